/* Remote frees: a block freed by a thread that does not hold its arena is
 * pushed on the arena's lock-free stack (linked through the block's first
 * word) and freed into the heap by whoever holds the arena next: its owner
 * on its next allocation, the thread that claims it, or the discard
 * helper.  Pushers never pop, and the holder takes the whole stack at
 * once, so there is no ABA problem. */
#include "process.h"

void _scr_remote_push(scr_arena *a, void *p) {
  void *head = atomic_load_explicit(&a->remote, memory_order_relaxed);
  do {
    *(void **)p = head;
  } while (!atomic_compare_exchange_weak_explicit(&a->remote, &head, p, memory_order_release,
                                                  memory_order_relaxed));
  atomic_fetch_add_explicit(&a->remote_pushed, 1, memory_order_relaxed);
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
