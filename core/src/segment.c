/* Segments: 4 MiB aligned mappings carved into 64 KiB pages, and huge
 * mappings holding one block.  This file maps and unmaps them, registers
 * them in the segment map, and hands out and takes back runs of pages.
 * Accounting changes only after the OS call succeeded. */
#include "internal.h"
#include <string.h>
#include <sys/uio.h>

#define ALL_PAGES_MASK (~(uint64_t)0 << SCR_FIRST_PAGE) /* pages 1..63 */
#define PAGE_BYTES ((uint64_t)SCR_PAGE_SIZE)

/* The heap's lock (types.h: who may touch what): the entry points below
 * take it; the static functions they share run under it. */
static inline void heap_lock(scr_heap *h) { pthread_mutex_lock(&h->lock); }
static inline void heap_unlock(scr_heap *h) { pthread_mutex_unlock(&h->lock); }

/* dirty_pages changes under the lock only (types.h), so a load and a store
 * do: it is atomic for the holder's reads without the lock, and a locked
 * add would drain the store buffer at every page taken or given back. */
static inline void dirty_pages_set(scr_heap *h, uint64_t v) {
  atomic_store_explicit(&h->dirty_pages, v, memory_order_relaxed);
}

static size_t meta_size(void) {
  size_t ps = _scr_os_page_size();
  return (sizeof(scr_segment) + ps - 1) & ~(ps - 1);
}

static void link_segment(scr_heap *h, scr_segment *seg) {
  seg->prev = NULL;
  seg->next = h->segments;
  if (h->segments) h->segments->prev = seg;
  h->segments = seg;
}

static void avail_remove(scr_heap *h, scr_segment *seg) {
  unsigned r = seg->avail_run;
  if (r == 0) return;
  if (seg->avail_prev) seg->avail_prev->avail_next = seg->avail_next; else h->avail[r] = seg->avail_next;
  if (seg->avail_next) seg->avail_next->avail_prev = seg->avail_prev;
  if (h->avail[r] == NULL) h->avail_runs &= ~((uint64_t)1 << r);
  seg->avail_next = seg->avail_prev = NULL;
  seg->avail_run = 0;
}

/* The longest run of set bits in m (the lowest on a tie), its first bit
 * in *first. */
static unsigned longest_run(uint64_t m, unsigned *first) {
  unsigned best = 0;
  *first = 0;
  while (m) {
    unsigned at = (unsigned)__builtin_ctzll(m);
    uint64_t rest = ~(m >> at);
    unsigned len = rest ? (unsigned)__builtin_ctzll(rest) : 64 - at;
    if (len > best) best = len, *first = at;
    m = at + len >= 64 ? 0 : m & (~(uint64_t)0 << (at + len));
  }
  return best;
}

/* seg's longest run is r pages from page at: it moves to list r. */
static void avail_set(scr_heap *h, scr_segment *seg, unsigned r, unsigned at) {
  seg->avail_at = at;
  if (r == seg->avail_run) return;
  avail_remove(h, seg);
  if (r == 0) return;
  seg->avail_prev = NULL;
  seg->avail_next = h->avail[r];
  if (h->avail[r]) h->avail[r]->avail_prev = seg;
  h->avail[r] = seg;
  h->avail_runs |= (uint64_t)1 << r;
  seg->avail_run = r;
}

/* seg's free_mask changed: it moves to the list of its longest run. */
static void avail_update(scr_heap *h, scr_segment *seg) {
  unsigned at;
  unsigned r = longest_run(seg->free_mask, &at);
  avail_set(h, seg, r, at);
}

/* Pages first..first+n-1 of seg were taken: only a run that overlaps its
 * longest one can shorten that (else the longest stays, where it is). */
static void avail_taken(scr_heap *h, scr_segment *seg, unsigned first, unsigned n) {
  if (first < seg->avail_at + seg->avail_run && seg->avail_at < first + n) avail_update(h, seg);
}

/* Pages first..first+n-1 of seg became free: the run they join is the
 * only one that grew, so it is the longest if it outgrew the old one.
 * (Page 0, the header, is never free: a clear bit lies below first.) */
static void avail_freed(scr_heap *h, scr_segment *seg, unsigned first, unsigned n) {
  scr_assert(first >= SCR_FIRST_PAGE && !(seg->free_mask & 1));
  uint64_t used = ~seg->free_mask;
  uint64_t below = used & (((uint64_t)1 << first) - 1);
  uint64_t above = first + n >= 64 ? 0 : used & (~(uint64_t)0 << (first + n));
  unsigned start = 64 - (unsigned)__builtin_clzll(below);
  unsigned end = above ? (unsigned)__builtin_ctzll(above) : 64;
  if (end - start > seg->avail_run) avail_set(h, seg, end - start, start);
}

