/* The prefault helper: the discard helper thread also faults in memory
 * just ahead of where busy arenas carve, with MADV_POPULATE_WRITE, which
 * commits zeroed pages without storing into them (so it cannot race with
 * carving).  An arena faults ahead only for a size class that has carved
 * prefault_after bytes (large blocks: 32 times that; hooks.c says why),
 * and (prefault=1, the default) only while fewer threads hold arenas than
 * the process has CPUs; each arena has one range
 * in flight; ranges of worker threads count against prefault_budget until
 * the carving reaches them or the arena parks.  Kernels without MADV_POPULATE_WRITE (< 5.14)
 * and SCRALLOC_PREFAULT=0 get nothing: the owner faults its pages.
 * Layer: arenas.  Owns each arena's pf_* fields (the holder queues, the
 * helper runs: pf_state says whose turn) and _scr_pc.prefault_inflight. */
#include "arenas.h"
#include <sched.h>

/* The holder posts the range hooks.c recorded, outside any heap call;
 * true when it is queued (the caller wakes the helper: helper.c). */
bool _scr_prefault_post(scr_arena *a) {
  size_t len = (size_t)(a->pf_end - a->pf_from);
  if (len == 0) return false;
  /* The helper only saves time where a CPU would otherwise idle: with as
   * many threads holding arenas as the process may run on, the faults cost
   * the same CPU either way and the range faulted ahead costs RSS. */
  if (_scr_proc.opt.prefault == 1 &&
      atomic_load_explicit(&_scr_proc.owned_hint, memory_order_relaxed) >= _scr_proc.ncpus) {
    SCR_PC_ADD(prefault_skipped, 1);
    return false;
  }
  if (atomic_load_explicit(&a->pf_state, memory_order_acquire) != 0) {
    SCR_PC_ADD(prefault_skipped, 1);
    return false;
  }
  if (a->worker) {
    uint64_t budget = _scr_proc.opt.prefault_budget;
    uint64_t before = atomic_fetch_add_explicit(&_scr_pc.prefault_inflight, len, memory_order_relaxed);
    if (before + len > budget) {
      atomic_fetch_sub_explicit(&_scr_pc.prefault_inflight, len, memory_order_relaxed);
      SCR_PC_ADD(prefault_skipped, 1);
      return false;
    }
    if (a->pf_counted) atomic_fetch_sub_explicit(&_scr_pc.prefault_inflight, a->pf_counted, memory_order_relaxed);
    a->pf_counted = len;
  }
  a->pf_req = (uint8_t *)a->pf_from;
  a->pf_req_len = len;
  atomic_store_explicit(&a->pf_state, 1, memory_order_release);
  return true;
}

/* Helper: run every queued request once.  1 if there was one. */
int _scr_prefault_run(void) {
  int any = 0;
  for (scr_arena *a = atomic_load_explicit(&_scr_proc.all, memory_order_acquire); a; a = a->next_all) {
    int one = 1;
    if (!atomic_compare_exchange_strong_explicit(&a->pf_state, &one, 2, memory_order_acquire,
                                                 memory_order_relaxed))
      continue;
    any = 1;
    if (_scr_proc_populate(a->pf_req, a->pf_req_len) == 0) {
      SCR_PC_ADD(prefaults, 1);
      SCR_PC_ADD(prefault_bytes, a->pf_req_len);
    }
    /* 3: the holder parks and sleeps until this step is done */
    if (atomic_exchange_explicit(&a->pf_state, 0, memory_order_release) == 3) _scr_proc_futex_wake(&a->pf_state, 1);
  }
  return any;
}

/* At park: drop a queued request, wait for one in progress, and return
 * the pages faulted ahead that the heap never took (they read as zero
 * again, which is what the heap expects of fresh pages). */
void _scr_prefault_release_ahead(scr_arena *a) {
  int one = 1;
  if (!atomic_compare_exchange_strong_explicit(&a->pf_state, &one, 0, memory_order_acquire,
                                               memory_order_relaxed)) {
    /* The helper is on a step: sleep until it is done (state 3 asks it to
     * wake us) rather than spin while it faults pages in. */
    int st;
    while ((st = atomic_load_explicit(&a->pf_state, memory_order_acquire)) != 0) {
      int two = 2;
      if (st == 3 || atomic_compare_exchange_strong_explicit(&a->pf_state, &two, 3, memory_order_acquire,
                                                              memory_order_acquire))
        _scr_proc_futex_wait(&a->pf_state, 3);
    }
  }
  if (a->pf_counted) {
    atomic_fetch_sub_explicit(&_scr_pc.prefault_inflight, a->pf_counted, memory_order_relaxed);
    a->pf_counted = 0;
  }
  if (a->pf_end == 0) return;
  uintptr_t from = a->pf_from, to = a->pf_end;
  a->pf_from = a->pf_end = 0;
  /* The range lies in the segment that was the frontier; the heap may
   * have unmapped it since and another heap mapped one at that address, so
   * look for it among our own segments instead of reading its header. */
  scr_segment *seg = (scr_segment *)(from & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1));
  const scr_segment *s = a->heap->segments;
  while (s && s != seg) s = s->next;
  if (s == NULL || seg->kind != SCR_SEG_NORMAL) return;
  /* Pages still FREE and fresh (not committed per the heap). */
  uint64_t fresh = seg->free_mask & ~seg->committed_free_mask & ~seg->lazy_free_mask;
  unsigned first = (unsigned)((from - (uintptr_t)seg) >> SCR_PAGE_SHIFT);
  unsigned last = (unsigned)((to - 1 - (uintptr_t)seg) >> SCR_PAGE_SHIFT);
  for (unsigned i = first; i <= last && i < SCR_PAGES_PER_SEGMENT; i++) {
    unsigned j = i;
    while (j <= last && j < SCR_PAGES_PER_SEGMENT && ((fresh >> j) & 1)) j++;
    if (j > i) {
      (void)_scr_os_decommit((uint8_t *)seg + ((size_t)i << SCR_PAGE_SHIFT), (size_t)(j - i) << SCR_PAGE_SHIFT,
                             false, &a->heap->os);
      i = j;
    }
  }
}

void _scr_prefault_after_fork_child(void) {
  for (scr_arena *a = atomic_load(&_scr_proc.all); a; a = a->next_all) atomic_store(&a->pf_state, 0);
  atomic_store(&_scr_pc.prefault_inflight, 0);
}
