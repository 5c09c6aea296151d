/* Errors: codes, messages, and the one handler a user can register. */
#include "internal.h"
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Atomic: a thread may report (the discard helper's failed munmap, a
 * bad free) while another sets the handler.  The function is stored last
 * and loaded first (release, acquire), so a report that sees a new
 * function sees its argument; one racing the change may still pair the
 * old function with the new argument, so programs set it before their
 * threads start. */
static _Atomic(scr_error_handler *) error_fn;
_Atomic int _scr_verbose; /* the process allocator's verbose option: reports on stderr in every build */
static _Atomic(void *) error_arg;

const char *scr_strerror(int err) {
  switch (err) {
#define X(name, value, msg) case name: return msg;
    SCR_ERRORS(X)
#undef X
  default: return "unknown error";
  }
}

void scr_set_error_handler(scr_error_handler *fn, void *arg) {
  atomic_store_explicit(&error_arg, arg, memory_order_relaxed);
  atomic_store_explicit(&error_fn, fn, memory_order_release);
}

void _scr_report(int err, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  scr_error_handler *fn = atomic_load_explicit(&error_fn, memory_order_acquire);
  if (fn) {
    fn(err, msg, atomic_load_explicit(&error_arg, memory_order_relaxed));
  } else if (SCR_DEBUG > 0 || atomic_load_explicit(&_scr_verbose, memory_order_relaxed)) {
    fprintf(stderr, "scralloc: %s (%s)\n", msg, scr_strerror(err));
  }
}

/* Each warning about the environment once per variable and process: the
 * core and the process allocator may both read a name, and a library may
 * read the environment again (a heap made from it).  The names warned
 * about, compared whole; a name too long for an entry, or one past a full
 * table, is warned about every time rather than silenced.  A mutex (no
 * malloc in pthread_mutex_lock): it runs inside the first malloc. */
#define ENV_WARNED_MAX 64
#define ENV_WARNED_LEN 128
static pthread_mutex_t env_warned_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned env_warned_n;
static char env_warned[ENV_WARNED_MAX][ENV_WARNED_LEN];
static bool env_first_warning(const char *name) {
  size_t len = strlen(name);
  if (len >= ENV_WARNED_LEN) return true;
  bool first = true;
  pthread_mutex_lock(&env_warned_lock);
  for (unsigned i = 0; i < env_warned_n && first; i++) first = strcmp(env_warned[i], name) != 0;
  if (first && env_warned_n < ENV_WARNED_MAX) memcpy(env_warned[env_warned_n++], name, len + 1);
  pthread_mutex_unlock(&env_warned_lock);
  return first;
}

/* A warning on stderr with write(2), not stdio: it runs inside the first
 * malloc.  To the handler instead when one is set. */
static void env_say(const char *msg) {
  scr_error_handler *fn = atomic_load_explicit(&error_fn, memory_order_acquire);
  if (fn) {
    fn(SCR_EINVAL, msg, atomic_load_explicit(&error_arg, memory_order_relaxed));
    return;
  }
  char line[320];
  int n = snprintf(line, sizeof line, "scralloc: %s\n", msg);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
}

/* A setting from the environment that is not applied is said in every
 * build (jemalloc and mimalloc warn too): the user believes it applied. */
void _scr_report_env(const char *name, const char *value, uint64_t lo, uint64_t hi) {
  if (!env_first_warning(name)) return;
  char msg[256];
  if (lo <= hi)
    snprintf(msg, sizeof msg, "ignoring %s=%s (out of range: valid values are %llu to %llu)", name, value,
             (unsigned long long)lo, (unsigned long long)hi);
  else
    snprintf(msg, sizeof msg, "ignoring %s=%s (not a valid value)", name, value);
  env_say(msg);
}

void _scr_report_unknown_env(const char *name, size_t len, const char *closest) {
  char env[ENV_WARNED_LEN];
  if (len + 9 < sizeof env) snprintf(env, sizeof env, "SCRALLOC_%.*s", (int)len, name);
  if (len + 9 >= sizeof env || env_first_warning(env)) {
    char msg[256];
    snprintf(msg, sizeof msg, "ignoring SCRALLOC_%.*s (no such option; the closest is SCRALLOC_%s)", (int)len, name,
             closest);
    env_say(msg);
  }
}

void _scr_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "scralloc: assertion failed: %s at %s:%d\n", expr, file, line);
  abort();
}
