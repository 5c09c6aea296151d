/* The fast paths of malloc and free, inline for heap.c and for the
 * process allocator's entry points (one call less, and no second lookup
 * of what the caller already knows).  Everything else is in heap.c. */
#ifndef SCR_HEAP_FAST_H
#define SCR_HEAP_FAST_H

#include "internal.h"

/* What a page's slot_limit (types.h) is: 0 while it has live sampled
 * blocks (every free of one of its blocks then takes the slow side),
 * else its carved slots' limit. */
static inline uint64_t _scr_page_slot_limit(const scr_page *pg) {
  if (__atomic_load_n(&pg->sampled, __ATOMIC_RELAXED)) return 0;
  return (uint64_t)__atomic_load_n(&pg->capacity, __ATOMIC_RELAXED) * _scr_misuse.geom[pg->cls].step;
}
/* The page's slot_limit becomes what it is, for each page of its run.
 * A thread that frees a page's last sampled block publishes it too,
 * racing its holder's carve: either store may win, and both are at most
 * the true limit (the capacity only grows while the block lives), which
 * only sends a free to the exact slow side. */
static inline void _scr_page_publish_limit(const scr_page *pg) {
  scr_segment *seg = _scr_page_segment(pg);
  unsigned first = _scr_page_index(seg, pg);
  uint64_t v = _scr_page_slot_limit(pg);
  for (unsigned i = first; i < first + pg->span; i++) __atomic_store_n(&seg->slot_limit[i], v, __ATOMIC_RELAXED);
}
/* The page carved one more slot: its slot_limit grows. */
static inline void _scr_page_carved(const scr_page *pg) { _scr_page_publish_limit(pg); }

/* y >= seg->slot_limit[idx] (the slot test, _scr_block_suspect), the limit read as a
 * relaxed atomic (its holder may be carving a slot): one compare with the
 * limit in memory.  GCC treats an atomic (or volatile) operand as
 * volatile: it loads it apart, into a register, at an address computed
 * apart, two instructions more on the free fast path.  An aligned 64-bit
 * access is atomic on x86-64 (volatile: the compiler may not move the
 * access above the tests that seg is a segment); ThreadSanitizer builds
 * and other targets take the builtin, which TSan sees. */
static inline bool _scr_slot_beyond(const scr_segment *seg, uintptr_t idx, uint64_t y) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  bool beyond;
  __asm__ volatile("cmpq %2, %1" : "=@ccae"(beyond) : "r"(y), "m"(seg->slot_limit[idx]));
  return beyond;
#else
  return y >= __atomic_load_n(&seg->slot_limit[idx], __ATOMIC_RELAXED);
#endif
}
/* p, on page idx of the NORMAL segment seg (its page's slot geometry g,
 * p off bytes into its page or run), is not plainly a live block of a
 * size class: not a slot the page carved (the slot test against the
 * page's slot_limit, misuse.c: 0 for a page of no size class and for a
 * page with live sampled blocks), or it holds the freed-block key.  False for every live small block (but one holding the
 * key by chance).  || : the key is read only at a carved slot, memory
 * that is mapped and readable.  The exact verdict is classify.c's. */
static inline bool _scr_block_suspect_at(const scr_segment *seg, uintptr_t idx, const void *p, const _scr_slot_geom *g,
                                         uint64_t off) {
  return _scr_slot_beyond(seg, idx, off * g->magic) || _scr_block_word1(p) == _scr_misuse.key;
}
/* The same by tag, which gives the slot geometry and p's offset in its
 * page (_scr_block_suspect_at takes them from a caller that has them). */
static inline bool _scr_block_suspect(const scr_segment *seg, uintptr_t idx, const void *p, unsigned tag) {
  const _scr_slot_geom *g = &_scr_misuse.geom[tag];
  return _scr_block_suspect_at(seg, idx, p, g, (uintptr_t)p & g->mask);
}

/* Take a block from a page that has one (free list first, then bump). */
static inline void *_scr_page_alloc(scr_heap *h, scr_page *pg) {
  scr_block *b = pg->free;
  if (b) {
    SCR_UNPOISON(b, pg->block_size);
    pg->free = b->next;
    _scr_block_set_word1(b, 0);      /* no longer free (misuse.c: the key) */
  } else {
    uint32_t cap = pg->capacity;     /* (atomic: _scr_page_capacity's readers) */
    __atomic_store_n(&pg->capacity, cap + 1, __ATOMIC_RELAXED);
    _scr_page_carved(pg);
    b = (scr_block *)(pg->start + (size_t)cap * pg->block_size);
    if (!pg->zero) _scr_block_set_word1(b, 0); /* reused memory may hold an old key there */
  }
  /* an idle page was never counted and keeps its list (a pair's page) */
  if (SCR_UNLIKELY(pg->used++ == 0) && pg->counted) return _scr_page_first_take(h, pg, b);
  scr_validate_page(pg);
  return b;
}

