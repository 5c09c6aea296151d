/* Allocator objects: creation and close, the malloc/free entry points and
 * their fast paths, the retention of empty pages, and trim.
 *
 * Fast paths: malloc pops the head page of its class queue (free list,
 * then bump); free pushes onto the block's page.  Everything else (a full
 * or missing page, an emptied page, large blocks) is a slow path. */
#include "heap_fast.h"
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

/* Requests above this are refused outright (ENOMEM): room for a header
 * and any alignment never overflows. */
#define SCR_MAX_REQUEST ((size_t)1 << 46)

static size_t heap_desc_size(void) {
  size_t ps = _scr_os_page_size();
  return (sizeof(scr_heap) + ps - 1) & ~(ps - 1);
}

/* Destroyed heaps' descriptors: their first OS page stays mapped (magic
 * 0), so that a call on a destroyed heap reads "destroyed" rather than
 * faulting, the rest goes back to the OS (MADV_DONTNEED), and the next
 * scr_heap_new takes one.  A stale pointer to a descriptor taken again
 * names the new heap: that is the case the magic word cannot tell. */
static const struct _scr_heap_hooks no_hooks; /* a heap of the scr_heap API's: none, no owner */
static scr_heap *dead_heaps;       /* linked through meta_next */
static _Atomic int dead_lock;      /* a spin lock: heaps are made and destroyed rarely */
static void dead_lock_take(void) {
  while (atomic_exchange_explicit(&dead_lock, 1, memory_order_acquire)) {
  }
}
static void dead_lock_drop(void) { atomic_store_explicit(&dead_lock, 0, memory_order_release); }

bool _scr_heap_live(const scr_heap *h) { return h != NULL && h->magic == SCR_HEAP_MAGIC; }

/* A call on a NULL or destroyed heap: reported, and the caller returns
 * its documented error. */
__attribute__((noinline)) void _scr_heap_bad(const char *call, const scr_heap *h) {
  _scr_report(SCR_EINVAL, "%s(%p): %s heap", call, (const void *)h, h == NULL ? "NULL" : "destroyed");
}
#define HEAP_OR_RETURN(call, h, ...)         \
  do {                                       \
    if (SCR_UNLIKELY(!_scr_heap_live(h))) {  \
      _scr_heap_bad(call, h);                     \
      return __VA_ARGS__;                    \
    }                                        \
  } while (0)

static void heap_set_keep(scr_heap *h);

