/* Interior return: free memory inside pages that still hold live blocks
 * goes back to the OS, as the glibc RFC does for free chunks.  A 64 KiB
 * page of a size class goes back only when its last block is freed; one
 * live block would keep the other 60 KiB committed.  Free slots go back
 * in two ways by slot size (ps: the OS page size, 4 KiB), and the part of
 * a page never carved in a third:
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
 * Small slots (below 2 ps), holes: the OS pages of a page that only free
 * slots overlap go back whole, and the slots that start in them leave
 * the free list (a list through them would fault them back in).  The
 * page records them in `holes` (types.h: bit j for OS page j, and the
 * invariants).  A free slot that starts in a kept OS page and runs into
 * a hole stays listed: its head (link and key, 16 bytes, never across an
 * OS page: slots and OS pages are multiples of 16) is in the kept page.
 * Only pages whose slots are all carved get holes, so that the bump
 * index, which would write slot_limit, never moves on a page with holes.
 *   - A hole slot is free, yet reads as zero (no freed-block key): a
 *     second free of it must not pass the fast paths' checks.  A page
 *     with holes has slot_limit 0, which fails the slot test (misuse.c)
 *     for every address of the page, so every free of one of its blocks
 *     takes the slow side; the classifiers (classify.c, the process
 *     allocator's misuse.c) call a slot that starts in a hole a double
 *     free.  The fast paths are unchanged; frees on such a page cost the
 *     slow check until its holes are filled.
 *   - When the page's free list runs dry (page_with_room, heap.c), the
 *     hole slots go back on it (_scr_holes_refill: their heads fault the
 *     OS pages back in) before the page is taken for full.
 *   - When the page empties, it forgets its slots (_scr_holes_forget):
 *     it carves them again from the start, touching only what it hands
 *     out, rather than fault its holes back in to list their slots.
 *   - calloc clears every slot that is not carved from a page that read
 *     as zero (heap.c: small_calloc), hole slots included.
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
#define HOLE_HEAD 16     /* link, freed-block key: what a listed slot keeps out of a hole */

static uint64_t interior_mark(const void *b) { return INTERIOR_MARK ^ (uintptr_t)b; }
SCR_NO_ASAN static uint64_t read_mark(const void *b) { return ((const uint64_t *)b)[2]; }
SCR_NO_ASAN static void write_mark(void *b) { ((uint64_t *)b)[2] = interior_mark(b); }

/* Ranges for one process_madvise: a big slot's interior (slot set, to be
 * marked once given back), a run of a page's holes (page and run set,
 * filled again when it was not given back), or a page's tail (page set,
 * run 0: the page reads as zero past its carved slots once given back). */
typedef struct interior_batch {
  size_t n, bytes;
  struct iovec r[INTERIOR_BATCH];
  void *slot[INTERIOR_BATCH];
  scr_page *page[INTERIOR_BATCH];
  uint32_t run[INTERIOR_BATCH];
} interior_batch;

static void interior_flush(scr_heap *h, interior_batch *b) {
  size_t done = _scr_os_decommit_ranges(b->r, b->n, &h->os);
  for (size_t i = 0; i < b->n; i++) {
    if (i >= done) {
      if (b->page[i] && b->run[i]) _scr_holes_refill(b->page[i], b->run[i]); /* still committed: listed again */
      continue;
    }
    if (b->slot[i]) write_mark(b->slot[i]);
    else if (b->page[i] && b->run[i] == 0) b->page[i]->zero = 1; /* a tail: what it carves reads as zero */
    b->bytes += b->r[i].iov_len;
  }
  b->n = 0;
}

static void interior_add(scr_heap *h, interior_batch *b, void *lo, size_t len, void *slot, scr_page *pg, uint32_t run) {
  if (b->n == INTERIOR_BATCH) interior_flush(h, b);
  b->r[b->n] = (struct iovec){lo, len};
  b->slot[b->n] = slot;
  b->page[b->n] = pg;
  b->run[b->n] = run;
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
    interior_add(h, b, (void *)lo, len, s, NULL, 0);
  }
}

/* ---- holes (slots below 2 OS pages) ---- */

/* OS pages per page, when holes fit the mask (0: no holes). */
static unsigned holes_os_pages(uintptr_t ps) {
  return ps >= SCR_PAGE_SIZE / 32 && ps <= SCR_PAGE_SIZE / 2 ? (unsigned)(SCR_PAGE_SIZE / ps) : 0;
}

/* The slots of pg that start in OS page j: first .. last (empty when
 * first > last: the page's tail, or no slot starts there). */
static void holes_slots_of(const scr_page *pg, uintptr_t ps, unsigned j, uint32_t *first, uint32_t *last) {
  uint32_t bs = pg->block_size;
  uint64_t lo = (uint64_t)j * ps, hi = lo + ps;
  *first = (uint32_t)((lo + bs - 1) / bs);
  uint64_t end = (hi + bs - 1) / bs; /* first slot starting at or past hi */
  if (end > pg->reserved) end = pg->reserved;
  *last = (uint32_t)end - 1; /* end >= 1: slot 0 starts in OS page 0 */
}

/* The page's holes become `holes`; its slot_limit follows (types.h: 0
 * while it has holes, else its carved slots' limit). */
static void holes_set(scr_page *pg, uint32_t holes) {
  __atomic_store_n(&pg->holes, holes, __ATOMIC_RELAXED);
  _scr_page_publish_limit(pg);
}

