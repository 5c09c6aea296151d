/* Micro-benchmark of the malloc/free fast paths, one thread: 32 live
 * blocks, each step frees a random one (checking the cookie its malloc
 * wrote: the size in the first word, a byte at the end) and mallocs a
 * block of a size drawn from one mix.  Plain malloc/free: run it with each
 * allocator LD_PRELOADed (bench/pairs_bench.py does, pinned to one CPU).
 * Prints nanoseconds per malloc/free pair: of the wall clock, or of the
 * thread's CPU time when PROC_PAIRS_CLOCK=cpu (on a machine shared with
 * other jobs, a pinned run's wall clock counts the time others ran on
 * its CPU; bench/pairs_bench.py --compare uses the CPU time).
 * Usage: proc_pairs MIX STEPS, MIX one of:
 *   64      every block 64 B
 *   small   16-127 B
 *   medium  128 B-4 KiB
 *   page    4-16 KiB
 *   large   16-64 KiB
 *   stress  the threaded stress's mix (85% 16-127 B, 14% 128 B-4 KiB,
 *           1% 4-64 KiB)
 *   runs    16-127 B in runs: 1,000 mallocs, then their 1,000 frees in
 *           the order they were made, over and over (a program building
 *           and dropping a container of small objects: Python's dicts
 *           with PYTHONMALLOC=malloc), past any thread cache's list
 *   aligned 16-127 B as `small`, each from aligned_alloc(64, n) (objects
 *           of a cache line's alignment: C++'s alignas(64), Rust's
 *           align(64))
 *   realloc 16-127 B as `small`, each step a realloc of a random live
 *           block to the next size (in place where it fits, else moved;
 *           its contents checked) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t draw(const char *mix, uint64_t *s) {
  if (strcmp(mix, "64") == 0) return 64;
  if (strcmp(mix, "small") == 0 || strcmp(mix, "runs") == 0 || strcmp(mix, "aligned") == 0 || strcmp(mix, "realloc") == 0)
    return 16 + next(s) % 112;
  if (strcmp(mix, "medium") == 0) return 128 + next(s) % 3968;
  if (strcmp(mix, "page") == 0) return 4096 + next(s) % 12288;
  if (strcmp(mix, "large") == 0) return 16384 + next(s) % 49152;
  uint64_t r = next(s) % 1000;
  if (r < 850) return 16 + next(s) % 112;
  if (r < 990) return 128 + next(s) % 4000;
  return 4096 + next(s) % 60000;
}

/* Each step frees a random one of 32 live blocks and mallocs the next
 * size in its place (aligned: with aligned_alloc(64, n); inlined where
 * it is called with a constant, so no mix times the test).  Bad cookies
 * are added to *bad. */
static inline __attribute__((always_inline)) void run_slots(const size_t *sizes, const unsigned *slots, long steps,
                                                            unsigned long *bad, bool aligned) {
  unsigned char *live[32] = {0};
  for (long i = 0; i < steps; i++) {
    unsigned char *q = live[slots[i]];
    if (q) {
      size_t m;
      memcpy(&m, q, sizeof m);
      *bad += q[m - 1] != (unsigned char)m || (aligned && ((uintptr_t)q & 63) != 0);
      free(q);
    }
    size_t n = sizes[i];
    unsigned char *p = aligned ? aligned_alloc(64, n) : malloc(n);
    if (!p) abort();
    memcpy(p, &n, sizeof n);
    p[n - 1] = (unsigned char)n;
    live[slots[i]] = p;
  }
  for (int k = 0; k < 32; k++) free(live[k]);
}

/* Each step reallocs a random one of 32 live blocks to the next size; the
 * size the block had stays in its first word (checked), its last byte is
 * stamped again. */
static void run_realloc(const size_t *sizes, const unsigned *slots, long steps, unsigned long *bad) {
  unsigned char *live[32] = {0};
  for (long i = 0; i < steps; i++) {
    unsigned char *q = live[slots[i]];
    size_t n = sizes[i], m = 0;
    if (q) memcpy(&m, q, sizeof m);
    unsigned char *p = realloc(q, n);
    if (!p) abort();
    if (q) *bad += memcmp(p, &m, sizeof m) != 0;
    memcpy(p, &n, sizeof n);
    p[n - 1] = (unsigned char)n;
    live[slots[i]] = p;
  }
  for (int k = 0; k < 32; k++) free(live[k]);
}

/* RUN mallocs, then their frees in the order they were made, until the
 * steps (a multiple of RUN) are done. */
enum { RUN = 1000 };
static void run_runs(const size_t *sizes, long steps, unsigned long *bad) {
  static unsigned char *run[RUN];
  for (long i = 0; i < steps; i += RUN) {
    for (int k = 0; k < RUN; k++) {
      size_t n = sizes[i + k];
      unsigned char *p = run[k] = malloc(n);
      if (!p) abort();
      memcpy(p, &n, sizeof n);
      p[n - 1] = (unsigned char)n;
    }
    for (int k = 0; k < RUN; k++) {
      size_t m;
      memcpy(&m, run[k], sizeof m);
      *bad += run[k][m - 1] != (unsigned char)m;
      free(run[k]);
    }
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: proc_pairs 64|small|medium|page|large|stress|runs|aligned|realloc STEPS\n");
    return 2;
  }
  const char *mix = argv[1];
  long steps = atol(argv[2]);
  static const char *const mixes[] = {"64", "small", "medium", "page", "large", "stress", "runs", "aligned", "realloc"};
  int known = 0;
  for (unsigned k = 0; k < sizeof mixes / sizeof *mixes; k++) known |= strcmp(mix, mixes[k]) == 0;
  bool runs = strcmp(mix, "runs") == 0;
  if (runs) steps -= steps % RUN;
  if (!known || steps < 1) {
    fprintf(stderr, "proc_pairs: unknown mix '%s' or too few steps\n", mix);
    return 2;
  }
  uint64_t s = 88172645463325252ull;
  /* the sizes first, so that drawing them is not timed */
  size_t *sizes = malloc((size_t)steps * sizeof *sizes);
  unsigned *slots = malloc((size_t)steps * sizeof *slots);
  if (!sizes || !slots) return 1;
  for (long i = 0; i < steps; i++) sizes[i] = draw(mix, &s), slots[i] = (unsigned)(next(&s) % 32);
  unsigned long bad = 0;
  const char *clk = getenv("PROC_PAIRS_CLOCK");
  clockid_t id = clk != NULL && strcmp(clk, "cpu") == 0 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
  struct timespec t0, t1;
  clock_gettime(id, &t0);
  if (runs) run_runs(sizes, steps, &bad);
  else if (strcmp(mix, "aligned") == 0) run_slots(sizes, slots, steps, &bad, true);
  else if (strcmp(mix, "realloc") == 0) run_realloc(sizes, slots, steps, &bad);
  else run_slots(sizes, slots, steps, &bad, false);
  clock_gettime(id, &t1);
  free(sizes);
  free(slots);
  if (bad) {
    fprintf(stderr, "proc_pairs: %lu bad cookies\n", bad);
    return 1;
  }
  printf("%.2f\n", ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / (double)steps);
  return 0;
}
