/* Benchmark workload: the threaded stress.  Threads hand blocks to each
 * other through a shared array (each swaps a fresh block for a random
 * slot's and frees what it got, usually another thread's block), with a
 * cookie checked before every free.  Plain malloc/free: run it with each
 * allocator LD_PRELOADed.  Usage: proc_xthread [threads] [ops per thread] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 4096
static _Atomic(void *) slots[SLOTS];
static _Atomic unsigned long bad;
static unsigned long ops = 400000;

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static size_t pick(uint64_t *s) {
  uint64_t r = next(s) % 1000;
  if (r < 850) return 16 + next(s) % 112;
  if (r < 990) return 128 + next(s) % 4000;
  return 4096 + next(s) % 60000;
}

static void *make(size_t n) {
  unsigned char *p = malloc(n);
  if (!p) abort();
  memcpy(p, &n, sizeof n);
  p[n - 1] = (unsigned char)n;
  return p;
}

static void check_free(void *q) {
  if (!q) return;
  unsigned char *p = q;
  size_t n;
  memcpy(&n, p, sizeof n);
  if (p[n - 1] != (unsigned char)n) atomic_fetch_add(&bad, 1);
  free(p);
}

static void *worker(void *arg) {
  uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  void *local[32] = {0};
  for (unsigned long i = 0; i < ops; i++) {
    /* mostly thread-local churn, one in four through the shared array */
    if (next(&s) % 4) {
      unsigned k = (unsigned)(next(&s) % 32);
      check_free(local[k]);
      local[k] = make(pick(&s));
    } else {
      void *old = atomic_exchange(&slots[next(&s) % SLOTS], make(pick(&s)));
      check_free(old);
    }
  }
  for (int k = 0; k < 32; k++) check_free(local[k]);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 8;
  if (argc > 2) ops = strtoul(argv[2], NULL, 10);
  pthread_t *t = calloc((size_t)threads, sizeof *t);
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < SLOTS; i++) check_free(atomic_exchange(&slots[i], NULL));
  free(t);
  if (atomic_load(&bad)) {
    fprintf(stderr, "proc_xthread: %lu bad cookies\n", atomic_load(&bad));
    return 1;
  }
  return 0;
}
