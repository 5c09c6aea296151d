/* The caches' layer of the process allocator.
 * Layer: caches.  What a thread keeps between its calls and its arena's
 * heap: its cache of freed blocks (tcache.c), the pool of other arenas'
 * blocks (pool.c), its batches of remote frees (remote.c), and the
 * holder's side of an arena (holder.c: claim and park with the cache set
 * and flushed, the tick, trim).  Uses the arenas' layer (arenas.h);
 * knows nothing of the entry points (entry.h).  Files, bottom up:
 * remote.c pool.c tcache.c holder.c.  Words: docs/process.md's
 * glossary. */
#ifndef SCR_PROCESS_CACHES_H
#define SCR_PROCESS_CACHES_H

#include "arenas.h"

/* remote.c: frees of other arenas' blocks */
SCR_INTERNAL void _scr_remote_push(scr_arena *a, void *p);
/* Blocks of class c (a list through their first words) go home: into
 * a's heap when they are a's (a may be NULL), else to their arenas'
 * remote stacks, one CAS per arena. */
SCR_INTERNAL void _scr_remote_send_list_home(scr_arena *a, unsigned c, void *p);

/* pool.c: other arenas' blocks from full cache lists, for any thread's
 * empty list */
#define SCR_POOL_BATCHES 8
typedef struct scr_pool_class {
  pthread_mutex_t lock;
  _Atomic uint32_t n;                /* batches (written under lock, peeked without) */
  uint32_t count[SCR_POOL_BATCHES];  /* blocks of each batch */
  void *batch[SCR_POOL_BATCHES];     /* each a list through the blocks' first words */
} scr_pool_class;
typedef struct { _Alignas(64) scr_pool_class c; } scr_pool_line; /* no two classes share a cache line */
SCR_INTERNAL extern scr_pool_line _scr_pool[SCR_CLASS_COUNT];
SCR_INTERNAL bool _scr_pool_overflow(scr_arena *a, unsigned c);
SCR_INTERNAL void *_scr_pool_refill_slow(scr_arena *a, unsigned c);
/* The pool holds no batch of class c (a peek without the lock, inline:
 * every carve of fresh memory asks). */
static inline bool _scr_pool_empty(unsigned c) {
  return atomic_load_explicit(&_scr_pool[c].c.n, memory_order_relaxed) == 0;
}
/* A block of a pooled batch of class c for a's empty list, or NULL. */
static inline void *_scr_pool_refill(scr_arena *a, unsigned c) {
  if (_scr_pool_empty(c)) return NULL;
  return _scr_pool_refill_slow(a, c);
}
SCR_INTERNAL void _scr_pool_flush(scr_arena *a);
SCR_INTERNAL void _scr_pool_account(struct scr_stats *lent);
SCR_INTERNAL void _scr_pool_lock_all(void);
SCR_INTERNAL void _scr_pool_unlock_all(void);
#if SCR_DEBUG > 0
SCR_INTERNAL bool _scr_pool_holds(unsigned c, const void *p);
#endif

/* tcache.c: the thread's cache of the blocks it frees */
SCR_INTERNAL void _scr_tcache_init(scr_arena *a, bool alone);
SCR_INTERNAL void _scr_tcache_medium_malloc(scr_arena *a, unsigned c);
SCR_INTERNAL void _scr_tcache_flush(scr_arena *a);
SCR_INTERNAL bool _scr_tcache_grow(scr_arena *a, unsigned c);
SCR_INTERNAL void _scr_tcache_gc(scr_arena *a);
SCR_INTERNAL void _scr_tcache_account(const scr_arena *a, struct scr_stats *st, struct scr_stats *lent);
#if SCR_DEBUG > 0
SCR_INTERNAL bool _scr_tcache_refused(const scr_tcache_list *r, const scr_segment *seg, uintptr_t idx, unsigned c, void *p);
#endif
/* Whether a's holder may keep a block it frees whose segment has the
 * mark `mark` in the segment map (internal.h): a's own, or another
 * arena's while another thread holds an arena (tcache.c says why); not a
 * heap the program made (unmarked), nor another arena's while the caller
 * is alone: that arena is parked (or borrowed, or being claimed or
 * parked), and its blocks go home so that its pages can go back.  The
 * marks tell without reading the segment or its heap, lines another
 * thread may have written since.  (scr_free's fast path keeps the
 * thread's own blocks only: another's is claimed first, _scr_proc_claim.) */
static inline bool _scr_tcache_may_keep(const scr_arena *a, uintptr_t mark) {
  unsigned held = atomic_load_explicit(&_scr_proc.owned_hint, memory_order_relaxed);
  return mark == a->own_mark || (mark != 0 && held > 1);
}
/* List r takes a block's room: true, or false when it had none (room
 * stays 0).  One decrement in memory whose borrow says "full" (a test
 * first is an instruction more on the free fast path, a register two),
 * which the compiler cannot see into (as _scr_slot_beyond); ThreadSanitizer
 * builds and other targets test and decrement plainly. */
