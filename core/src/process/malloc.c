/* The process allocator's entry points: scr_malloc and friends.
 *
 * Allocation: the thread's cache, else the caller's arena (claimed on
 * first use).  Free: the thread's cache, whoever owns the block (the
 * mark map tells the thread's own in one load; the segment map any
 * other, lock-free); what the cache cannot keep goes to its heap, the
 * caller's at once, another arena's through its remote ring.  Realloc of
 * a block of another arena stays in place when it fits, else moves it
 * into the caller's.
 * Layer: entry.  Owns nothing: each call runs on the caller's arena
 * through the caches' layer (caches.h). */
#include "entry.h"
#include <errno.h>
#include <string.h>


/* Everything malloc does beyond the thread's cache; a is the caller's
 * arena or NULL (none claimed yet). */
static __attribute__((noinline)) void *proc_malloc_general(scr_arena *a, size_t n) {
  if (SCR_UNLIKELY(a == NULL)) {
    a = _scr_holder_claim();
    if (a == NULL) return NULL;
  }
  void *p;
  if (SCR_LIKELY(n <= SCR_SMALL_MAX)) {
    unsigned c = _scr_class_of(n); /* the list is empty: the fast path looked, or a was just claimed */
    if (c >= SCR_MEDIUM_FIRST && SCR_UNLIKELY(a->medium_cap[c - SCR_MEDIUM_FIRST] != 0)) _scr_tcache_medium_malloc(a, c);
    /* a free slot in the arena's own page first, then the pool's blocks,
     * then the rest of the page, then a new page */
    scr_page *pg = a->heap->queue[c];
    if (pg == NULL || pg->free == NULL) {
      p = _scr_pool_refill(a, c);
      if (p == NULL && (pg == NULL || pg->capacity == pg->reserved)) {
        /* About to take a page: the blocks other threads freed go back
         * first (the heap then takes a slot of theirs), rather than wait
         * for the next tick while a new page is faulted in.  Here and not
         * at every carve from the page, where the read of the stack's
         * line, which pushers keep writing, costs (docs/process.md). */
        if (_scr_remote_waiting(a)) _scr_remote_drain(a);
      }
      if (p != NULL) return p; /* the heap did not change */
    }
    p = _scr_small_alloc(a->heap, c);
  } else {
    p = proc_heap_malloc(a->heap, n);
  }
  _scr_holder_tick(a);
  return p;
}

/* A small request of class c (x4: c times 4, from the fast path) whose
 * list was empty.  The common case first, with few registers (as free's):
 * a free or carved slot of the arena's own page of a class below the
 * medium ones, carved when the pool holds none (proc_malloc_general takes
 * the same block); a program's runs longer than a list come here often. */
static __attribute__((noinline)) void *proc_malloc_slow(size_t n, scr_arena *a, uintptr_t x4) {
  unsigned c = (unsigned)(x4 / 4);
  a->cache_emptied |= (uint64_t)1 << c; /* (as _scr_tcache_take) */
  scr_page *pg = a->heap->queue[c];
  if (SCR_LIKELY(c < SCR_MEDIUM_FIRST && pg != NULL) &&
      (pg->free != NULL || (pg->capacity < pg->reserved && _scr_pool_empty(c)))) {
    void *p = _scr_page_alloc(a->heap, pg);
    _scr_holder_tick(a);
    return p;
  }
  return proc_malloc_general(a, n);
}

/* The countdown of a's sampler ran out at p, n bytes (NULL: failed);
 * caller: the entry point's return address.  p is of a's own heap, never
 * another arena's from the cache or the pool: marking a page sampled
 * stores 0 as its slot limit, and a store of the limit by a holder that
 * carves meanwhile could land last (the free would then take the fast
 * path and the sample stay).  Only a's holder carves a's pages. */
static __attribute__((noinline)) void *proc_sampled(scr_arena *a, void *p, size_t n, const void *caller) {
  uint64_t rate = _scr_prof_next(&a->prof, atomic_load_explicit(&_scr_proc.opt.profile_rate, memory_order_relaxed));
  if (p != NULL && rate != 0) _scr_prof_take(NULL, p, n, rate, caller);
  _scr_holder_tick_slow(a); /* the holder's clock: its cache hits make no tick */
  return p;
}
/* p, n bytes an entry point just allocated for a's holder (a may be NULL
 * when the allocation failed), after the countdown. */
