/* Options of the process allocator: SCR_OPTION_TABLE's entries of scope
 * process or both, parsed by the core's one parser (core/src/options.c)
 * and kept as atomic uint64_t (process.h).  Read without malloc (getenv
 * only), so it can run inside the first malloc call.
 * Layer: base.  Owns _scr_proc.opt's values (written under
 * _scr_proc.lock, read by every layer without it). */
#include "process.h"

void _scr_proc_options_init(scr_proc_options *o) {
#define SCR_PROC_OPT_DEF_(type, name, def, lo, hi, doc) o->name = (uint64_t)(def);
  SCR_PROC_OPTIONS(SCR_PROC_OPT_DEF_)
#undef SCR_PROC_OPT_DEF_
}

static void proc_store(scr_proc_options *o, int id, uint64_t v) {
  switch (id) {
#define SCR_PROC_OPT_SET_(type, n, def, lo, hi, doc) \
  case SCR_OPT_##n: o->n = v; break;
    SCR_PROC_OPTIONS(SCR_PROC_OPT_SET_)
#undef SCR_PROC_OPT_SET_
  default: break;
  }
}

int _scr_proc_option_set(scr_proc_options *o, const char *name, const char *value) {
  uint64_t v;
  int id = _scr_option_find(name, SCR_SCOPE_PROCESS);
  if (id < 0 || _scr_option_parse(id, value, &v) != SCR_OK) return -1;
  proc_store(o, id, v);
  return id;
}

uint64_t _scr_proc_option_get(const scr_proc_options *o, const char *name) {
  switch (_scr_option_find(name, SCR_SCOPE_PROCESS)) {
#define SCR_PROC_OPT_GET_(type, n, def, lo, hi, doc) \
  case SCR_OPT_##n: return o->n;
    SCR_PROC_OPTIONS(SCR_PROC_OPT_GET_)
#undef SCR_PROC_OPT_GET_
  default: return UINT64_MAX;
  }
}

void _scr_proc_options_from_env(scr_proc_options *o) {
  uint64_t v;
  for (int id = 0; id < SCR_OPT_COUNT; id++)
    if (_scr_option_env(id, SCR_SCOPE_PROCESS, &v)) proc_store(o, id, v);
}