static void unlink_segment(scr_heap *h, scr_segment *seg) {
  if (h->last_free_seg == seg) h->last_free_seg = SCR_NO_SEGMENT;
  if (seg->prev) seg->prev->next = seg->next; else h->segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  avail_remove(h, seg);
}

static scr_segment *segment_map(scr_heap *h, size_t size, size_t align, scr_segment_kind kind) {
  if (align < SCR_SEGMENT_SIZE) align = SCR_SEGMENT_SIZE;
  scr_segment *seg = _scr_os_map_aligned(size, align, &h->os);
  if (seg == NULL) return NULL;
  if (_scr_segmap_set((uintptr_t)seg, size, seg, h->map_mark) != 0) {
    _scr_os_unmap(seg, size, &h->os);
    return NULL;
  }
  /* The mapping is fresh, so every field starts at zero. */
  seg->magic = SCR_SEGMENT_MAGIC;
  seg->heap = h;
  seg->size = size;
  seg->kind = kind;
  memset(seg->page_tag4, SCR_TAG_OTHER * 4, sizeof seg->page_tag4);
  link_segment(h, seg);
  if (kind == SCR_SEG_NORMAL) {
    seg->free_mask = ALL_PAGES_MASK;
    avail_update(h, seg);
  }
  h->mmaps++;
  h->reserved += size;
  if (h->hooks->segment_mapped) h->hooks->segment_mapped(h, seg, size, h->hooks->arg);
  return seg;
}

scr_segment *_scr_segment_map(scr_heap *h, size_t size, size_t align, scr_segment_kind kind) {
  heap_lock(h);
  scr_segment *seg = segment_map(h, size, align, kind);
  heap_unlock(h);
  return seg;
}

/* Unmap a segment whose pages are all FREE (or a huge one).  false when
 * munmap failed: the segment stays registered and usable. */
static bool segment_unmap(scr_heap *h, scr_segment *seg) {
  size_t size = seg->size;
  uint64_t committed = seg->kind == SCR_SEG_HUGE ? size
                                                 : PAGE_BYTES * (uint64_t)_scr_popcount(seg->committed_free_mask);
  scr_assert(seg->kind == SCR_SEG_HUGE || seg->used_pages == 0);
  uint64_t dirty = seg->dirty_new | seg->dirty_old, over = seg->dirty_over;
  unlink_segment(h, seg);
  _scr_segmap_clear((uintptr_t)seg, size);
  seg->magic = 0;
  if (_scr_os_unmap(seg, size, &h->os) != 0) {
    seg->magic = SCR_SEGMENT_MAGIC;
    _scr_segmap_set((uintptr_t)seg, size, seg, h->map_mark); /* leaves exist already */
    link_segment(h, seg);
    avail_update(h, seg);
    _scr_report(SCR_ENOMEM, "munmap of a segment failed; kept for a later trim");
    return false;
  }
  h->mmaps--;
  h->reserved -= size;
  _scr_heap_bytes_sub(h, committed);
  dirty_pages_set(h, h->dirty_pages - (uint64_t)_scr_popcount(dirty));
  h->over_pages -= (uint64_t)_scr_popcount(over);
  return true;
}

bool _scr_segment_unmap(scr_heap *h, scr_segment *seg) {
  heap_lock(h);
  bool done = segment_unmap(h, seg);
  heap_unlock(h);
  return done;
}

void _scr_segment_detach(scr_heap *h, scr_segment *seg) {
  scr_assert(seg->kind == SCR_SEG_HUGE && !seg->huge_live);
  heap_lock(h);
  unlink_segment(h, seg);
  heap_unlock(h);
  h->mmaps--;
  h->reserved -= seg->size;
  h->bytes -= seg->size; /* still committed: the process's huge cache's (_scr_owned_bytes) */
}

void _scr_segment_unmap_detached(scr_segment *seg, scr_os_counters *c) {
  size_t size = seg->size;
  _scr_segmap_clear((uintptr_t)seg, size);
  seg->magic = 0;
  if (_scr_os_unmap(seg, size, c) != 0) _scr_report(SCR_ENOMEM, "munmap of a cached huge block failed: %zu bytes stay mapped", size);
  else _scr_owned_shrink(size);
}

/* The segment map's chunks of [base + from, base + to) that no byte below
 * base + from shares. */
static void segmap_clear_tail(uintptr_t base, size_t from, size_t to) {
  uintptr_t first = (base + from + SCR_SEGMENT_SIZE - 1) & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1);
  if (first < base + to) _scr_segmap_clear(first, base + to - first);
}

/* A detached huge segment gives back its tail from new_size on (a page
 * multiple); false when the munmap failed (nothing changed). */
