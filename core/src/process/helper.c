/* The helper thread: the one clock of the return policy (decay.c: free
 * pages of every arena and cached huge blocks unused past the decay
 * delay go back) and the discard of parked arenas past their delay
 * (discard.c).  Started by the first post; it blocks every signal and
 * never allocates.
 * Layer: arenas (its top: it runs the two above).  Owns
 * _scr_proc.helper_state and helper_kick (under helper_lock, a leaf) and
 * the thread.  Those who have work for it post (_scr_helper_post): the
 * holder's tick and park (holder.c), outside heap calls and locks. */
#include "arenas.h"
#include <signal.h>
#include <time.h>

/* The helper waits on the monotonic clock, the one its deadlines are
 * read on (the condition is made before the helper starts). */
static void helper_cv_init(void) {
  pthread_condattr_t at;
  pthread_condattr_init(&at);
  pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
  pthread_cond_init(&_scr_proc.helper_cv, &at);
  pthread_condattr_destroy(&at);
}

static void *proc_helper_main(void *arg) {
  scr_proc *P = &_scr_proc;
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&P->helper_lock);
    P->helper_kick = 0;
    pthread_mutex_unlock(&P->helper_lock);
    atomic_store_explicit(&P->helper_wake_ns, 0, memory_order_relaxed);

    uint64_t now = _scr_proc_now_ns();
    pthread_mutex_lock(&P->decay_lock);
    uint64_t wait_until = _scr_decay_step(now);
    pthread_mutex_unlock(&P->decay_lock);
    if (_scr_discard_step(now, &wait_until)) continue; /* one at a time, then look again */

    atomic_store_explicit(&P->helper_wake_ns, wait_until, memory_order_relaxed);
    pthread_mutex_lock(&P->helper_lock);
    if (!P->helper_kick) {
      if (wait_until == UINT64_MAX) pthread_cond_wait(&P->helper_cv, &P->helper_lock);
      else {
        struct timespec ts = {(time_t)(wait_until / 1000000000u), (long)(wait_until % 1000000000u)};
        pthread_cond_timedwait(&P->helper_cv, &P->helper_lock, &ts);
      }
    }
    pthread_mutex_unlock(&P->helper_lock);
  }
  return NULL;
}

/* Wake the helper, starting it the first time.  Never called inside a heap
 * call or with a lock held: pthread_create allocates. */
void _scr_helper_post(void) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_lock(&P->helper_lock);
  if (P->helper_state == 2) { /* a forked child: no helper thread */
    pthread_mutex_unlock(&P->helper_lock);
    return;
  }
  if (P->helper_state != 0) {
    P->helper_kick = 1;
    pthread_cond_signal(&P->helper_cv);
    pthread_mutex_unlock(&P->helper_lock);
    return;
  }
  P->helper_state = 1;
  helper_cv_init(); /* nobody waits on it or signals it yet */
  pthread_mutex_unlock(&P->helper_lock);

  pthread_attr_t attr;
  pthread_t t;
  sigset_t all, old;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, (size_t)256 << 10);
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t, &attr, proc_helper_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    pthread_mutex_lock(&P->helper_lock);
    P->helper_state = 0;
    pthread_mutex_unlock(&P->helper_lock);
  }
}

void _scr_helper_after_fork_child(void) {
  scr_proc *P = &_scr_proc;
  helper_cv_init();
  /* Starting threads in the child of a multi-threaded fork is unsafe, so
   * the child runs without a helper: parked arenas keep their pages
   * (exec starts afresh). */
  P->helper_state = 2;
  P->helper_kick = 0;
}
