/* Pages of one size class: formatting and the page validator.  Slots are
 * carved lazily: `capacity` is the bump index, and only slots below it
 * were ever handed out.  A medium class's page is a run of
 * SCR_MEDIUM_SPAN pages: the first descriptor is the page's, the others
 * are RUN_TAIL and point at it. */
#include "internal.h"
#include "heap_fast.h"
#include <string.h>

/* No slot of pg (pg->span pages) carved: its blocks are handed out again
 * from its start, in address order. */
void _scr_page_uncarve(scr_page *pg) {
  scr_segment *seg = _scr_page_segment(pg);
  unsigned first = _scr_page_index(seg, pg);
  __atomic_store_n(&pg->capacity, 0, __ATOMIC_RELAXED); /* (_scr_page_capacity's readers) */
  for (unsigned i = first; i < first + pg->span; i++) __atomic_store_n(&seg->slot_limit[i], 0, __ATOMIC_RELAXED);
  pg->free = NULL;
  SCR_UNPOISON(pg->start, pg->span * SCR_PAGE_SIZE); /* its free blocks were poisoned */
}

void _scr_page_format(scr_page *pg, unsigned cls) {
  scr_segment *seg = _scr_page_segment(pg);
  unsigned first = _scr_page_index(seg, pg), span = _scr_class_span(cls);
  scr_assert(first % span == 0 && first + span <= SCR_PAGES_PER_SEGMENT);
  pg->kind = SCR_PAGE_SMALL;
  pg->cls = (uint8_t)cls;
  pg->span = (uint8_t)span;
  pg->block_size = _scr_class_sizes[cls];
  pg->reserved = (uint32_t)(span * SCR_PAGE_SIZE / pg->block_size);
  pg->start = _scr_page_start(seg, pg);
  _scr_page_uncarve(pg); /* (a retained page changing class: unpoisoned) */
  pg->used = 0;
  pg->counted = 0;
  __atomic_store_n(&pg->sampled, 0, __ATOMIC_RELAXED);
  pg->in_queue = 0;
  pg->next = pg->prev = NULL;
  scr_seg_set_tag(seg, first, cls);
  for (unsigned i = first + 1; i < first + span; i++) {
    scr_page *t = &seg->pages[i];
    pg->zero &= t->zero; /* the run reads as zero when all its pages do */
    t->kind = SCR_PAGE_RUN_TAIL;
    t->head = (uint8_t)first;
    t->cls = (uint8_t)cls;
    scr_seg_set_tag(seg, i, cls);
  }
}

/* Is block p, a slot the page carved, free: on the page's free list?
 * O(free slots): checked calls only. */
bool _scr_page_slot_is_free(const scr_page *pg, const void *p) {
  for (const scr_block *b = pg->free; b; b = scr_block_next(b))
    if (b == p) return true;
  return false;
}

/* used + length(free) == capacity <= reserved; every free slot is a
 * slot start inside the carved part of the page, listed once; its
 * slot_limit is _scr_page_slot_limit's (types.h). */
bool _scr_page_validate(const scr_page *pg) {
  if (pg->kind != SCR_PAGE_SMALL) return true;
  const scr_segment *seg = _scr_page_segment(pg);
  const uint8_t *start = _scr_page_start(seg, pg);
  uint64_t seen[SCR_MAX_SLOTS / 64] = {0};
  if (pg->start != start) return false;
  if (pg->block_size != _scr_class_sizes[pg->cls]) return false;
  if (pg->capacity > pg->reserved || pg->used > pg->capacity) return false;
  if (pg->span != _scr_class_span(pg->cls) || pg->reserved != pg->span * SCR_PAGE_SIZE / pg->block_size) return false;
  unsigned first = _scr_page_index(seg, pg);
  for (unsigned i = first + 1; i < first + pg->span; i++)
    if (seg->pages[i].kind != SCR_PAGE_RUN_TAIL || seg->pages[i].head != first || seg->pages[i].cls != pg->cls) return false;
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
  /* (at most: a thread that freed the page's last sampled block may have
   * published an older capacity's limit after the holder's, or lost the
   * race to a holder that still saw the sample, heap_fast.h; a lower
   * limit only sends frees to the exact slow side.  Each published limit
   * is read before the page's: such a thread may raise it meanwhile, to
   * within the page's, while the holder, which runs this check, is the
   * only one to mark the page sampled or carve it.) */
  for (unsigned i = first; i < first + pg->span; i++) {
    uint64_t published = __atomic_load_n(&seg->slot_limit[i], __ATOMIC_ACQUIRE);
    if (published > _scr_page_slot_limit(pg)) return false;
  }
  return pg->used + nfree == pg->capacity;
}
