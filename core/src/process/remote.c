/* Remote frees: a block that goes home to an arena its freeing thread
 * does not hold takes a slot of the arena's ring (process.h says how),
 * or, when the ring is full, is pushed on its lock-free stack (linked
 * through the block's first word), and is freed into the heap by
 * whoever holds the arena next: its owner at its next tick or before it
 * takes a new page (malloc.c), the thread that claims it, or the discard
 * helper.  Pushers never pop, and the holder takes the whole stack at
 * once, so there is no ABA problem.  A list of blocks that leaves a
 * thread's cache or the pool goes home grouped by owner, one CAS per
 * owner on its stack.
 * Layer: caches (its bottom): the pushing side and the blocks that go
 * home from the caches (pool.c, tcache.c); the arena's side, the drain,
 * is arena.c's.  Owns ring_tail, remote_pushed and drain_req (the
 * pushers'). */
#include "caches.h"

#define SCR_REMOTE_DRAIN_BATCH 256 /* a power of 2 */
#define SCR_REMOTE_GROUPS 4        /* owners a list going home is sorted into at once */
static void proc_borrow_and_drain(scr_arena *a);

/* a's ring has just filled, or the pushes on its stack have just passed
 * a multiple of SCR_REMOTE_DRAIN_BATCH.  Nobody holds a parked arena: the
 * pusher frees what waits there so that the pages can go back.  What
 * stays below that goes at the next claim or discard. */
static void remote_parked_due(scr_arena *a) {
  if (_scr_arena_parked(a) && !atomic_exchange_explicit(&a->drain_req, 1, memory_order_acquire))
    proc_borrow_and_drain(a);
}

/* Pushes the list first..last, n blocks marked free, on a's stack in one
 * CAS, and counts them there (the line the CAS holds). */
static void remote_push_list(scr_arena *a, void *first, void *last, unsigned n) {
  void *head = atomic_load_explicit(&a->remote, memory_order_relaxed);
  do {
    *(void **)last = head;
  } while (!atomic_compare_exchange_weak_explicit(&a->remote, &head, first, memory_order_release,
                                                  memory_order_relaxed));
  uint64_t sent = atomic_fetch_add_explicit(&a->remote_pushed, n, memory_order_relaxed) + n;
  if (SCR_UNLIKELY(sent % SCR_REMOTE_DRAIN_BATCH < n)) remote_parked_due(a);
}

/* A single block: into a slot of the ring while it has one, else on the
 * stack. */
void _scr_remote_push(scr_arena *a, void *p) {
  /* the caller's claim marked it free (the key: a second free of it is
   * found while it waits) */
  scr_assert(_scr_block_word1(p) == _scr_misuse.key);
  uint64_t t = atomic_load_explicit(&a->ring_tail, memory_order_relaxed), lim;
  while (t < (lim = atomic_load_explicit(&a->ring_limit, memory_order_acquire))) {
    if (atomic_compare_exchange_weak_explicit(&a->ring_tail, &t, t + 1, memory_order_relaxed, memory_order_relaxed)) {
      atomic_store_explicit(&a->ring[t & (SCR_REMOTE_RING - 1)], p, memory_order_release);
      if (SCR_UNLIKELY(t + 1 == lim)) remote_parked_due(a); /* the ring is full: nobody drains a parked one */
      return;
    }
  }
  remote_push_list(a, p, p, 1);
}

/* The pusher borrows a parked arena that has a batch of remote frees
 * waiting, frees them into its heap (which gives emptied pages back by its
 * retention rules) and parks it again in its place.  Done by the pusher,
 * once per SCR_REMOTE_DRAIN_BATCH pushes: handing it to the helper thread
 * costs a wake-up per batch and leaves the memory held until the helper
 * runs, which a program that frees and exits never sees. */
static void proc_borrow_and_drain(scr_arena *a) {
  scr_proc *P = &_scr_proc;
  scr_arena *b, *prev = NULL;
  pthread_mutex_lock(&P->lock);
  for (b = P->parked; b && b != a; prev = b, b = b->next_parked) {
  }
  if (b == NULL) { /* claimed or borrowed meanwhile */
    pthread_mutex_unlock(&P->lock);
    atomic_store_explicit(&a->drain_req, 0, memory_order_relaxed);
    return;
  }
  _scr_arena_borrow_locked(a, prev);
  pthread_mutex_unlock(&P->lock);

  if (a->poisoned) _scr_arena_unpoison(a);
  _scr_remote_drain(a);
  _scr_arena_publish(a);
  SCR_PC_ADD(parked_drains, 1);
  _scr_arena_unborrow(a, prev);
}

/* The blocks of class c of a list linked through their first words go
 * home: a's own (a may be NULL) into its heap, the others onto their
 * owners' stacks, gathered by owner so that each owner's share of the
 * list takes one CAS (SCR_REMOTE_GROUPS owners at a time: a block of one
 * more pushes the first group gathered). */
void _scr_remote_send_list_home(scr_arena *a, unsigned c, void *p) {
  struct {
    scr_arena *to;
    void *first, *last;
    unsigned n;
  } g[SCR_REMOTE_GROUPS];
  unsigned ng = 0;
  uint64_t key = _scr_misuse.key;
  while (p) {
    SCR_UNPOISON(p, _scr_class_sizes[c]);
    void *next = *(void **)p;
    scr_heap *h = _scr_heap_of(p);
    if (a != NULL && h == a->heap) {
      proc_heap_free(h, p);
    } else {
      scr_arena *to = (scr_arena *)_scr_heap_owner(h);
      _scr_block_set_word1(p, key); /* free, as _scr_remote_push marks it */
      unsigned i = 0;
      while (i < ng && g[i].to != to) i++;
      if (i == ng) { /* a new owner: a group of its own, the first one's place when all are taken */
        if (ng == SCR_REMOTE_GROUPS) {
          remote_push_list(g[0].to, g[0].first, g[0].last, g[0].n);
          i = 0;
        } else {
          ng++;
        }
        g[i].to = to;
        g[i].first = NULL;
        g[i].last = p;
        g[i].n = 0;
      }
      *(void **)p = g[i].first;
      g[i].first = p;
      g[i].n++;
    }
    p = next;
  }
  for (unsigned i = 0; i < ng; i++) remote_push_list(g[i].to, g[i].first, g[i].last, g[i].n);
}
