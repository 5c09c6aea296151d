/* The shared arena: threads that do not run at the same time use one arena.
 *
 * The thread that makes the process's first allocation (the main thread,
 * as a rule) holds an arena of its own.  A thread after it starts on the
 * shared arena: each of its calls takes the arena's lock (a try),
 * holds the arena for the call (_scr_tl_arena points to it meanwhile, so
 * the call runs the same code as a thread's own arena's) and lets it go.
 * The thread claims an arena of its own, for good, once it has found the
 * lock taken share_contended times within SHARE_LOOK_EVERY calls
 * (another thread allocates at the same moments: the lock is contended)
 * or has made share_hot calls without blocking (a busy thread, whose
 * calls are worth the lock-free path); the times before, it waits for
 * the lock.  When the last thread on it leaves or exits, the shared
 * arena is parked like any thread's.
 *
 * Why not leave at the first collision: threads that take turns still
 * meet now and then.  Python's threads allocate without the GIL as they
 * start and end (their thread state), and one of them meeting the thread
 * that runs made it leave, in 5 runs out of 8 of bench/proc_py.py 4 9:
 * an arena more, and 11.5-12.4k page faults instead of 9.5-10.1k (glibc
 * 9.1k); waiting, 8 runs out of 8 kept their three arenas (9.3-10.2k).
 * Threads that run at once meet within their first calls.
 *
 * Why: threads that take turns (Python's under the GIL, workers waiting on
 * a queue) each grow an arena to their own peak when each has one, and
 * the pages one of them frees wait while the one that runs faults in
 * others.  On one arena they reuse each other's memory.  python3 with
 * pymalloc, 4 threads (bench/proc_py.py 4 3), 40 paired runs: page faults
 * 10.2k -> 8.1k (glibc 8.4k), max RSS 36.2 -> 35.0 MiB (glibc 35.6); its
 * malloc calls replayed (bench/malloc_replay.c): 6.2k -> 3.8k faults.
 * The threaded stress and the churn, whose threads run at once, find the
 * lock taken within their first calls.  The first thread stays off it:
 * it is the one that frees what finished threads left, and on the shared
 * arena the churn's RSS 1.5 s after those frees was 10.2 MiB, not 2.3.
 *
 * Invariants: share_arena (under share_lock) is NULL or OWNED with
 * shared set; share_members counts the threads with _scr_tl_share ==
 * SHARE_MEMBER that have not exited (joins under share_lock, leaves with
 * or without it); when it drops to 0, the thread that dropped it parks
 * share_arena, unless a thread joined again before it took the lock.
 *
 * Layer: entry (its bottom): which arena a call runs on, above the
 * caches' layer because parking or trimming the shared arena flushes the
 * cache its members filled (holder.c).  Owns share_arena, share_members,
 * the share lock and the threads' _scr_tl_share (state.c stores it). */
#include "entry.h"

enum { SHARE_NEW = 0, SHARE_MEMBER = 1 }; /* and SCR_SHARE_SOLO */
#define SHARE_LOOK_EVERY 256 /* calls between looks at the clock (a power of 2) */
#define SHARE_QUIET_NS 1000000u /* wall time of SHARE_LOOK_EVERY calls of a thread that did not block */

__thread int _scr_tl_share __attribute__((tls_model("initial-exec")));
static __thread uint64_t tl_calls __attribute__((tls_model("initial-exec")));
static __thread uint64_t tl_quiet_calls __attribute__((tls_model("initial-exec")));
static __thread uint64_t tl_window_ns __attribute__((tls_model("initial-exec"))); /* when the window of calls began */
static __thread uint64_t tl_collisions __attribute__((tls_model("initial-exec"))); /* since the last look */

/* share_lock: a word, taken with one compare-and-swap and let go with an
 * exchange, because every call of a thread on the shared arena takes and
 * drops it.  bench/proc_xthread 1 2000000 with its thread kept on the
 * shared arena (SCRALLOC_SHARE_HOT=1e11), 15 paired rounds: 188 ms with
 * pthread_mutex_trylock and _unlock (a fifth of the samples), 163 ms with
 * a flag, 79 ms on the thread's own arena (the atomic is most of the
 * difference left).  A thread that must wait for it (a collision below
 * share_contended, parking, trim, fork) sleeps on a futex and the holder
 * wakes it: 0 free, 1 taken, 2 taken and a thread may sleep on it.  (It
 * spun with sched_yield before: a waiter whose holder was off the CPU
 * burned its own time slice in system calls.) */
static _Atomic int share_lock;
static bool share_trylock(void) {
  int free_ = 0;
  return atomic_compare_exchange_strong_explicit(&share_lock, &free_, 1, memory_order_acquire, memory_order_relaxed);
}
static void share_lock_wait(void) {
  if (share_trylock()) return;
  while (atomic_exchange_explicit(&share_lock, 2, memory_order_acquire) != 0) _scr_proc_futex_wait(&share_lock, 2);
}
static void share_unlock(void) {
  if (atomic_exchange_explicit(&share_lock, 0, memory_order_release) == 2) _scr_proc_futex_wake(&share_lock, 1);
}
static scr_arena *share_arena;
static _Atomic unsigned share_members;
static pthread_key_t share_key;
static pthread_once_t share_key_once = PTHREAD_ONCE_INIT;

