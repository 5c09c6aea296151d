/* Benchmark workload of the glibc RFC's shape ("malloc: madvise interior
 * free chunks above a threshold", ../shared/seeds/002): threads build a
 * long-lived index gradually while they allocate and free bursts of
 * short-lived blocks, so that index blocks end up in the same pages as the
 * bursts' blocks.  What it measures is how much memory an allocator still
 * holds once the bursts are gone, after malloc_trim(0), after the index
 * is freed, and a while later.
 *
 *     proc_rfc_churn [threads] [index MiB per thread] [bursts] [burst MiB] [wait ms]
 *                    [index block min] [index block max]
 *
 * Defaults 16 16 10 64 1000 64 1024 (the RFC's figures).  Each thread:
 *   for each burst: allocate burst MiB of blocks (40% 64-512 B, 30%
 *   512 B-4 KiB, 20% 4-32 KiB, 10% 32-120 KiB), every block touched once
 *   per 4 KiB page, with index blocks (64 B-1 KiB by default) interleaved among them
 *   until the index holds its share (index MiB * (burst+1) / bursts);
 *   then free the burst in shuffled order.
 * The threads exit; the main thread reads its RSS (after_bursts), calls
 * malloc_trim(0) (whichever malloc_trim the preloaded allocator provides,
 * glibc's otherwise), reads RSS (after_trim), frees every index block,
 * reads RSS (after_index_free), sleeps wait ms, reads RSS (after_wait).
 * It prints one line for the harness (sizes in KiB, times in ms):
 *
 *   rfc_churn threads=16 ... live_kib=N rss_after_bursts_kib=N
 *     rss_after_trim_kib=N trim_ms=F rss_after_index_free_kib=N
 *     rss_after_wait_kib=N work_ms=F
 *
 * live_kib is what the program holds after the bursts: the index blocks'
 * requested sizes plus the pointer arrays.  work_ms is the threads' part
 * (create to join), the run time to compare; the wall of the whole
 * program adds the wait.  Only libc: run it with each allocator
 * LD_PRELOADed.
 *
 * RFC_CHURN_PROFILE=PREFIX, under scralloc with sampling on
 * (SCRALLOC_PROFILE_RATE): right after the bursts, before the trim,
 * scralloc's folded stacks, blame and top sites go to PREFIX.folded,
 * PREFIX.blame and PREFIX.top (docs/profile.md's worked example). */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "suite_prog.h"

/* Weak: a libc without malloc_trim (musl) leaves it NULL. */
extern int malloc_trim(size_t pad) __attribute__((weak));

#define MAX_THREADS 1024

static int threads = 16, bursts = 10;
static size_t index_per_thread = (size_t)16 << 20, burst_bytes = (size_t)64 << 20;
static long wait_ms = 1000;
static size_t index_min = 64, index_max = 1024;

struct index {      /* one thread's long-lived index, freed by main */
  void **blocks;    /* blocks[0..n) */
  size_t n, cap;
  size_t bytes;     /* sum of the requested sizes */
};
static struct index indexes[MAX_THREADS];

static size_t burst_size(uint64_t *s) {
  uint64_t r = rnd(s) % 100;
  if (r < 40) return 64 + rnd(s) % (512 - 64);
  if (r < 70) return 512 + rnd(s) % (4096 - 512);
  if (r < 90) return 4096 + rnd(s) % (32768 - 4096);
  return 32768 + rnd(s) % (122880 - 32768);
}

/* Writes once per 4 KiB so that every page of the block is resident. */
static void touch(char *p, size_t n) {
  for (size_t i = 0; i < n; i += 4096) p[i] = 1;
  p[n - 1] = 1;
}

/* Not inlined: the profile's worked example (docs/profile.md) names the
 * index's allocation site by this function. */
__attribute__((noinline)) static void index_add(struct index *ix, uint64_t *s) {
  if (ix->n == ix->cap) {
    ix->cap = ix->cap ? ix->cap * 2 : 1024;
    ix->blocks = must(realloc(ix->blocks, ix->cap * sizeof *ix->blocks));
  }
  size_t sz = index_min + rnd(s) % (index_max - index_min + 1);
  char *p = must(malloc(sz));
  memset(p, 0x5a, sz);
  ix->blocks[ix->n++] = p;
  ix->bytes += sz;
}

