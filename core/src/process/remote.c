/* Remote frees: a block freed by a thread that does not hold its arena is
 * pushed on the arena's lock-free stack (linked through the block's first
 * word) and freed into the heap by whoever holds the arena next: its owner
 * on its next allocation, the thread that claims it, or the discard
 * helper.  Pushers never pop, and the holder takes the whole stack at
 * once, so there is no ABA problem. */
#include "process.h"

#define SCR_REMOTE_DRAIN_BATCH 256 /* a power of 2 */

void _scr_remote_push(scr_arena *a, void *p) {
  void *head = atomic_load_explicit(&a->remote, memory_order_relaxed);
  do {
    *(void **)p = head;
  } while (!atomic_compare_exchange_weak_explicit(&a->remote, &head, p, memory_order_release,
                                                  memory_order_relaxed));
  uint64_t n = atomic_fetch_add_explicit(&a->remote_pushed, 1, memory_order_relaxed) + 1;
  /* Nobody holds a parked arena: every SCR_REMOTE_DRAIN_BATCH pushes, ask
   * the helper to free the blocks into it so their pages can go back (a
   * request per push would keep the helper and the pushers ping-ponging
   * on its lock).  What stays below a batch goes at the next claim or
   * discard. */
  if (SCR_UNLIKELY((n & (SCR_REMOTE_DRAIN_BATCH - 1)) == 0) &&
      atomic_load_explicit(&a->parked_hint, memory_order_relaxed) &&
      !atomic_exchange_explicit(&a->drain_req, 1, memory_order_relaxed))
    _scr_helper_post();
}

void _scr_remote_drain(scr_arena *a) {
  void *p = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
  while (p) {
    void *next = *(void **)p;
    scr_heap_free(a->heap, p);
    a->remote_drained++;
    p = next;
  }
}

/* Helper: borrow each parked arena that has remote frees waiting, free
 * them into its heap (the heap gives emptied pages back by its retention
 * rules), and park it again where it was.  1 if any was drained. */
int _scr_remote_drain_parked(void) {
  scr_proc *P = &_scr_proc;
  int any = 0;
  for (;;) {
    scr_arena *a, *prev = NULL;
    pthread_mutex_lock(&P->lock);
    for (a = P->parked; a; prev = a, a = a->next_parked)
      if (atomic_load_explicit(&a->drain_req, memory_order_relaxed)) break;
    if (a == NULL) {
      pthread_mutex_unlock(&P->lock);
      return any;
    }
    if (prev) prev->next_parked = a->next_parked; else P->parked = a->next_parked;
    a->state = SCR_ARENA_DISCARDING;
    atomic_store_explicit(&a->parked_hint, 0, memory_order_relaxed);
    P->nparked--;
    pthread_mutex_unlock(&P->lock);

    atomic_store_explicit(&a->drain_req, 0, memory_order_relaxed);
    if (a->poisoned) _scr_discard_unpoison(a);
    _scr_remote_drain(a);
    _scr_arena_publish(a);
    SCR_PC_ADD(parked_drains, 1);
    any = 1;

    pthread_mutex_lock(&P->lock);
    a->state = SCR_ARENA_PARKED;
    atomic_store_explicit(&a->parked_hint, 1, memory_order_relaxed);
    if (prev && prev->state == SCR_ARENA_PARKED) {
      a->next_parked = prev->next_parked;
      prev->next_parked = a;
    } else {
      a->next_parked = P->parked;
      P->parked = a;
    }
    P->nparked++;
    pthread_mutex_unlock(&P->lock);
  }
}
