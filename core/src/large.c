/* Blocks above the size classes.  Up to huge_threshold: a run of pages in
 * a segment, the block starting a few cache lines into it (its colour,
 * below).  Above: a mapping of its own, the header page first and the
 * block after it.  Freed large blocks go to a bounded cache
 * (count and bytes), oldest evicted first, so that a loop of large
 * alloc/free reuses one block instead of mapping every turn. */
#include "internal.h"
#include <errno.h>
#include <string.h>

static size_t round_up(size_t n, size_t to) { return (n + to - 1) & ~(to - 1); }

static uint8_t *huge_block(const scr_segment *seg) { return (uint8_t *)seg + seg->huge_offset; }

/* The descriptor of the first page of block's run (its caller's to
 * write when it holds the segment). */
static scr_page *head_page(const scr_segment *seg, const void *block) {
  return (scr_page *)&seg->pages[((uintptr_t)block - (uintptr_t)seg) >> SCR_PAGE_SHIFT];
}

/* The bytes a block holds: its run's (the cache counts these), or its
 * mapping's past the header. */
static size_t block_bytes(const scr_segment *seg, const void *block) {
  if (seg->kind == SCR_SEG_HUGE) return seg->huge_size;
  return (size_t)head_page(seg, block)->span << SCR_PAGE_SHIFT;
}

/* Its usable bytes (the heap's large_bytes counts these): a run's less its
 * colour. */
size_t _scr_large_usable(const scr_segment *seg, const void *p) {
  if (seg->kind == SCR_SEG_HUGE) return seg->huge_size;
  const scr_page *pg = head_page(seg, p);
  return ((size_t)pg->span << SCR_PAGE_SHIFT) - _scr_large_colour(pg);
}

/* ---- colour ---- */

/* A large block for malloc starts SCR_COLOUR_LINES (types.h) cache lines
 * into its run, where the run's slack past the request has room (set in
 * _scr_large_alloc): a program's stores at one offset of each block (a
 * header, a byte on each OS page) then share one cache set, and not the
 * set of a page's first line, where every page-aligned structure keeps
 * its hot line (segment headers, arenas, the program's own mappings).  One
 * colour for all blocks, not one per block as jemalloc's cache-oblivious
 * large blocks: each colour in use is a set that such stores keep
 * evicting.  docs/process.md, "why", has the measurements. */

/* ---- the cache ---- */

static void cache_remove_at(scr_heap *h, uint32_t i) {
  h->cache_bytes -= h->cache[i].size;
  memmove(&h->cache[i], &h->cache[i + 1], (h->cache_count - i - 1) * sizeof h->cache[0]);
  h->cache_count--;
}

/* The smallest cached block of the right kind that holds n bytes at
 * `align` without wasting more than a quarter. */
static void *cache_take(scr_heap *h, size_t n, size_t align, bool huge) {
  int best = -1;
  for (uint32_t i = 0; i < h->cache_count; i++) {
    scr_cached *e = &h->cache[i];
    scr_segment *seg = _scr_segmap_get(e->block);
    if ((seg->kind == SCR_SEG_HUGE) != huge) continue;
    size_t usable = _scr_large_usable(seg, e->block);
    if (usable < n || usable - n > n / 4 + SCR_PAGE_SIZE) continue;
    if (((uintptr_t)e->block & (align - 1)) != 0) continue;
    if (best < 0 || e->size < h->cache[best].size) best = (int)i;
  }
  if (best < 0) return NULL;
  void *block = h->cache[best].block;
  cache_remove_at(h, (uint32_t)best);
  return block;
}

static scr_segment *segment_of_block(void *block) {
  scr_segment *seg = _scr_segmap_get(block);
  scr_assert(seg != NULL);
  return seg;
}

/* Give a large block's memory back: its pages to the segment, or the
 * whole mapping to the OS.  false when that failed (the block stays). */