bool _scr_segment_shrink_detached(scr_segment *seg, size_t new_size, scr_os_counters *c) {
  size_t old_size = seg->size;
  scr_assert(seg->kind == SCR_SEG_HUGE && !seg->huge_live && new_size > seg->huge_offset && new_size < old_size);
  segmap_clear_tail((uintptr_t)seg, new_size, old_size); /* before: the range is anyone's after */
  if (_scr_os_unmap((uint8_t *)seg + new_size, old_size - new_size, c) != 0) {
    _scr_segmap_set((uintptr_t)seg, old_size, seg, seg->heap->map_mark);
    return false;
  }
  seg->size = new_size;
  seg->huge_size = new_size - seg->huge_offset;
  _scr_owned_shrink(old_size - new_size);
  return true;
}

scr_segment *_scr_segment_attach(scr_heap *h, scr_segment *seg, size_t new_size) {
  size_t old_size = seg->size;
  scr_segment *split = NULL;
  if (new_size < old_size) {
    /* The head, resident, serves the block, and keeps up to a quarter
     * more of what it has (the block's usable size; jemalloc's large size
     * classes round up as much), so that the block serves a larger
     * request once freed instead of being grown.  A tail that holds a
     * huge block from its next segment boundary on becomes a cached huge
     * segment of its own (its first page the header): its pages stay
     * resident for the next request; the rest of the tail goes back. */
    uintptr_t base = (uintptr_t)seg, end = base + old_size;
    uintptr_t t = (base + new_size + SCR_SEGMENT_SIZE - 1) & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1);
    size_t cut = old_size, ps = _scr_os_page_size();
    if (h->hooks->huge_put && seg->huge_offset == SCR_HUGE_OFFSET && t + SCR_HUGE_OFFSET + h->opt.huge_threshold < end)
      cut = t - base;
    size_t keep = (new_size + (new_size - seg->huge_offset) / 4 + ps - 1) & ~(ps - 1);
    new_size = keep < cut ? keep : cut;
    segmap_clear_tail(base, new_size, cut);
    if (cut > new_size && _scr_os_unmap((uint8_t *)seg + new_size, cut - new_size, &h->os) != 0) {
      _scr_segmap_set(base, cut, seg, h->map_mark);
      new_size = cut; /* keeps that part of its tail */
    }
    if (cut < old_size) {
      split = (scr_segment *)t;
      memset(split, 0, sizeof *split);
      split->magic = SCR_SEGMENT_MAGIC;
      split->heap = h;
      split->size = end - t;
      split->kind = SCR_SEG_HUGE;
      memset(split->page_tag4, SCR_TAG_OTHER * 4, sizeof split->page_tag4);
      split->huge_offset = SCR_HUGE_OFFSET;
      split->huge_size = split->size - SCR_HUGE_OFFSET;
      _scr_segmap_set(t, split->size, split, h->map_mark); /* its leaves exist */
    }
  } else if (new_size > old_size) {
    scr_segment *moved = NULL;
    if (_scr_segmap_prepare((uintptr_t)seg, new_size) == 0) moved = _scr_os_remap(seg, old_size, new_size, NULL, &h->os);
    if (moved == NULL) {
      size_t align = seg->huge_offset > SCR_SEGMENT_SIZE ? seg->huge_offset : SCR_SEGMENT_SIZE;
      void *target = _scr_os_map_aligned(new_size, align, &h->os);
      if (target != NULL && _scr_segmap_prepare((uintptr_t)target, new_size) == 0) {
        /* before the move, which frees the old range for any thread's
         * mmap (large.c: _scr_large_realloc_inplace says why) */
        _scr_segmap_clear((uintptr_t)seg, old_size);
        moved = _scr_os_remap(seg, old_size, new_size, target, &h->os);
      }
      if (moved == NULL) {
        if (target != NULL) _scr_os_unmap(target, new_size, &h->os);
        _scr_segment_unmap_detached(seg, &h->os);
        return NULL;
      }
    }
    seg = moved;
  }
  seg->size = new_size;
  seg->huge_size = new_size - seg->huge_offset;
  seg->heap = h;
  if (_scr_segmap_set((uintptr_t)seg, new_size, seg, h->map_mark) != 0) { /* leaves exist: cannot fail */
    _scr_segment_unmap_detached(seg, &h->os);
    return NULL;
  }
  heap_lock(h);
  link_segment(h, seg);
  heap_unlock(h);
  h->mmaps++;
  h->reserved += new_size;
  h->bytes += new_size;
  /* counted in _scr_owned_bytes since it was detached: the change only */
  uint64_t now = new_size + (split ? split->size : 0);
  if (now > old_size) _scr_owned_grow(now - old_size);
  else _scr_owned_shrink(old_size - now);
  if (split) h->hooks->huge_put(h, split, h->hooks->arg); /* detached from birth */
  return seg;
}

