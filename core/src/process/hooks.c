/* What an arena does when its heap maps a segment or takes fresh pages:
 * huge pages once the arena has carved hugepage_after bytes (small pages
 * before), MADV_DONTDUMP where no core would be written, and a prefault
 * step ahead of the pages it carves.  Runs inside heap calls, on the
 * thread that holds the arena: nothing here may allocate or block. */
#include "process.h"
#include <sys/mman.h>

static void proc_segment_mapped(scr_heap *h, void *base, size_t size, void *arg) {
  scr_arena *a = arg;
  const scr_proc *P = &_scr_proc;
  a->mapped += size;
  if (size == SCR_SEGMENT_SIZE) { /* a normal segment: carving starts after its header page */
    a->frontier_seg = (uintptr_t)base;
    a->frontier = (uintptr_t)base + SCR_PAGE_SIZE;
  }
#if defined(MADV_HUGEPAGE) && defined(MADV_NOHUGEPAGE)
  if (P->thp_mode != 0) {
    if (a->carved >= P->opt.hugepage_after) {
      if (_scr_os_advise(base, size, MADV_HUGEPAGE, &h->os) == 0) {
        a->huge_segments++;
        SCR_PC_ADD(huge_advised, 1);
      }
    } else if (P->thp_mode == 2) {
      /* THP "always": start on small pages, as in madvise mode. */
      (void)_scr_os_advise(base, size, MADV_NOHUGEPAGE, &h->os);
    }
  }
#endif
#ifdef MADV_DONTDUMP
  if (P->opt.dontdump == 1 || (P->opt.dontdump == 2 && !P->core_dumps)) {
    if (_scr_os_advise(base, size, MADV_DONTDUMP, &h->os) == 0) SCR_PC_ADD(dontdump_advised, 1);
  }
#endif
}

static void proc_page_acquired(scr_heap *h, void *page_start, size_t page_bytes, void *arg) {
  scr_arena *a = arg;
  const scr_proc *P = &_scr_proc;
  uint8_t *end = (uint8_t *)page_start + page_bytes;
  (void)h;
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
  a->carved += (uintptr_t)end - (a->frontier > (uintptr_t)page_start ? a->frontier : (uintptr_t)page_start);
  a->frontier = (uintptr_t)end;
  if (P->opt.switch_bytes && a->carved - a->carved_mark >= SCR_SWITCH_AFTER &&
      atomic_load_explicit(&P->parked_room, memory_order_relaxed) >= P->opt.switch_bytes) {
    a->switch_pending = 1; /* the next tick looks (arena.c: proc_switch) */
    a->ops |= SCR_ARENA_POLL_EVERY - 1;
  }
  if (!P->opt.prefault || !P->populate_ok || a->carved < P->opt.prefault_after) return;
  if ((uintptr_t)end + P->opt.prefault_step / 2 <= a->pf_end) return; /* still ahead */
  /* The next step after `end`, within its segment. */
  uintptr_t seg_end = ((uintptr_t)page_start & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1)) + SCR_SEGMENT_SIZE;
  uintptr_t from = (uintptr_t)end > a->pf_end ? (uintptr_t)end : a->pf_end;
  uintptr_t to = (uintptr_t)end + P->opt.prefault_step;
  if (to > seg_end) to = seg_end;
  if (from >= to || from < (uintptr_t)page_start) return;
  a->pf_from = from;
  a->pf_end = to;
  a->pf_pending = 1;
  a->ops |= SCR_ARENA_POLL_EVERY - 1; /* the next tick posts it, outside the heap call */
}

const struct _scr_heap_hooks _scr_arena_hooks = {proc_segment_mapped, proc_page_acquired, NULL};
