/* Pages of one size class: formatting and the page validator.  Slots are
 * carved lazily: `capacity` is the bump index, and only slots below it
 * were ever handed out. */
#include "internal.h"
#include <string.h>

void _scr_page_format(scr_page *pg, unsigned cls) {
  pg->kind = SCR_PAGE_SMALL;
  pg->cls = (uint8_t)cls;
  pg->block_size = _scr_class_sizes[cls];
  pg->reserved = (uint32_t)(SCR_PAGE_SIZE / pg->block_size);
  pg->capacity = 0;
  pg->used = 0;
  pg->free = NULL;
  pg->in_queue = 0;
  pg->next = pg->prev = NULL;
  pg->start = _scr_page_start(_scr_page_segment(pg), pg);
  _scr_page_segment(pg)->page_tag[_scr_page_index(_scr_page_segment(pg), pg)] = (uint8_t)cls;
  SCR_UNPOISON(pg->start, SCR_PAGE_SIZE); /* a retained page changing class */
}

/* Is block p on the page's free list?  O(free slots): checked calls only. */
bool _scr_page_slot_is_free(const scr_page *pg, const void *p) {
  for (const scr_block *b = pg->free; b; b = scr_block_next(b))
    if (b == p) return true;
  return false;
}

/* used + length(free) == capacity <= reserved; every free slot is a slot
 * start inside the carved part of the page, listed once. */
bool _scr_page_validate(const scr_page *pg) {
  if (pg->kind != SCR_PAGE_SMALL) return true;
  const scr_segment *seg = _scr_page_segment(pg);
  const uint8_t *start = _scr_page_start(seg, pg);
  uint64_t seen[SCR_MAX_SLOTS / 64] = {0};
  if (pg->start != start) return false;
  if (pg->block_size != _scr_class_sizes[pg->cls]) return false;
  if (pg->capacity > pg->reserved || pg->used > pg->capacity) return false;
  if (pg->reserved != SCR_PAGE_SIZE / pg->block_size) return false;
  uint32_t nfree = 0;
  for (const scr_block *b = pg->free; b; b = scr_block_next(b)) {
    uintptr_t off = (uintptr_t)((const uint8_t *)b - start);
    if ((const uint8_t *)b < start || off % pg->block_size != 0) return false;
    uint32_t slot = (uint32_t)(off / pg->block_size);
    if (slot >= pg->capacity) return false;
    if ((seen[slot / 64] >> (slot % 64)) & 1) return false; /* listed twice: a cycle */
    seen[slot / 64] |= (uint64_t)1 << (slot % 64);
    nfree++;
  }
  return pg->used + nfree == pg->capacity;
}
