/* The seed's reproducer as a benchmark: n alloc/free pairs of one size,
 * with scralloc heaps (retain = 0 without a purge delay, the seed's
 * free-on-empty, and retain = 1) beside glibc, jemalloc, mimalloc
 * and tcmalloc (loaded with dlopen, when installed) on the same loop, in
 * one process.  Rounds are interleaved; the table gives medians.
 *
 *   bench_pairs [n] [rounds]        (defaults 200000, 7) */
#include "scralloc.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);

typedef struct {
  const char *name;
  malloc_fn m;
  free_fn f;
} peer;

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double run_peer(const peer *p, size_t size, long n) {
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    void *b = p->m(size);
    *(volatile char *)b = (char)i;
    p->f(b);
  }
  return (now_ns() - t0) / (double)n;
}

static double run_heap(unsigned retain, size_t size, long n, struct scr_stats *st) {
  scr_options o;
  scr_options_init(&o);
  o.retain = retain;
  if (retain == 0) o.purge_delay_ms = 0; /* the seed's free-on-empty (the delay would keep the page) */
  scr_heap *h = scr_heap_new(&o);
  double t0 = now_ns();
  for (long i = 0; i < n; i++) {
    void *b = scr_heap_malloc(h, size);
    *(volatile char *)b = (char)i;
    scr_heap_free(h, b);
  }
  double ns = (now_ns() - t0) / (double)n;
  scr_heap_stats(h, st);
  scr_heap_destroy(h);
  return ns;
}

static int load_peer(peer *p, const char *name, const char *lib) {
  void *dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!dl) {
    (void)dlerror();
    return 0;
  }
  p->name = name;
  p->m = (malloc_fn)(uintptr_t)dlsym(dl, "malloc");
  p->f = (free_fn)(uintptr_t)dlsym(dl, "free");
  return p->m && p->f;
}

/* A peer that cannot be dlopen'ed (jemalloc needs static TLS) runs in a
 * child with LD_PRELOAD: the child's own malloc is then that allocator. */
static double child_peer_median(const char *self, const char *lib, size_t size, long n, int rounds) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s %s --system %zu %ld %d", lib, self, size, n, rounds);
  FILE *f = popen(cmd, "r");
  double ns = -1;
  if (f) {
    if (fscanf(f, "%lf", &ns) != 1) ns = -1;
    pclose(f);
  }
  return ns;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--system") == 0) { /* child: time this process's malloc */
    peer sys = {"system", malloc, free};
    int rounds = atoi(argv[4]);
    if (rounds > 31) rounds = 31;
    double t[31];
    for (int r = 0; r < rounds; r++) t[r] = run_peer(&sys, (size_t)atol(argv[2]), atol(argv[3]));
    printf("%.3f\n", median(t, rounds));
    return 0;
  }
  long n = argc > 1 ? atol(argv[1]) : 200000;
  int rounds = argc > 2 ? atoi(argv[2]) : 7;
  if (rounds > 31) rounds = 31;
  peer peers[5];
  int npeers = 0;
  peers[npeers++] = (peer){"glibc", malloc, free};
  int jemalloc_in_child = 0;
  if (load_peer(&peers[npeers], "jemalloc", "libjemalloc.so.2")) npeers++;
  else jemalloc_in_child = 1;
  if (load_peer(&peers[npeers], "mimalloc", "libmimalloc.so.2")) npeers++;
  if (load_peer(&peers[npeers], "tcmalloc", "libtcmalloc_minimal.so.4")) npeers++;
  size_t sizes[] = {64, 4096};
  printf("%ld alloc/free pairs, median of %d interleaved rounds\n\n", n, rounds);
  printf("| size | allocator | mmap | munmap | madvise | ns/pair | vs glibc | end state |\n");
  printf("|---|---|---:|---:|---:|---:|---:|---|\n");
  for (int s = 0; s < 2; s++) {
    double t_heap[2][31], t_peer[5][31];
    struct scr_stats st[2];
    for (int r = 0; r < rounds; r++) {
      for (unsigned retain = 0; retain < 2; retain++)
        t_heap[retain][r] = run_heap(retain, sizes[s], retain ? n : n / 10 + 1, &st[retain]);
      for (int p = 0; p < npeers; p++) t_peer[p][r] = run_peer(&peers[p], sizes[s], n);
    }
    double glibc = median(t_peer[0], rounds);
    for (unsigned retain = 0; retain < 2; retain++) {
      double t = median(t_heap[retain], rounds);
      long pairs = retain ? n : n / 10 + 1;
      /* retain = 0 runs n/10 pairs (each costs syscalls); counts scaled to n */
      double scale = (double)n / (double)pairs;
      printf("| %zu B | scralloc retain=%u%s | %.0f | %.0f | %.0f | %.1f | %.2fx | Mmaps=%llu Bytes=%llu |\n", sizes[s],
             retain, retain ? "" : ", purge_delay_ms=0", (double)st[retain].mmap_calls * scale, (double)st[retain].munmap_calls * scale,
             (double)st[retain].madvise_calls * scale, t, t / glibc, (unsigned long long)st[retain].mmaps,
             (unsigned long long)st[retain].bytes);
    }
    for (int p = 0; p < npeers; p++) {
      double t = median(t_peer[p], rounds);
      printf("| %zu B | %s | - | - | - | %.1f | %.2fx | |\n", sizes[s], peers[p].name, t, t / glibc);
    }
    if (jemalloc_in_child) {
      char self[512];
      ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
      self[len > 0 ? len : 0] = '\0';
      double t = len > 0 ? child_peer_median(self, "libjemalloc.so.2", sizes[s], n, rounds) : -1;
      if (t > 0) printf("| %zu B | jemalloc (LD_PRELOAD child) | - | - | - | %.1f | %.2fx | |\n", sizes[s], t, t / glibc);
    }
  }
  printf("\n(retain=0 runs n/10 pairs, its syscall counts are scaled to n; peers' syscalls are not counted here)\n");
  return 0;
}