scr_heap *scr_heap_new(const scr_options *opt) {
  _scr_misuse_init();
  /* The descriptor has a mapping of its own (not counted in the heap's
   * figures): a heap that holds nothing shows mmaps == bytes == 0. */
  dead_lock_take();
  scr_heap *h = dead_heaps;
  if (h) dead_heaps = h->meta_next;
  dead_lock_drop();
  if (h) memset(h, 0, sizeof *h);
  else h = _scr_os_map_aligned(heap_desc_size(), _scr_os_page_size(), NULL);
  if (h == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  if (opt) h->opt = *opt; else scr_options_init(&h->opt);
  _scr_options_clamp(&h->opt);
  heap_set_keep(h);
  pthread_mutex_init(&h->lock, NULL);
  h->hooks = &no_hooks;
  h->last_free_seg = SCR_NO_SEGMENT;
  h->magic = SCR_HEAP_MAGIC;
  (void)_scr_prof_next(&h->prof, h->opt.profile_rate);
  scr_validate_heap(h);
  return h;
}

void scr_heap_destroy(scr_heap *h) {
  if (h == NULL) return;
  HEAP_OR_RETURN("scr_heap_destroy", h);
  _scr_prof_drop_heap(h);
  h->magic = 0;
  while (h->segments) {
    scr_segment *seg = h->segments;
    h->segments = seg->next;
    _scr_segmap_clear((uintptr_t)seg, seg->size);
    SCR_UNPOISON(seg, seg->size); /* the next mapping here starts clean */
    seg->magic = 0;
    if (_scr_os_unmap(seg, seg->size, &h->os) != 0)
      _scr_report(SCR_ENOMEM, "munmap failed while closing a heap: %zu bytes stay mapped", seg->size);
  }
  size_t ps = _scr_os_page_size();
  if (heap_desc_size() > ps) _scr_os_decommit((uint8_t *)h + ps, heap_desc_size() - ps, false, NULL);
  dead_lock_take();
  h->meta_next = dead_heaps;
  dead_heaps = h;
  dead_lock_drop();
}

void scr_heap_options(const scr_heap *h, scr_options *out) {
  if (out == NULL) return;
  HEAP_OR_RETURN("scr_heap_options", h);
  *out = h->opt;
}

bool _scr_heap_grow_ok(const scr_heap *h, size_t more) {
  return h->opt.limit_bytes == 0 || (h->bytes + more <= h->opt.limit_bytes && h->bytes + more >= more);
}

/* ---- small blocks ---- */

/* A small class's first SCR_FRESH_PAGES pages in a heap come from memory
 * never touched (or decommitted) where a segment has some: carved lazily,
 * such a page is resident only as far as its class carves it, where a
 * page still committed from an earlier use is all resident at once.  A
 * class with a page or two may never need more than a few blocks;
 * committed pages go to the classes that fill pages, medium runs and
 * large blocks.  The first ever, not whenever the class holds fewer: a
 * class whose pages empty and fill again would otherwise fault fresh
 * pages each time while its freed ones wait for the purge.  (The figures:
 * docs/process.md, "Why it is built this way".) */
#define SCR_FRESH_PAGES 2

/* The empty page pg of class k becomes a page of class c, counted as an
 * empty page of c. */
static scr_page *page_steal(scr_heap *h, scr_page *pg, unsigned k, unsigned c) {
  scr_assert(pg->used == 0);
  if (!pg->counted) h->retained_pages += pg->span; /* idle */
  else h->empty_count[k]--;
  _scr_queue_remove(h, pg);
  h->class_pages[k]--;
  h->class_pages[c]++;
  h->empty_count[c]++;
  pg->zero = 0; /* reused memory is not zero */
  _scr_gone_note(h, pg->start, pg->block_size, pg->capacity); /* its blocks of class k */
  _scr_page_format(pg, c);
  pg->counted = 1;
  return pg;
}

/* The block to hand out when b was just taken from pg, a retained
 * (empty) page of its class, which is uncounted: the first block of the
 * page carved again from its start when it had been carved further.  Its
 * free list holds its blocks in the order the program freed them: taken
 * in that order, the class's next blocks would be scattered over the
 * page instead of lying side by side in the order they are made
 * (mimalloc and tcmalloc also give an emptied page a list in address
 * order when it is used again; like mimalloc, a queue's only page, here
 * the idle one, keeps its list). */
void *_scr_page_first_take(scr_heap *h, scr_page *pg, void *b) {
  pg->counted = 0;
  h->empty_count[pg->cls]--;
  h->retained_pages -= pg->span;
  if (pg->capacity > 1) {
    _scr_gone_note(h, pg->start, pg->block_size, pg->capacity); /* a free of one of them is a double free */
    _scr_page_uncarve(pg);
    pg->zero = 0; /* reused memory is not zero */
    __atomic_store_n(&pg->capacity, 1, __ATOMIC_RELAXED);
    _scr_page_carved(pg);
    b = pg->start;
    _scr_block_set_word1(b, 0); /* an old block's key */
  }
  scr_validate_page(pg);
  return b;
}

/* A page for class c: a retained page of another class of the same span
 * (an idle one, the current page of a small class, last), else a page (a
 * run, for a medium class) from a segment.  It comes back counted as an
 * empty page of class c, which the first allocation from it uncounts.  (A
 * retained page of class c itself would already be the head of queue c.) */
static scr_page *page_for_class(scr_heap *h, unsigned c) {
  scr_assert(h->empty_count[c] == 0);
  unsigned span = _scr_class_span(c);
  /* the classes of c's span: the small ones, or the medium ones */
  unsigned first = c < SCR_MEDIUM_FIRST ? 0 : SCR_MEDIUM_FIRST, end = c < SCR_MEDIUM_FIRST ? SCR_MEDIUM_FIRST : SCR_CLASS_COUNT;
  for (unsigned k = h->retained_pages != 0 ? first : end; k < end; k++)
    if (h->empty_count[k] != 0) return page_steal(h, h->queue_tail[k], k, c);
  for (unsigned k = h->keep_current && span == 1 ? first : end; k < end; k++)
    if (_scr_heap_idle_page(h, k) != NULL) return page_steal(h, h->queue[k], k, c);
  bool fresh_first = c < SCR_MEDIUM_FIRST && h->fresh_taken[c] < SCR_FRESH_PAGES;
  scr_page *pg = _scr_segment_take_pages(h, span, span * SCR_PAGE_SIZE, fresh_first);
  if (pg == NULL) return NULL;
  h->fresh_taken[c] += fresh_first; /* a failed take does not count */
  _scr_page_format(pg, c);
  pg->counted = 1;
  h->class_pages[c]++;
  h->empty_count[c]++;
  h->retained_pages += span;
  return pg;
}

/* The page class c's next block comes from: the head of its queue once
 * full pages are off it, else a new page in front (*added set: the heap
 * is valid again once its first block is taken); NULL (errno ENOMEM)
 * when no page can be had. */
static scr_page *page_with_room(scr_heap *h, unsigned c, bool *added) {
  scr_page *pg;
  *added = false;
  while ((pg = h->queue[c]) != NULL && !_scr_page_has_room(pg)) _scr_queue_remove(h, pg); /* full */
  if (pg != NULL) return pg;
  pg = page_for_class(h, c);
  if (pg == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  _scr_queue_push_front(h, pg);
  *added = true;
  return pg;
}

__attribute__((noinline)) void *_scr_heap_alloc_small_slow(scr_heap *h, unsigned c) {
  bool added;
  /* (an arena's purge_at_ms is the process's clock's, which another
   * thread writes: its heap is not asked) */
  if (h->hooks->pages_dirty == NULL && SCR_UNLIKELY(h->purge_at_ms != 0)) _scr_segment_purge_due(h);
  scr_page *pg = page_with_room(h, c, &added);
  if (pg == NULL) return NULL;
  void *b = _scr_page_alloc(h, pg);
  if (added) scr_validate_heap(h);
  return b;
}

/* calloc of a size class: a block carved from the part of its page never
 * carved, in a page that read as zero when it was taken, needs no memset
 * (glibc's calloc skips fresh memory too), so the pages of a big zeroed
 * block stay untouched until the program writes them: Python's bytes(n),
 * for one, writes only its header. */
static void *small_calloc(scr_heap *h, unsigned c, size_t n) {
  scr_page *pg = h->queue[c];
  bool added = false;
  if (pg == NULL || !_scr_page_has_room(pg)) pg = page_with_room(h, c, &added);
  if (pg == NULL) return NULL;
  bool fresh = pg->free == NULL && pg->zero;
  void *p = _scr_page_alloc(h, pg);
  if (added) scr_validate_heap(h);
  if (!fresh) memset(p, 0, n);
  return p;
}

/* An empty page of class pg->cls leaves its queue and goes back to its
 * segment (decommitted, or unmapped with the segment). */
static void page_release(scr_heap *h, scr_page *pg) {
  _scr_gone_note(h, pg->start, pg->block_size, pg->capacity);
  _scr_queue_remove(h, pg);
  h->class_pages[pg->cls]--;
  scr_segment *seg = _scr_page_segment(pg);
  _scr_segment_release_pages(h, seg, _scr_page_index(seg, pg), pg->span);
}

/* keep_pages and keep_current from the options: a heap that may keep a
 * page of every small class (retain, and retain_bytes for two each) keeps
 * its classes' current pages idle, and the rest within retain_bytes less
 * those. */
static bool keeps_current(unsigned retain, size_t retain_bytes) {
  return retain != 0 && retain_bytes / SCR_PAGE_SIZE >= 2 * SCR_MEDIUM_FIRST;
}

static void heap_set_keep(scr_heap *h) {
  uint64_t pages = h->opt.retain_bytes / SCR_PAGE_SIZE;
  bool keep = keeps_current(h->opt.retain, h->opt.retain_bytes);
  h->keep_pages = keep ? pages - SCR_MEDIUM_FIRST : pages;
  if (keep == h->keep_current) return; /* idle_retain follows keep_current (retain is set once) */
  h->keep_current = keep;
  /* the small classes' (a medium class's stays 0: a run is never idle) */
  uint32_t v = keep ? (uint32_t)h->opt.retain : 0;
  for (unsigned c = 0; c < SCR_MEDIUM_FIRST; c++) h->idle_retain[c] = v;
}

/* The idle page pg is settled as any page that empties (kept and
 * counted, or given back). */
static void settle_idle(scr_heap *h, scr_page *pg) {
  _scr_heap_page_emptied(h, pg);
}

/* A full page got a slot back: it goes in front of its queue, where the
 * next block of its class comes from; an idle page it takes the place of
 * is settled. */
void _scr_heap_page_requeue(scr_heap *h, scr_page *pg) {
  scr_assert(pg->used != 0);
  scr_page *old = _scr_heap_idle_page(h, pg->cls);
  _scr_queue_push_front(h, pg);
  if (SCR_UNLIKELY(old != NULL)) settle_idle(h, old);
}

void _scr_heap_page_emptied(scr_heap *h, scr_page *pg) {
  unsigned c = pg->cls;
  if (_scr_page_keep(h, pg)) {
    pg->counted = 1;
    h->empty_count[c]++;
    h->retained_pages += pg->span;
    if (h->queue_tail[c] != pg) {
      _scr_queue_remove(h, pg);
      _scr_queue_push_back(h, pg);
    }
    return;
  }
  page_release(h, pg);
  scr_validate_heap(h);
}

/* ---- entry points ---- */

/* malloc on a heap known to be live (the process allocator's arenas). */
void *_scr_heap_malloc(scr_heap *h, size_t n) {
  if (SCR_LIKELY(n <= SCR_SMALL_MAX)) return _scr_small_alloc(h, _scr_class_of(n));
  if (n > SCR_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  bool zero;
  return _scr_large_alloc(h, n, SCR_MIN_ALIGN, &zero);
}

/* The countdown of h's sampler ran out at p, an allocation of n bytes
 * (NULL: it failed); caller: the entry point's return address. */
void *_scr_heap_sampled(scr_heap *h, void *p, size_t n, const void *caller) {
  uint64_t rate = _scr_prof_next(&h->prof, h->opt.profile_rate);
  if (p != NULL && rate != 0) _scr_prof_take(h, p, n, rate, caller);
  return p;
}
/* p, n bytes an entry point of h just allocated, after the countdown. */
#define HEAP_COUNTED(h, p, n) \
  (_scr_prof_due(&(h)->prof, (n)) ? _scr_heap_sampled((h), (p), (n), __builtin_return_address(0)) : (p))

void scr_heap_profile_rate(scr_heap *h, size_t rate) {
  HEAP_OR_RETURN("scr_heap_profile_rate", h);
  h->opt.profile_rate = rate;
  (void)_scr_prof_next(&h->prof, rate); /* a countdown at the new rate */
}

/* scr_heap_malloc of a large block, or on a bad heap. */
static __attribute__((noinline)) void *heap_malloc_other(scr_heap *h, size_t n, const void *caller) {
  if (SCR_UNLIKELY(!_scr_heap_live(h))) {
    _scr_heap_bad("scr_heap_malloc", h);
    errno = EINVAL;
    return NULL;
  }
  void *p = _scr_heap_malloc(h, n);
  return _scr_prof_due(&h->prof, n) ? _scr_heap_sampled(h, p, n, caller) : p;
}
/* scr_heap_malloc's countdown ran out at a small request. */
static __attribute__((noinline)) void *heap_malloc_sampled(scr_heap *h, size_t n, const void *caller) {
  return _scr_heap_sampled(h, _scr_small_alloc(h, _scr_class_of(n)), n, caller);
}

/* The hit path, a block of the class's head page, needs no stack frame:
 * the rest is a tail call.  It and scr_heap_free start a cache line, as
 * the process allocator's entry points do (process/malloc.c), so that a
 * change elsewhere does not move them across one. */
__attribute__((aligned(64))) void *scr_heap_malloc(scr_heap *h, size_t n) {
  if (SCR_LIKELY(n <= SCR_SMALL_MAX && _scr_heap_live(h))) {
    if (SCR_UNLIKELY(_scr_prof_due(&h->prof, n))) return heap_malloc_sampled(h, n, __builtin_return_address(0));
    return _scr_small_alloc_x4(h, _scr_class_x4(n));
  }
  return heap_malloc_other(h, n, __builtin_return_address(0));
}

void *scr_heap_calloc(scr_heap *h, size_t count, size_t size) {
  if (SCR_UNLIKELY(!_scr_heap_live(h))) {
    _scr_heap_bad("scr_heap_calloc", h);
    errno = EINVAL;
    return NULL;
  }
  size_t n;
  if (__builtin_mul_overflow(count, size, &n) || n > SCR_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  void *p;
  if (n <= SCR_SMALL_MAX) {
    p = small_calloc(h, _scr_class_of(n), n);
  } else {
    bool zero = false;
    p = _scr_large_alloc(h, n, SCR_MIN_ALIGN, &zero);
    if (p && !zero) memset(p, 0, n);
  }
  return HEAP_COUNTED(h, p, n);
}

static void *heap_aligned_alloc(scr_heap *h, size_t align, size_t n) {
  if (align <= SCR_MIN_ALIGN) return _scr_heap_malloc(h, n);
  unsigned c = _scr_class_aligned(align, n);
  if (c < SCR_CLASS_COUNT) return _scr_small_alloc(h, c);
  bool zero;
  return _scr_large_alloc(h, n, align < SCR_PAGE_SIZE ? SCR_PAGE_SIZE : align, &zero);
}

void *scr_heap_aligned_alloc(scr_heap *h, size_t align, size_t n) {
  if (SCR_UNLIKELY(!_scr_heap_live(h))) {
    _scr_heap_bad("scr_heap_aligned_alloc", h);
    errno = EINVAL;
    return NULL;
  }
  if (align == 0 || (align & (align - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  if (n > SCR_MAX_REQUEST || align > SCR_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = heap_aligned_alloc(h, align, n);
  return HEAP_COUNTED(h, p, n);
}

/* The segment of h that holds p, or NULL (NULL p, another heap's or no
 * heap's memory). */
static inline scr_segment *own_segment(const scr_heap *h, const void *p) {
  scr_segment *seg = p ? _scr_segmap_get(p) : NULL;
  return seg && seg->heap == h ? seg : NULL;
}

/* The page of size class that holds p, a block of the NORMAL segment seg,
 * or NULL when p is in a large block. */
static inline scr_page *small_page_of(scr_segment *seg, const void *p) {
  uintptr_t idx = ((uintptr_t)p - (uintptr_t)seg) >> SCR_PAGE_SHIFT;
  unsigned tag = scr_seg_tag(seg, idx);
  return tag < SCR_CLASS_COUNT ? _scr_class_page(seg, idx, tag) : NULL;
}

static size_t block_usable(scr_segment *seg, const void *p) {
  if (seg->kind == SCR_SEG_NORMAL) {
    const scr_page *pg = small_page_of(seg, p);
    if (pg) return pg->block_size;
  }
  return _scr_large_usable(seg, p);
}

/* Free p, a block of h in its segment seg. */
static inline void heap_free_in(scr_heap *h, scr_segment *seg, void *p) {
  if (SCR_LIKELY(seg->kind == SCR_SEG_NORMAL)) {
    h->last_free_seg = seg;
    scr_page *pg = small_page_of(seg, p);
    if (SCR_LIKELY(pg != NULL)) {
      _scr_small_free(h, pg, p);
      return;
    }
  }
  _scr_large_free(h, seg, p);
}

/* Free p, a block of h or not (NULL included), without the misuse
 * checks: the process allocator's frees of blocks it has classified, or
 * that come from its own lists (remote stacks, caches, the pool). */
void _scr_heap_free_block(scr_heap *h, void *p) {
  /* The segment a block is in: the one the last free used when the address
   * arithmetic lands there (it only ever holds a NORMAL segment of this
   * heap, whose base is never a block), else the segment map. */
  scr_segment *seg = _scr_segment_of(p);
  if (SCR_LIKELY(seg == h->last_free_seg)) {
    scr_page *pg = small_page_of(seg, p);
    if (SCR_LIKELY(pg != NULL)) {
      _scr_small_free(h, pg, p);
      return;
    }
  }
  if (p == NULL) return;
  seg = own_segment(h, p);
  if (SCR_UNLIKELY(seg == NULL)) {
    _scr_report(SCR_EFOREIGN, "free(%p): not a block of heap %p", p, (void *)h);
    return;
  }
  heap_free_in(h, seg, p);
}

/* p, an address in seg (a segment of h), is not plainly a live block of
 * size class (_scr_block_suspect); true for every large one (classified).
 * A page with live sampled blocks fails the hit path's slot test (its
 * slot_limit is 0: profile.c); here it takes the test against its carved
 * slots, so that its frees do not walk its free list (classify.c). */
static inline bool heap_block_suspect(const scr_segment *seg, const void *p) {
  if (seg->kind != SCR_SEG_NORMAL) return true;
  uintptr_t idx = ((uintptr_t)p - (uintptr_t)seg) >> SCR_PAGE_SHIFT;
  unsigned tag = scr_seg_tag(seg, idx);
  if (!_scr_block_suspect(seg, idx, p, tag)) return false;
  if (tag >= SCR_CLASS_COUNT) return true;
  const scr_page *pg = _scr_class_page((scr_segment *)seg, idx, tag);
  if (pg->sampled == 0) return true;
  const _scr_slot_geom *g = &_scr_misuse.geom[tag];
  uint64_t limit = (uint64_t)pg->capacity * g->step;
  return (((uintptr_t)p & g->mask) * g->magic) >= limit || _scr_block_word1(p) == _scr_misuse.key;
}

/* The exact verdict on p for h's unchecked entry points (call names the
 * entry point): SCR_OK, or the misuse, reported through the error
 * handler.  The caller then ignores the call. */
static __attribute__((noinline)) int heap_misuse(const scr_heap *h, const void *p, const char *call) {
  int r = _scr_classify(h, p);
  if (r != SCR_OK) _scr_report(r, "%s(%p): %s (ignored)", call, p, _scr_misuse_what(r, call));
  return r;
}

/* The segment of h that holds p, when p is a live block of h; else NULL
 * after the misuse was reported. */
static inline scr_segment *heap_checked_segment(const scr_heap *h, const void *p, const char *call) {
  scr_segment *seg = own_segment(h, p);
  if (SCR_LIKELY(seg != NULL && !heap_block_suspect(seg, p))) return seg;
  return heap_misuse(h, p, call) == SCR_OK ? seg : NULL;
}

/* scr_heap_free beyond its hit path (a bad heap, NULL, a block of
 * another segment, a large block, misuse). */
static __attribute__((noinline)) void heap_free_slow(scr_heap *h, void *p) {
  HEAP_OR_RETURN("scr_heap_free", h);
  if (p == NULL) return;
  scr_segment *seg = heap_checked_segment(h, p, "scr_heap_free");
  if (seg == NULL) return;
  _scr_prof_free(p); /* (a sampled block's page sends its frees here: slot_limit 0) */
  heap_free_in(h, seg, p);
}

/* The fast path of _scr_heap_free_block, with the misuse tests, needs no
 * stack frame: the rest is a tail call. */
__attribute__((aligned(64))) void scr_heap_free(scr_heap *h, void *p) {
  scr_segment *seg = _scr_segment_of(p);
  if (SCR_LIKELY(_scr_heap_live(h) && seg == h->last_free_seg)) {
    /* the screen by the page's tag times 4 (no test of the tag: a page
     * of no class fails the slot test), and the page's descriptor from
     * the offset of p in its run, which the screen needs anyway */
    uintptr_t rel = (uintptr_t)p - (uintptr_t)seg, idx = rel >> SCR_PAGE_SHIFT;
    const _scr_slot_geom *g = _scr_slot_geom_x4(seg->page_tag4[idx]);
    uint64_t off = (uintptr_t)p & g->mask;
    if (SCR_LIKELY(!_scr_block_suspect_at(seg, idx, p, g, off))) {
      _scr_small_free(h, _scr_run_page(seg, rel - off), p);
      return;
    }
  }
  heap_free_slow(h, p);
}

size_t _scr_heap_usable_size(const scr_heap *h, const void *p) {
  scr_segment *seg = own_segment(h, p);
  return seg ? block_usable(seg, p) : 0;
}

scr_heap *scr_heap_of(const void *p, size_t *usable) {
  scr_segment *seg = p ? _scr_segmap_get(p) : NULL;
  if (usable) *usable = seg ? block_usable(seg, p) : 0;
  return seg ? seg->heap : NULL;
}

size_t scr_heap_usable_size(const scr_heap *h, const void *p) {
  HEAP_OR_RETURN("scr_heap_usable_size", h, 0);
  if (p == NULL) return 0;
  scr_segment *seg = heap_checked_segment(h, p, "scr_heap_usable_size");
  return seg ? block_usable(seg, p) : 0;
}

/* realloc of p, a live block of h (or NULL), without the misuse checks. */
void *_scr_heap_realloc(scr_heap *h, void *p, size_t n) {
  if (p == NULL) return _scr_heap_malloc(h, n);
  if (n == 0) {
    _scr_heap_free_block(h, p);
    return NULL;
  }
  if (n > SCR_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  scr_segment *seg = own_segment(h, p);
  if (seg == NULL) {
    _scr_report(SCR_EFOREIGN, "realloc(%p): not a block of heap %p", p, (void *)h);
    errno = EINVAL;
    return NULL;
  }
  size_t usable = block_usable(seg, p);
  if (_scr_realloc_stays(usable, n)) return p;
  if (n > usable && usable > SCR_SMALL_MAX) {
    void *q = _scr_large_realloc_inplace(h, seg, p, n);
    if (q) return q;
  }
  void *q = _scr_heap_malloc(h, _scr_realloc_size(usable, n));
  if (q == NULL) return NULL;
  memcpy(q, p, n < usable ? n : usable);
  _scr_heap_free_block(h, p);
  return q;
}

void *scr_heap_realloc(scr_heap *h, void *p, size_t n) {
  if (SCR_UNLIKELY(!_scr_heap_live(h))) {
    _scr_heap_bad("scr_heap_realloc", h);
    errno = EINVAL;
    return NULL;
  }
  if (p != NULL && heap_checked_segment(h, p, "scr_heap_realloc") == NULL) {
    errno = EINVAL;
    return NULL;
  }
  if (p != NULL) _scr_prof_free(p); /* (a block realloc keeps in place is counted anew too) */
  void *q = _scr_heap_realloc(h, p, n);
  return q == NULL ? NULL : HEAP_COUNTED(h, q, n);
}

/* ---- trim ---- */

/* Every retained (empty) page goes back to its segment, the idle ones
 * too. */
static void release_retained(scr_heap *h) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    while (h->empty_count[c] > 0) {
      scr_page *pg = h->queue_tail[c];
      scr_assert(pg && pg->used == 0 && pg->counted);
      pg->counted = 0;
      h->empty_count[c]--;
      h->retained_pages -= pg->span;
      page_release(h, pg);
    }
    scr_page *pg = _scr_heap_idle_page(h, c);
    if (pg != NULL) {
      page_release(h, pg);
    }
  }
}

static size_t heap_trim(scr_heap *h, uint64_t decay_delay_ms) {
  uint64_t before = h->bytes;
  release_retained(h);
  _scr_large_cache_flush(h);
  _scr_segment_trim(h, decay_delay_ms);
  scr_validate_heap(h);
  return (size_t)(before - h->bytes);
}

size_t scr_heap_trim(scr_heap *h) {
  HEAP_OR_RETURN("scr_heap_trim", h, 0);
  return heap_trim(h, 0);
}
size_t _scr_heap_trim_decayed(scr_heap *h, uint64_t delay_ms) { return heap_trim(h, delay_ms); }

/* Each small page's free list in address order: its free slots marked in
 * a bitmap, then linked from the last (pages with live blocks: a
 * retained empty page is carved again instead, _scr_page_first_take).  Free blocks are poisoned in ASan
 * builds, hence no_sanitize_address. */
SCR_NO_ASAN void _scr_heap_relink_free(scr_heap *h) {
  for (scr_segment *seg = h->segments; seg; seg = seg->next) {
    for (unsigned i = SCR_FIRST_PAGE; seg->kind == SCR_SEG_NORMAL && i < SCR_PAGES_PER_SEGMENT; i++) {
      scr_page *pg = &seg->pages[i];
      if (pg->kind != SCR_PAGE_SMALL || pg->free == NULL) continue;
      uint64_t bits[SCR_MAX_SLOTS / 64] = {0};
      for (scr_block *b = pg->free; b; b = b->next) {
        size_t k = (size_t)((uint8_t *)b - pg->start) / pg->block_size;
        bits[k / 64] |= (uint64_t)1 << (k % 64);
      }
      pg->free = NULL;
      for (size_t k = pg->capacity; k-- > 0;) {
        if (!((bits[k / 64] >> (k % 64)) & 1)) continue;
        scr_block *b = (scr_block *)(pg->start + k * pg->block_size);
        b->next = pg->free;
        pg->free = b;
      }
    }
  }
  scr_validate_heap(h);
}

/* A new cap on the empty pages kept committed (the process allocator
 * sets a held arena's share of retain_max, and a parked one's retain_bytes); what the heap keeps above a
 * smaller cap goes back now: the retained pages (to their segments, dirty
 * where the cap allows), then dirty pages, oldest first, down to the cap.
 * (Everything went back before: an arena parked with a few MiB over its
 * 512 KiB gave back those 512 KiB too, which the next thread faulted in
 * again: proc_churn's faults +4%.) */
void _scr_heap_set_retain_bytes(scr_heap *h, size_t bytes) {
  /* idle pages are settled as any page that empties, under the old cap,
   * before the heap stops keeping them */
  if (h->keep_current && !keeps_current(h->opt.retain, bytes))
    for (unsigned c = 0; c < SCR_CLASS_COUNT; c++)
      if (_scr_heap_idle_page(h, c) != NULL) settle_idle(h, h->queue[c]);
  pthread_mutex_lock(&h->lock);
  h->opt.retain_bytes = bytes;
  heap_set_keep(h);
  bool within = h->retained_pages + h->dirty_pages <= h->keep_pages;
  pthread_mutex_unlock(&h->lock);
  if (within) return;
  release_retained(h);
  _scr_segment_purge_down(h, h->keep_pages);
  scr_validate_heap(h);
}

/* ---- hooks for the process allocator ---- */

size_t _scr_heap_decay(scr_heap *h, uint64_t delay_ms, bool *left) {
  return _scr_segment_decay(h, delay_ms, left);
}

uint64_t _scr_heap_refault_bytes(scr_heap *h) {
  pthread_mutex_lock(&h->lock);
  uint64_t n = h->refault_bytes;
  pthread_mutex_unlock(&h->lock);
  return n;
}

scr_heap *_scr_heap_of(const void *p) {
  scr_segment *seg = _scr_segmap_get(p);
  return seg ? seg->heap : NULL;
}
void _scr_heap_set_owner(scr_heap *h, const struct _scr_heap_hooks *hooks, uintptr_t map_mark) {
  scr_assert(h->segments == NULL && hooks != NULL && hooks->arg != NULL && map_mark <= SCR_SEGMAP_MARK_MASK);
  h->hooks = hooks;
  h->map_mark = map_mark;
}
