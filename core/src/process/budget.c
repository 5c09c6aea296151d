/* The process budget of free pages kept committed (retained and dirty) and of
 * cached large blocks: one for the process, shared by the threads holding
 * arenas, never below the arenas' retain_bytes.  It is retain_budget plus
 * retain_ratio percent of the bytes the arenas' live blocks' pages take
 * (busy_bytes) beyond retain_ratio_above (64 MiB: a smaller program
 * keeps what it kept before, python3 with PYTHONMALLOC=malloc peaked 10%
 * higher without it), as Go's scavenger works to a goal proportional to the
 * heap: a program that frees and allocates bursts as large as what it
 * keeps live reuses the freed pages without an madvise and a fault per
 * page (the RFC-shaped churn, 16 threads of 64 MiB bursts: 40,000
 * madvise calls and 4x glibc's time with a fixed 4 MiB budget; 1.16 M
 * faults with retain_ratio 100, 0.59 M with 200, as many as with no
 * bound at all), while a
 * small program keeps little, and the budget does not grow with the
 * number of threads.  arena_keep holds the fixed part's share (arena.c);
 * the holder adds the proportional part at its ticks
 * (_scr_arena_keep_update).
 * Layer: arenas (its bottom: the huge-block cache and the arenas read
 * it).  Owns _scr_proc.busy_bytes (each holder adds its own change) and
 * each arena's busy_published (its holder). */
#include "arenas.h"

/* The bytes a's live blocks' pages take as a's holder last published
 * them, summed over every arena in _scr_proc.busy_bytes: the holder adds
 * the change when it is 1 MiB or more (at ticks and snapshots), so the
 * sum is off by less than 1 MiB per arena. */
void _scr_arena_busy_publish(scr_arena *a, bool exact) {
  uint64_t busy = _scr_heap_busy_bytes(a->heap);
  uint64_t d = busy > a->busy_published ? busy - a->busy_published : a->busy_published - busy;
  if (d == 0 || (!exact && d < ((uint64_t)1 << 20))) return;
  atomic_fetch_add_explicit(&_scr_proc.busy_bytes, busy - a->busy_published, memory_order_relaxed); /* modulo 2^64 */
  a->busy_published = busy;
}

uint64_t _scr_proc_budget_ratio(void) {
  uint64_t busy = atomic_load_explicit(&_scr_proc.busy_bytes, memory_order_relaxed);
  uint64_t above = _scr_proc.opt.retain_ratio_above;
  if (busy >> 62) busy = 0; /* a transient negative sum while arenas publish */
  return busy > above ? (busy - above) / 100 * _scr_proc.opt.retain_ratio : 0;
}

uint64_t _scr_proc_budget(void) { return _scr_proc.opt.retain_budget + _scr_proc_budget_ratio(); }

/* The huge-block cache's part of it: the fixed part and a quarter of the
 * proportional one.  Resized cached blocks keep their tails (segment.c),
 * so more cached bytes mean fewer faults but a higher peak: the issue's
 * large-block program at one thread (proc_large_reuse 1 400, one run
 * each, glibc 1.49 s and 613 MB max RSS): a quarter 1.55 s and 537 MB, a
 * half 1.49 s and 625 MB, all of it 1.98 s and 744 MB (the peak's
 * growth cost more than the faults it saved), an eighth 1.95 s. */
uint64_t _scr_proc_budget_huge(void) { return _scr_proc.opt.retain_budget + _scr_proc_budget_ratio() / 4; }