static bool large_release(scr_heap *h, void *block) {
  scr_segment *seg = segment_of_block(block);
  _scr_gone_note(h, block, 1, 1);
  if (seg->kind == SCR_SEG_HUGE) return _scr_segment_unmap(h, seg);
  unsigned first = (unsigned)(((uintptr_t)block - (uintptr_t)seg) >> SCR_PAGE_SHIFT);
  unsigned span = seg->pages[first].span;
  _scr_segment_release_pages(h, seg, first, span);
  return true;
}

/* Append to the cache (newest last).  false when the array is full. */
static bool cache_push(scr_heap *h, void *block, size_t size) {
  if (h->cache_count >= SCR_LARGE_CACHE_MAX) return false;
  h->cache[h->cache_count++] = (scr_cached){block, size};
  h->cache_bytes += size;
  return true;
}

/* Give back the oldest cached block; one whose munmap fails goes back to
 * the end of the cache, for a later trim.  false when that happened. */
static bool cache_evict_oldest(scr_heap *h) {
  scr_cached old = h->cache[0];
  cache_remove_at(h, 0);
  if (large_release(h, old.block)) return true;
  cache_push(h, old.block, old.size); /* room: one entry was just removed */
  return false;
}

/* Each cached block once (a failed release stays cached, and is not
 * retried in this pass). */
void _scr_large_cache_flush(scr_heap *h) {
  for (uint32_t n = h->cache_count; n > 0; n--) cache_evict_oldest(h);
}

/* ---- alloc / free ---- */

/* A large or huge block handed out: memory used before may hold the
 * freed-block key in its second word (a remote free writes it there,
 * remote.c, and a small block freed in the same pages did), which a
 * realloc to a small size would copy into a live small block, and a
 * second free of that one would then be told a double free (misuse.c).
 * Every malloc that hands a block out clears it, as the small ones'
 * do. */
static void *handed_out(void *block, bool zero) {
  if (!zero) _scr_block_set_word1(block, 0);
  return block;
}

