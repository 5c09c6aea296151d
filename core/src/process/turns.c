/* Threads that take turns: a thread that has blocked often (voluntary
 * context switches, from getrusage) while holding its arena keeps no block
 * above turns_cache_max in its cache from then on, until it exits.
 *
 * Why: the thread's cache keeps blocks, and their pages, in use for the
 * thread's next mallocs; a thread that waits most of the time (Python's
 * threads waiting for the GIL, workers waiting for work) keeps them while
 * the thread that runs grows into fresh memory.  Big blocks are where that
 * costs most and the cache saves least: their own writes cost more than
 * the trip through their page.  Threads that do not block, like the
 * threaded stress's (20 voluntary switches over 8 threads a run, against
 * the Python workload's 170 over 4 and, switching every 0.2 ms, 2800),
 * keep the whole cache, which saves them page faults.
 *
 * The look costs a getrusage call (130 ns here).  The first comes after
 * SCR_TURNS_CHECK_EVERY heap calls, and each look that does not find the
 * thread taking turns doubles the wait for the next, up to
 * SCR_TURNS_CHECK_MAX calls: a thread that blocks from its start is
 * found as early as before, one that starts later within that many calls,
 * and a busy thread that never blocks looks a few dozen times instead of
 * every 1024 calls (python3 with PYTHONMALLOC=malloc made 9,769 getrusage
 * calls a run, 1.3 ms of its 115, 2,440 by each of its four threads). */
#include "process.h"
#include <sys/resource.h>

/* The calling thread's voluntary context switches (times it blocked). */
uint64_t _scr_turns_voluntary_switches(void) {
  SCR_PC_ADD(turn_looks, 1);
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  return (uint64_t)ru.ru_nvcsw;
}

/* The holder, at claim (its cache was set from the options). */
void _scr_turns_on_claim(scr_arena *a) {
  a->takes_turns = 0;
  a->turns_wait = SCR_TURNS_CHECK_EVERY;
  a->turns_next = a->ops + SCR_TURNS_CHECK_EVERY;
  a->blocks_at_claim = _scr_proc.opt.turns_after ? _scr_turns_voluntary_switches() : 0;
}

/* The holder, at a tick (outside heap calls) once a->turns_next is
 * reached.  Alone (no other thread holds an arena) it takes turns with
 * nobody: a single-threaded program that waits for input keeps its cache
 * (that look needs no system call, and the wait does not grow). */
void _scr_turns_check(scr_arena *a) {
  uint64_t after = _scr_proc.opt.turns_after;
  if (after != 0 && atomic_load_explicit(&_scr_proc.owned_hint, memory_order_relaxed) >= 2) {
    if (_scr_turns_voluntary_switches() - a->blocks_at_claim >= after) {
      a->takes_turns = 1;
      _scr_recycle_limit(a, _scr_proc.opt.turns_cache_max);
      SCR_PC_ADD(turn_takers, 1);
      return;
    }
    if (a->turns_wait < SCR_TURNS_CHECK_MAX) a->turns_wait *= 2;
  }
  a->turns_next = a->ops + a->turns_wait;
}
