/* Arenas: claimed by a thread on its first allocation, parked when it
 * exits, claimed again by the next thread that needs one; borrowed
 * meanwhile by threads that work on a parked arena's heap (remote.c,
 * discard.c); their figures published for the stats.
 * Layer: arenas.  Owns the arena lists and states (_scr_proc.all, parked,
 * the counts: under _scr_proc.lock), each arena's snapshot (under its
 * snap_lock), its heap's cap while parked (keep, with decay.c's share
 * while held) and the drain of its remote ring and stack (its holder).
 * The thread's cache is the caches' layer's (holder.c). */
#include "arenas.h"
#include <errno.h>
#include <string.h>

/* A new arena, under the lock.  Descriptors are carved from mappings of
 * our own and never freed: an arena lives as long as the process. */
static scr_arena *proc_arena_new(void) {
  scr_proc *P = &_scr_proc;
  size_t sz = (sizeof(scr_arena) + 63) & ~(size_t)63;
  if (P->pool_left < sz) {
    size_t chunk = (size_t)256 << 10;
    uint8_t *m = _scr_proc_map(chunk);
    if (m == NULL) return NULL;
    P->pool = m;
    P->pool_left = chunk;
  }
  scr_heap *h = scr_heap_new(&P->heap_opt);
  if (h == NULL) return NULL;
  scr_arena *a = (scr_arena *)P->pool;
  P->pool += sz;
  P->pool_left -= sz;
  a->heap = h;
  a->id = P->narenas++;
  atomic_store_explicit(&a->ring_limit, SCR_REMOTE_RING, memory_order_relaxed);
  /* never takes a block; its slot test fails every address (tcache.c
   * sets the other lists at each claim) */
  a->tc[SCR_TAG_OTHER] = (scr_tcache_list){.head = NULL, .room = 0, .max = 0, .magic = 0, .mask = 0};
  pthread_mutex_init(&a->snap_lock, NULL);
  a->hooks = _scr_arena_hooks;
  _scr_huge_cache_install(&a->hooks);
  a->hooks.arg = a;
  /* Its segments' mark in the segment map: id + 1 while that fits (0,
   * unmarked, is every other heap's), else none and an own_mark that
   * matches no entry (past 4 Mi arenas: their blocks skip the caches). */
  uintptr_t mark = (uintptr_t)a->id + 1 <= SCR_SEGMAP_MARK_MASK ? (uintptr_t)a->id + 1 : 0;
  a->own_mark = mark != 0 ? mark : UINTPTR_MAX;
  _scr_heap_set_owner(h, &a->hooks, mark);
  scr_heap_stats(h, &a->snap);
  a->next_all = atomic_load_explicit(&P->all, memory_order_relaxed);
  atomic_store_explicit(&P->all, a, memory_order_release);
  return a;
}

/* The parked arena with the most committed bytes not in live blocks
 * (free slots, retained and dirty pages; live ones as last published),
 * which the new holder fills before it faults anything new; the most
 * recently parked among equals; NULL when none is parked.  Taken off the
 * parked list.  Under the lock. */
static scr_arena *proc_take_parked(void) {
  scr_proc *P = &_scr_proc;
  scr_arena *best = NULL, *best_prev = NULL, *prev = NULL;
  uint64_t best_free = 0;
  for (scr_arena *a = P->parked; a; prev = a, a = a->next_parked) {
    uint64_t bytes = _scr_heap_bytes(a->heap), used = atomic_load_explicit(&a->used_published, memory_order_relaxed);
    uint64_t f = bytes > used ? bytes - used : 0;
    if (best == NULL || f > best_free) best = a, best_prev = prev, best_free = f;
  }
  if (best == NULL) return NULL;
  if (best_prev) best_prev->next_parked = best->next_parked; else P->parked = best->next_parked;
  best->next_parked = NULL;
  return best;
}

/* Under the lock: a, off the parked list or new, is held from now on.
 * Returns whether no other thread held an arena (tcache.c's medium
 * lists, set by the claiming thread after the lock). */
static bool proc_own_locked(scr_arena *a, bool was_parked) {
  scr_proc *P = &_scr_proc;
  if (was_parked) {
    P->nparked--;
    _scr_arena_set_parked(a, 0);
    atomic_store_explicit(&a->drain_req, 0, memory_order_relaxed);
  }
  a->state = SCR_ARENA_OWNED;
  bool alone = P->nowned == 0;
  P->nowned++;
  atomic_store_explicit(&P->owned_hint, P->nowned, memory_order_relaxed);
  scr_validate_proc();
  return alone;
}