uint32_t _scr_holes_slot_count(const scr_page *pg) {
  uintptr_t ps = _scr_os_page_size();
  uint32_t n = 0;
  for (uint32_t m = pg->holes; m; m &= m - 1) {
    uint32_t first, last;
    holes_slots_of(pg, ps, (unsigned)__builtin_ctz(m), &first, &last);
    if (first <= last) n += last - first + 1;
  }
  return n;
}

/* The slots that start in the OS pages of `mask` (holes of pg) go on its
 * free list, in address order, with the freed-block key (misuse.c), and
 * those pages are no longer holes.  The slots are free and poisoned in
 * ASan builds: no_sanitize_address. */
SCR_NO_ASAN void _scr_holes_refill(scr_page *pg, uint32_t mask) {
  scr_assert((pg->holes & mask) == mask);
  uintptr_t ps = _scr_os_page_size();
  uint64_t key = _scr_misuse.key;
  for (uint32_t m = mask; m;) {
    unsigned j = 31u - (unsigned)__builtin_clz(m); /* highest first: the list comes out ascending */
    m &= ~((uint32_t)1 << j);
    uint32_t first, last;
    holes_slots_of(pg, ps, j, &first, &last);
    for (uint32_t k = last + 1; k-- > first;) {
      scr_block *s = (scr_block *)(pg->start + (size_t)k * pg->block_size);
      s->next = pg->free;
      ((uint64_t *)s)[1] = key;
      pg->free = s;
    }
  }
  holes_set(pg, pg->holes & ~mask);
}

/* pg, a page with holes whose last block was freed, forgets its slots:
 * it carves them again from the start (the checked calls still tell a
 * second free of one of them: scr_gone). */
void _scr_holes_forget(scr_heap *h, scr_page *pg) {
  scr_assert(pg->used == 0 && pg->holes != 0);
  _scr_gone_note(h, pg->start, pg->block_size, pg->capacity);
  pg->free = NULL;
  pg->zero = 0;
  __atomic_store_n(&pg->capacity, 0, __ATOMIC_RELAXED); /* (_scr_page_capacity's readers) */
  holes_set(pg, 0);
  SCR_UNPOISON(pg->start, SCR_PAGE_SIZE); /* not carved, as a page just formatted */
}

/* The OS pages of pg (slots below 2 ps, all carved, live blocks and free
 * slots) that only free slots overlap: their slots off the free list,
 * the pages into holes and into the batch (or back at once with
 * MADV_FREE).  Free slots are poisoned in ASan builds. */
SCR_NO_ASAN static void holes_page(scr_heap *h, scr_page *pg, uintptr_t ps, interior_batch *b, size_t *lazy) {
  uint64_t is_free[SCR_MAX_SLOTS / 64] = {0};
  uint32_t bs = pg->block_size;
  for (const scr_block *s = pg->free; s; s = s->next) {
    uint32_t k = (uint32_t)(((const uint8_t *)s - pg->start) / bs);
    is_free[k / 64] |= (uint64_t)1 << (k % 64);
  }
  unsigned nos = holes_os_pages(ps);
  uint32_t take = 0;
  for (unsigned j = 0; j < nos; j++) {
    uint64_t lo = (uint64_t)j * ps;
    uint32_t first = (uint32_t)(lo / bs), last = (uint32_t)((lo + ps - 1) / bs); /* slots overlapping OS page j */
    if ((pg->holes >> j) & 1 || first >= pg->reserved) continue;
    if (last >= pg->reserved) last = pg->reserved - 1;
    if ((uint64_t)first * bs < lo && (uint64_t)first * bs + HOLE_HEAD > lo) continue; /* a listed slot's head */
    bool all = true;
    for (uint32_t k = first; k <= last && all; k++) all = (is_free[k / 64] >> (k % 64)) & 1;
    if (all) take |= (uint32_t)1 << j;
  }
  if (take == 0) return;
  scr_block **link = &pg->free;
  for (scr_block *s = *link; s; s = *link) {
    unsigned j = (unsigned)(((uint8_t *)s - pg->start) / ps);
    if ((take >> j) & 1) *link = s->next;
    else link = &s->next;
  }
  holes_set(pg, pg->holes | take);
  while (take) { /* each run of OS pages, one range */
    unsigned j0 = (unsigned)__builtin_ctz(take), j1 = j0;
    while (j1 < nos && (take >> j1) & 1) j1++;
    uint32_t run = (uint32_t)((((uint64_t)1 << (j1 - j0)) - 1) << j0);
    take &= ~run;
    void *lo = pg->start + (size_t)j0 * ps;
    size_t len = (size_t)(j1 - j0) * ps;
    if (len < h->opt.madv_free_below) {
      if (_scr_os_decommit(lo, len, true, &h->os) == 0) *lazy += len;
      else _scr_holes_refill(pg, run);
      continue;
    }
    interior_add(h, b, lo, len, NULL, pg, run);
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
  interior_add(h, b, (void *)lo, hi - lo, NULL, pg, 0);
}

size_t _scr_heap_return_interior(scr_heap *h, size_t *lazy_bytes) {
  uintptr_t ps = _scr_os_page_size();
  bool holes = holes_os_pages(ps) != 0;
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
      else if (holes && pg->span == 1 && pg->capacity == pg->reserved) holes_page(h, pg, ps, &b, &lazy);
    }
  }
  if (b.n) interior_flush(h, &b);
  h->interior_bytes += b.bytes + lazy;
  h->interior_lazy_bytes += lazy;
  if (lazy_bytes) *lazy_bytes = lazy;
  scr_validate_heap(h);
  return b.bytes + lazy;
}
