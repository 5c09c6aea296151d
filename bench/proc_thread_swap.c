/* Breadth suite: thousands of short-lived threads, one after another.
 * Each allocates a small object (32-128 B) that outlives it: it swaps the
 * object into a random slot of a shared table, frees the one an earlier
 * thread left there, and exits.
 *
 *     proc_thread_swap [threads] [slots] */
#include <pthread.h>

#include "suite_prog.h"

static unsigned char **table; /* slots, each NULL or a stamped block */
static long slots = 64;
static unsigned long bad;

static void *run(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  size_t sz = rnd_in(&s, 32, 129);
  unsigned char *mine = must(malloc(sz));
  stamp(mine, sz);
  unsigned char *old = __atomic_exchange_n(&table[rnd(&s) % (uint64_t)slots], mine, __ATOMIC_ACQ_REL);
  if (old) {
    size_t osz = stamped_size(old);
    if (osz < 32 || osz > 128 || !stamp_ok(old, osz)) __atomic_fetch_add(&bad, 1, __ATOMIC_RELAXED);
    free(old);
  }
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[threads] [slots]";
  long threads = arg_num(argc, argv, 1, 10000, 1, 100000000, "threads");
  slots = arg_num(argc, argv, 2, 64, 1, 1000000, "slots");
  table = must(calloc((size_t)slots, sizeof *table));
  for (long i = 0; i < threads; i++) {
    pthread_t t;
    if (pthread_create(&t, NULL, run, (void *)(uintptr_t)(i + 1)) != 0) return 3;
    pthread_join(t, NULL);
  }
  for (long i = 0; i < slots; i++) free(table[i]);
  free(table);
  printf("thread_swap threads=%ld bad=%lu\n", threads, bad);
  return bad != 0;
}
