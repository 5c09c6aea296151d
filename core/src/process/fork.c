/* The fork handlers.
 * Layer: entry (its top but override.c): they take every layer's locks,
 * top down in the lock order (process.h), across fork, and let them go
 * after, so that no layer below has to know about fork beyond its own
 * locks and its after-fork-in-the-child step.  Owns nothing.
 * The child has one thread.  The parent's lock and every snapshot lock
 * are held across fork so the child finds them consistent; arenas other
 * threads held stay theirs in the child (their heaps may be mid-call),
 * which only leaks them there.  The child's helper thread is gone. */
#include "entry.h"

static void proc_fork_prepare(void) {
  scr_proc *P = &_scr_proc;
  _scr_prof_lock(); /* (never taken inside the others) */
  pthread_mutex_lock(&P->lock);
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) pthread_mutex_lock(&a->snap_lock);
  _scr_pool_lock_all();
  pthread_mutex_lock(&P->decay_lock);
  _scr_huge_cache_lock();
  pthread_mutex_lock(&P->helper_lock);
}

static void proc_fork_parent(void) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_unlock(&P->helper_lock);
  _scr_huge_cache_unlock();
  pthread_mutex_unlock(&P->decay_lock);
  _scr_pool_unlock_all();
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) pthread_mutex_unlock(&a->snap_lock);
  pthread_mutex_unlock(&P->lock);
  _scr_prof_unlock();
}

static void proc_fork_child(void) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_unlock(&P->helper_lock);
  _scr_huge_cache_unlock();
  pthread_mutex_unlock(&P->decay_lock);
  /* An arena's heap lock is taken by its holder, by the helper's decay
   * (not under way: decay_lock) and by readers (stats, the profile's
   * blame), which change nothing: a lock a thread that is gone held is
   * made anew (those threads' own heaps stay theirs, as above). */
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) {
    pthread_mutex_init(&a->heap->lock, NULL);
    if (a->state == SCR_ARENA_PARKED || a == _scr_tl.arena) _scr_remote_after_fork_child(a);
  }
  _scr_pool_unlock_all();
  _scr_helper_after_fork_child();
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) pthread_mutex_unlock(&a->snap_lock);
  SCR_PC_ADD(forks, 1);
  pthread_mutex_unlock(&P->lock);
  _scr_prof_unlock();
}

/* pthread_atfork may allocate, so it runs here and not in the first
 * malloc. */
__attribute__((constructor)) static void scr_proc_constructor(void) {
  pthread_atfork(proc_fork_prepare, proc_fork_parent, proc_fork_child);
}
