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
  default: /* FREE page, or the header page 0 */
    return SCR_ENOTALLOC;
  }
}

scr_heap *scr_heap_of(const void *p) {
  scr_segment *seg = p ? _scr_segmap_get(p) : NULL;
  return seg ? seg->heap : NULL;
}

int scr_heap_check(const scr_heap *h, const void *p) {
  if (h == NULL || p == NULL) return SCR_EFOREIGN;
  return _scr_classify(h, p);
}

int scr_heap_free_checked(scr_heap *h, void *p) {
  if (p == NULL) return SCR_OK;
  int r = _scr_classify(h, p);
  if (r == SCR_OK) scr_heap_free(h, p);
  return r;
}

int scr_heap_usable_size_checked(const scr_heap *h, const void *p, size_t *out) {
  int r = scr_heap_check(h, p);
  if (r == SCR_OK && out) *out = scr_heap_usable_size(h, p);
  return r;
}

int scr_heap_realloc_checked(scr_heap *h, void *p, size_t n, void **out) {
  *out = NULL;
  if (p != NULL) {
    int r = _scr_classify(h, p);
    if (r != SCR_OK) return r;
  }
  if (p != NULL && n == 0) {
    scr_heap_free(h, p);
    return SCR_OK;
  }
  errno = 0;
  void *q = scr_heap_realloc(h, p, n);
  if (q == NULL) return errno == EINVAL ? SCR_EINVAL : SCR_ENOMEM;
  *out = q;
  return SCR_OK;
}
