/* What the breadth suite's programs (bench/proc_*.c run by
 * bench/suite_bench.py) share: a small random generator, a checked malloc,
 * a command-line number parser with a clear message, and the clock.  Only
 * libc: every program is run with each allocator LD_PRELOADed. */
#ifndef SUITE_PROG_H
#define SUITE_PROG_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* xorshift64: cheap and the same sequence under every allocator. */
static inline uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* A number in [lo, hi): lo + rnd % (hi - lo). */
static inline size_t rnd_in(uint64_t *s, size_t lo, size_t hi) { return lo + (size_t)(rnd(s) % (hi - lo)); }

static const char *prog_usage = "";

/* p, or exit 3 with a message: a failed allocation is not a result. */
static inline void *must(void *p) {
  if (p == NULL) {
    fprintf(stderr, "out of memory\n");
    exit(3);
  }
  return p;
}

/* argv[i] as a whole number in [lo, hi], dflt when absent; exit 2 with the
 * usage line otherwise. */
static inline long arg_num(int argc, char **argv, int i, long dflt, long lo, long hi, const char *what) {
  if (argc <= i) return dflt;
  char *end;
  errno = 0;
  long v = strtol(argv[i], &end, 10);
  if (errno || end == argv[i] || *end || v < lo || v > hi) {
    fprintf(stderr, "%s: %s must be a whole number in %ld..%ld, not '%s'\nusage: %s %s\n", argv[0], what, lo, hi,
            argv[i], argv[0], prog_usage);
    exit(2);
  }
  return v;
}

/* A block's stamp, checked before it is freed: its size in its first 4
 * bytes (blocks of 8 B or more) and a tag of it in its last byte.  A
 * block that an allocator handed out twice, or overlapping another, fails
 * the check. */
static inline unsigned char stamp_tag(size_t n) { return (unsigned char)(n * 131 + 7); }
static inline void stamp(void *p, size_t n) {
  unsigned char *c = p;
  if (n >= 8) {
    uint32_t v = (uint32_t)n;
    memcpy(c, &v, sizeof v);
  }
  c[n - 1] = stamp_tag(n);
}
static inline int stamp_ok(const void *p, size_t n) {
  const unsigned char *c = p;
  uint32_t v = (uint32_t)n;
  if (n >= 8) memcpy(&v, c, sizeof v);
  return v == (uint32_t)n && c[n - 1] == stamp_tag(n);
}
/* The size a block of 8 B or more was stamped with. */
static inline size_t stamped_size(const void *p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* This process's resident set in KiB (VmRSS), -1 where /proc has none. */
static inline long rss_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld kB", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#endif
