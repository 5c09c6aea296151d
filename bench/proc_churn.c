/* Benchmark workload: many threads, allocation-heavy, after the glibc RFC
 * reproducer (malloc: madvise interior free chunks above a threshold):
 * each thread keeps a live set and churns short-lived blocks around it,
 * in waves of threads that exit (so arenas are parked and claimed), then
 * everything is freed and the RSS after free is printed
 * ("rss_after_free_kib N") for the harness.  The threads of a wave make
 * their first allocation, then wait for each other (a barrier), so that
 * every thread of a wave holds its arena (or thread cache) at once
 * whatever the scheduler does: without it, how many arenas a run
 * created, and with it the peak RSS, varied by tens of MiB between runs.
 * With "hold" as a fifth argument, the threads of each wave also wait for
 * each other once their live sets and churn are done, before they free
 * anything, and the RSS at that point is printed ("rss_held_kib WAVE N"):
 * a figure that does not depend on how the threads interleave (the max
 * RSS of the plain run moves by tens of MiB with it), for comparing what
 * an allocator's layout costs.
 * With PROC_CHURN_WAIT_MS=N in the environment, it then sleeps N ms and
 * prints the RSS again ("rss_after_wait_kib N"): what an allocator that
 * returns memory after a delay holds once the delay has passed.
 * Usage: proc_churn [threads] [live MiB total] [churn MiB per thread] [waves] [hold] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "suite_prog.h" /* rss_kib */

static int threads = 16, waves = 2;
static size_t live_total = (size_t)128 << 20, churn_per = (size_t)64 << 20;
static void **kept[256];
static pthread_barrier_t start, held, release;
static int hold, wave_now;
static long rss_held[64];
static size_t kept_n[256];

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void *worker(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  uint64_t s = id * 2654435761u + 7;
  size_t live_bytes = live_total / (size_t)threads, have = 0, n = 0, cap = 1024;
  void **live = malloc(cap * sizeof *live);
  pthread_barrier_wait(&start); /* every thread holds its arena (its first malloc) */
  while (have < live_bytes) { /* the live set: 64 B .. 4 KiB */
    size_t sz = 64 + next(&s) % 4032;
    if (n == cap) live = realloc(live, (cap *= 2) * sizeof *live);
    live[n] = malloc(sz);
    memset(live[n], (int)id, 16);
    n++;
    have += sz;
  }
  /* churn: short-lived blocks, 16 B .. 64 KiB, a few held at a time */
  void *ring[64] = {0};
  size_t done = 0;
  unsigned k = 0;
  while (done < churn_per) {
    size_t sz = next(&s) % 16 ? 16 + next(&s) % 1024 : 1024 + next(&s) % 65536;
    free(ring[k % 64]);
    ring[k % 64] = malloc(sz);
    ((char *)ring[k % 64])[0] = 1;
    k++;
    done += sz;
  }
  for (int i = 0; i < 64; i++) free(ring[i]);
  if (hold) {
    if (pthread_barrier_wait(&held) == PTHREAD_BARRIER_SERIAL_THREAD) rss_held[wave_now] = rss_kib();
    pthread_barrier_wait(&release);
  }
  /* half the live set dies with the thread, half outlives it */
  for (size_t i = 0; i < n; i += 2) free(live[i]), live[i] = NULL;
  kept[id] = live;
  kept_n[id] = n;
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) threads = atoi(argv[1]);
  if (argc > 2) live_total = strtoul(argv[2], NULL, 10) << 20;
  if (argc > 3) churn_per = strtoul(argv[3], NULL, 10) << 20;
  if (argc > 4) waves = atoi(argv[4]);
  if (argc > 5) hold = strcmp(argv[5], "hold") == 0;
  if (threads < 1 || threads > 128 || waves < 1 || waves > 64) return 2;
  for (int w = 0; w < waves; w++) {
    pthread_t t[128];
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    pthread_barrier_init(&held, NULL, (unsigned)threads);
    pthread_barrier_init(&release, NULL, (unsigned)threads);
    wave_now = w;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(w % 2 * 128 / 2 + i));
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&held);
    pthread_barrier_destroy(&release);
    if (hold) printf("rss_held_kib %d %ld\n", w, rss_held[w]);
    /* the main thread frees what the previous wave left */
    for (int i = 0; i < 256; i++) {
      if (!kept[i] || (i >= (w % 2) * 64 && i < (w % 2) * 64 + threads)) continue;
      for (size_t j = 0; j < kept_n[i]; j++) free(kept[i][j]);
      free(kept[i]);
      kept[i] = NULL;
    }
  }
  for (int i = 0; i < 256; i++) {
    if (!kept[i]) continue;
    for (size_t j = 0; j < kept_n[i]; j++) free(kept[i][j]);
    free(kept[i]);
    kept[i] = NULL;
  }
  printf("rss_after_free_kib %ld\n", rss_kib());
  const char *wait = getenv("PROC_CHURN_WAIT_MS");
  if (wait && atoi(wait) > 0) {
    struct timespec ts = {atoi(wait) / 1000, (long)(atoi(wait) % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    printf("rss_after_wait_kib %ld\n", rss_kib());
  }
  return 0;
}