static void *huge_alloc(scr_heap *h, size_t n, size_t align, bool *zero) {
  size_t offset = align > SCR_HUGE_OFFSET ? align : SCR_HUGE_OFFSET;
  size_t size = round_up(offset + n, _scr_os_page_size());
  void *cached = cache_take(h, size - offset, align, true);
  if (cached) {
    scr_segment *seg = segment_of_block(cached);
    seg->huge_live = 1;
    *zero = false;
    h->large_live++;
    _scr_heap_large_add(h, seg->huge_size);
    return handed_out(cached, false);
  }
  if (!_scr_segment_grow_ok(h, size)) {
    errno = ENOMEM;
    return NULL;
  }
  if (h->hooks->huge_take) {
    /* A freed huge block of any thread, resized: the pages it keeps are
     * resident already (no fault, no zeroing by the kernel). */
    scr_segment *seg = h->hooks->huge_take(h, size, offset, h->hooks->arg);
    if (seg != NULL && (seg = _scr_segment_attach(h, seg, size)) != NULL) {
      seg->huge_live = 1;
      *zero = false;
      h->large_live++;
      _scr_heap_large_add(h, seg->huge_size);
      scr_validate_heap(h);
      return handed_out(huge_block(seg), false);
    }
  }
  scr_segment *seg = _scr_segment_map(h, size, align, SCR_SEG_HUGE);
  if (seg == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  scr_assert((((uintptr_t)seg + offset) & (align - 1)) == 0);
  seg->huge_offset = offset;
  seg->huge_size = size - offset;
  seg->huge_live = 1;
  _scr_heap_bytes_add(h, size);
  h->large_live++;
  _scr_heap_large_add(h, seg->huge_size);
  *zero = true;
  return huge_block(seg);
}

static void mark_span(scr_segment *seg, unsigned first, unsigned span, bool cached) {
  scr_page *pg = &seg->pages[first];
  pg->kind = SCR_PAGE_LARGE;
  pg->span = (uint8_t)span;
  pg->used = cached ? 0 : 1;
  pg->cached = cached;
  scr_seg_set_tag(seg, first, SCR_TAG_OTHER);
  for (unsigned i = first + 1; i < first + span; i++) {
    seg->pages[i].kind = SCR_PAGE_TAIL;
    seg->pages[i].head = (uint8_t)first;
  }
}

/* align: SCR_MIN_ALIGN for malloc's blocks, which are coloured; more
 * (SCR_PAGE_SIZE or above) for blocks that start on a page boundary. */
void *_scr_large_alloc(scr_heap *h, size_t n, size_t align, bool *zero) {
  if (n == 0) n = 1; /* aligned_alloc(big, 0): still a unique block */
  if (n > h->opt.huge_threshold || align > SCR_SEGMENT_SIZE / 2) return huge_alloc(h, n, align, zero);
  size_t bytes = round_up(n, SCR_PAGE_SIZE);
  unsigned span = (unsigned)(bytes >> SCR_PAGE_SHIFT);
  void *block = cache_take(h, bytes, align, false);
  if (block) {
    scr_segment *seg = _scr_segment_of(block);
    scr_page *pg = head_page(seg, block);
    pg->used = 1;
    pg->cached = 0;
    *zero = false;
    h->large_live++;
    _scr_heap_large_add(h, _scr_large_usable(seg, block));
    return handed_out(block, false);
  }
  scr_page *pg = _scr_segment_take_pages(h, span, align, false);
  if (pg == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  scr_segment *seg = _scr_page_segment(pg);
  unsigned first = _scr_page_index(seg, pg);
  bool all_zero = true;
  for (unsigned i = first; i < first + span; i++) all_zero &= seg->pages[i].zero;
  mark_span(seg, first, span, false);
  pg->line_off = align <= SCR_MIN_ALIGN && bytes - n >= SCR_COLOUR_LINES * SCR_LINE ? SCR_COLOUR_LINES : 0;
  *zero = all_zero;
  h->large_live++;
  _scr_heap_large_add(h, bytes - _scr_large_colour(pg));
  scr_validate_heap(h);
  return handed_out(_scr_page_start(seg, pg) + _scr_large_colour(pg), all_zero);
}


void _scr_large_free(scr_heap *h, scr_segment *seg, void *p) {
  size_t size = block_bytes(seg, p), usable = _scr_large_usable(seg, p);
  if (seg->kind == SCR_SEG_HUGE) {
    scr_assert(p == huge_block(seg) && seg->huge_live);
    seg->huge_live = 0;
  } else {
    scr_page *pg = head_page(seg, p);
    scr_assert(pg->kind == SCR_PAGE_LARGE && pg->used == 1 &&
               (uint8_t *)p == _scr_page_start(seg, pg) + _scr_large_colour(pg));
    pg->used = 0;
    pg->cached = 1;
  }
  h->large_live--;
  _scr_heap_large_sub(h, usable);
  if (seg->kind == SCR_SEG_HUGE && h->hooks->huge_put) { /* the process's huge cache */
    _scr_segment_detach(h, seg);
    h->hooks->huge_put(h, seg, h->hooks->arg);
    scr_validate_heap(h);
    return;
  }
  /* With a purge delay a page run goes back to its segment as dirty
   * pages, which any later request (small pages too) takes first: the
   * cache then holds huge mappings only. */
  bool cacheable = seg->kind == SCR_SEG_HUGE || h->opt.purge_delay_ms == 0;
  if (cacheable && h->opt.large_cache > 0 && size <= h->opt.large_cache_bytes) {
    while (h->cache_count > 0 &&
           (h->cache_count >= h->opt.large_cache || h->cache_bytes + size > h->opt.large_cache_bytes)) {
      if (!cache_evict_oldest(h)) break; /* could not give it back: it stays */
    }
    if (cache_push(h, p, size)) {
      scr_validate_heap(h);
      return;
    }
  }
  /* A munmap that fails keeps the block cached, above the caps, for a
   * later trim (lost only if all SCR_LARGE_CACHE_MAX entries are taken). */
  if (!large_release(h, p) && !cache_push(h, p, size))
    _scr_report(SCR_ENOMEM, "munmap failed and the large cache is full: %zu bytes stay mapped", size);
  scr_validate_heap(h);
}

/* Grow a large block where it is: a span over the free pages after it, a
 * huge mapping with mremap (in place, or moved without copying).  NULL
 * when that is not possible; the caller then copies. */
void *_scr_large_realloc_inplace(scr_heap *h, scr_segment *seg, void *p, size_t n) {
  if (seg->kind == SCR_SEG_NORMAL) {
    if (n > h->opt.huge_threshold) return NULL;
    unsigned first = (unsigned)(((uintptr_t)p - (uintptr_t)seg) >> SCR_PAGE_SHIFT);
    scr_page *pg = &seg->pages[first];
    unsigned want = (unsigned)(round_up(n + _scr_large_colour(pg), SCR_PAGE_SIZE) >> SCR_PAGE_SHIFT);
    unsigned more = want - pg->span;
    if (first + want > SCR_PAGES_PER_SEGMENT) return NULL;
    uint64_t bits = _scr_run_mask(first + pg->span, more);
    if ((seg->free_mask & bits) != bits) return NULL;
    if (!_scr_segment_grow_ok(h, (size_t)more * SCR_PAGE_SIZE)) return NULL;
    if (_scr_segment_take_at(h, seg, first + pg->span, more) == NULL) return NULL;
    _scr_heap_large_add(h, (size_t)more << SCR_PAGE_SHIFT);
    mark_span(seg, first, want, false);
    scr_validate_heap(h);
    return p;
  }
  size_t old_size = seg->size;
  size_t new_size = round_up(seg->huge_offset + n, _scr_os_page_size());
  size_t grow = new_size - old_size;
  if (!_scr_segment_grow_ok(h, grow)) return NULL;
  /* In place first; else to a fresh aligned place that mremap replaces. */
  if (_scr_segmap_prepare((uintptr_t)seg, new_size) != 0) return NULL;
  scr_segment *moved = _scr_os_remap(seg, old_size, new_size, NULL, &h->os);
  if (moved == NULL) {
    /* huge_offset is the block's alignment when that is above a page */
    size_t align = seg->huge_offset > SCR_SEGMENT_SIZE ? seg->huge_offset : SCR_SEGMENT_SIZE;
    void *target = _scr_os_map_aligned(new_size, align, &h->os);
    if (target == NULL) return NULL;
    if (_scr_segmap_prepare((uintptr_t)target, new_size) != 0) {
      _scr_os_unmap(target, new_size, &h->os);
      return NULL;
    }
    /* The move unmaps the old range, which another thread's mmap may be
     * given at once and register: its entries go first (a failed move
     * puts them back), never after that thread's. */
    _scr_segmap_clear((uintptr_t)seg, old_size);
    moved = _scr_os_remap(seg, old_size, new_size, target, &h->os);
    if (moved == NULL) {
      _scr_segmap_set((uintptr_t)seg, old_size, seg, h->map_mark); /* leaves exist already */
      _scr_os_unmap(target, new_size, &h->os);
      return NULL;
    }
    /* the header moved with the block: fix the links */
    if (moved->prev) moved->prev->next = moved; else h->segments = moved;
    if (moved->next) moved->next->prev = moved;
  }
  _scr_segmap_set((uintptr_t)moved, new_size, moved, h->map_mark); /* leaves exist for both ranges */
  moved->size = new_size;
  moved->huge_size = new_size - moved->huge_offset;
  _scr_heap_bytes_add(h, grow);
  h->reserved += grow;
  _scr_heap_large_add(h, grow);
  scr_validate_heap(h);
  return huge_block(moved);
}
