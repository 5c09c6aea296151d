/* What an arena does when its heap maps a segment (small pages under THP
 * "always", MADV_DONTDUMP where no core would be written) and when it gets
 * its first dirty page since the decay last looked (decay.c: the holder's
 * next tick wakes the helper).  Runs inside heap calls, on the thread that
 * holds the arena: nothing here may allocate or block.
 * Layer: arenas (its bottom).  Owns nothing. */
#include "arenas.h"
#include <sys/mman.h>

static void proc_segment_mapped(scr_heap *h, void *base, size_t size, void *arg) {
  (void)arg;
  const scr_proc *P = &_scr_proc;
#ifdef MADV_NOHUGEPAGE
  /* THP "always": small pages, as in madvise mode.  Why: the first touch
   * of a 2 MiB region makes all of it resident, most of it memory the
   * arena never carves (its last, partly carved region, and the pages it
   * keeps free): a higher peak (docs/process.md, "Why it is built this
   * way"). */
  if (P->thp_mode == 2) (void)_scr_os_advise(base, size, MADV_NOHUGEPAGE, &h->os);
#endif
#ifdef MADV_DONTDUMP
  if (P->opt.dontdump == 1 || (P->opt.dontdump == 2 && !P->core_dumps)) {
    if (_scr_os_advise(base, size, MADV_DONTDUMP, &h->os) == 0) SCR_PC_ADD(dontdump_segments, 1);
  }
#endif
}

/* Under the heap's lock: the flag, and the holder's tick at its next call
 * (holder.c), which wakes the helper outside the heap call, unless it
 * looks within the decay delay anyway (docs/process.md). */
static void proc_pages_dirty(scr_heap *h, void *arg) {
  (void)h;
  scr_arena *a = arg;
  if (_scr_helper_looks_by(_scr_proc_now_ns() + _scr_decay_delay_ms() * 1000000u)) return;
  if (!atomic_load_explicit(&_scr_proc.decay_wake, memory_order_relaxed))
    atomic_store_explicit(&_scr_proc.decay_wake, 1, memory_order_relaxed);
  a->ops |= SCR_ARENA_POLL_EVERY - 1;
}

/* huge_cache.c installs its two */
const struct _scr_heap_hooks _scr_arena_hooks = {.segment_mapped = proc_segment_mapped, .pages_dirty = proc_pages_dirty};