#define PROC_COUNTED(a, p, n) \
  ((a) != NULL && _scr_prof_due(&(a)->prof, (n)) ? proc_sampled((a), (p), (n), __builtin_return_address(0)) : (p))

/* The countdown ran out while sampling was off (it looks at the rate
 * every SCR_PROF_IDLE bytes): re-armed, and true: not sampled, so the
 * allocation may take a block of the cache as if it had not run out. */
static bool proc_prof_idle(scr_arena *a) {
  if (a->prof.rate != 0) return false;
  (void)_scr_prof_next(&a->prof, atomic_load_explicit(&_scr_proc.opt.profile_rate, memory_order_relaxed));
  _scr_holder_tick_slow(a); /* the holder's clock: its cache hits make no tick */
  return true;
}

/* scr_malloc's countdown ran out at a small request: a block of a's own
 * heap, whose pages only a's holder carves (see proc_sampled). */
static __attribute__((noinline)) void *proc_malloc_sampled(size_t n, scr_arena *a, const void *caller) {
  if (proc_prof_idle(a)) return scr_malloc(n); /* (the countdown re-armed: the fast path's block) */
  void *p = _scr_small_alloc(a->heap, _scr_class_of(n));
  _scr_holder_tick(a);
  return proc_sampled(a, p, n, caller);
}

/* scr_malloc of a large block, or before the thread holds an arena (the
 * countdown first: a sampled block is one of a's heap, proc_sampled). */
static __attribute__((noinline)) void *proc_malloc_other(scr_arena *a, size_t n, const void *caller) {
  if (a == NULL && (a = _scr_holder_claim()) == NULL) return NULL;
  if (_scr_prof_due(&a->prof, n)) {
    if (n <= SCR_SMALL_MAX) return proc_malloc_sampled(n, a, caller);
    return proc_sampled(a, proc_malloc_general(a, n), n, caller);
  }
  return proc_malloc_general(a, n);
}

/* The fast path, a block of the thread's cache, needs no stack frame: the
 * rest is a tail call (a frame for the slow side's registers cost every
 * call about ten instructions).  It and scr_free start a cache line, so
 * that a change elsewhere in the library does not move them across one
 * (docs/process.md). */
__attribute__((aligned(64))) void *scr_malloc(size_t n) {
  scr_tl *t = &_scr_tl;
  if (SCR_LIKELY(n < t->small_end)) { /* (then t->arena is not NULL) */
    scr_arena *a = t->arena;
    /* the class times 4, which the slow side takes: the list's address
     * scales it by 8 (internal.h: _scr_class_x4) */
    uintptr_t x4 = _scr_class_x4(n);
    if (_scr_prof_due(&a->prof, n)) return proc_malloc_sampled(n, a, __builtin_return_address(0));
    void *p = _scr_tcache_take_at(a, x4 * (sizeof(scr_tcache_list) / 4));
    if (SCR_LIKELY(p != NULL)) return p; /* no tick: the heap did not change */
    return proc_malloc_slow(n, a, x4);
  }
  return proc_malloc_other(t->arena, n, __builtin_return_address(0));
}

void *scr_calloc(size_t count, size_t size) {
  /* A block of the thread's cache, zeroed, as malloc's fast path would
   * give (the heap's path below, where that list is empty, skips the
   * memset for a block carved from a fresh page). */
  scr_arena *a = _scr_tl.arena;
  size_t n;
  if (SCR_LIKELY(a != NULL) && !__builtin_mul_overflow(count, size, &n) && n <= SCR_SMALL_MAX) {
    void *p;
    if (_scr_prof_due(&a->prof, n)) { /* a block of a's heap (proc_sampled) */
      p = proc_malloc_sampled(n, a, __builtin_return_address(0));
      return p ? memset(p, 0, n) : NULL;
    }
    p = _scr_tcache_take(a, _scr_class_of(n));
    if (p != NULL) return memset(p, 0, n);
    p = proc_heap_calloc(a->heap, count, size); /* (counted above) */
    _scr_holder_tick(a);
    return p;
  }
  a = _scr_holder_get();
  if (SCR_UNLIKELY(a == NULL)) return NULL;
  void *p = proc_heap_calloc(a->heap, count, size);
  _scr_holder_tick(a);
  return p ? PROC_COUNTED(a, p, count * size) : NULL;
}

