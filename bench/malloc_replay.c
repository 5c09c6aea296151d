/* Plays a trace of bench/malloc_trace.c back under whatever allocator is
 * linked or LD_PRELOADed, and prints what it cost:
 *
 *     LD_PRELOAD=build/release/libscralloc.so build/release/bench/malloc_replay py.trace
 *     ops=17665 threads=5 rss_kib=18720 peak_live_kib=12606 minflt=7161 wall_ms=352
 *
 * rss_kib is the peak RSS (VmHWM) less the RSS before the first call: the
 * allocator's memory at its peak, for the program's blocks.  Each traced
 * thread is a thread here, and the calls run one at a time in the traced
 * order (a thread waits for its turn), at the traced pace (each call no
 * earlier than its recorded time from the start; SCR_REPLAY_PACE=0 runs
 * them back to back, a factor stretches or shrinks time): a threaded
 * program's interleaving decides what is live at once, and time decides
 * what delayed purges have done.  A block is written over its whole size
 * when malloc'd (SCR_REPLAY_WRITTEN=0.5: its first half), over the grown
 * part when realloc'd; a calloc'd block over
 * its first 64 bytes (programs often leave the rest zero, as Python's
 * bytes(n) does, and allocators leave fresh memory untouched). */
#define _GNU_SOURCE
#include "malloc_trace.h"
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static scr_trace_rec *rec;
static size_t nrec;

/* ---- traced address -> block here (open addressing, backward-shift delete) ---- */
typedef struct {
  uint64_t key; /* traced address, 0 = empty */
  void *block;
  uint64_t size;
} slot;
static slot *table;
static size_t mask;
static unsigned shift; /* 64 - log2(slots) */

static size_t home(uint64_t key) { return (size_t)((key * 0x9E3779B97F4A7C15ull) >> shift); }
static size_t find(uint64_t key) {
  size_t i = home(key);
  while (table[i].key != 0 && table[i].key != key) i = (i + 1) & mask;
  return i;
}
static void put(uint64_t key, void *block, uint64_t size) {
  size_t i = find(key);
  table[i] = (slot){key, block, size};
}
static void *take(uint64_t key, uint64_t *size) {
  size_t i = find(key);
  if (table[i].key == 0) return NULL;
  void *block = table[i].block;
  *size = table[i].size;
  table[i].key = 0;
  for (size_t j = (i + 1) & mask; table[j].key != 0; j = (j + 1) & mask) {
    size_t h = home(table[j].key);
    /* move j back to the hole at i unless its home lies in (i, j] */
    if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
      table[i] = table[j];
      table[j].key = 0;
      i = j;
    }
  }
  return block;
}

/* ---- the replay ---- */
static pthread_mutex_t turn_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_cv = PTHREAD_COND_INITIALIZER;
static size_t pos;
static double pace = 1.0;
static double written = 1.0; /* of a malloc'd block, from its start */
static uint64_t start_ns;
static uint64_t live, peak_live;
#define HEADER_BYTES 64

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void wait_until(uint64_t due) {
  uint64_t t;
  while ((t = now_ns()) < due) {
    if (due - t > 200000) { /* long gaps sleep, short ones spin */
      struct timespec ts = {0, (long)(due - t - 100000)};
      nanosleep(&ts, NULL);
    }
  }
}

static void run_call(const scr_trace_rec *r) {
  if (pace > 0) wait_until(start_ns + (uint64_t)((double)(r->ns - rec[0].ns) * pace));
  uint64_t old = 0;
  void *p;
  switch (r->op) {
  case SCR_TRACE_MALLOC:
  case SCR_TRACE_CALLOC:
  case SCR_TRACE_ALIGNED:
    p = r->op == SCR_TRACE_MALLOC ? malloc(r->size)
      : r->op == SCR_TRACE_CALLOC ? calloc(1, r->size)
      : memalign(r->align, r->size);
    if (p == NULL) break;
    if (r->op == SCR_TRACE_CALLOC) /* only a header's worth is written */
      memset(p, 0xA5, r->size < HEADER_BYTES ? r->size : HEADER_BYTES);
    else
      memset(p, 0xA5, r->size <= HEADER_BYTES ? r->size : (size_t)((double)r->size * written));
    put(r->out, p, r->size);
    live += r->size;
    break;
  case SCR_TRACE_FREE:
    p = take(r->in, &old);
    if (p) free(p), live -= old;
    break;
  case SCR_TRACE_REALLOC:
    p = r->in ? take(r->in, &old) : NULL;
    p = realloc(p, r->size);
    if (r->out == 0 || p == NULL) { /* freed (size 0), or failed here */
      live -= old;
      break;
    }
    if (r->size > old) memset((char *)p + old, 0x5A, r->size - old);
    put(r->out, p, r->size);
    live += r->size - old;
    break;
  }
  if (live > peak_live) peak_live = live;
}

