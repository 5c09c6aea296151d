/* A program that frees most of its memory and goes idle: it allocates
 * `total` MiB in blocks of 64 B-512 KiB (log-uniform), touching each
 * page, frees all but one block in `keep` at random, and then makes no
 * allocator call at all while it sleeps `wait` ms, reading its RSS every
 * 250 ms.  What an allocator gives back without a call from the program.
 * With `busy` 1 it does not sleep but mallocs and frees one 32-byte block
 * after another meanwhile: what it gives back while the program runs on
 * with small blocks only (its cache's blocks of the other sizes unused).
 *
 *     proc_idle [total MiB] [keep one in] [wait ms] [busy 0|1]
 *
 * It prints "idle live_kib=N rss_base_kib=N rss_freed_kib=N work_ms=F
 * rss_<t>ms_kib=N..." (live: the bytes of the blocks kept; base: RSS
 * before the first block; freed: right after the frees; work: the
 * allocations and frees; then RSS at each 250 ms step). */
#include "suite_prog.h"
#include <math.h>

int main(int argc, char **argv) {
  prog_usage = "[total MiB] [keep one in] [wait ms] [busy 0|1]";
  long total = arg_num(argc, argv, 1, 256, 1, 1 << 20, "total MiB");
  long keep = arg_num(argc, argv, 2, 10, 1, 1000000, "keep one in");
  long wait = arg_num(argc, argv, 3, 2000, 0, 3600000, "wait ms");
  long busy = arg_num(argc, argv, 4, 0, 0, 1, "busy");
  size_t cap = 1 << 16, n = 0, bytes = 0, live = 0;
  unsigned char **b = must(malloc(cap * sizeof *b));
  size_t *sz = must(malloc(cap * sizeof *sz));
  long base = rss_kib();
  double t0 = now_s();
  uint64_t s = 42;
  double lmin = log(64.0), lspan = log(512.0 * 1024) - lmin;
  while (bytes < (size_t)total << 20) {
    if (n == cap) {
      cap *= 2;
      b = must(realloc(b, cap * sizeof *b));
      sz = must(realloc(sz, cap * sizeof *sz));
    }
    double u = (double)(rnd(&s) >> 11) / (double)(1ull << 53);
    sz[n] = (size_t)exp(lmin + u * lspan);
    b[n] = must(malloc(sz[n]));
    for (size_t i = 0; i < sz[n]; i += 4096) b[n][i] = 1;
    b[n][sz[n] - 1] = 1;
    bytes += sz[n++];
  }
  for (size_t i = 0; i < n; i++) {
    if (rnd(&s) % (uint64_t)keep == 0) live += sz[i];
    else {
      free(b[i]);
      b[i] = NULL;
    }
  }
  double work = (now_s() - t0) * 1e3;
  printf("idle live_kib=%zu rss_base_kib=%ld rss_freed_kib=%ld work_ms=%.1f", live / 1024, base, rss_kib(), work);
  for (long t = 250; t <= wait; t += 250) {
    struct timespec ts = {0, 250 * 1000000L};
    if (!busy) nanosleep(&ts, NULL);
    for (double until = now_s() + 0.25; busy && now_s() < until;)
      for (int k = 0; k < 1000; k++) {
        unsigned char *volatile q = must(malloc(32));
        q[31] = (unsigned char)k;
        free(q);
      }
    printf(" rss_%ldms_kib=%ld", t, rss_kib());
  }
  printf("\n");
  for (size_t i = 0; i < n; i++) free(b[i]);
  free(b);
  free(sz);
  return 0;
}