/* aligned_alloc's heap path for a's holder; due: the countdown ran out
 * (the block is then sampled: one of a's heap, proc_sampled). */
static __attribute__((noinline)) void *proc_aligned_heap(scr_arena *a, size_t alignment, size_t n, bool due,
                                                         const void *caller) {
  void *p = proc_heap_aligned_alloc(a->heap, alignment, n);
  _scr_holder_tick(a);
  return p && due ? proc_sampled(a, p, n, caller) : p;
}

/* Everything aligned_alloc does beyond its hit path: an alignment of 16
 * or less, one that is not a power of two, a large block, or a thread
 * that holds no arena yet (whose cache, once claimed, is empty). */
static __attribute__((noinline)) void *proc_aligned_other(size_t alignment, size_t n, const void *caller) {
  /* Every block is aligned to SCR_MIN_ALIGN: a smaller alignment (a power
   * of two; the heap's path reports others) is malloc's, cache included. */
  if (alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= SCR_MIN_ALIGN) return scr_malloc(n);
  scr_arena *a = _scr_holder_get();
  if (SCR_UNLIKELY(a == NULL)) return NULL;
  return proc_aligned_heap(a, alignment, n, _scr_prof_due(&a->prof, n), caller);
}

/* The hit path, as malloc's: an alignment above 16 that every block of a
 * size class has (its size a multiple of it), a block of that class's
 * list (the countdown first, as in proc_malloc_other). */
void *scr_aligned_alloc(size_t alignment, size_t n) {
  scr_tl *t = &_scr_tl;
  if (SCR_LIKELY(n < t->small_end && alignment > SCR_MIN_ALIGN && (alignment & (alignment - 1)) == 0)) {
    scr_arena *a = t->arena; /* (not NULL: small_end says so) */
    bool due = _scr_prof_due(&a->prof, n);
    unsigned c = _scr_class_aligned(alignment, n);
    void *p = SCR_LIKELY(!due) && c < SCR_CLASS_COUNT ? _scr_tcache_take(a, c) : NULL;
    if (SCR_LIKELY(p != NULL)) return p; /* the heap did not change */
    return proc_aligned_heap(a, alignment, n, due, __builtin_return_address(0));
  }
  return proc_aligned_other(alignment, n, __builtin_return_address(0));
}

/* p, a block of seg (page idx, tag `tag`, mark `mark` in the mark map)
 * whose free the caller claimed (its freed state set, misuse.c), goes to
 * its next place, for free and for a realloc that moved it. */
static void proc_free_claimed(void *p, scr_arena *a, scr_segment *seg, uintptr_t idx, unsigned tag, uintptr_t mark) {
  /* the list first: a block kept there needs its owner looked up (three
   * dependent loads, one of the owner's segment header) no more than on
   * the hit path */
  bool keep = a != NULL && tag < SCR_CLASS_COUNT && _scr_tcache_may_keep(a, mark);
  if (keep && _scr_tcache_put(a, seg, idx, tag, p)) return;
  scr_heap *h = seg->heap;
  scr_arena *o = (scr_arena *)_scr_heap_owner(h); /* the heap's arena */
  scr_assert(o != NULL); /* _scr_proc_check: an arena's block */
  if (keep) {
    bool home = o == a || !_scr_arena_parked(o); /* the list may grow or overflow for it */
    /* Another arena's block and a full list: its newer half leaves for
     * the pool, where other threads take it; past a full pool, and for
     * the arena's own block, the list grows.  The own block that cannot
     * be kept goes to its heap, so that frees in address order
     * (scr_free_many) stay in order. */
    if (o != a && home && _scr_pool_overflow(a, tag) && _scr_tcache_put(a, seg, idx, tag, p)) return;
    if (home && _scr_tcache_grow(a, tag) && _scr_tcache_put(a, seg, idx, tag, p)) return;
  }
  if (SCR_LIKELY(o == a)) {
    if (tag < SCR_CLASS_COUNT) _scr_small_free(h, _scr_class_page(seg, idx, tag), p);
    else proc_heap_free(h, p);
    _scr_holder_tick(a);
    return;
  }
  _scr_remote_push(o, p);
}

