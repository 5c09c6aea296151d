/* Threads that take turns: a thread holding its arena that spends most
 * of its time away from the allocator (waiting for others) keeps no block
 * above turns_cache_max in its cache from then on, until it exits.
 *
 * Why: the thread's cache keeps blocks, and their pages, in use for the
 * thread's next mallocs; a thread that waits most of the time (Python's
 * threads waiting for the GIL, workers waiting for work) keeps them while
 * the thread that runs grows into fresh memory.  Big blocks are where that
 * costs most and the cache saves least: their own writes cost more than
 * the trip through their page.  Busy threads, like the threaded stress's,
 * keep the whole cache, which saves them page faults.
 *
 * How it is found, without a system call: every SCR_TURNS_CHECK_EVERY
 * heap calls the holder reads a monotonic clock (the vDSO's: some 20 ns,
 * no kernel entry).  A window of that many heap calls that took more than
 * SCR_TURNS_IDLE_NS a call on average (20 ms for 1024 calls, where a busy
 * thread takes well under one, and a thread that the scheduler shares a
 * CPU with eight others a few) is idle: the thread waited in between.
 * After turns_after idle windows it takes turns.  (It asked getrusage for
 * the thread's voluntary context switches before, 130 ns a look, from
 * inside malloc.)  A thread that allocates rarely because it computes
 * between its calls counts as idle too; its cache saves it little. */
#include "process.h"

/* The holder, at claim (its cache was set from the options). */
void _scr_turns_on_claim(scr_arena *a) {
  a->takes_turns = 0;
  a->turns_idle = 0;
  a->turns_next = a->ops + SCR_TURNS_CHECK_EVERY;
  a->turns_window_ns = _scr_proc.opt.turns_after ? _scr_proc_now_ns() : 0;
}

/* The holder, at a tick (outside heap calls) once a->turns_next is
 * reached.  Alone (no other thread holds an arena) it takes turns with
 * nobody: a single-threaded program that waits for input keeps its cache
 * (that look needs no clock). */
void _scr_turns_check(scr_arena *a) {
  uint64_t after = _scr_proc.opt.turns_after;
  uint64_t calls = a->ops - (a->turns_next - SCR_TURNS_CHECK_EVERY);
  a->turns_next = a->ops + SCR_TURNS_CHECK_EVERY;
  if (after == 0 || atomic_load_explicit(&_scr_proc.owned_hint, memory_order_relaxed) < 2) {
    a->turns_window_ns = 0; /* the next window starts at the next look */
    return;
  }
  SCR_PC_ADD(turn_looks, 1);
  uint64_t now = _scr_proc_now_ns();
  uint64_t began = a->turns_window_ns;
  a->turns_window_ns = now;
  if (began == 0 || now - began <= calls * SCR_TURNS_IDLE_NS) return;
  if (++a->turns_idle < after) return;
  a->takes_turns = 1;
  _scr_recycle_limit(a, _scr_proc.opt.turns_cache_max);
  SCR_PC_ADD(turn_takers, 1);
}