/* Bit j of the result: pages j .. j+n-1 are all free, and page j starts
 * on an `align` boundary. */
static uint64_t run_starts(uint64_t free_mask, unsigned n, size_t align) {
  /* m holds the starts of runs of `len` pages, len doubling, then the
   * last shift tops it up to n: log2(n) steps rather than n */
  uint64_t m = free_mask;
  unsigned len = 1;
  for (; 2 * len <= n && m; len *= 2) m &= m >> len;
  if (len < n) m &= m >> (n - len);
  size_t step = align > SCR_PAGE_SIZE ? align >> SCR_PAGE_SHIFT : 1;
  /* a bit every `step` pages (a power of two that divides 64): all ones
   * over 2^step - 1, one division rather than a loop */
  scr_assert((step & (step - 1)) == 0 && step <= SCR_PAGES_PER_SEGMENT / 2);
  if (step > 1) m &= ~(uint64_t)0 / (((uint64_t)1 << step) - 1);
  return m;
}

/* Where in a segment a run of n pages starts, of the possible `starts`:
 * a single page at the top, a longer run at the bottom, so that the
 * pages of size classes (one page each, scattered by their lifetimes)
 * do not split the free space that long runs need. */
static unsigned run_start(uint64_t starts, unsigned n) {
  return n == 1 ? 63 - (unsigned)__builtin_clzll(starts) : (unsigned)__builtin_ctzll(starts);
}

/* Pages of `bits` that the decay gave back are taken again: within its
 * window, a refault (the decay backs off on them: process/decay.c). */
static void note_refault(scr_heap *h, scr_segment *seg, uint64_t bits) {
  uint64_t back = seg->decayed_mask & bits;
  seg->decayed_mask &= ~bits;
  if (_scr_os_now_ms() < seg->decayed_ms + h->refault_window_ms)
    h->refault_bytes += PAGE_BYTES * (uint64_t)_scr_popcount(back);
}

/* Fresh pages taken while segments a decay's trim unmapped are missed:
 * within the window, as many bytes as it unmapped are refaults (as the
 * huge cache counts a miss soon after a return). */
static void note_refault_fresh(scr_heap *h, uint64_t fresh) {
  uint64_t b = PAGE_BYTES * (uint64_t)_scr_popcount(fresh);
  if (b > h->unmapped_decayed) b = h->unmapped_decayed;
  if (_scr_os_now_ms() < h->unmapped_decayed_ms + h->refault_window_ms) h->refault_bytes += b;
  else b = h->unmapped_decayed; /* past the window: none of it is */
  h->unmapped_decayed -= b;
}

static scr_page *take_run(scr_heap *h, scr_segment *seg, unsigned first, unsigned n) {
  uint64_t bits = _scr_run_mask(first, n);
  uint64_t fresh = bits & ~seg->committed_free_mask;
  uint64_t zero = fresh & ~seg->lazy_free_mask;
  if (SCR_UNLIKELY(seg->decayed_mask & bits)) note_refault(h, seg, bits);
  if (SCR_UNLIKELY(h->unmapped_decayed != 0) && fresh) note_refault_fresh(h, fresh);
  seg->lazy_free_mask &= ~bits;
  seg->free_mask &= ~bits;
  avail_taken(h, seg, first, n);
  seg->committed_free_mask &= ~bits;
  uint64_t dirty = (seg->dirty_new | seg->dirty_old) & bits;
  if (dirty) dirty_pages_set(h, h->dirty_pages - (uint64_t)_scr_popcount(dirty));
  seg->dirty_new &= ~bits;
  seg->dirty_old &= ~bits;
  if (seg->dirty_over & bits) h->over_pages -= (uint64_t)_scr_popcount(seg->dirty_over & bits);
  seg->dirty_over &= ~bits;
  seg->used_pages += n;
  if (fresh) _scr_heap_bytes_add(h, PAGE_BYTES * (uint64_t)_scr_popcount(fresh));
  h->page_acquires += n;
  for (unsigned i = first; i < first + n; i++) {
    scr_page *pg = &seg->pages[i];
    pg->zero = (zero >> i) & 1;
    pg->freed_block = 0;
    pg->line_off = 0;
  }
  return &seg->pages[first];
}

/* Pages first..first+n-1 of seg, which the caller knows are free. */
scr_page *_scr_segment_take_at(scr_heap *h, scr_segment *seg, unsigned first, unsigned n) {
  heap_lock(h);
  scr_page *pg = take_run(h, seg, first, n);
  heap_unlock(h);
  return pg;
}

static void purge_tick(scr_heap *h);
static void purge_down(scr_heap *h, uint64_t keep);
static void over_flush(scr_heap *h);