/* Everything free does beyond its hit path; a is the caller's arena (NULL
 * when it holds none: it takes one for a block of a size class).  Whose
 * block p is, decided once, from its segment map entry; then p is claimed
 * (one atomic exchange: of two frees of it, racing or not, exactly one
 * goes on) and goes to its one next place (proc_free_claimed): the
 * thread's cache when it may keep p and the list has room, is made room
 * (another arena's block: its newer half to the pool) or grows; else p's
 * heap, the caller's at once, another arena's through its remote ring.
 * A parked arena's blocks go home, so that its pages can go back. */
static __attribute__((noinline)) void proc_free_slow(void *p, scr_arena *a) {
  uintptr_t e = _scr_segmap_entry(p);
  scr_segment *seg = _scr_segmap_seg(e);
  uintptr_t idx = 0;
  unsigned tag = seg != NULL ? _scr_block_tag(seg, p, &idx) : SCR_TAG_OTHER;
  /* The hit path's screen for an arena's segment (marked), held or not;
   * the exact check (misuse.c) for what it stops: NULL, large and huge
   * blocks, a page with live sampled blocks (slot_limit 0: profile.c), a
   * heap the program made, misuse. */
  const _scr_slot_geom *g = &_scr_misuse.geom[tag];
  bool screened = _scr_segmap_mark(e) != 0 && !_scr_proc_block_suspect(seg, p, idx, g->magic, g->mask, _scr_misuse.key);
  if (!screened) {
    if (p == NULL) return;
    if (SCR_UNLIKELY(_scr_proc_check("free", p) != SCR_OK)) return; /* reported (misuse.c) */
  }
  if (SCR_UNLIKELY(!_scr_proc_claim(p))) return _scr_proc_misuse("free", p, SCR_EDOUBLEFREE); /* lost a race */
  if (!screened) _scr_prof_free(p);
  /* A thread that frees before it ever mallocs takes its arena (its cache,
   * which hands blocks on through the pool) now, as tcmalloc's and jemalloc's
   * threads do; free leaves errno alone (POSIX), whatever the claim met. */
  if (a == NULL && screened) { int saved = errno; a = _scr_holder_get(); errno = saved; }
  proc_free_claimed(p, a, seg, idx, tag, _scr_segmap_mark(e));
}

/* A free the hit path screened and the cache refused (p's list is full;
 * p of a's own heap, as the mark map said): the list grows or p goes to
 * its page, with few registers; a block of no class takes proc_free_slow.
 * Runs of frees longer than a list (half of Python's) would otherwise
 * take proc_free_slow's screen and claim again for each. */
static __attribute__((noinline)) void proc_free_refused(void *p, scr_arena *a) {
  scr_segment *seg = _scr_segment_of(p);
  uintptr_t idx;
  unsigned tag = _scr_block_tag(seg, p, &idx);
  if (SCR_LIKELY(tag < SCR_CLASS_COUNT)) {
    /* a full list grows to the thread's runs (tcache.c), within its budget */
    if (_scr_tcache_grow(a, tag) && _scr_tcache_put(a, seg, idx, tag, p)) return;
    _scr_small_free(a->heap, _scr_class_page(seg, idx, tag), p);
    _scr_holder_tick(a);
    return;
  }
  proc_free_slow(p, a);
}

/* The fast path, onto the thread's cache, needs no stack frame (as
 * malloc's) and starts a cache line.  Its first test is the mark map's
 * (internal.h): p lies in a segment of the caller's arena, whose header
 * is then p's aligned 4 MiB; NULL, another arena's block and everything
 * else go to proc_free_slow. */
