/* Breadth suite: threads that allocate and free blocks of mixed sizes, in
 * phases, many of them freed by another thread.  In each phase every
 * thread allocates its blocks (70% 16-256 B, 25% 256 B-4 KiB, 5% 4-32 KiB);
 * after a barrier it frees the odd-numbered blocks of the next thread and
 * the even-numbered ones of its own (half its frees are remote); after a
 * second barrier the next phase begins.
 *
 *     proc_phases [threads] [phases] [blocks per thread and phase] */
#include <pthread.h>

#include "suite_prog.h"

#define MAX_THREADS 256
static int threads = 4;
static long phases = 300, per_phase = 2000;
static unsigned char **blocks[MAX_THREADS]; /* blocks[i][0..per_phase) */
static pthread_barrier_t allocated, freed;
static unsigned long bad;

static size_t pick(uint64_t *s) {
  uint64_t r = rnd(s) % 100;
  return r < 70 ? rnd_in(s, 16, 257) : r < 95 ? rnd_in(s, 257, 4097) : rnd_in(s, 4097, 32769);
}

static unsigned long release(unsigned char *p) {
  size_t sz = stamped_size(p);
  unsigned long wrong = sz < 16 || sz > 32768 || !stamp_ok(p, sz);
  free(p);
  return wrong;
}

static void *run(void *arg) {
  int id = (int)(uintptr_t)arg, next = (id + 1) % threads;
  uint64_t s = (uint64_t)id * 0x9e3779b97f4a7c15ull + 1;
  unsigned long wrong = 0;
  for (long ph = 0; ph < phases; ph++) {
    for (long k = 0; k < per_phase; k++) {
      size_t sz = pick(&s);
      blocks[id][k] = must(malloc(sz));
      stamp(blocks[id][k], sz);
    }
    pthread_barrier_wait(&allocated);
    for (long k = 0; k < per_phase; k++) wrong += release(k % 2 ? blocks[next][k] : blocks[id][k]);
    pthread_barrier_wait(&freed);
  }
  __atomic_fetch_add(&bad, wrong, __ATOMIC_RELAXED);
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[threads] [phases] [blocks per thread and phase]";
  threads = (int)arg_num(argc, argv, 1, 4, 1, MAX_THREADS, "threads");
  phases = arg_num(argc, argv, 2, 300, 1, 100000000, "phases");
  per_phase = arg_num(argc, argv, 3, 2000, 1, 10000000, "blocks per thread and phase");
  pthread_barrier_init(&allocated, NULL, (unsigned)threads);
  pthread_barrier_init(&freed, NULL, (unsigned)threads);
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < threads; i++) blocks[i] = must(malloc((size_t)per_phase * sizeof *blocks[i]));
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, (void *)(uintptr_t)i);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < threads; i++) free(blocks[i]);
  printf("phases blocks=%ld bad=%lu\n", (long)threads * phases * per_phase, bad);
  return bad != 0;
}