/* h is at its limit_bytes for `more` bytes: the free pages it keeps
 * committed (waiting for the purge or the batched decommit) go back, and
 * whether that makes room.  Kept pages never make a request fail. */
static bool room_from_kept_pages(scr_heap *h, size_t more) {
  if (h->dirty_pages == 0 && h->over_pages == 0) return false;
  purge_down(h, 0);
  over_flush(h);
  return _scr_heap_grow_ok(h, more);
}

bool _scr_segment_grow_ok(scr_heap *h, size_t more) {
  if (_scr_heap_grow_ok(h, more)) return true; /* no limit, or within it: no lock */
  heap_lock(h);
  bool ok = _scr_heap_grow_ok(h, more) || room_from_kept_pages(h, more);
  heap_unlock(h);
  return ok;
}

/* A run of n free pages whose start is `align`-aligned (align <= a
 * segment), from an existing segment or a new one.  The pages come back
 * committed (counted in bytes) with kind FREE for the caller to set.
 * Among the first TAKE_LOOK segments whose runs fit, shortest longest
 * run first (best fit, which leaves long runs whole and emptier segments
 * free to go back), pages still committed come first (no fault on first
 * touch), then the first segment with a run.  With fresh_first, a run
 * never touched (or decommitted) comes before them (when the heap may
 * grow). */
#define TAKE_LOOK 8
static scr_page *take_pages(scr_heap *h, unsigned n, size_t align, bool fresh_first) {
  purge_tick(h);
  scr_segment *best = NULL, *fresh = NULL, *committed = NULL;
  uint64_t best_m = 0, fresh_m = 0, committed_m = 0;
  unsigned looked = 0;
  /* The shortest runs first (best fit); past TAKE_LOOK segments with a
   * run, the first one found serves. */
  for (uint64_t runs = h->avail_runs & (~(uint64_t)0 << n); runs && !(best && looked >= TAKE_LOOK); runs &= runs - 1) {
    for (scr_segment *seg = h->avail[__builtin_ctzll(runs)]; seg; seg = seg->avail_next) {
      /* committed pages are free pages: a committed run is the answer
       * without fresh_first, whatever other runs seg has */
      if (committed == NULL && (committed_m = run_starts(seg->committed_free_mask, n, align)) != 0) {
        committed = seg;
        if (!fresh_first) break;
      }
      uint64_t m = run_starts(seg->free_mask, n, align);
      if (m == 0) continue; /* none aligned */
      looked++;
      if (fresh_first && fresh == NULL) {
        uint64_t f = run_starts(seg->free_mask & ~seg->committed_free_mask, n, align);
        if (f) fresh = seg, fresh_m = f;
      }
      if (best == NULL) best = seg, best_m = m;
      if (looked >= TAKE_LOOK) break;
    }
    if (committed && !fresh_first) break;
  }
  bool grow_ok = _scr_heap_grow_ok(h, (size_t)n * SCR_PAGE_SIZE);
  if (fresh && grow_ok) return take_run(h, fresh, run_start(fresh_m, n), n);
  if (committed) return take_run(h, committed, run_start(committed_m, n), n);
  if (!grow_ok && !room_from_kept_pages(h, (size_t)n * SCR_PAGE_SIZE)) return NULL;
  if (best == NULL) {
    best = segment_map(h, SCR_SEGMENT_SIZE, SCR_SEGMENT_SIZE, SCR_SEG_NORMAL);
    if (best == NULL) return NULL;
    best_m = run_starts(best->free_mask, n, align);
    scr_assert(best_m != 0);
  }
  return take_run(h, best, run_start(best_m, n), n);
}

scr_page *_scr_segment_take_pages(scr_heap *h, unsigned n, size_t align, bool fresh_first) {
  scr_assert(n >= 1 && n < SCR_PAGES_PER_SEGMENT && align <= SCR_SEGMENT_SIZE / 2);
  heap_lock(h);
  scr_page *pg = take_pages(h, n, align, fresh_first);
  heap_unlock(h);
  return pg;
}

/* Pages first..first+n-1 of seg were given back (lazily: MADV_FREE). */
static void decommitted(scr_heap *h, scr_segment *seg, unsigned first, unsigned n, bool lazy) {
  uint64_t bits = _scr_run_mask(first, n);
  seg->committed_free_mask &= ~bits;
  if (lazy) seg->lazy_free_mask |= bits;
  _scr_heap_bytes_sub(h, (uint64_t)n << SCR_PAGE_SHIFT);
  h->decommits++;
}

/* A run of n pages goes back with MADV_FREE (below madv_free_below; its
 * pages then do not read as zero), else with MADV_DONTNEED. */
static bool lazy_run(const scr_heap *h, unsigned n) {
  return ((size_t)n << SCR_PAGE_SHIFT) < h->opt.madv_free_below;
}

