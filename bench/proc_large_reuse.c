/* Large blocks replaced at random (issue #29's large-block reuse): each
 * thread keeps up to 20 live blocks of 1-32 MiB, zero-filled when they are
 * allocated (malloc and memset, so every page is touched under every
 * allocator), and each step frees one at random and allocates another;
 * every fourth step also allocates a small block (16-512 B) that replaces
 * one of 64 kept small blocks.  An allocator that maps and unmaps each
 * large block pays a fault per page every step; one that reuses freed
 * large blocks does not.
 *
 *     proc_large_reuse [threads] [steps per thread] [live blocks per thread] [min MiB] [max MiB] */
#include <pthread.h>

#include "suite_prog.h"

#define MAX_THREADS 256
#define MAX_LIVE 1024
static long steps = 200, live = 20;
static size_t lo = (size_t)1 << 20, hi = (size_t)32 << 20;
static unsigned long bad;
/* Through a pointer the compiler cannot see through: malloc followed by
 * memset(0) would otherwise become calloc, which may skip the writes. */
static void *(*volatile zero_fill)(void *, int, size_t) = memset;

static void *run(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  unsigned char *big[MAX_LIVE] = {0}, *small[64] = {0};
  size_t size[MAX_LIVE] = {0};
  unsigned long wrong = 0;
  for (long k = 0; k < steps; k++) {
    long i = (long)(rnd(&s) % (uint64_t)live);
    if (big[i]) {
      wrong += big[i][0] != 0 || big[i][size[i] / 2] != 0 || big[i][size[i] - 1] != stamp_tag(size[i]);
      free(big[i]);
    }
    size[i] = rnd_in(&s, lo, hi + 1);
    big[i] = must(malloc(size[i]));
    zero_fill(big[i], 0, size[i]);
    big[i][size[i] - 1] = stamp_tag(size[i]);
    if (k % 4 == 0) {
      unsigned char **sl = &small[rnd(&s) % 64];
      free(*sl);
      size_t sz = rnd_in(&s, 16, 513);
      *sl = must(malloc(sz));
      memset(*sl, 1, sz);
    }
  }
  for (long i = 0; i < live; i++) free(big[i]);
  for (int i = 0; i < 64; i++) free(small[i]);
  __atomic_fetch_add(&bad, wrong, __ATOMIC_RELAXED);
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[threads] [steps per thread] [live blocks per thread] [min MiB] [max MiB]";
  int threads = (int)arg_num(argc, argv, 1, 1, 1, MAX_THREADS, "threads");
  steps = arg_num(argc, argv, 2, 200, 1, 1000000000, "steps per thread");
  live = arg_num(argc, argv, 3, 20, 1, MAX_LIVE, "live blocks per thread");
  lo = (size_t)arg_num(argc, argv, 4, 1, 1, 4096, "min MiB") << 20;
  hi = (size_t)arg_num(argc, argv, 5, 32, 1, 4096, "max MiB") << 20;
  if (hi < lo) {
    fprintf(stderr, "%s: max MiB is below min MiB\n", argv[0]);
    return 2;
  }
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  printf("large_reuse threads=%d steps=%ld bad=%lu\n", threads, (long)threads * steps, bad);
  return bad != 0;
}