static void *replay_thread(void *arg) {
  uint8_t me = (uint8_t)(uintptr_t)arg;
  pthread_mutex_lock(&turn_lock);
  for (;;) {
    while (pos < nrec && rec[pos].thread != me) pthread_cond_wait(&turn_cv, &turn_lock);
    if (pos >= nrec) break;
    while (pos < nrec && rec[pos].thread == me) run_call(&rec[pos++]);
    pthread_cond_broadcast(&turn_cv);
  }
  pthread_mutex_unlock(&turn_lock);
  return NULL;
}

/* A field of /proc/self/status in KiB: "VmRSS" now, "VmHWM" the peak
 * since this process's exec.  ru_maxrss is not that peak: Linux folds in
 * the peak of the image the process was forked from, so a driver bigger
 * than the replay's peak (bench/proc_launch.c says more) would set it. */
static long status_kib(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t len = strlen(field);
  long kib = 0;
  if (f) {
    while (fgets(line, sizeof line, f))
      if (strncmp(line, field, len) == 0 && line[len] == ':' && sscanf(line + len + 1, "%ld", &kib) == 1) break;
    fclose(f);
  }
  return kib;
}

static int load(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return -1;
  size_t cap = 1 << 16;
  rec = malloc(cap * sizeof *rec);
  size_t got;
  while (rec && (got = fread(rec + nrec, sizeof *rec, cap - nrec, f)) > 0) {
    nrec += got;
    if (nrec == cap) rec = realloc(rec, (cap *= 2) * sizeof *rec);
  }
  fclose(f);
  return rec && nrec > 0 ? 0 : -1;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s TRACE (bench/malloc_trace.c writes one)\n", argv[0]);
    return 2;
  }
  if (load(argv[1]) != 0) {
    fprintf(stderr, "%s: cannot read a trace\n", argv[1]);
    return 1;
  }
  if (getenv("SCR_REPLAY_PACE")) pace = atof(getenv("SCR_REPLAY_PACE"));
  if (getenv("SCR_REPLAY_WRITTEN")) written = atof(getenv("SCR_REPLAY_WRITTEN"));
  /* the table: twice the most blocks live at once, a power of 2 */
  size_t most = 0, n = 0, threads = 0;
  for (size_t i = 0; i < nrec; i++) {
    const scr_trace_rec *r = &rec[i];
    if (r->thread + 1u > threads) threads = r->thread + 1u;
    if (r->op == SCR_TRACE_FREE || (r->op == SCR_TRACE_REALLOC && r->in != 0)) n -= n > 0;
    if (r->op != SCR_TRACE_FREE && r->out != 0) n++;
    if (n > most) most = n;
  }
  size_t slots = 1024;
  shift = 64 - 10;
  while (slots < 2 * most) slots *= 2, shift--;
  table = calloc(slots, sizeof *table);
  mask = slots - 1;
  pthread_t *t = calloc(threads, sizeof *t);
  if (table == NULL || t == NULL) return 1;
  memset(table, 0, slots * sizeof *table); /* resident before the base RSS is read */

  long base = status_kib("VmRSS");
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  start_ns = now_ns();
  for (size_t i = 1; i < threads; i++) pthread_create(&t[i], NULL, replay_thread, (void *)(uintptr_t)i);
  replay_thread((void *)(uintptr_t)0);
  for (size_t i = 1; i < threads; i++) pthread_join(t[i], NULL);
  uint64_t wall = now_ns() - start_ns;
  getrusage(RUSAGE_SELF, &after);
  printf("ops=%zu threads=%zu rss_kib=%ld peak_live_kib=%llu minflt=%ld wall_ms=%llu\n", nrec, threads,
         status_kib("VmHWM") - base, (unsigned long long)(peak_live >> 10), after.ru_minflt - before.ru_minflt,
         (unsigned long long)(wall / 1000000));
  return 0;
}