/* Decommit free pages first..first+n-1 of seg.  On failure they stay
 * committed, for a later trim. */
static void decommit_run(scr_heap *h, scr_segment *seg, unsigned first, unsigned n, scr_os_counters *os) {
  bool lazy = lazy_run(h, n);
  if (_scr_os_decommit((uint8_t *)seg + ((size_t)first << SCR_PAGE_SHIFT), (size_t)n << SCR_PAGE_SHIFT, lazy,
                       os) != 0)
    return;
  decommitted(h, seg, first, n, lazy);
}

/* The runs one purge pass gives back with MADV_DONTNEED, gathered so that
 * they go in one system call (prim/os.c: _scr_os_decommit_ranges). */
#define PURGE_BATCH 64
typedef struct purge_batch {
  size_t n;
  struct iovec r[PURGE_BATCH];
  scr_segment *seg[PURGE_BATCH];
  uint8_t first[PURGE_BATCH], pages[PURGE_BATCH];
} purge_batch;

static void purge_flush(scr_heap *h, purge_batch *b, scr_os_counters *os) {
  size_t done = _scr_os_decommit_ranges(b->r, b->n, os);
  for (size_t i = 0; i < done; i++) decommitted(h, b->seg[i], b->first[i], b->pages[i], false);
  b->n = 0; /* ranges past `done` stay committed, for a later trim */
}

static void over_flush(scr_heap *h);

/* The runs of seg waiting for the batched decommit, now no longer waiting. */
static uint64_t over_take(scr_heap *h, scr_segment *seg) {
  uint64_t m = seg->dirty_over;
  seg->dirty_over = 0;
  h->over_pages -= (uint64_t)_scr_popcount(m);
  return m;
}

/* Pages first..first+n-1 of seg go back: the whole segment to the OS if
 * nothing else lives in it, else the run is decommitted: at once, or with
 * decommit_batch, once that many bytes of such runs gather (or at the next
 * purge pass), in one call.  Why batch: a program whose frees empty page
 * after page past its budget made one madvise per page, each a
 * TLB shootdown on every CPU the process runs on (docs/process.md); a
 * waiting run is also the first taken again.
 * A failed OS call leaves the pages committed and free, for a later trim
 * to retry. */
static void release_pages(scr_heap *h, scr_segment *seg, unsigned first, unsigned n) {
  uint64_t bits = _scr_run_mask(first, n);
  for (unsigned i = first; i < first + n; i++) {
    scr_page *pg = &seg->pages[i];
    bool block_start = pg->kind == SCR_PAGE_LARGE;
    uint8_t line_off = pg->line_off;
    memset(pg, 0, sizeof *pg);
    pg->freed_block = block_start;
    pg->line_off = block_start ? line_off : 0;
    scr_seg_set_tag(seg, i, SCR_TAG_OTHER);
    __atomic_store_n(&seg->slot_limit[i], 0, __ATOMIC_RELAXED);
  }
  SCR_UNPOISON((uint8_t *)seg + ((size_t)first << SCR_PAGE_SHIFT), (size_t)n << SCR_PAGE_SHIFT);
  seg->free_mask |= bits;
  avail_freed(h, seg, first, n);
  seg->committed_free_mask |= bits;
  seg->used_pages -= n;
  h->page_releases += n;
  if (h->opt.purge_delay_ms > 0 &&
      h->retained_pages + h->dirty_pages + n <= h->keep_pages) {
    /* kept committed until a purge pass finds it old */
    seg->dirty_new |= bits;
    if (h->dirty_pages == 0 && h->hooks->pages_dirty) h->hooks->pages_dirty(h, h->hooks->arg);
    dirty_pages_set(h, h->dirty_pages + n);
    purge_tick(h);
    return;
  }
  if (seg->used_pages == 0 && segment_unmap(h, seg)) return;
  if (h->opt.decommit_batch > 0 && !lazy_run(h, n)) {
    seg->dirty_over |= bits;
    h->over_pages += n;
    if (h->over_pages * PAGE_BYTES >= h->opt.decommit_batch) over_flush(h);
    else purge_tick(h); /* a pass is due within purge_delay_ms / 2 */
    return;
  }
  decommit_run(h, seg, first, n, &h->os);
}

void _scr_segment_release_pages(scr_heap *h, scr_segment *seg, unsigned first, unsigned n) {
  heap_lock(h);
  release_pages(h, seg, first, n);
  heap_unlock(h);
}

/* Decommit the free pages of seg in mask m, run by run: into the batch
 * (MADV_DONTNEED runs) or at once (MADV_FREE ones). */