static inline bool _scr_page_has_room(const scr_page *pg) {
  return pg->free != NULL || pg->capacity < pg->reserved;
}

/* A block of the class whose index times 4 is x4 (_scr_class_x4): the
 * head page of its queue, else the slow path.  The queue's entries are 8
 * bytes, so x4 * 2 is the offset, no shift on the hit path. */
static inline void *_scr_small_alloc_x4(scr_heap *h, unsigned x4) {
  scr_page *pg = *(scr_page **)((char *)h->queue + (size_t)x4 * 2);
  if (SCR_LIKELY(pg != NULL && _scr_page_has_room(pg))) return _scr_page_alloc(h, pg);
  return _scr_heap_alloc_small_slow(h, x4 >> 2);
}
/* A block of class c. */
static inline void *_scr_small_alloc(scr_heap *h, unsigned c) { return _scr_small_alloc_x4(h, c * 4); }

/* A page's last block was freed: keep it (at the tail of its queue) while
 * the class holds fewer than `retain` empty pages and the heap's retained
 * and dirty bytes stay under the cap; else give it back.  A medium class's
 * run goes back as dirty pages instead when the heap has a purge delay:
 * those serve any class or large block, a retained run only its class
 * (docs/process.md has the faults it saves).  The common case (kept,
 * already last in its queue) is inline in _scr_small_free. */
static inline bool _scr_page_keep(const scr_heap *h, const scr_page *pg) {
  /* an idle page is one of the `retain` a class keeps (pg, empty and
   * not counted yet, is not) */
  const scr_page *idle = _scr_heap_idle_page(h, pg->cls);
  unsigned kept = h->empty_count[pg->cls] + (idle != NULL && idle != pg);
  return (pg->span == 1 || h->opt.purge_delay_ms == 0) && kept < h->opt.retain &&
         h->retained_pages + h->dirty_pages + pg->span <= h->keep_pages;
}

/* Free p, a block of the small page pg of h.  A page that empties while
 * it is the head of its queue, the one its class's next block comes from,
 * stays there idle, uncounted, where the heap keeps a page of every small
 * class (keep_current), as mimalloc keeps a queue's only page when it
 * empties: a program that mallocs and frees one block at a time pays no
 * count of kept pages either way.  It is settled as any emptied page when
 * another page takes its place (_scr_heap_page_requeue), and given back
 * by a trim. */
static inline __attribute__((always_inline)) void _scr_small_free(scr_heap *h, scr_page *pg, void *p) {
  scr_assert(((uint8_t *)p - pg->start) % pg->block_size == 0);
  scr_block *b = p;
  b->next = pg->free;
  _scr_block_set_word1(b, _scr_misuse.key); /* free (misuse.c) */
  pg->free = b;
  SCR_POISON(b, pg->block_size);
  pg->used--;
  if (pg != h->queue[pg->cls]) h->class_bank[pg->cls]--; /* (the head's are its own: types.h) */
  scr_validate_page(pg);
  /* it was full, and holds another block (a full page has two slots or
   * more): nothing else to do (a tail call) */
  if (SCR_UNLIKELY(!pg->in_queue)) return _scr_heap_page_requeue(h, pg);
  if (SCR_UNLIKELY(pg->used == 0)) {
    /* (keep_current, a page of one page and fewer than retain kept: one
     * compare, idle_retain) */
    if (h->queue[pg->cls] == pg && h->empty_count[pg->cls] < h->idle_retain[pg->cls]) {
      /* idle: nothing to write (an empty head not counted is idle) */
    } else if (h->queue_tail[pg->cls] == pg && _scr_page_keep(h, pg)) {
      pg->counted = 1;
      h->empty_count[pg->cls]++;
      h->retained_pages += pg->span;
    } else {
      _scr_heap_page_emptied(h, pg); /* may unmap pg */
    }
  }
}

#endif /* SCR_HEAP_FAST_H */