static inline bool _scr_tcache_take_room(scr_tcache_list *r) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  bool full;
  __asm__("subl $1, %0" : "+m"(r->room), "=@ccb"(full));
  if (SCR_UNLIKELY(full)) {
    r->room = 0;
    return false;
  }
  return true;
#else
  if (r->room == 0) return false;
  r->room--;
  return true;
#endif
}
/* Link block p of class c onto list r, whose room the caller took
 * (linked through its first word; ASan builds poison the rest); key:
 * _scr_misuse.key, as the caller read it. */
static inline void _scr_tcache_link_key(scr_tcache_list *r, unsigned c, void *p, uint64_t key) {
  *(void **)p = r->head;
  _scr_block_set_word1(p, key); /* free (core/src/misuse.c) */
  SCR_POISON(p, _scr_class_sizes[c]); /* ASan: a use after free is caught */
  r->head = p;
}
/* Keep p, a block on page idx of seg with tag `tag` that a's holder frees
 * and may keep (_scr_tcache_may_keep), for a's next malloc of its class:
 * 1, or 0 when it is not kept (p is not a block of a size class: its
 * tag's list has no room; or the list is full). */
static inline int _scr_tcache_put(scr_arena *a, const scr_segment *seg, uintptr_t idx, unsigned tag, void *p) {
  unsigned c = tag;
  scr_assert(c <= SCR_TAG_OTHER);
  scr_tcache_list *r = &a->tc[c]; /* SCR_TAG_OTHER's has no room */
  if (r->room == 0) return 0;
#if SCR_DEBUG > 0
  if (_scr_tcache_refused(r, seg, idx, c, p)) return 1;
#endif
  _scr_tcache_link_key(r, c, p, _scr_misuse.key);
  r->room--;
  return 1;
}
/* A kept block of the class whose list is at a->tc plus `at` bytes, or
 * NULL. */
static inline void *_scr_tcache_take_at(scr_arena *a, uintptr_t at) {
  scr_tcache_list *r = (scr_tcache_list *)((char *)a->tc + at);
  unsigned c = (unsigned)(at / sizeof(scr_tcache_list));
  void *b = r->head;
#if defined(__x86_64__)
  /* loaded into the return register (left to itself, the compiler put
   * the list's address there and copied b over at the end) */
  __asm__("" : "+a"(b));
#endif
  if (b == NULL) return NULL;
  SCR_UNPOISON(b, _scr_class_sizes[c]);
  r->head = *(void **)b;
  r->room++;
  _scr_block_set_word1(b, 0); /* handed out: no longer free */
  return b;
}
/* A kept block of class c, or NULL (the list marked found empty: tcache.c). */
static inline void *_scr_tcache_take(scr_arena *a, unsigned c) {
  void *b = _scr_tcache_take_at(a, (uintptr_t)c * sizeof(scr_tcache_list));
  if (b == NULL) a->cache_emptied |= (uint64_t)1 << c;
  return b;
}

/* holder.c: the holder's side of its arena */
SCR_INTERNAL scr_arena *_scr_holder_claim(void); /* an arena with its cache set (arena.c: _scr_arena_claim) */
SCR_INTERNAL void _scr_holder_park(scr_arena *a);       /* the cache flushed, then the arena parked */
SCR_INTERNAL void _scr_holder_publish(scr_arena *a);    /* a snapshot, less the blocks the cache keeps */
SCR_INTERNAL size_t _scr_holder_trim(scr_arena *a); /* a's cache, pool share, remote frees, free pages back */
/* The caller's arena, claimed on first use; NULL when none can be had. */
static inline scr_arena *_scr_holder_get(void) {
  scr_arena *a = _scr_tl.arena;
  if (SCR_UNLIKELY(a == NULL)) a = _scr_holder_claim();
  return a;
}
#define SCR_ARENA_PUBLISH_EVERY 65536 /* calls between stats snapshots */
/* Counts the holder's heap calls: a malloc or free that the thread's cache
 * serves changes nothing in the heap and does not tick (a count on the
 * cache's hits would tax every pair: docs/process.md); its sampler's
 * countdown, which they do take, ticks when it runs out.  Every
 * SCR_ARENA_POLL_EVERY heap calls the slow side frees what other threads
 * pushed (reading the remote stack's line, which pushers keep writing, on
 * every call would cost a miss each time), applies retain_max's share,
 * empties lists left unused (tcache.c) and now and then publishes. */
SCR_INTERNAL void _scr_holder_tick_slow(scr_arena *a);

static inline void _scr_holder_tick(scr_arena *a) {
  if (SCR_UNLIKELY((++a->ops & (SCR_ARENA_POLL_EVERY - 1)) == 0)) _scr_holder_tick_slow(a);
}

#endif /* SCR_PROCESS_CACHES_H */
