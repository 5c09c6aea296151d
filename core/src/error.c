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
  } else if (SCR_DEBUG > 0) {
    fprintf(stderr, "scralloc: %s (%s)\n", msg, scr_strerror(err));
  }
}

/* A setting from the environment that is not applied is said in every
 * build (jemalloc and mimalloc warn too): the user believes it applied.
 * write(2), not stdio: this runs inside the first malloc. */
void _scr_report_env(const char *name, const char *value) {
  char msg[256];
  snprintf(msg, sizeof msg, "ignoring %s=%s (not a valid value)", name, value);
  scr_error_handler *fn = atomic_load_explicit(&error_fn, memory_order_acquire);
  if (fn) {
    fn(SCR_EINVAL, msg, atomic_load_explicit(&error_arg, memory_order_relaxed));
    return;
  }
  char line[300];
  int n = snprintf(line, sizeof line, "scralloc: %s\n", msg);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
}

void _scr_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "scralloc: assertion failed: %s at %s:%d\n", expr, file, line);
  abort();
}
