/* Exact classification of any address for a heap (the one classifier,
 * _scr_classify), and the checked entry points built on it. */
#include "internal.h"
#include <errno.h>

/* Remember a run of blocks given back (types.h: scr_gone). */
void _scr_gone_note(scr_heap *h, const void *start, uint32_t block, uint32_t count) {
  if (count == 0) return;
  h->gone[h->gone_next] = (scr_gone){(uintptr_t)start, block, count};
  h->gone_next = (h->gone_next + 1) % SCR_GONE_MAX;
}

static bool gone_block(const scr_heap *h, const void *p) {
  uintptr_t a = (uintptr_t)p;
  for (unsigned i = 0; i < SCR_GONE_MAX; i++) {
    const scr_gone *g = &h->gone[i];
    if (g->count != 0 && a >= g->start && (a - g->start) % g->block == 0 &&
        (a - g->start) / g->block < g->count)
      return true;
  }
  return false;
}

/* p, on page idx (tag: a size class) of h's NORMAL segment seg.  By the
 * page's tag and bump index, which a thread that does not hold an arena's
 * heap may read (relaxed atomics), not by its descriptor. */
static int classify_slot(const scr_heap *h, const scr_segment *seg, uintptr_t idx, unsigned tag, const void *p) {
  uintptr_t first = _scr_class_first(idx, tag);
  const scr_page *pg = &seg->pages[first];
  uintptr_t off = (uintptr_t)p - ((uintptr_t)seg + (first << SCR_PAGE_SHIFT));
  uint32_t size = _scr_class_sizes[tag];
  if (off / size >= (uintptr_t)_scr_class_span(tag) * SCR_PAGE_SIZE / size) return SCR_ENOTALLOC; /* page tail */
  if (off % size != 0) return SCR_EINTERIOR;
  if (off / size >= _scr_page_capacity(pg)) return SCR_ENOTALLOC;
  /* Free or live: a heap the program made has every free block on its
   * page's list (exact); an arena's may wait in any thread's cache, the
   * pool or a remote stack, where only the key tells (misuse.c). */
  if (_scr_heap_owner(h) == NULL) return _scr_page_slot_is_free(pg, p) ? SCR_EDOUBLEFREE : SCR_OK;
  return _scr_block_word1(p) == _scr_misuse.key ? SCR_EDOUBLEFREE : SCR_OK;
}

/* p, in h's segment seg: as _scr_classify says, less the runs given back. */
static int classify_in(const scr_heap *h, const scr_segment *seg, const void *p) {
  bool arena = _scr_heap_owner(h) != NULL;
  uintptr_t a = (uintptr_t)p, base = (uintptr_t)seg;
  if (seg->kind == SCR_SEG_HUGE) {
    uintptr_t block = base + seg->huge_offset;
    /* an arena's large or huge block that another thread freed holds the
     * key until its owner takes it back (process/misuse.c) */
    if (a == block) return seg->huge_live && !(arena && _scr_block_word1(p) == _scr_misuse.key) ? SCR_OK : SCR_EDOUBLEFREE;
    return a > block ? SCR_EINTERIOR : SCR_ENOTALLOC; /* header page: never a block */
  }
  uintptr_t idx = (a - base) >> SCR_PAGE_SHIFT;
  unsigned tag = scr_seg_tag(seg, idx);
  if (tag < SCR_CLASS_COUNT) return classify_slot(h, seg, idx, tag, p);
  const scr_page *pg = &seg->pages[idx];
  uintptr_t start = base + (idx << SCR_PAGE_SHIFT);
  switch (pg->kind) {
  case SCR_PAGE_LARGE:
    start += _scr_large_colour(pg);
    if (a != start) return a < start ? SCR_ENOTALLOC : SCR_EINTERIOR;
    return pg->used && !(arena && _scr_block_word1(p) == _scr_misuse.key) ? SCR_OK : SCR_EDOUBLEFREE;
  case SCR_PAGE_TAIL: {
    const scr_page *head = &seg->pages[pg->head];
    return head->used || head->cached ? SCR_EINTERIOR : SCR_ENOTALLOC;
  }
  case SCR_PAGE_FREE:
    /* A large block that started here went back to the segment, or a
     * small block freed before its page did still holds the key (pages
     * that went back to the OS read as zero).  The process allocator
     * reads its arenas' free pages itself (a discard may have made them
     * inaccessible). */
    if (pg->freed_block && a == start + _scr_large_colour(pg)) return SCR_EDOUBLEFREE;
    if (!arena && idx != 0 && (a & (SCR_MIN_ALIGN - 1)) == 0 && _scr_block_word1(p) == _scr_misuse.key)
      return SCR_EDOUBLEFREE;
    return SCR_ENOTALLOC;
  default: /* the header page 0 */
    return SCR_ENOTALLOC;
  }
}

