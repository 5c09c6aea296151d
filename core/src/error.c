/* Errors: codes, messages, and the one handler a user can register. */
#include "internal.h"
#include <stdarg.h>
#include <stdlib.h>
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

/* Each warning about the environment once per name and process: the
 * core and the process allocator may both read a name, and a library
 * may read the environment again (a heap made from it).  A bit per hash
 * of the name; a collision only silences a second warning. */
static _Atomic uint64_t env_warned;
static bool env_first_warning(const char *name) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  uint64_t bit = (uint64_t)1 << (h % 64);
  return (atomic_fetch_or(&env_warned, bit) & bit) == 0;
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

void _scr_report_unknown_env(const char *name, const char *closest) {
  if (!env_first_warning(name)) return;
  char msg[256];
  snprintf(msg, sizeof msg, "ignoring SCRALLOC_%s (no such option; the closest is SCRALLOC_%s)", name, closest);
  env_say(msg);
}

void _scr_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "scralloc: assertion failed: %s at %s:%d\n", expr, file, line);
  abort();
}
