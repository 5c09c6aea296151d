/* Exact classification of any address for a heap, and the checked entry
 * points built on it.  Never dereferences memory the heap does not own:
 * the segment map says which mapping an address is in first. */
#include "internal.h"
#include <errno.h>

int _scr_classify(const scr_heap *h, const void *p) {
  scr_segment *seg = _scr_segmap_get(p);
  if (seg == NULL || seg->heap != h) return SCR_EFOREIGN;
  uintptr_t a = (uintptr_t)p, base = (uintptr_t)seg;
  if (seg->kind == SCR_SEG_HUGE) {
    uintptr_t block = base + seg->huge_offset;
    if (a == block) return seg->huge_live ? SCR_OK : SCR_EDOUBLEFREE;
    return a > block ? SCR_EINTERIOR : SCR_ENOTALLOC; /* header page: never a block */
  }
  unsigned idx = (unsigned)((a - base) >> SCR_PAGE_SHIFT);
  const scr_page *pg = &seg->pages[idx];
  uintptr_t start = base + ((uintptr_t)idx << SCR_PAGE_SHIFT);
  if (pg->kind == SCR_PAGE_RUN_TAIL) { /* a medium class's run: its first page says */
    pg = &seg->pages[pg->head];
    start = (uintptr_t)pg->start;
  }
  switch (pg->kind) {
  case SCR_PAGE_SMALL: {
    size_t off = a - start;
    if (off >= (size_t)pg->reserved * pg->block_size) return SCR_ENOTALLOC; /* page tail */
    if (off % pg->block_size != 0) return SCR_EINTERIOR;
    uint32_t slot = (uint32_t)(off / pg->block_size);
    if (slot >= pg->capacity) return SCR_ENOTALLOC;
    return _scr_page_slot_is_free(pg, p) ? SCR_EDOUBLEFREE : SCR_OK;
  }
  case SCR_PAGE_LARGE:
    if (a != start) return SCR_EINTERIOR;
    return pg->used ? SCR_OK : SCR_EDOUBLEFREE;
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
    if (a == start && pg->freed_block) return SCR_EDOUBLEFREE;
    if (h->owner == NULL && idx != 0 && (a & (SCR_MIN_ALIGN - 1)) == 0 && _scr_block_word1(p) == _scr_misuse.key)
      return SCR_EDOUBLEFREE;
    return SCR_ENOTALLOC;
  default: /* the header page 0 */
    return SCR_ENOTALLOC;
  }
}

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

/* _scr_classify, and a block of a run given back is a double free where
 * the segment map alone says foreign or never allocated (retain=0 gives
 * a page back as its last block is freed, and its segment with it). */
int _scr_classify_checked(const scr_heap *h, const void *p) {
  int r = _scr_classify(h, p);
  if ((r == SCR_EFOREIGN || r == SCR_ENOTALLOC) && gone_block(h, p)) return SCR_EDOUBLEFREE;
  return r;
}

int scr_heap_check(const scr_heap *h, const void *p) {
  if (!_scr_heap_live(h)) return SCR_EINVAL;
  if (p == NULL) return SCR_EFOREIGN;
  return _scr_classify_checked(h, p);
}

int scr_heap_free_checked(scr_heap *h, void *p) {
  if (!_scr_heap_live(h)) return SCR_EINVAL;
  if (p == NULL) return SCR_OK;
  int r = _scr_classify_checked(h, p);
  if (r == SCR_OK) _scr_heap_free_block(h, p);
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
    int r = _scr_classify_checked(h, p);
    if (r != SCR_OK) return r;
  }
  if (p != NULL && n == 0) {
    _scr_heap_free_block(h, p);
    return SCR_OK;
  }
  errno = 0;
  void *q = _scr_heap_realloc(h, p, n);
  if (q == NULL) return errno == EINVAL ? SCR_EINVAL : SCR_ENOMEM;
  *out = q;
  return SCR_OK;
}