/* The calling thread is off the shared arena for good: 1 when it was the
 * last thread on it. */
static int share_drop_member(void) {
  int last = 0;
  if (_scr_tl_share == SHARE_MEMBER) {
    pthread_setspecific(share_key, NULL);
    SCR_PC_ADD(share_leaves, 1);
    last = atomic_fetch_sub_explicit(&share_members, 1, memory_order_relaxed) == 1;
  }
  _scr_tl_share = SCR_SHARE_SOLO;
  return last;
}

/* Under share_lock: the shared arena when nobody is on it (taken off:
 * the caller parks it once the lock is let go, as parking may start the
 * helper thread, whose creation allocates), else NULL. */
static scr_arena *share_idle_locked(void) {
  scr_arena *idle = NULL;
  if (atomic_load_explicit(&share_members, memory_order_relaxed) == 0) {
    idle = share_arena;
    share_arena = NULL;
  }
  return idle;
}

static void share_unlock_and_park(scr_arena *idle) {
  share_unlock();
  if (idle != NULL) _scr_holder_park(idle);
}

/* Off the shared arena without holding its lock (another thread holds
 * it: waiting for it here could mean waiting for a thread the scheduler
 * has put aside); the last one off takes the lock to park the arena. */
static void share_leave_unlocked(void) {
  if (!share_drop_member()) return;
  share_lock_wait();
  share_unlock_and_park(share_idle_locked());
}

static void share_thread_exit(void *arg) {
  (void)arg;
  share_leave_unlocked();
}

static void share_key_create(void) {
  if (pthread_key_create(&share_key, share_thread_exit) != 0)
    _scr_report(SCR_ENOMEM, "no pthread key: the shared arena will not be parked when its threads exit");
}

/* The shared arena, held by the caller until _scr_share_leave; NULL when
 * the caller is to claim its own (the lock was taken share_contended
 * times since the last look, or no arena). */
scr_arena *_scr_share_enter(void) {
  if (!share_trylock()) {
    SCR_PC_ADD(share_collisions, 1);
    if (++tl_collisions >= _scr_proc.opt.share_contended) {
      share_leave_unlocked();
      return NULL;
    }
    share_lock_wait();
  }
  if (_scr_tl_share == SHARE_NEW) {
    pthread_once(&share_key_once, share_key_create);
    pthread_setspecific(share_key, &share_key); /* any non-NULL value: the exit hook runs */
    _scr_tl_share = SHARE_MEMBER;
    atomic_fetch_add_explicit(&share_members, 1, memory_order_relaxed);
    tl_window_ns = _scr_proc_now_ns();
    SCR_PC_ADD(share_joins, 1);
  }
  if (share_arena == NULL) share_arena = _scr_holder_claim(true);
  if (share_arena == NULL) { /* no memory for one: the thread tries a claim of its own */
    share_drop_member();
    share_unlock_and_park(share_idle_locked());
    return NULL;
  }
  _scr_tl_arena = share_arena;
  return share_arena;
}

/* After the call: every SHARE_LOOK_EVERY calls, a thread that has not
 * blocked for share_hot calls leaves, and the count of collisions starts
 * again.  "Has not blocked": its last SHARE_LOOK_EVERY calls took less
 * than SHARE_QUIET_NS of wall time (a monotonic clock, read through the
 * vDSO: no system call).  A window that spans a wait for a lock, a
 * condition or the GIL (milliseconds: Python switches every 5 ms) is
 * slower; a busy thread's 256 calls take microseconds, hundreds under a
 * sanitizer.  (It asked getrusage for the thread's voluntary context
 * switches before: a system call inside malloc every 256 calls.)  A busy
 * thread that the scheduler preempts in a window looks as if it had
 * blocked and stays a little longer; running at the same time as others,
 * it finds the lock taken and leaves by share_contended instead. */
void _scr_share_leave(void) {
  _scr_tl_arena = NULL;
  if ((++tl_calls & (SHARE_LOOK_EVERY - 1)) == 0) {
    uint64_t now = _scr_proc_now_ns();
    tl_quiet_calls = now - tl_window_ns < SHARE_QUIET_NS ? tl_quiet_calls + SHARE_LOOK_EVERY : 0;
    tl_window_ns = now;
    tl_collisions = 0;
    if (tl_quiet_calls >= _scr_proc.opt.share_hot) {
      share_unlock_and_park(share_drop_member() ? share_idle_locked() : NULL);
      return;
    }
  }
  share_unlock();
}

/* For scr_stats: a fresh snapshot of the shared arena, unless a thread is
 * on it this moment (its last snapshot then stands). */
void _scr_share_publish(void) {
  if (!share_trylock()) return;
  if (share_arena != NULL) {
    _scr_remote_poll(share_arena);
    _scr_holder_publish(share_arena);
  }
  share_unlock();
}

/* For scr_trim: what the shared arena can give back. */
size_t _scr_share_trim(void) {
  size_t n = 0;
  share_lock_wait();
  if (share_arena != NULL) n = _scr_holder_trim(share_arena);
  share_unlock();
  return n;
}

void _scr_share_lock(void) { share_lock_wait(); }
void _scr_share_unlock(void) { share_unlock(); }
