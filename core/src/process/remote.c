/* Remote frees: a block freed by a thread that does not hold its arena is
 * pushed on the arena's lock-free stack (linked through the block's first
 * word) and freed into the heap by whoever holds the arena next: its owner
 * on its next allocation, the thread that claims it, or the discard
 * helper.  Pushers never pop, and the holder takes the whole stack at
 * once, so there is no ABA problem. */
#include "process.h"

#define SCR_REMOTE_DRAIN_BATCH 256 /* a power of 2 */
static void proc_borrow_and_drain(scr_arena *a);

void _scr_remote_push(scr_arena *a, void *p) {
  _scr_block_set_word1(p, _scr_misuse.key); /* free (core/src/misuse.c); a large block ignores it */
  void *head = atomic_load_explicit(&a->remote, memory_order_relaxed);
  do {
    *(void **)p = head;
  } while (!atomic_compare_exchange_weak_explicit(&a->remote, &head, p, memory_order_release,
                                                  memory_order_relaxed));
  /* Counted by the pushing thread (its own arena, no atomic on the line
   * every pusher writes). */
  scr_arena *me = _scr_tl_arena;
  uint64_t n;
  if (SCR_LIKELY(me != NULL)) n = ++me->remote_sent;
  else n = atomic_fetch_add_explicit(&_scr_pc.remote_sent_unowned, 1, memory_order_relaxed) + 1;
  /* Nobody holds a parked arena: every SCR_REMOTE_DRAIN_BATCH pushes of a
   * thread that land on one, it frees what waits there so that the pages
   * can go back.  What
   * stays below a batch goes at the next claim or discard. */
  if (SCR_UNLIKELY((n & (SCR_REMOTE_DRAIN_BATCH - 1)) == 0) &&
      _scr_arena_parked(a) &&
      !atomic_exchange_explicit(&a->drain_req, 1, memory_order_acquire))
    proc_borrow_and_drain(a);
}

void _scr_remote_drain(scr_arena *a) {
  void *p = atomic_exchange_explicit(&a->remote, NULL, memory_order_acquire);
  while (p) {
    void *next = *(void **)p;
    __builtin_prefetch(next, 1); /* a line another thread wrote: fetched while p is freed */
    proc_heap_free(a->heap, p);
    a->remote_drained++;
    p = next;
  }
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

  if (a->poisoned) _scr_discard_unpoison(a);
  /* No other thread holds an arena (a program freeing what its finished
   * threads left): the pages this drain empties wait for the discard, as
   * parked arenas' free pages do, instead of going back now.  Nobody runs
   * who could want them, and a program that exits within the delay
   * returns nothing: the kernel frees them at exit for less than
   * MADV_DONTNEED costs page by page (the churn benchmark's last phase,
   * the main thread freeing 64 MiB of finished threads' blocks: 46-52 ->
   * 10-12 ms, the whole run 0.177 -> 0.170 s over 15 runs, tcmalloc 0.172).
   * While other threads hold arenas, the pages go back by the heap's caps
   * as before: those threads would fault fresh pages while these wait
   * (the threaded stress's end, 11.1 -> 12.9 MiB max RSS when every
   * drain held them).  Released at the next claim or by the discard. */
  if (!a->held && !a->discarded && _scr_proc_alone(_scr_tl_arena)) {
    _scr_heap_hold_empty_pages(a->heap);
    a->held = 1;
    SCR_PC_ADD(holds, 1);
  }
  _scr_remote_drain(a);
  _scr_arena_publish(a);
  SCR_PC_ADD(parked_drains, 1);
  _scr_arena_unborrow(a, prev);
}