static void decommit_mask(scr_heap *h, scr_segment *seg, uint64_t m, purge_batch *b, scr_os_counters *os) {
  while (m) {
    unsigned first = (unsigned)__builtin_ctzll(m);
    unsigned n = (unsigned)__builtin_ctzll(~(m >> first)); /* first >= 1: the top bit of ~(m >> first) is set */
    m &= ~_scr_run_mask(first, n);
    if (lazy_run(h, n)) {
      decommit_run(h, seg, first, n, os);
      continue;
    }
    if (b->n == PURGE_BATCH) purge_flush(h, b, os);
    b->r[b->n] = (struct iovec){(uint8_t *)seg + ((size_t)first << SCR_PAGE_SHIFT), (size_t)n << SCR_PAGE_SHIFT};
    b->seg[b->n] = seg;
    b->first[b->n] = (uint8_t)first;
    b->pages[b->n] = (uint8_t)n;
    b->n++;
  }
}

/* Every run waiting for the batched decommit goes back, in one call. */
static void over_flush(scr_heap *h) {
  purge_batch batch;
  batch.n = 0;
  for (scr_segment *seg = h->segments; seg && h->over_pages; seg = seg->next) {
    if (seg->dirty_over) decommit_mask(h, seg, over_take(h, seg), &batch, &h->os);
  }
  if (batch.n) purge_flush(h, &batch, &h->os);
}

/* The purge pass.  Pages freed while purge_delay_ms > 0 stay committed
 * (dirty), first in dirty_new; each pass decommits dirty_old and moves
 * dirty_new there, so a page goes back between delay/2 and delay after it
 * was freed, unless it is taken again first.  A segment left with nothing
 * in it is unmapped once it has no page younger than that, except the
 * newest such one, which stays mapped (decommitted) for the heap's next
 * growth: a program that fills and empties its heap in rounds would
 * otherwise map and unmap a segment every round.  Runs waiting for the
 * batched decommit (dirty_over) go in the same call.  all: give back every
 * committed free page (trim), including those an earlier failure kept,
 * and every empty segment.  decayed_ms: nonzero, what goes back is marked
 * as the decay's at that time (taken again within its window, a refault),
 * and the newest empty segment stays mapped, as in the purge pass, for
 * the next thread's growth to refault in. */
static void purge(scr_heap *h, bool all, uint64_t decayed_ms) {
  scr_segment *next;
  bool kept_empty = all && !decayed_ms;
  purge_batch batch;
  batch.n = 0;
  if (!all) h->purge_passes++;
  for (scr_segment *seg = h->segments; seg; seg = next) { /* newest first */
    next = seg->next;
    if (seg->kind != SCR_SEG_NORMAL) continue;
    uint64_t over = over_take(h, seg);
    uint64_t old = all ? seg->committed_free_mask : seg->dirty_old | over;
    dirty_pages_set(h, h->dirty_pages - (uint64_t)_scr_popcount(old & (seg->dirty_new | seg->dirty_old)));
    seg->dirty_new &= ~old;
    seg->dirty_old = seg->dirty_new;
    seg->dirty_new = 0;
    if (seg->used_pages == 0 && seg->dirty_old == 0) {
      uint64_t back = decayed_ms ? PAGE_BYTES * (uint64_t)_scr_popcount(seg->committed_free_mask) : 0;
      if (kept_empty && segment_unmap(h, seg)) {
        h->unmapped_decayed += back; /* (note_refault_fresh) */
        if (back) h->unmapped_decayed_ms = decayed_ms;
        continue;
      }
      kept_empty = true;
    }
    if (decayed_ms && old) {
      seg->decayed_mask |= old;
      seg->decayed_ms = decayed_ms;
    }
    decommit_mask(h, seg, old, &batch, &h->os);
  }
  if (batch.n) purge_flush(h, &batch, &h->os);
  /* a failed call leaves pages committed: not given back, not refaults */
  for (scr_segment *seg = h->segments; seg && decayed_ms; seg = seg->next) seg->decayed_mask &= ~seg->committed_free_mask;
}

void _scr_segment_trim(scr_heap *h, uint64_t delay_ms) {
  heap_lock(h);
  if (delay_ms) h->refault_window_ms = 2 * delay_ms;
  purge(h, true, delay_ms ? _scr_os_now_ms() : 0);
  if (!delay_ms) { /* asked for: no refault */
    for (scr_segment *seg = h->segments; seg; seg = seg->next) seg->decayed_mask = 0;
    h->unmapped_decayed = 0;
  }
  heap_unlock(h);
}

/* The decay's pass, when due (every delay / 2: purge_at_ms), by the
 * holder at its ticks or by the process's helper thread, under the lock:
 * the purge pass's two generations, but with the decay's own counters,
 * without unmapping (the holder owns the segment list), and marking what
 * went back so that taking it again within twice the delay counts as a
 * refault.  Returns the bytes given back; *left: dirty pages remain. */
