/* Options of the process allocator: one table (process.h), each with a
 * default, a clamp and an environment name SCRALLOC_<NAME>.  Read without
 * malloc (getenv only), so it can run inside the first malloc call. */
#include "process.h"
#include <stdlib.h>
#include <string.h>

void _scr_proc_options_init(scr_proc_options *o) {
#define SCR_PROC_OPT_DEF_(name, def, lo, hi, doc) o->name = (uint64_t)(def);
  SCR_PROC_OPTIONS(SCR_PROC_OPT_DEF_)
#undef SCR_PROC_OPT_DEF_
}

/* A size as the core parses it ("8M"), on/off words, and "poison" for
 * discard.  -1 on bad text. */
static int proc_parse_value(const char *name, const char *s, uint64_t *out) {
  if (strcmp(name, "discard") == 0 && strcmp(s, "poison") == 0) { *out = 2; return 0; }
  if (strcmp(s, "on") == 0 || strcmp(s, "true") == 0 || strcmp(s, "yes") == 0) { *out = 1; return 0; }
  if (strcmp(s, "off") == 0 || strcmp(s, "false") == 0 || strcmp(s, "no") == 0) { *out = 0; return 0; }
  return _scr_parse_size(s, out) == SCR_OK ? 0 : -1;
}

static uint64_t proc_clamp(uint64_t v, uint64_t lo, uint64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

int _scr_proc_option_set(scr_proc_options *o, const char *name, const char *value) {
  uint64_t v;
#define SCR_PROC_OPT_SET_(n, def, lo, hi, doc)                                  \
  if (strcmp(name, #n) == 0) {                                                  \
    if (proc_parse_value(name, value, &v) != 0) return SCR_EINVAL;                   \
    o->n = proc_clamp(v, (uint64_t)(lo), (uint64_t)(hi));                       \
    return SCR_OK;                                                              \
  }
  SCR_PROC_OPTIONS(SCR_PROC_OPT_SET_)
#undef SCR_PROC_OPT_SET_
  return SCR_EINVAL;
}

void _scr_proc_options_from_env(scr_proc_options *o) {
  char env[64];
#define SCR_PROC_OPT_ENV_(n, def, lo, hi, doc)                                  \
  {                                                                             \
    const char *val = _scr_env_option(#n, env, sizeof env);                     \
    if (val && _scr_proc_option_set(o, #n, val) != SCR_OK)                      \
      _scr_report_env(env, val);                                                 \
  }
  SCR_PROC_OPTIONS(SCR_PROC_OPT_ENV_)
#undef SCR_PROC_OPT_ENV_
}

int scr_process_option_set(const char *name, const char *value) {
  _scr_proc_init();
  pthread_mutex_lock(&_scr_proc.lock);
  int r = _scr_proc_option_set(&_scr_proc.opt, name, value);
  if (r == SCR_OK && (strcmp(name, "discard_delay_ms") == 0))
    _scr_proc.delay_ms = _scr_proc.opt.discard_delay_ms;
  pthread_mutex_unlock(&_scr_proc.lock);
  return r;
}

uint64_t scr_process_option_get(const char *name) {
  _scr_proc_init();
#define SCR_PROC_OPT_GET_(n, def, lo, hi, doc) \
  if (strcmp(name, #n) == 0) return _scr_proc.opt.n;
  SCR_PROC_OPTIONS(SCR_PROC_OPT_GET_)
#undef SCR_PROC_OPT_GET_
  return UINT64_MAX;
}
