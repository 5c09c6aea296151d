/* Recycling, the thread's cache of freed blocks: a small block (or a
 * one-page large block) that the holder of an arena frees, of its own
 * arena or of another, is kept on a per-class list for the holder's next
 * malloc of the class, up to SCR_RECYCLE_CLASS_BYTES and
 * SCR_RECYCLE_CLASS_MAX blocks per class (SCR_RECYCLE_LARGE_MAX one-page
 * blocks, which serve any request between SCR_SMALL_MAX and a page).
 *
 * Why: the most recently freed block of a class is the one whose cache
 * line this thread touched last; a page's free list hands out whatever
 * that page got back first, and a block of another arena would take a
 * push onto that arena's remote stack, a drain by its owner and a trip
 * through its page.  The block stays live in its owner's heap the whole
 * time; it goes back when this thread frees past the caps, exits or calls
 * scr_trim (the flush).  Blocks of a parked arena are not kept, so that
 * its pages can go back.  The figures of _scr_arena_publish leave the
 * kept blocks out of what is used. */
#include "process.h"
#include <string.h>

#ifndef SCR_RECYCLE_CLASS_BYTES
#define SCR_RECYCLE_CLASS_BYTES 16384
#endif
#ifndef SCR_RECYCLE_CLASS_MAX
#define SCR_RECYCLE_CLASS_MAX 64
#endif
#define SCR_RECYCLE_LARGE_MAX 4

/* Bytes of a block on list c. */
static inline size_t proc_recycled_size(unsigned c) {
  return c < SCR_CLASS_COUNT ? _scr_class_sizes[c] : SCR_PAGE_SIZE;
}

int _scr_recycle_put(scr_arena *a, scr_arena *o, const scr_segment *seg, void *p) {
  if (o != a && atomic_load_explicit(&o->parked_hint, memory_order_relaxed)) return 0;
  /* The page's tag, not its descriptor: o's holder writes the descriptor
   * on every call, the tag line only when the page changes kind.  (A HUGE
   * segment's tags are all OTHER; its block may lie beyond the 64 pages.) */
  uintptr_t idx = ((uintptr_t)p - (uintptr_t)seg) >> SCR_PAGE_SHIFT;
  unsigned c = idx < SCR_PAGES_PER_SEGMENT ? seg->page_tag[idx] : SCR_TAG_OTHER;
  if (c == SCR_TAG_LARGE1) {
    /* a one-page block, freed by the program (a cached one is not) */
    c = SCR_CLASS_COUNT;
    if (a->rc[c].count >= SCR_RECYCLE_LARGE_MAX) return 0;
  } else if (c < SCR_CLASS_COUNT) {
    if (a->rc[c].count >= SCR_RECYCLE_CLASS_MAX ||
        (size_t)a->rc[c].count * _scr_class_sizes[c] >= SCR_RECYCLE_CLASS_BYTES)
      return 0;
  } else {
    return 0;
  }
  scr_recycled *r = &a->rc[c];
#if SCR_DEBUG > 0
  /* checked builds: what the heap's free would have refused */
  if (((uintptr_t)p - ((uintptr_t)seg + (idx << SCR_PAGE_SHIFT))) % proc_recycled_size(c) != 0) {
    _scr_report(SCR_EINTERIOR, "free(%p): interior of a block (ignored)", p);
    return 1;
  }
  for (void *q = r->head, *next; q; q = next) {
    SCR_UNPOISON(q, sizeof(void *));
    next = *(void **)q;
    SCR_POISON(q, sizeof(void *));
    if (q == p) {
      _scr_report(SCR_EDOUBLEFREE, "free(%p): double free (the block was already freed) (ignored)", p);
      return 1;
    }
  }
#endif
  *(void **)p = r->head;
  SCR_POISON(p, proc_recycled_size(c)); /* ASan: a use after free is caught */
  r->head = p;
  r->count++;
  return 1;
}

/* Every kept block goes back: the arena's own into its heap, others' to
 * their owners' remote stacks (at park and trim). */
void _scr_recycle_flush(scr_arena *a) {
  for (unsigned c = 0; c <= SCR_CLASS_COUNT; c++) {
    void *p = a->rc[c].head;
    a->rc[c].head = NULL;
    a->rc[c].count = 0;
    while (p) {
      SCR_UNPOISON(p, proc_recycled_size(c));
      void *next = *(void **)p;
      scr_heap *h = _scr_heap_of(p);
      if (h == a->heap) proc_heap_free(h, p);
      else _scr_remote_push((scr_arena *)_scr_heap_owner(h), p);
      p = next;
    }
  }
}

/* Adds sign (1 or -1) times one block of list c to t's block counts. */
static void proc_count_block(struct scr_stats *t, unsigned c, int64_t sign) {
  uint64_t one = (uint64_t)sign, bytes = (uint64_t)sign * proc_recycled_size(c);
  t->allocs += one;
  t->heap_used += bytes;
  if (c < SCR_CLASS_COUNT) {
    t->classes[c].live += one;
  } else {
    t->large_allocs += one;
    t->large_bytes += bytes;
  }
}

/* Take the kept blocks out of the arena's figures: its own come off `st`
 * (the heap counts them as live), other arenas' are added up in `lent`,
 * which scr_stats() takes off the process-wide sum. */
void _scr_recycle_account(const scr_arena *a, struct scr_stats *st, struct scr_stats *lent) {
  memset(lent, 0, sizeof *lent);
  for (unsigned c = 0; c <= SCR_CLASS_COUNT; c++) {
    for (void *p = a->rc[c].head, *next; p; p = next) {
      SCR_UNPOISON(p, sizeof(void *));
      next = *(void **)p;
      SCR_POISON(p, sizeof(void *));
      if (_scr_heap_of(p) == a->heap) proc_count_block(st, c, -1);
      else proc_count_block(lent, c, 1);
    }
  }
}
