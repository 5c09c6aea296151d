/* Breadth suite: a working set that is freed and reused at once, at every
 * block size.  Each thread keeps `live` blocks of random sizes between
 * `min` and `max` bytes (log-uniform: as many blocks of 1-2 KiB as of
 * 256-512 KiB) and replaces one at random, `ops` times, writing a byte
 * on each 4 KiB page of every block it gets.  Every freed byte is wanted
 * again within a few operations: an allocator that gives the pages of a
 * freed block back to the OS faults them in again on the next
 * replacement.  With `runs` instead (mode "runs"): one thread allocates
 * `live` blocks of `min` bytes, frees them all, and starts again.
 *
 *     proc_reuse [threads] [live] [min] [max] [ops per thread]
 *     proc_reuse runs [rounds] [blocks] [size]
 *
 * It prints "reuse ops=N faults=N faulted_mib_s=X given_back_mib_s=Y"
 * (minor faults of the whole run from getrusage, and the bytes they
 * brought in per second of the run, 4 KiB a fault; under scralloc also the
 * bytes it gave back to the OS per second, from its statistics, which no
 * other allocator publishes: -1 there). */
#include "suite_prog.h"
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sys/resource.h>

/* Bytes scralloc gave back with advice (its scr_process_stats_json's
 * dontneed_bytes and lazy_free_bytes), or -1 under another allocator. */
static double given_back_bytes(void) {
  size_t (*json)(char *, size_t) = (size_t(*)(char *, size_t))dlsym(RTLD_DEFAULT, "scr_process_stats_json");
  if (json == NULL) return -1;
  static char buf[16384];
  json(buf, sizeof buf);
  double total = 0;
  const char *keys[] = {"\"dontneed_bytes\":", "\"lazy_free_bytes\":"};
  for (int i = 0; i < 2; i++) {
    const char *at = strstr(buf, keys[i]);
    if (at) total += strtod(at + strlen(keys[i]), NULL);
  }
  return total;
}

/* The block is used, as a program uses the memory it asks for: a byte on
 * each of its 4 KiB pages between the stamps (which hold its first bytes
 * and its last), so that all of its pages are resident. */
static void use(unsigned char *c, size_t n) {
  for (size_t o = 4096; o + 1 < n; o += 4096) c[o] = (unsigned char)o;
}

typedef struct job {
  long live, ops;
  size_t min, max;
  uint64_t seed;
  unsigned long bad;
  double back; /* given_back_bytes() after its operations, before its frees and exit (thread 0) */
} job;

#define SEED0 0x9e3779b97f4a7c15ull

/* log-uniform in [min, max]: exp of a uniform draw between the logs */
static size_t draw(uint64_t *s, double lmin, double lspan) {
  double u = (double)(rnd(s) >> 11) / (double)(1ull << 53);
  return (size_t)exp(lmin + u * lspan);
}

static void *worker(void *arg) {
  job *j = arg;
  unsigned char **blk = must(calloc((size_t)j->live, sizeof *blk));
  double lmin = log((double)j->min), lspan = log((double)j->max + 1) - lmin;
  uint64_t s = j->seed;
  for (long k = 0; k < j->live; k++) {
    size_t n = draw(&s, lmin, lspan);
    blk[k] = must(malloc(n));
    stamp(blk[k], n);
    use(blk[k], n);
  }
  for (long i = 0; i < j->ops; i++) {
    long k = (long)(rnd(&s) % (uint64_t)j->live);
    size_t n = draw(&s, lmin, lspan);
    if (j->min >= 8) j->bad += !stamp_ok(blk[k], stamped_size(blk[k]));
    free(blk[k]);
    blk[k] = must(malloc(n));
    stamp(blk[k], n);
    use(blk[k], n);
  }
  if (j->seed == SEED0) j->back = given_back_bytes(); /* an exiting thread's arena gives back its free pages */
  for (long k = 0; k < j->live; k++) free(blk[k]);
  free(blk);
  return NULL;
}

static void runs(long rounds, long len, size_t size, unsigned long *bad) {
  unsigned char **run = must(malloc((size_t)len * sizeof *run));
  for (long r = 0; r < rounds; r++) {
    for (long k = 0; k < len; k++) {
      run[k] = must(malloc(size));
      stamp(run[k], size);
      use(run[k], size);
    }
    for (long k = 0; k < len; k++) {
      *bad += !stamp_ok(run[k], size);
      free(run[k]);
    }
  }
  free(run);
}

int main(int argc, char **argv) {
  prog_usage = "[threads] [live] [min] [max] [ops per thread] | runs [rounds] [blocks] [size]";
  unsigned long bad = 0;
  long ops;
  double back = -1;
  double t0 = now_s();
  if (argc > 1 && strcmp(argv[1], "runs") == 0) {
    long rounds = arg_num(argc, argv, 2, 2000, 1, 1000000000, "rounds");
    long len = arg_num(argc, argv, 3, 1000, 1, 10000000, "blocks");
    long size = arg_num(argc, argv, 4, 65536, 1, 1L << 30, "size");
    runs(rounds, len, (size_t)size, &bad);
    back = given_back_bytes();
    ops = rounds * len;
  } else {
    long nt = arg_num(argc, argv, 1, 1, 1, 1024, "threads");
    long live = arg_num(argc, argv, 2, 64, 1, 10000000, "live");
    long min = arg_num(argc, argv, 3, 1, 1, 1L << 30, "min");
    long max = arg_num(argc, argv, 4, 1 << 20, min, 1L << 30, "max");
    long per = arg_num(argc, argv, 5, 1000000, 0, 1000000000, "ops per thread");
    pthread_t *t = must(calloc((size_t)nt, sizeof *t));
    job *jobs = must(calloc((size_t)nt, sizeof *jobs));
    for (long i = 0; i < nt; i++) {
      jobs[i] = (job){.live = live, .ops = per, .min = (size_t)min, .max = (size_t)max, .seed = SEED0 * (uint64_t)(i + 1)};
      if (pthread_create(&t[i], NULL, worker, &jobs[i]) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        return 3;
      }
    }
    for (long i = 0; i < nt; i++) {
      pthread_join(t[i], NULL);
      bad += jobs[i].bad;
    }
    back = jobs[0].back;
    free(t);
    free(jobs);
    ops = nt * per;
  }
  double wall = now_s() - t0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  if (wall <= 0) wall = 1e-9;
  printf("reuse ops=%ld faults=%ld faulted_mib_s=%.1f given_back_mib_s=%.1f bad=%lu\n", ops, ru.ru_minflt,
         (double)ru.ru_minflt * 4096 / (1 << 20) / wall, back < 0 ? -1.0 : back / (1 << 20) / wall, bad);
  return bad != 0;
}
