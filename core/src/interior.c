/* Interior return: the whole OS pages (4 KiB) inside free slots of pages
 * that still hold live blocks go back to the OS, as the glibc RFC does
 * for free chunks.  A 64 KiB page of a size class goes back only when its
 * last block is freed; one live block keeps the other 60 KiB committed.
 * A free slot of 8 KiB or more has at least one whole OS page past its
 * first bytes, which hold what the free list and the misuse checks need
 * (the link, the freed-block key, and the mark below): those stay, the
 * rest goes back with MADV_DONTNEED (in batches, one process_madvise
 * each), or with MADV_FREE for a range below madv_free_below.
 *
 * When: at trim and at the process allocator's discard, not at every
 * free (an madvise per free would cost what the churn lost).
 * A slot given back is marked (its third word), so that the next pass
 * skips it; a slot handed out and freed again may keep the mark if the
 * program never wrote that word, and is then skipped too (memory the
 * next trim does not reach, never memory given back in use).
 *
 * Correctness: a slot given back reads as zero (DONTNEED) or as its old
 * bytes or zero (FREE) past its first OS page; malloc promises nothing
 * there, and calloc clears every slot that is not fresh (heap.c). */
#include "internal.h"
#include <sys/uio.h>

#define INTERIOR_BATCH 64
#define INTERIOR_HEAD 24 /* link, freed-block key, mark */
#define INTERIOR_MARK 0x5343524d494e5452ull /* "SCRMINTR" */

static uint64_t interior_mark(const void *b) { return INTERIOR_MARK ^ (uintptr_t)b; }
SCR_NO_ASAN static uint64_t read_mark(const void *b) { return ((const uint64_t *)b)[2]; }
SCR_NO_ASAN static void write_mark(void *b) { ((uint64_t *)b)[2] = interior_mark(b); }

typedef struct interior_batch {
  size_t n, bytes;
  struct iovec r[INTERIOR_BATCH];
  void *slot[INTERIOR_BATCH];
} interior_batch;

static void interior_flush(scr_heap *h, interior_batch *b) {
  size_t done = _scr_os_decommit_ranges(b->r, b->n, &h->os);
  for (size_t i = 0; i < done; i++) {
    write_mark(b->slot[i]);
    b->bytes += b->r[i].iov_len;
  }
  b->n = 0;
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
    if (b->n == INTERIOR_BATCH) interior_flush(h, b);
    b->r[b->n] = (struct iovec){(void *)lo, len};
    b->slot[b->n] = s;
    b->n++;
  }
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
      if (pg->kind != SCR_PAGE_SMALL || pg->used == 0 || pg->free == NULL) continue;
      if (pg->block_size < 2 * ps) continue; /* no whole OS page past a slot's head */
      interior_page(h, pg, ps, &b, &lazy);
    }
  }
  if (b.n) interior_flush(h, &b);
  h->interior_bytes += b.bytes + lazy;
  h->interior_lazy_bytes += lazy;
  if (lazy_bytes) *lazy_bytes = lazy;
  return b.bytes + lazy;
}