__attribute__((aligned(64))) void scr_free(void *p) {
  scr_tl *t = &_scr_tl;
  if (SCR_LIKELY(_scr_segmap_fast_mark(p) == t->fast)) { /* (then t->arena is not NULL) */
    scr_arena *a = t->arena;
    scr_segment *seg = _scr_segment_of(p);
    uintptr_t idx;
    uintptr_t x4 = _scr_block_tag_x4(seg, p, &idx);
    unsigned tag = (unsigned)(x4 / 4);
    /* The list of the tag (SCR_TAG_OTHER's: no room, a test no address
     * passes): the address scales the tag times 4 by 8. */
    scr_tcache_list *r = (scr_tcache_list *)((char *)a->tc + x4 * (sizeof(scr_tcache_list) / 4));
    uint64_t key = _scr_misuse.key;
    if (SCR_UNLIKELY(_scr_proc_block_suspect(seg, p, idx, r->magic, r->mask, key))) return proc_free_slow(p, a);
    if (SCR_LIKELY(_scr_tcache_take_room(r))) {
#if SCR_DEBUG > 0
      if (_scr_tcache_refused(r, seg, idx, tag, p)) {
        r->room++; /* (its room back) */
        return;
      }
#endif
      _scr_tcache_link_key(r, tag, p, key);
      return;
    }
    return proc_free_refused(p, a);
  }
  proc_free_slow(p, t->arena);
}

/* call: the name the misuse line gives (malloc_usable_size under
 * LD_PRELOAD, scr_usable_size otherwise). */
size_t _scr_proc_usable_size_named(const void *p, const char *call) {
  if (p == NULL) return 0;
  _scr_proc_init(); /* (the option the report reads) */
  if (_scr_proc_check(call, p) != SCR_OK) return 0;
  return proc_heap_usable_size(_scr_heap_of(p), p);
}

size_t scr_usable_size(const void *p) { return _scr_proc_usable_size_named(p, "scr_usable_size"); }

/* realloc of p (of a size class of a's own heap, usable bytes) to n
 * bytes that do not fit it: through the thread's cache, as the malloc and
 * free it stands for (through the heap, a buffer grown by doubling took
 * new blocks while its frees filled the cache with blocks never taken). */
static __attribute__((noinline)) void *proc_realloc_move(scr_arena *a, void *p, size_t usable, size_t n) {
  size_t m = _scr_realloc_size(usable, n);
  void *q = m <= SCR_SMALL_MAX ? _scr_tcache_take(a, _scr_class_of(m)) : NULL;
  if (q == NULL && (q = proc_malloc_general(a, m)) == NULL) return NULL;
  memcpy(q, p, n < usable ? n : usable);
  scr_free(p);
  return q;
}

/* realloc of p, a block of a's own heap h, to n bytes; sampled: the
 * countdown ran out (the block is then one of a's heap, proc_sampled). */
static __attribute__((noinline)) void *proc_realloc_heap(scr_arena *a, void *p, size_t n, bool sampled,
                                                         const void *caller) {
  void *q = proc_heap_realloc(a->heap, p, n);
  _scr_holder_tick(a);
  return q && sampled ? proc_sampled(a, q, n, caller) : q;
}

