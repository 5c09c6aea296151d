/* Delayed discard of parked arenas, by the helper thread (helper.c).
 * An arena parked at thread exit keeps its free pages for the next
 * thread; once it has stayed parked for the decay delay (decay.c), the
 * helper borrows it, frees what other threads pushed on it, trims its
 * heap and parks it again at the cold end of the parked list, one arena
 * at a time.  The trim counts as the decay's (refaults included: one
 * clock, one back-off).  SCRALLOC_DISCARD=0 keeps everything; =poison
 * also makes the returned pages PROT_NONE until the arena is claimed
 * again, so that tests see a use after discard fault.
 * Layer: arenas (above arena.c: it borrows, trims and parks arenas
 * again).  Owns each arena's discarded flag. */
#include "arenas.h"

#define SCR_HELPER_RELOOK_MS 10 /* while an arena is borrowed; borrows last microseconds */

/* The caller holds the arena (BORROWED, or PARKED under the lock);
 * decay_ms: the decay's delay, or 0 for scr_trim's (no refaults). */
size_t _scr_discard_arena(scr_arena *a, uint64_t decay_ms) {
  size_t n = _scr_arena_give_back(a, decay_ms);
  SCR_PC_ADD(discards, 1);
  SCR_PC_ADD(discard_bytes, n);
  return n;
}

/* Oldest parked arena not yet discarded, under the lock. */
static scr_arena *proc_oldest_undiscarded(scr_arena **prev_out) {
  scr_arena *best = NULL, *best_prev = NULL, *prev = NULL;
  for (scr_arena *a = _scr_proc.parked; a; prev = a, a = a->next_parked) {
    if (!a->discarded) {
      best = a;
      best_prev = prev;
    }
  }
  *prev_out = best_prev;
  return best;
}

bool _scr_discard_step(uint64_t now, uint64_t *wait_until) {
  scr_proc *P = &_scr_proc;
  scr_arena *a = NULL, *prev = NULL;
  pthread_mutex_lock(&P->lock);
  if (P->opt.discard) {
    a = proc_oldest_undiscarded(&prev);
    if (a) {
      uint64_t due = a->parked_ns + _scr_decay_delay_ms() * 1000000u;
      if (now >= due) {
        _scr_arena_borrow_locked(a, prev); /* parked again below, at the cold end */
      } else {
        if (due < *wait_until) *wait_until = due;
        a = NULL;
      }
    }
    /* An arena borrowed by a freeing thread is off the parked
     * list, due or not, and its return wakes nobody (a wake per drain
     * would cost the freeing thread a syscall): look again soon. */
    unsigned borrowed = P->narenas - P->nowned - P->nparked;
    uint64_t relook = now + SCR_HELPER_RELOOK_MS * 1000000u;
    if (a == NULL && borrowed > 0 && *wait_until > relook) *wait_until = relook;
  }
  int poison = P->opt.discard == 2;
  pthread_mutex_unlock(&P->lock);
  if (a == NULL) return false;

  _scr_discard_arena(a, _scr_decay_delay_ms());
  if (poison) _scr_arena_poison(a);
  pthread_mutex_lock(&P->lock);
  a->state = SCR_ARENA_PARKED;
  _scr_arena_set_parked(a, 1);
  a->discarded = 1;
  /* Cold end of the parked list: claims prefer arenas still warm. */
  scr_arena **tail = &P->parked;
  while (*tail) tail = &(*tail)->next_parked;
  *tail = a;
  P->nparked++;
  pthread_mutex_unlock(&P->lock);
  return true;
}
