/* What an arena does when its heap maps a segment or takes fresh pages:
 * small pages under THP "always", MADV_DONTDUMP where no core would be
 * written, and a prefault step ahead of the pages it carves.  Runs inside
 * heap calls, on the thread that holds the arena: nothing here may
 * allocate or block.
 * Layer: arenas (its bottom).  Owns the arena's frontier, carved and
 * pf_end/pf_from/pf_pending fields (the holder, inside its heap calls); the tick (holder.c) acts on what they ask. */
#include "arenas.h"
#include <sys/mman.h>

static void proc_segment_mapped(scr_heap *h, void *base, size_t size, void *arg) {
  scr_arena *a = arg;
  const scr_proc *P = &_scr_proc;
  a->mapped += size;
  if (size == SCR_SEGMENT_SIZE) { /* a normal segment: carving starts after its header page */
    a->frontier_seg = (uintptr_t)base;
    a->frontier = (uintptr_t)base + SCR_PAGE_SIZE;
  }
#ifdef MADV_NOHUGEPAGE
  /* THP "always": small pages, as in madvise mode.  Why: the first touch
   * of a 2 MiB region makes all of it resident, most of it memory the
   * arena never carves (its last, partly carved region, and the pages it
   * keeps free); the churn benchmark (16 arenas of 8-14 MiB) peaked
   * 16 MiB higher with huge pages on segments when mapped than with none
   * (15 runs: 209.8 against 193.9 MiB, glibc 199.3). */
  if (P->thp_mode == 2) (void)_scr_os_advise(base, size, MADV_NOHUGEPAGE, &h->os);
#endif
#ifdef MADV_DONTDUMP
  if (P->opt.dontdump == 1 || (P->opt.dontdump == 2 && !P->core_dumps)) {
    if (_scr_os_advise(base, size, MADV_DONTDUMP, &h->os) == 0) SCR_PC_ADD(dontdump_advised, 1);
  }
#endif
}

static void proc_page_acquired(scr_heap *h, void *page_start, size_t page_bytes, unsigned cls, void *arg) {
  scr_arena *a = arg;
  const scr_proc *P = &_scr_proc;
  uint8_t *end = (uint8_t *)page_start + page_bytes;
  if (a->pf_counted && (uintptr_t)page_start >= a->pf_from) {
    /* The carving reached the range faulted ahead: it no longer counts. */
    atomic_fetch_sub_explicit(&_scr_pc.prefault_inflight, a->pf_counted, memory_order_relaxed);
    a->pf_counted = 0;
  }
  /* Fault ahead only where the carving enters fresh territory (the top of
   * the segment mapped last): pages taken again after a decommit, or out
   * of order, say nothing about what comes next. */
  if ((((uintptr_t)page_start) & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1)) != a->frontier_seg ||
      (uintptr_t)end <= a->frontier)
    return;
  /* carved: how far the frontier moved, not pages taken again (a heap
   * that frees and takes the same pages all day is not growing) */
  uintptr_t from = a->frontier > (uintptr_t)page_start ? a->frontier : (uintptr_t)page_start;
  a->carved += (uintptr_t)end - from;
  uint64_t *carved_for = &a->carved_for[cls < SCR_CLASS_COUNT ? cls : SCR_CLASS_COUNT];
  *carved_for += (uintptr_t)end - from;
  a->frontier = (uintptr_t)end;
  /* Fault ahead for a size class that has carved prefault_after itself,
   * large blocks once they have carved 32 times that (the seed's slices
   * and glibc heap: 1 and 32 MiB).  Why not the arena's total: the range
   * ahead goes to whichever class takes the next fresh page, and a class
   * with a block or two there holds a whole resident page (python3 carves
   * its first MiB across some 40 classes and a few big blocks). */
  uint64_t after = P->opt.prefault_after;
  if (cls >= SCR_CLASS_COUNT) after = after > UINT64_MAX / 32 ? UINT64_MAX : after * 32;
  if (!P->opt.prefault || !P->populate_ok || *carved_for < after) return;
  if ((uintptr_t)end + P->opt.prefault_step / 2 <= a->pf_end) return; /* still ahead */
  /* The next step after `end`, within its segment. */
  uintptr_t seg_end = ((uintptr_t)page_start & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1)) + SCR_SEGMENT_SIZE;
  uintptr_t pf_from = (uintptr_t)end > a->pf_end ? (uintptr_t)end : a->pf_end;
  uintptr_t to = (uintptr_t)end + P->opt.prefault_step;
  if (to > seg_end) to = seg_end;
  if (pf_from >= to || pf_from < (uintptr_t)page_start) return;
  a->pf_from = pf_from;
  a->pf_end = to;
  a->pf_pending = 1;
  a->ops |= SCR_ARENA_POLL_EVERY - 1; /* the next tick posts it, outside the heap call */
}

const struct _scr_heap_hooks _scr_arena_hooks = {proc_segment_mapped, proc_page_acquired, NULL, NULL, NULL}; /* huge_cache.c installs its two */
