/* The process allocator's validator: the arena lists against their
 * counts and states.  Debug builds (SCR_DEBUG >= 3) run it at every claim
 * and park; scr_process_validate() runs it on demand.
 *   length(all) == narenas, ids 0 .. narenas-1 each once
 *   every arena on parked is PARKED (its parked flag set), length == nparked
 *   nowned == arenas OWNED;  nowned + nparked <= narenas (the rest are
 *   BORROWED: by the helper or a freeing thread)
 *   every arena's list of tag SCR_TAG_OTHER is empty with no room
 * Layer: arenas (below arena.c, which runs it at its state changes): it
 * reads the arena lists only, under _scr_proc.lock, and owns nothing. */
#include "arenas.h"

/* Under _scr_proc.lock.  true when consistent; reports what is not. */
bool _scr_proc_validate_locked(void) {
  const scr_proc *P = &_scr_proc;
  unsigned n = 0, owned = 0, parked = 0;
  uint64_t seen[4] = {0}; /* ids below 256 */
  for (const scr_arena *a = atomic_load_explicit(&P->all, memory_order_acquire); a; a = a->next_all) {
    n++;
    if (a->id >= P->narenas) SCR_VALIDATE_FAIL("arena id %u out of range (%u arenas)", a->id, P->narenas);
    if (a->id < 256) {
      if ((seen[a->id / 64] >> (a->id % 64)) & 1) SCR_VALIDATE_FAIL("arena id %u twice", a->id);
      seen[a->id / 64] |= (uint64_t)1 << (a->id % 64);
    }
    if (a->state == SCR_ARENA_OWNED) owned++;
    else if (a->state != SCR_ARENA_PARKED && a->state != SCR_ARENA_BORROWED)
      SCR_VALIDATE_FAIL("arena %u in state %u", a->id, a->state);
    if (a->tc[SCR_TAG_OTHER].head != NULL || a->tc[SCR_TAG_OTHER].room != 0)
      SCR_VALIDATE_FAIL("arena %u: the list of blocks of no size class is not empty and full", a->id);
    if (_scr_heap_owner(a->heap) != a) SCR_VALIDATE_FAIL("arena %u: its heap names another owner", a->id);
  }
  for (const scr_arena *a = P->parked; a; a = a->next_parked) {
    if (++parked > n) SCR_VALIDATE_FAIL("parked list has a cycle");
    if (a->state != SCR_ARENA_PARKED || !_scr_arena_parked(a))
      SCR_VALIDATE_FAIL("arena %u on the parked list but not parked", a->id);
  }
  if (n != P->narenas || parked != P->nparked || owned != P->nowned || owned + parked > n)
    SCR_VALIDATE_FAIL("arena counts: %u listed / %u, %u parked / %u, %u owned / %u", n, P->narenas, parked,
                      P->nparked, owned, P->nowned);
  return true;
}

int scr_process_validate(void) {
  _scr_proc_init();
  pthread_mutex_lock(&_scr_proc.lock);
  bool ok = _scr_proc_validate_locked();
  pthread_mutex_unlock(&_scr_proc.lock);
  return ok ? SCR_OK : SCR_EINVAL;
}
