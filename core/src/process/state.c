/* The process-wide state: the one scr_proc (_scr_proc), the counters
 * (_scr_pc), the thread's arena, and the initialization
 * that the first call of the process runs (options from the environment,
 * the arenas' heap options, what the OS offers), and the options' changes
 * at run time (scr_process_option_set: the table is options.c's).
 * Layer: base.  Storage only: process.h says under which lock each field
 * is written and by which file; every layer reads the options and bumps
 * the counters (SCR_PC_ADD) without calling up.  The thread-exit hook
 * that parks a thread's arena is the caches' layer's (holder.c), created
 * at the first claim of a thread's own arena. */
#include "process.h"

scr_proc _scr_proc = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .helper_lock = PTHREAD_MUTEX_INITIALIZER,
    .decay_lock = PTHREAD_MUTEX_INITIALIZER,
};
scr_proc_counters _scr_pc;
__thread scr_tl _scr_tl __attribute__((tls_model("initial-exec"))) = {NULL, SCR_SEGMAP_NO_MARK, 0};

static pthread_mutex_t proc_init_lock = PTHREAD_MUTEX_INITIALIZER;

/* Runs inside the first allocation of the process: nothing here may call
 * malloc (getenv, open/read do not). */
void _scr_proc_init_slow(void) {
  pthread_mutex_lock(&proc_init_lock);
  if (!atomic_load_explicit(&_scr_proc.inited, memory_order_relaxed)) {
    scr_proc *P = &_scr_proc;
    _scr_misuse_init();
    _scr_proc_options_init(&P->opt);
    _scr_proc_options_from_env(&P->opt);
    char env[64];
    if (_scr_env_option("profile", env, sizeof env) && !_scr_env_option("profile_rate", env, sizeof env))
      P->opt.profile_rate = SCR_PROFILE_DEFAULT_RATE; /* SCRALLOC_PROFILE=PATH alone: sampling on */
    scr_options_init(&P->heap_opt);
    /* Arena defaults.  Freed pages stay committed (dirty), taken first by
     * any class or large block, until the decay gives them back
     * (decay.c: purge_delay_ms is the decay's; its passes run on the
     * process's clock).  A parked arena keeps retain_bytes of them (one
     * retained page per class at most, with dirty ones); freed pages past
     * that go back in batches (decommit_batch), reused first meanwhile:
     * one process_madvise instead of an madvise per page.  Huge
     * mappings go to the process's huge cache (huge_cache.c); the heap's
     * own large cache, which keeps blocks only without a purge delay, is
     * off: decay_ms=0 means free memory goes back at once. */
    P->heap_opt.retain = 1;
    P->heap_opt.retain_bytes = (size_t)512 << 10;
    P->heap_opt.decommit_batch = (size_t)256 << 10;
    P->heap_opt.large_cache = 0;
    scr_options_from_env(&P->heap_opt); /* and warns of unknown names */
    P->heap_opt.purge_delay_ms = (unsigned)P->opt.decay_ms;
    P->decay_next_ns = UINT64_MAX;
    atomic_store(&_scr_verbose, P->opt.verbose != 0);
    P->thp_mode = _scr_proc_thp_mode();
    P->core_dumps = _scr_proc_core_dumps();
    atomic_store_explicit(&P->inited, 1, memory_order_release);
  }
  pthread_mutex_unlock(&proc_init_lock);
}

/* Under the process lock; the values other threads read without it are
 * atomic (process.h). */
int scr_process_option_set(const char *name, const char *value) {
  if (name == NULL || value == NULL) return SCR_EINVAL;
  _scr_proc_init();
  pthread_mutex_lock(&_scr_proc.lock);
  int id = _scr_proc_option_set(&_scr_proc.opt, name, value);
  if (id == SCR_OPT_decay_ms || id == SCR_OPT_decay_max_ms) /* the back-off starts again from the new values */
    atomic_store_explicit(&_scr_proc.decay_delay_ms, 0, memory_order_relaxed);
  if (id == SCR_OPT_verbose) atomic_store(&_scr_verbose, _scr_proc.opt.verbose != 0);
  pthread_mutex_unlock(&_scr_proc.lock);
  return id < 0 ? SCR_EINVAL : SCR_OK;
}

uint64_t scr_process_option_get(const char *name) {
  if (name == NULL) return UINT64_MAX;
  _scr_proc_init();
  return _scr_proc_option_get(&_scr_proc.opt, name);
}