/* The calling thread's side of taking a (after proc_own_locked): its own
 * from now on (holder.c sets the exit hook). */
static void proc_adopt(scr_arena *a, unsigned poisoned) {
  scr_proc *P = &_scr_proc;
  a->discarded = 0;
  a->trim_seen = atomic_load_explicit(&P->trim_epoch, memory_order_relaxed);
  if (poisoned) _scr_arena_unpoison(a);
  _scr_tl_set(a);
  SCR_PC_ADD(claims, 1);
  _scr_remote_poll(a);
  _scr_decay_keep_update(a);
}

scr_arena *_scr_arena_claim(bool *alone) {
  _scr_proc_init();
  scr_proc *P = &_scr_proc;
  pthread_mutex_lock(&P->lock);
  scr_arena *a = proc_take_parked();
  bool was_parked = a != NULL;
  if (a == NULL) a = proc_arena_new();
  if (a == NULL) {
    pthread_mutex_unlock(&P->lock);
    errno = ENOMEM;
    return NULL;
  }
  *alone = proc_own_locked(a, was_parked);
  unsigned poisoned = a->poisoned;
  pthread_mutex_unlock(&P->lock);
  proc_adopt(a, poisoned);
  (void)_scr_prof_next(&a->prof, atomic_load_explicit(&P->opt.profile_rate, memory_order_relaxed)); /* the new holder's countdown */
  return a;
}

/* Borrowing: a thread that does not hold parked arena a works on its heap
 * (remote.c: a pusher frees what waits on its stack; discard.c: the
 * helper returns its pages) with a off the parked list, so that no claim
 * or other borrower takes it meanwhile.  Under the lock; prev is a's
 * predecessor on the list (NULL at its head).  The borrower unpoisons a
 * discarded arena's pages (after the lock) before it touches them. */
void _scr_arena_borrow_locked(scr_arena *a, scr_arena *prev) {
  scr_proc *P = &_scr_proc;
  if (prev) prev->next_parked = a->next_parked; else P->parked = a->next_parked;
  a->next_parked = NULL;
  a->state = SCR_ARENA_BORROWED;
  _scr_arena_set_parked(a, 0);
  P->nparked--;
}

/* The borrower parks a again where it was, if prev is still parked (so
 * that claims keep their order), else first; takes the lock. */
void _scr_arena_unborrow(scr_arena *a, scr_arena *prev) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_lock(&P->lock);
  a->state = SCR_ARENA_PARKED;
  _scr_arena_set_parked(a, 1);
  if (prev && prev->state == SCR_ARENA_PARKED) {
    a->next_parked = prev->next_parked;
    prev->next_parked = a;
  } else {
    a->next_parked = P->parked;
    P->parked = a;
  }
  P->nparked++;
  atomic_store_explicit(&a->drain_req, 0, memory_order_relaxed);
  scr_validate_proc();
  pthread_mutex_unlock(&P->lock);
}

/* The holder gives the arena up (its cache and its batch of remote frees
 * already flushed: holder.c): free lists and bump pointers stay, so its
 * blocks stay valid; the helper returns its free pages later. */
void _scr_arena_park(scr_arena *a) {
  scr_proc *P = &_scr_proc;
  _scr_remote_poll(a);
  /* Free pages kept above retain_bytes were the thread's working set,
   * which nobody is left to reuse: they go back now (decay.c). */
  if (a->keep > P->heap_opt.retain_bytes) {
    a->keep = P->heap_opt.retain_bytes;
    _scr_heap_set_retain_bytes(a->heap, (size_t)a->keep);
  }
  _scr_arena_publish(a);
  pthread_mutex_lock(&P->lock);
  a->state = SCR_ARENA_PARKED;
  a->parked_ns = _scr_proc_now_ns();
  a->next_parked = P->parked;
  P->parked = a;
  _scr_arena_set_parked(a, 1);
  P->nowned--;
  atomic_store_explicit(&P->owned_hint, P->nowned, memory_order_relaxed);
  P->nparked++;
  scr_validate_proc();
  pthread_mutex_unlock(&P->lock);
  SCR_PC_ADD(parks, 1);
}

void _scr_arena_publish_figures(scr_arena *a, const struct scr_stats *st, const struct scr_stats *lent) {
  pthread_mutex_lock(&a->snap_lock);
  a->snap = *st;
  a->snap_lent = *lent;
  pthread_mutex_unlock(&a->snap_lock);
  atomic_store_explicit(&a->used_published, st->heap_used, memory_order_relaxed);
  a->ops_published = a->ops;
}

