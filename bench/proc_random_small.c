/* Breadth suite: threads that allocate and free small blocks at random,
 * sharing nothing.  Each thread has its own table of slots; a step picks a
 * slot at random and frees its block if it holds one, or allocates a new
 * one (8-256 B, mostly under 64 B) if it is empty, so about half the
 * slots are live.  With one thread: the single-threaded random pattern;
 * with 0 threads: one thread per online CPU.
 *
 *     proc_random_small [threads, 0 = one per CPU] [steps per thread] [slots] */
#include <pthread.h>
#include <unistd.h>

#include "suite_prog.h"

#define MAX_THREADS 1024
static long steps = 10000000, slots = 8192;
static unsigned long bad;

static void *run(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  unsigned char **table = must(calloc((size_t)slots, sizeof *table));
  unsigned long wrong = 0;
  for (long k = 0; k < steps; k++) {
    unsigned char **slot = &table[rnd(&s) % (uint64_t)slots];
    if (*slot) {
      size_t sz = stamped_size(*slot);
      wrong += sz < 8 || sz > 256 || !stamp_ok(*slot, sz);
      free(*slot);
      *slot = NULL;
    } else {
      size_t sz = rnd(&s) % 4 ? rnd_in(&s, 8, 64) : rnd_in(&s, 64, 257);
      *slot = must(malloc(sz));
      stamp(*slot, sz);
    }
  }
  for (long i = 0; i < slots; i++) free(table[i]);
  free(table);
  __atomic_fetch_add(&bad, wrong, __ATOMIC_RELAXED);
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[threads, 0 = one per CPU] [steps per thread] [slots]";
  long threads = arg_num(argc, argv, 1, 1, 0, MAX_THREADS, "threads");
  steps = arg_num(argc, argv, 2, 10000000, 1, 1000000000000L, "steps per thread");
  slots = arg_num(argc, argv, 3, 8192, 1, 100000000, "slots");
  if (threads == 0) threads = sysconf(_SC_NPROCESSORS_ONLN) > 0 ? sysconf(_SC_NPROCESSORS_ONLN) : 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  if (threads == 1) {
    run((void *)1);
  } else {
    pthread_t t[MAX_THREADS];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, (void *)(uintptr_t)(i + 1));
    for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
  }
  printf("random_small threads=%ld steps=%ld bad=%lu\n", threads, threads * steps, bad);
  return bad != 0;
}