static void *worker(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  uint64_t s = id * 0x9e3779b97f4a7c15ull + 1;
  struct index *ix = &indexes[id];
  size_t cap = 4096, n;
  void **burst = must(malloc(cap * sizeof *burst));
  for (int b = 0; b < bursts; b++) {
    size_t share = index_per_thread / (size_t)bursts * (size_t)(b + 1), start = ix->bytes, done = 0;
    for (n = 0; done < burst_bytes; n++) {
      if (n == cap) burst = must(realloc(burst, (cap *= 2) * sizeof *burst));
      size_t sz = burst_size(&s);
      burst[n] = must(malloc(sz));
      touch(burst[n], sz);
      done += sz;
      /* the index grows in step with the burst: its share by the burst's end */
      size_t due = start + (share - start) * (done < burst_bytes ? done : burst_bytes) / burst_bytes;
      while (ix->bytes < due) index_add(ix, &s);
    }
    while (ix->bytes < share) index_add(ix, &s);
    for (size_t i = n; i > 1; i--) { /* Fisher-Yates: free in shuffled order */
      size_t j = rnd(&s) % i;
      void *t = burst[i - 1];
      burst[i - 1] = burst[j];
      burst[j] = t;
    }
    for (size_t i = 0; i < n; i++) free(burst[i]);
  }
  free(burst);
  return NULL;
}

static double now_ms(void) { return now_s() * 1e3; }

/* RFC_CHURN_PROFILE: scr_profile_write of the preloaded scralloc, found
 * at run time (this program links nothing but libc); formats as in
 * scralloc.h (SCR_PROFILE_FOLDED 1, BLAME 3, TOP 4). */
static void write_profile(void) {
  const char *prefix = getenv("RFC_CHURN_PROFILE");
  if (prefix == NULL || prefix[0] == '\0') return;
  int (*w)(const void *, const char *, unsigned) =
      (int (*)(const void *, const char *, unsigned))dlsym(RTLD_DEFAULT, "scr_profile_write");
  if (w == NULL) {
    fprintf(stderr, "proc_rfc_churn: RFC_CHURN_PROFILE needs scralloc preloaded\n");
    return;
  }
  static const struct { const char *suffix; unsigned format; } files[] = {{".folded", 1}, {".blame", 3}, {".top", 4}};
  for (int i = 0; i < 3; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", prefix, files[i].suffix);
    if (w(NULL, path, files[i].format) != 0) fprintf(stderr, "proc_rfc_churn: cannot write %s\n", path);
  }
}

int main(int argc, char **argv) {
  prog_usage = "[threads] [index MiB per thread] [bursts] [burst MiB] [wait ms] [index block min] [index block max]";
  threads = (int)arg_num(argc, argv, 1, 16, 1, MAX_THREADS, "threads");
  index_per_thread = (size_t)arg_num(argc, argv, 2, 16, 0, 4096, "index MiB per thread") << 20;
  bursts = (int)arg_num(argc, argv, 3, 10, 1, 100000, "bursts");
  burst_bytes = (size_t)arg_num(argc, argv, 4, 64, 1, 4096, "burst MiB") << 20;
  wait_ms = arg_num(argc, argv, 5, 1000, 0, 3600000, "wait ms");
  index_min = (size_t)arg_num(argc, argv, 6, 64, 1, 1 << 20, "index block min");
  index_max = (size_t)arg_num(argc, argv, 7, 1024, (long)index_min, 1 << 20, "index block max");

  pthread_t t[MAX_THREADS];
  double t0 = now_ms();
  for (int i = 0; i < threads; i++)
    if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0) {
      fprintf(stderr, "proc_rfc_churn: pthread_create failed\n");
      return 3;
    }
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double work = now_ms() - t0;

  size_t live = 0;
  for (int i = 0; i < threads; i++) live += indexes[i].bytes + indexes[i].cap * sizeof(void *);
  long after_bursts = rss_kib();
  write_profile();
  double t1 = now_ms();
  if (malloc_trim) malloc_trim(0);
  double trim = now_ms() - t1;
  long after_trim = rss_kib();
  for (int i = 0; i < threads; i++) {
    for (size_t j = 0; j < indexes[i].n; j++) free(indexes[i].blocks[j]);
    free(indexes[i].blocks);
  }
  long after_free = rss_kib();
  if (wait_ms > 0) {
    struct timespec ts = {wait_ms / 1000, wait_ms % 1000 * 1000000L};
    nanosleep(&ts, NULL);
  }
  long after_wait = rss_kib();
  printf("rfc_churn threads=%d index_mib=%zu bursts=%d burst_mib=%zu wait_ms=%ld live_kib=%zu "
         "rss_after_bursts_kib=%ld rss_after_trim_kib=%ld trim_ms=%.2f rss_after_index_free_kib=%ld "
         "rss_after_wait_kib=%ld work_ms=%.1f\n",
         threads, index_per_thread >> 20, bursts, burst_bytes >> 20, wait_ms, live / 1024, after_bursts,
         after_trim, trim, after_free, after_wait, work);
  return 0;
}