/* The figures of an arena whose holder keeps no block aside (parked,
 * borrowed, or its cache just flushed: holder.c publishes a held one). */
void _scr_arena_publish(scr_arena *a) {
  struct scr_stats st, lent;
#if SCR_DEBUG >= 2
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) scr_assert(a->tc[c].head == NULL);
#endif
  scr_heap_stats(a->heap, &st);
  memset(&lent, 0, sizeof lent);
  _scr_arena_publish_figures(a, &st, &lent);
}

/* The arena's ring and remote stack (remote.c pushes on them, the holder
 * drains them: its owner at its ticks and before it takes a new page, the
 * thread that claims it, a borrower, the discard helper). */
void _scr_remote_drain(scr_arena *a) {
  uint64_t h = a->ring_head, n = 0;
  void *p;
  while ((p = atomic_load_explicit(&a->ring[h & (SCR_REMOTE_RING - 1)], memory_order_acquire)) != NULL) {
    atomic_store_explicit(&a->ring[h & (SCR_REMOTE_RING - 1)], NULL, memory_order_relaxed);
    h++;
    proc_heap_free(a->heap, p);
    n++;
  }
  if (n) {
    a->ring_head = h;
    /* after the NULLs above: a pusher that reads the new limit writes
     * those slots after them */
    atomic_store_explicit(&a->ring_limit, h + SCR_REMOTE_RING, memory_order_release);
  }
  p = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
  while (p) {
    void *next = *(void **)p;
    __builtin_prefetch(next, 1); /* a line another thread wrote: fetched while p is freed */
    proc_heap_free(a->heap, p);
    n++;
    p = next;
  }
  if (n) atomic_store_explicit(&a->remote_drained, a->remote_drained + n, memory_order_relaxed);
}

/* In a fork's child, for an arena nobody else can hold there: a slot a
 * gone thread took and never stored would stop every later drain of the
 * ring; the ring is drained past such slots (counted as taken). */
void _scr_remote_after_fork_child(scr_arena *a) {
  uint64_t tail = atomic_load_explicit(&a->ring_tail, memory_order_relaxed);
  atomic_store_explicit(&a->remote_drained, a->remote_drained + (tail - a->ring_head), memory_order_relaxed);
  for (; a->ring_head < tail; a->ring_head++) {
    void *p = atomic_exchange_explicit(&a->ring[a->ring_head & (SCR_REMOTE_RING - 1)], NULL, memory_order_relaxed);
    if (p) proc_heap_free(a->heap, p);
  }
  atomic_store_explicit(&a->ring_limit, tail + SCR_REMOTE_RING, memory_order_relaxed);
}

size_t _scr_arena_give_back(scr_arena *a, uint64_t decay_ms) {
  _scr_remote_drain(a);
  size_t n = _scr_heap_trim_decayed(a->heap, decay_ms);
  size_t lazy = 0, inside = _scr_heap_return_interior(a->heap, &lazy); /* core/src/interior.c */
  SCR_PC_ADD(interior_bytes, inside);
  SCR_PC_ADD(interior_lazy_bytes, lazy);
  _scr_heap_relink_free(a->heap); /* the next mallocs ascend, as carving does */
  _scr_arena_publish(a);
  return n + inside;
}

/* Poison mode: every FREE page of every segment becomes PROT_NONE. */
static void proc_poison_pages(scr_arena *a, int accessible) {
  for (scr_segment *seg = a->heap->segments; seg; seg = seg->next) {
    if (seg->kind != SCR_SEG_NORMAL) continue;
    uint64_t m = seg->free_mask;
    while (m) {
      unsigned i = (unsigned)__builtin_ctzll(m);
      unsigned j = i;
      while (j < SCR_PAGES_PER_SEGMENT && ((m >> j) & 1)) j++;
      (void)_scr_proc_protect((uint8_t *)seg + ((size_t)i << SCR_PAGE_SHIFT), (size_t)(j - i) << SCR_PAGE_SHIFT,
                              accessible);
      m &= j >= 64 ? 0 : ~(((uint64_t)1 << j) - 1);
    }
  }
}

/* discard=poison (discard.c, after a discard) and back (whoever takes a
 * poisoned arena: claim, borrowers), so that tests see a use after
 * discard fault. */
void _scr_arena_poison(scr_arena *a) {
  proc_poison_pages(a, 0);
  a->poisoned = 1;
}

void _scr_arena_unpoison(scr_arena *a) {
  proc_poison_pages(a, 1);
  a->poisoned = 0;
}