/* The one classifier: what p is for heap h, SCR_OK for a live block of h,
 * else the misuse (SCR_EFOREIGN, SCR_EINTERIOR, SCR_ENOTALLOC,
 * SCR_EDOUBLEFREE).  The heap calls (heap.c, the checked calls below,
 * which the bindings use) and the process allocator (process/misuse.c,
 * for the arena that owns p's segment) ask it.  Never dereferences memory
 * the heap does not own: the segment map says which mapping an address is
 * in first. */
int _scr_classify(const scr_heap *h, const void *p) {
  scr_segment *seg = _scr_segmap_get(p);
  if (seg != NULL && seg->heap != h) return SCR_EFOREIGN; /* another heap's, whatever h held there before */
  int r = seg != NULL ? classify_in(h, seg, p) : SCR_EFOREIGN;
  /* A block of a run h gave back, whose address no segment holds now or
   * that h has not handed out since (retain=0 gives a page back as its
   * last block is freed, and its segment with it).  An arena's holder
   * writes the ring, other threads classify: heaps the program made
   * only. */
  if ((r == SCR_EFOREIGN || r == SCR_ENOTALLOC) && _scr_heap_owner(h) == NULL && gone_block(h, p)) return SCR_EDOUBLEFREE;
  return r;
}

int scr_heap_check(const scr_heap *h, const void *p) {
  if (!_scr_heap_live(h)) return SCR_EINVAL;
  if (p == NULL) return SCR_EFOREIGN;
  return _scr_classify(h, p);
}

int scr_heap_free_checked(scr_heap *h, void *p) {
  if (!_scr_heap_live(h)) return SCR_EINVAL;
  if (p == NULL) return SCR_OK;
  int r = _scr_classify(h, p);
  if (r == SCR_OK) {
    _scr_prof_free(p);
    _scr_heap_free_block(h, p);
  }
  return r;
}

int scr_heap_usable_size_checked(const scr_heap *h, const void *p, size_t *out) {
  int r = scr_heap_check(h, p);
  if (r == SCR_OK && out) *out = _scr_heap_usable_size(h, p);
  return r;
}

int scr_heap_realloc_checked(scr_heap *h, void *p, size_t n, void **out) {
  if (out == NULL || !_scr_heap_live(h)) return SCR_EINVAL;
  *out = NULL;
  if (p != NULL) {
    int r = _scr_classify(h, p);
    if (r != SCR_OK) return r;
    _scr_prof_free(p);
  }
  if (p != NULL && n == 0) {
    _scr_heap_free_block(h, p);
    return SCR_OK;
  }
  errno = 0;
  void *q = _scr_heap_realloc(h, p, n);
  if (q == NULL) return errno == EINVAL ? SCR_EINVAL : SCR_ENOMEM;
  if (_scr_prof_due(&h->prof, n)) q = _scr_heap_sampled(h, q, n, __builtin_return_address(0));
  *out = q;
  return SCR_OK;
}