void *scr_realloc(void *p, size_t n) {
  /* The hit path: a block of the thread's own size-class pages, screened
   * as on free's hit path (the mark map, the slot test, the freed key),
   * stays where it is or moves through the cache; anything else takes the
   * exact check below.  It is counted anew, as every realloc: its sample
   * goes, and the countdown may take it again (proc_sampled). */
  scr_tl *t = &_scr_tl;
  if (SCR_LIKELY(_scr_segmap_fast_mark(p) == t->fast) && n != 0) { /* (then p is not NULL, t->arena is not) */
    scr_arena *a = t->arena;
    scr_segment *seg = _scr_segment_of(p);
    uintptr_t idx;
    unsigned tag = _scr_block_tag_x4(seg, p, &idx) / 4;
    const scr_tcache_list *r = &a->tc[tag];
    if (!_scr_proc_block_suspect(seg, p, idx, r->magic, r->mask, _scr_misuse.key)) { /* (then tag is a class) */
      _scr_prof_free(p);
      size_t usable = _scr_class_sizes[tag];
      if (SCR_UNLIKELY(_scr_prof_due(&a->prof, n)) && !proc_prof_idle(a))
        return proc_realloc_heap(a, p, n, true, __builtin_return_address(0));
      return _scr_realloc_stays(usable, n) ? p : proc_realloc_move(a, p, usable, n);
    }
  }
  if (p == NULL) return scr_malloc(n);
  _scr_proc_init();
  if (SCR_UNLIKELY(_scr_proc_check("realloc", p) != SCR_OK)) {
    errno = EINVAL;
    return NULL;
  }
  scr_heap *h = _scr_heap_of(p);
  scr_arena *a = _scr_holder_get();
  if (SCR_UNLIKELY(a == NULL)) return NULL;
  if (SCR_LIKELY(a->heap == h)) {
    _scr_prof_free(p); /* (a block realloc keeps in place is counted anew too) */
    /* the countdown first, as in proc_malloc_other */
    bool sampled = _scr_prof_due(&a->prof, n) && !proc_prof_idle(a);
    uintptr_t idx;
    unsigned c = _scr_block_tag(_scr_segment_of(p), p, &idx);
    size_t usable = c < SCR_CLASS_COUNT ? _scr_class_sizes[c] : 0;
    /* a size-class block that moves, as on the hit path; a large one, one
     * that stays, realloc(p, 0): the heap's realloc */
    if (!sampled && usable != 0 && n != 0 && !_scr_realloc_stays(usable, n)) return proc_realloc_move(a, p, usable, n);
    return proc_realloc_heap(a, p, n, sampled, __builtin_return_address(0));
  }
  /* A block of another arena: it stays where it fits (as the arena's own
   * would: no heap changes; any thread may free it later), else it moves
   * into ours. */
  if (n == 0) {
    scr_free(p);
    return NULL;
  }
  size_t old = proc_heap_usable_size(h, p);
  /* (counted anew, as in place above; when the countdown runs out here,
   * the block moves, and the malloc below samples one of a's own:
   * proc_sampled) */
  if (_scr_realloc_stays(old, n) && !_scr_prof_due(&a->prof, n)) {
    _scr_prof_free(p);
    return p;
  }
  void *q = scr_malloc(_scr_realloc_size(old, n));
  if (q == NULL) return NULL;
  memcpy(q, p, old < n ? old : n);
  if (SCR_UNLIKELY(!_scr_proc_claim(p))) { /* another thread freed p meanwhile */
    scr_free(q);
    _scr_proc_misuse("realloc", p, SCR_EDOUBLEFREE);
    errno = EINVAL;
    return NULL;
  }
  _scr_prof_free(p);
  /* the old block goes where its free would send it */
  uintptr_t e = _scr_segmap_entry(p), idx;
  scr_segment *seg = _scr_segmap_seg(e);
  unsigned tag = _scr_block_tag(seg, p, &idx);
  proc_free_claimed(p, a, seg, idx, tag, _scr_segmap_mark(e));
  SCR_PC_ADD(realloc_moves, 1);
  return q;
}

/* Give back what can be given back: the caller's arena's free pages and
 * cached blocks, and those of every parked arena. */
size_t scr_trim(void) {
  _scr_proc_init();
  scr_proc *P = &_scr_proc;
  size_t n = 0;
  scr_arena *a = _scr_tl.arena;
  /* Threads holding arenas trim theirs at their next tick (every 32
   * calls that reach their heaps): their heaps are theirs alone. */
  uint64_t epoch = atomic_fetch_add_explicit(&P->trim_epoch, 1, memory_order_relaxed) + 1;
  if (a) {
    a->trim_seen = epoch;
    n += _scr_holder_trim(a);
  }
  else _scr_pool_flush(NULL);
  uint64_t cached = 0;
  (void)_scr_huge_cache_decay(0, true, &cached);
  n += cached;
  pthread_mutex_lock(&P->lock);
  for (scr_arena *b = P->parked; b; b = b->next_parked) {
    if (b->poisoned) continue; /* already given back */
    n += _scr_discard_arena(b, 0);
  }
  pthread_mutex_unlock(&P->lock);
  return n;
}

/* Direct (hidden) names of the entry points, for override.c's malloc & co. */
SCR_HIDDEN_ALIAS(_scr_proc_malloc, scr_malloc);
SCR_HIDDEN_ALIAS(_scr_proc_calloc, scr_calloc);
SCR_HIDDEN_ALIAS(_scr_proc_realloc, scr_realloc);
SCR_HIDDEN_ALIAS(_scr_proc_free, scr_free);
SCR_HIDDEN_ALIAS(_scr_proc_aligned_alloc, scr_aligned_alloc);
