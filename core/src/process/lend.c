/* Lending: a thread about to carve fresh memory for a size class takes
 * free slots of that class from a parked arena instead, a list's worth at
 * a time, into its cache.
 *
 * Why: when threads finish at different times, a finished thread's arena
 * waits parked with the slots its thread freed (half its live set, in the
 * churn benchmark) while the threads still running grow into fresh pages.
 * A slot taken here costs no fault and no new page.  The blocks stay blocks of the parked
 * arena: freed, they go back to it on its remote stack (the caches do not
 * keep a parked arena's blocks).
 *
 * The parked arena is borrowed (off the parked list while its heap is
 * used, arena.c) under the process lock, so this runs only when the
 * room hint says a parked arena has room, and a thread that found nothing
 * waits SCR_LEND_BACKOFF heap calls before it looks again.
 *
 * Layer: caches.  Owns the holder's lend_after; the parked arena it
 * borrows is arena.c's (borrow, unborrow). */
#include "caches.h"

#define SCR_LEND_BACKOFF 256                     /* heap calls after a look that found nothing */

/* Slots of class c in h not in live blocks (those never carved included:
 * a bound). */
static uint64_t lend_slots(const scr_heap *h, unsigned c) {
  uint64_t per_page = (uint64_t)_scr_class_span(c) * SCR_PAGE_SIZE / _scr_class_sizes[c];
  uint64_t slots = h->class_pages[c] * per_page;
  return slots > h->class_live[c] ? slots - h->class_live[c] : 0;
}

/* a's list of class c is empty, its own page has no free slot, and a
 * parked arena has room (_scr_lend_refill): fill the list from the parked
 * arena with the most slots of the class; one block, or NULL. */
void *_scr_lend_refill_slow(scr_arena *a, unsigned c) {
  scr_proc *P = &_scr_proc;
  if (!P->opt.lend) return NULL;
  scr_recycled *r = &a->rc[c];
  uint32_t want = r->max;
  if (want == 0) return NULL; /* the class skips the cache */
  scr_arena *b = NULL, *b_prev = NULL, *prev = NULL;
  uint64_t best = 0;
  pthread_mutex_lock(&P->lock);
  for (scr_arena *x = P->parked; x; prev = x, x = x->next_parked) {
    uint64_t s = lend_slots(x->heap, c);
    if (s > best) best = s, b = x, b_prev = prev;
  }
  if (b != NULL && best >= want) _scr_arena_borrow_locked(b, b_prev);
  else b = NULL;
  pthread_mutex_unlock(&P->lock);
  if (b == NULL) {
    a->lend_after = a->ops + SCR_LEND_BACKOFF;
    return NULL;
  }
  if (b->poisoned) _scr_arena_unpoison(b);
  _scr_remote_drain(b);
  /* Slots on the pages' free lists only: carving would be fresh memory
   * in the lender as much as in the borrower. */
  scr_heap *h = b->heap;
  void *first = NULL;
  uint32_t k = 0;
  for (scr_page *pg = h->queue[c]; pg && k < want; pg = pg->next) {
    while (pg->free && k < want) {
      void *p = _scr_page_alloc(h, pg);
      if (first == NULL) first = p;
      else _scr_recycle_push(r, c, p);
      k++;
    }
  }
  _scr_arena_publish(b);
  _scr_arena_unborrow(b, b_prev);
  if (first == NULL) a->lend_after = a->ops + SCR_LEND_BACKOFF;
  else SCR_PC_ADD(lends, 1);
  return first;
}