size_t _scr_segment_decay(scr_heap *h, uint64_t delay_ms, bool *left) {
  purge_batch batch;
  batch.n = 0;
  uint64_t now_ms = _scr_os_now_ms(); /* the clock take_run reads */
  heap_lock(h);
  uint64_t before = h->bytes;
  h->refault_window_ms = 2 * delay_ms;
  if (h->dirty_pages == 0 && h->over_pages == 0) {
    h->purge_at_ms = 0; /* the first dirty page starts the clock again */
    heap_unlock(h);
    *left = false;
    return 0;
  }
  if (now_ms < h->purge_at_ms) {
    heap_unlock(h);
    *left = true;
    return 0;
  }
  h->purge_at_ms = now_ms + (delay_ms > 1 ? delay_ms / 2 : 1);
  h->purge_passes++;
  for (scr_segment *seg = h->segments; seg && (h->dirty_pages || h->over_pages); seg = seg->next) {
    if (seg->kind != SCR_SEG_NORMAL) continue;
    uint64_t old = seg->dirty_old | over_take(h, seg);
    dirty_pages_set(h, h->dirty_pages - (uint64_t)_scr_popcount(seg->dirty_old));
    seg->dirty_old = seg->dirty_new;
    seg->dirty_new = 0;
    if (old == 0) continue;
    seg->decayed_mask |= old;
    seg->decayed_ms = now_ms;
    decommit_mask(h, seg, old, &batch, &h->decay_os);
  }
  if (batch.n) purge_flush(h, &batch, &h->decay_os);
  /* a failed call leaves pages committed: not given back, not refaults */
  for (scr_segment *seg = h->segments; seg; seg = seg->next) seg->decayed_mask &= ~seg->committed_free_mask;
  *left = h->dirty_pages != 0;
  size_t n = (size_t)(before - h->bytes);
  heap_unlock(h);
  return n;
}

/* Dirty pages go back, those freed before the last pass first, until
 * no more than keep stay (a smaller retain_bytes: heap.c).  A partial
 * pass: what the cap still allows stays for the next request. */
static void purge_down(scr_heap *h, uint64_t keep) {
  purge_batch batch;
  batch.n = 0;
  for (int old = 1; old >= 0 && h->dirty_pages > keep; old--) {
    for (scr_segment *seg = h->segments; seg && h->dirty_pages > keep; seg = seg->next) {
      if (seg->kind != SCR_SEG_NORMAL) continue;
      uint64_t m = old ? seg->dirty_old : seg->dirty_new, take = 0;
      uint64_t need = h->dirty_pages - keep;
      while (m && need) {
        uint64_t bit = m & -m;
        take |= bit;
        m &= m - 1;
        need--;
      }
      if (take == 0) continue;
      dirty_pages_set(h, h->dirty_pages - (uint64_t)_scr_popcount(take));
      seg->dirty_old &= ~take;
      seg->dirty_new &= ~take;
      decommit_mask(h, seg, take, &batch, &h->os);
    }
  }
  if (batch.n) purge_flush(h, &batch, &h->os);
}

void _scr_segment_purge_down(scr_heap *h, uint64_t keep) {
  heap_lock(h);
  purge_down(h, keep);
  heap_unlock(h);
}

/* Run the purge pass when it is due (every purge_delay_ms / 2); called
 * where pages are taken and freed, so an idle heap purges at its next
 * page-level call (or trim). */
static void purge_tick(scr_heap *h) {
  if (h->hooks->pages_dirty) return; /* another thread's clock gives them back */
  if (h->dirty_pages == 0 && h->over_pages == 0) {
    h->purge_at_ms = 0;
    return;
  }
  uint64_t now = _scr_os_now_ms(), half = (h->opt.purge_delay_ms + 1) / 2;
  if (h->purge_at_ms == 0) {
    h->purge_at_ms = now + half; /* the first dirty page since the last pass */
    return;
  }
  if (now < h->purge_at_ms) return;
  purge(h, false, 0);
  h->purge_at_ms = h->dirty_pages ? now + half : 0; /* the pass took every waiting run */
}

void _scr_segment_purge_due(scr_heap *h) {
  scr_assert(h->hooks->pages_dirty == NULL); /* (purge_at_ms is then the holder's alone) */
  if (h->purge_at_ms == 0 || _scr_os_now_ms() < h->purge_at_ms) return;
  heap_lock(h);
  purge_tick(h);
  heap_unlock(h);
}

size_t _scr_segment_meta_bytes(const scr_heap *h) {
  size_t total = 0;
  for (const scr_segment *seg = h->segments; seg; seg = seg->next)
    total += seg->kind == SCR_SEG_NORMAL ? meta_size() : _scr_os_page_size();
  return total;
}
