/* Errors: codes, messages, and the one handler a user can register. */
#include "internal.h"
#include <stdarg.h>
#include <stdlib.h>

static scr_error_handler *error_handler;
static void *error_arg;

const char *scr_strerror(int err) {
  switch (err) {
#define X(name, value, msg) case name: return msg;
    SCR_ERRORS(X)
#undef X
  default: return "unknown error";
  }
}

void scr_set_error_handler(scr_error_handler *fn, void *arg) {
  error_handler = fn;
  error_arg = arg;
}

void _scr_report(int err, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (error_handler) {
    error_handler(err, msg, error_arg);
  } else if (SCR_DEBUG > 0) {
    fprintf(stderr, "scralloc: %s (%s)\n", msg, scr_strerror(err));
  }
}

void _scr_assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "scralloc: assertion failed: %s at %s:%d\n", expr, file, line);
  abort();
}
