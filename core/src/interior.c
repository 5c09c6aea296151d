/* Interior return: free memory inside pages that still hold live blocks
 * goes back to the OS, as the glibc RFC does for free chunks.  A 64 KiB
 * page of a size class goes back only when its last block is freed; one
 * live block would keep the other 60 KiB committed.  Free slots of 2 OS
 * pages and more (ps: the OS page size, 4 KiB) give back their insides,
 * and a page's part never carved goes back whole:
 *
 * Big slots (2 ps and more: 8 KiB up): a free slot has at least one whole
 * OS page past its first bytes, which hold what the free list and the
 * misuse checks need (the link, the freed-block key, and the mark
 * below): those stay, the rest goes back.  A slot given back is marked
 * (its third word), so that the next pass skips it; a slot handed out and
 * freed again may keep the mark if the program never wrote that word,
 * and is then skipped too (memory the next trim does not reach, never
 * memory given back in use).
 *
 * Smaller slots keep their OS pages: a free slot's head (its link and
 * the freed-block key) lies in each of them, and giving back an OS page
 * that only free slots overlap would take those slots off the free list
 * and out of the fast paths' misuse checks, for little memory
 * (docs/process.md).
 *
 * Tails: a page that has not carved all its slots, on memory used
 * before (page->zero clear), gives back the whole OS pages past its last
 * carved slot and clears the bytes before them, so that it reads as zero
 * past its carved slots (page->zero set: carving and calloc skip the
 * clearing, and the next pass skips the page).
 *
 * All go back with MADV_DONTNEED (in batches, one process_madvise each),
 * or (tails excepted) with MADV_FREE for a range below madv_free_below,
 * and count in interior_bytes (interior_lazy_bytes for MADV_FREE).
 *
 * When: at trim and at the process allocator's discard, not at every
 * free (an madvise per free would cost what the churn lost).
 *
 * Correctness: memory given back reads as zero (DONTNEED) or as its old
 * bytes or zero (FREE); malloc promises nothing there, and calloc clears
 * every slot that is not fresh (heap.c). */
#include "internal.h"
#include <string.h>
#include <sys/uio.h>

#define INTERIOR_BATCH 64
#define INTERIOR_HEAD 24 /* link, freed-block key, mark */
#define INTERIOR_MARK 0x5343524d494e5452ull /* "SCRMINTR" */

static uint64_t interior_mark(const void *b) { return INTERIOR_MARK ^ (uintptr_t)b; }
SCR_NO_ASAN static uint64_t read_mark(const void *b) { return ((const uint64_t *)b)[2]; }
SCR_NO_ASAN static void write_mark(void *b) { ((uint64_t *)b)[2] = interior_mark(b); }

/* Ranges for one process_madvise: a big slot's interior (slot set, to be
 * marked once given back), or a page's tail (page set: the page reads as
 * zero past its carved slots once given back). */
typedef struct interior_batch {
  size_t n, bytes;
  struct iovec r[INTERIOR_BATCH];
  void *slot[INTERIOR_BATCH];
  scr_page *page[INTERIOR_BATCH];
} interior_batch;

static void interior_flush(scr_heap *h, interior_batch *b) {
  size_t done = _scr_os_decommit_ranges(b->r, b->n, &h->os);
  for (size_t i = 0; i < b->n; i++) {
    if (i >= done) continue; /* still committed */
    if (b->slot[i]) write_mark(b->slot[i]);
    else if (b->page[i]) b->page[i]->zero = 1; /* a tail: what it carves reads as zero */
    b->bytes += b->r[i].iov_len;
  }
  b->n = 0;
}

static void interior_add(scr_heap *h, interior_batch *b, void *lo, size_t len, void *slot, scr_page *pg) {
  if (b->n == INTERIOR_BATCH) interior_flush(h, b);
  b->r[b->n] = (struct iovec){lo, len};
  b->slot[b->n] = slot;
  b->page[b->n] = pg;
  b->n++;
}

/* The free slots of pg (a SMALL page with live blocks): their interior
 * OS pages, into the batch or back at once (MADV_FREE ranges). */
SCR_NO_ASAN static void interior_page(scr_heap *h, scr_page *pg, uintptr_t ps, interior_batch *b, size_t *lazy) {
  for (scr_block *s = pg->free; s; s = scr_block_next(s)) {
    uintptr_t lo = ((uintptr_t)s + INTERIOR_HEAD + ps - 1) & ~(ps - 1);
    uintptr_t hi = ((uintptr_t)s + pg->block_size) & ~(ps - 1);
    if (hi <= lo || read_mark(s) == interior_mark(s)) continue;
    size_t len = hi - lo;
    if (len < h->opt.madv_free_below) {
      if (_scr_os_decommit((void *)lo, len, true, &h->os) == 0) {
        write_mark(s);
        *lazy += len;
      }
      continue;
    }
    interior_add(h, b, (void *)lo, len, s, NULL);
  }
}

/* ---- tails: the OS pages past a page's carved slots ---- */

/* pg (with live blocks) has not carved all its slots, and its memory was
 * in use before (not zero: a retained page of another class, or a dirty
 * one): the whole OS pages past its last carved slot go into the batch,
 * and the bytes before them, past that slot, are cleared, so that once
 * they are given back the page reads as zero past its carved slots
 * (pg->zero: carving and calloc skip the clearing).  Never MADV_FREE,
 * after which they would not read as zero. */
static void tail_page(scr_heap *h, scr_page *pg, uintptr_t ps, interior_batch *b) {
  uintptr_t end = (uintptr_t)pg->start + (size_t)pg->capacity * pg->block_size;
  uintptr_t lo = (end + ps - 1) & ~(ps - 1), hi = (uintptr_t)pg->start + (size_t)pg->span * SCR_PAGE_SIZE;
  if (hi <= lo || hi - lo < h->opt.madv_free_below) return;
  memset((void *)end, 0, lo - end); /* never carved: not poisoned */
  interior_add(h, b, (void *)lo, hi - lo, NULL, pg);
}

size_t _scr_heap_return_interior(scr_heap *h, size_t *lazy_bytes) {
  uintptr_t ps = _scr_os_page_size();
  interior_batch b;
  b.n = b.bytes = 0;
  size_t lazy = 0;
  for (scr_segment *seg = h->segments; seg; seg = seg->next) {
    if (seg->kind != SCR_SEG_NORMAL) continue;
    for (unsigned i = SCR_FIRST_PAGE; i < SCR_PAGES_PER_SEGMENT; i++) {
      scr_page *pg = &seg->pages[i];
      if (pg->kind != SCR_PAGE_SMALL || pg->used == 0) continue;
      if (pg->capacity < pg->reserved && !pg->zero) tail_page(h, pg, ps, &b);
      if (pg->free == NULL) continue;
      if (pg->block_size >= 2 * ps) interior_page(h, pg, ps, &b, &lazy);
    }
  }
  if (b.n) interior_flush(h, &b);
  h->interior_bytes += b.bytes + lazy;
  h->interior_lazy_bytes += lazy;
  if (lazy_bytes) *lazy_bytes = lazy;
  scr_validate_heap(h);
  return b.bytes + lazy;
}
