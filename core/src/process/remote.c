/* Remote frees: a block freed by a thread that does not hold its arena is
 * pushed on the arena's lock-free stack (linked through the block's first
 * word; a thread that holds an arena batches them per destination, below)
 * and freed into the heap by whoever holds the arena next: its owner
 * at its next tick or before it takes a new page (malloc.c), the
 * thread that claims it, or the discard helper.  Pushers never pop, and
 * the holder takes the whole stack at once, so there is no ABA problem.
 * Layer: caches (its bottom): the pushing side, the holder's batch and
 * the blocks that go home from the caches (pool.c, recycle.c); the
 * arena's side, its stack's drain, is arena.c's.  Owns each arena's
 * batch (rb_*, its holder) and remote_sent (its holder), and drain_req
 * (pushers of a parked arena). */
#include "caches.h"

#define SCR_REMOTE_DRAIN_BATCH 256 /* a power of 2 */
static void proc_borrow_and_drain(scr_arena *a);

/* Pushes the list first..last on a's stack in one CAS. */
static void remote_push_list(scr_arena *a, void *first, void *last) {
  void *head = atomic_load_explicit(&a->remote, memory_order_relaxed);
  do {
    *(void **)last = head;
  } while (!atomic_compare_exchange_weak_explicit(&a->remote, &head, first, memory_order_release,
                                                  memory_order_relaxed));
}

void _scr_remote_flush_slow(scr_arena *me) {
  remote_push_list(me->rb_dest, me->rb_head, me->rb_tail);
  me->rb_head = me->rb_tail = NULL;
  me->rb_n = 0;
}

/* A thread that holds an arena batches its frees of another arena's
 * blocks: SCR_REMOTE_BATCH of them (or those before a block of another
 * arena comes) go in one CAS on the owner's stack, instead of one CAS each
 * on a line that every pusher to that arena and the owner's drain keep
 * taking from each other.  The holder also pushes its batch at each tick
 * (every SCR_ARENA_POLL_EVERY heap calls), when it parks and at trim, so
 * that a batch does not wait for long on a thread that stopped freeing.
 * A parked arena's blocks go at once: the pusher drains those (below). */
void _scr_remote_push(scr_arena *a, void *p) {
  /* free (core/src/misuse.c): the key marks it in a batch and on the stack
   * alike, so that a second free of it is found; a large block ignores it */
  _scr_block_set_word1(p, _scr_misuse.key);
  scr_arena *me = _scr_tl.arena;
  uint64_t n;
  if (SCR_LIKELY(me != NULL)) {
    n = ++me->remote_sent; /* counted by the pusher: no atomic on the line every pusher writes */
    if (SCR_LIKELY(!_scr_arena_parked(a))) {
      if (me->rb_dest != a) {
        _scr_remote_flush(me);
        me->rb_dest = a;
      }
      if (me->rb_head == NULL) me->rb_tail = p;
      *(void **)p = me->rb_head;
      me->rb_head = p;
      if (++me->rb_n >= SCR_REMOTE_BATCH) _scr_remote_flush_slow(me);
      return;
    }
  } else {
    n = atomic_fetch_add_explicit(&_scr_pc.remote_sent_unowned, 1, memory_order_relaxed) + 1;
  }
  remote_push_list(a, p, p);
  /* Nobody holds a parked arena: every SCR_REMOTE_DRAIN_BATCH pushes of a
   * thread that land on one, it frees what waits there so that the pages
   * can go back.  What
   * stays below a batch goes at the next claim or discard. */
  if (SCR_UNLIKELY((n & (SCR_REMOTE_DRAIN_BATCH - 1)) == 0) &&
      _scr_arena_parked(a) &&
      !atomic_exchange_explicit(&a->drain_req, 1, memory_order_acquire))
    proc_borrow_and_drain(a);
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
  if (b == NULL) { /* claimed or discarding meanwhile */
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

/* A kept block p of class c goes back: into a's heap when it is a's (a
 * may be NULL), else onto its owner's remote stack. */
void _scr_remote_send_home(scr_arena *a, unsigned c, void *p) {
  SCR_UNPOISON(p, _scr_class_sizes[c]);
  scr_heap *h = _scr_heap_of(p);
  if (a != NULL && h == a->heap) proc_heap_free(h, p);
  else _scr_remote_push((scr_arena *)_scr_heap_owner(h), p);
}

/* The blocks of a list linked through their first words go back. */
void _scr_remote_send_list_home(scr_arena *a, unsigned c, void *p) {
  while (p) {
    SCR_UNPOISON(p, sizeof(void *));
    void *next = *(void **)p;
    _scr_remote_send_home(a, c, p);
    p = next;
  }
}

