/* The sampled sites' test program (docs/profile.md), run under
 * LD_PRELOAD=libscralloc.so with SCRALLOC_PROFILE by
 * tests/preload/profile_check.py:
 *
 *     profile_keep_index [index MiB] [churn MiB] [top file]
 *     profile_keep_index fork
 *
 * keep_index keeps `index MiB` (default 200) of 1 KiB blocks live to the
 * end; between its calls churn allocates and frees `churn MiB` (default
 * 2048) of assorted sizes, a window of 64 MiB at a time, so that the
 * index's blocks share pages with churn's.  Once churn's blocks are all
 * freed, the index is what is live and what keeps the free slots of its
 * pages.  The program then checks scr_profile_write's answers to bad
 * arguments and writes the top sites to `top file` (when given); the
 * preloaded library writes SCRALLOC_PROFILE's files at exit.  With
 * `fork` it checks instead that children forked while another thread
 * writes reports write their own (and do not hang).
 *
 * Links nothing but libc: scr_profile_write is looked up in the
 * preloaded library.  Prints "index_bytes=N samples=N pinning=N" (the
 * live samples once churn's blocks are freed, and how many of them pin
 * bytes: those in partly used pages), then "N passed, N failed". */
#define _GNU_SOURCE
#include "preload_check.h"
#include "scralloc.h" /* the constants only */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KIB 1024u
#define MIB (1024u * 1024u)
#define INDEX_MAX ((size_t)4096 * MIB / KIB) /* blocks */
#define WINDOW (64u * MIB)            /* churn's live bytes before it frees them */
#define CHURN_MAX (WINDOW / 16)       /* blocks in a window: 16 bytes is the smallest */

static void *index_blocks[INDEX_MAX];
static size_t index_n;
static void *churn_blocks[CHURN_MAX];
static size_t churn_n, churn_live;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void) { /* xorshift64 */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Sizes of a program's passing objects: a tenth exactly the index's
 * 1 KiB (their slots are the ones the index keeps), the rest from 16 B
 * to 64 KiB, most of them small. */
static size_t churn_size(void) {
  uint64_t r = rnd() % 100;
  if (r < 10) return KIB;
  if (r < 45) return 16 + rnd() % 240;
  if (r < 75) return 256 + rnd() % 1792;
  if (r < 92) return 2048 + rnd() % 14336;
  return 16384 + rnd() % 49152;
}

static void churn_free_all(void) {
  for (size_t i = churn_n; i > 1; i--) { /* shuffled: the order a program's frees come in */
    size_t j = rnd() % i;
    void *t = churn_blocks[i - 1];
    churn_blocks[i - 1] = churn_blocks[j];
    churn_blocks[j] = t;
  }
  for (size_t i = 0; i < churn_n; i++) free(churn_blocks[i]);
  churn_n = churn_live = 0;
}

/* Allocates `bytes` of passing blocks; frees the window when it is full. */
__attribute__((noinline)) static void churn(size_t bytes) {
  for (size_t done = 0; done < bytes;) {
    if (churn_live >= WINDOW || churn_n == CHURN_MAX) churn_free_all();
    size_t n = churn_size();
    char *p = malloc(n);
    if (p == NULL) abort();
    p[0] = 1;
    p[n - 1] = 1;
    churn_blocks[churn_n++] = p;
    churn_live += n;
    done += n;
  }
}

/* Keeps `blocks` more 1 KiB blocks. */
__attribute__((noinline)) static void keep_index(size_t blocks) {
  for (size_t i = 0; i < blocks && index_n < INDEX_MAX; i++) {
    char *p = malloc(KIB);
    if (p == NULL) abort();
    memset(p, 0x5a, 64);
    index_blocks[index_n++] = p;
  }
}

static int count_sample(const scr_profile_sample *x, void *arg) {
  size_t *n = arg;
  n[0]++;
  if (x->pinned > 0) n[1]++;
  return 0;
}

typedef size_t samples_fn(const scr_heap *, scr_profile_visit *, void *);
typedef int write_fn(const scr_heap *, const char *, unsigned);

static void check_write_errors(write_fn *w) {
  CHECK(w(NULL, NULL, SCR_PROFILE_FOLDED) == SCR_EINVAL);
  CHECK(w(NULL, "/dev/null", 0) == SCR_EINVAL);
  CHECK(w(NULL, "/dev/null", 99) == SCR_EINVAL);
  CHECK(w(NULL, "/dev/null", SCR_PROFILE_TOP + 1) == SCR_EINVAL);
  CHECK(w(NULL, "/dev/null", SCR_PROFILE_NATIVE) == SCR_EINVAL);
  CHECK(w(NULL, "/dev/null", SCR_PROFILE_FOLDED | 0x200) == SCR_EINVAL);
  errno = 0;
  CHECK(w(NULL, "/nonexistent-dir/profile", SCR_PROFILE_FOLDED) == -1 && errno == ENOENT);
  errno = 0;
  CHECK(w(NULL, "/", SCR_PROFILE_PPROF) == -1 && errno == EISDIR);
  CHECK(w(NULL, "/dev/null", SCR_PROFILE_PPROF | SCR_PROFILE_NATIVE) == SCR_OK);
  CHECK(w(NULL, "/dev/null", SCR_PROFILE_BLAME) == SCR_OK);
}

/* Forks while another thread writes reports: each child writes one of
 * its own and _exits (a child that inherited a report's lock held would
 * wait for ever: the alarm turns that into a failure). */
#define FORKS 100
static write_fn *reporter_w;
static _Atomic int reporter_stop;

static void *reporter(void *arg) {
  (void)arg;
  while (!reporter_stop) reporter_w(NULL, "/dev/null", SCR_PROFILE_PPROF | SCR_PROFILE_NATIVE);
  return NULL;
}

static void check_fork_during_reports(write_fn *w) {
  reporter_w = w;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, reporter, NULL) == 0);
  int good = 0;
  for (int i = 0; i < FORKS; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      alarm(10);
      _exit(w(NULL, "/dev/null", SCR_PROFILE_FOLDED) == SCR_OK ? 0 : 3);
    }
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0) good++;
    else {
      fprintf(stderr, "profile_keep_index: child %d of %d: status 0x%x\n", i, FORKS, st);
      break;
    }
  }
  reporter_stop = 1;
  pthread_join(t, NULL);
  CHECK(good == FORKS);
}

int main(int argc, char **argv) {
  size_t index_bytes = (size_t)(argc > 1 ? atol(argv[1]) : 200) * MIB;
  size_t churn_bytes = (size_t)(argc > 2 ? atol(argv[2]) : 2048) * MIB;
  write_fn *w = (write_fn *)dlsym(RTLD_DEFAULT, "scr_profile_write");
  if (w == NULL) {
    fprintf(stderr, "profile_keep_index: no scr_profile_write: run it with LD_PRELOAD=libscralloc.so\n");
    return 2;
  }
  bool fork_check = argc > 1 && strcmp(argv[1], "fork") == 0;
  if (fork_check) argc = 1; /* the default sizes */
  if (index_bytes / KIB > INDEX_MAX) index_bytes = (size_t)INDEX_MAX * KIB;
  /* the index grows in steps of 100 KiB, with churn's share in between */
  size_t steps = index_bytes / (100 * KIB) ? index_bytes / (100 * KIB) : 1;
  for (size_t i = 0; i < steps; i++) {
    churn(churn_bytes / steps);
    keep_index(index_bytes / KIB * (i + 1) / steps - index_n);
  }
  churn_free_all();
  if (fork_check) { /* with the heaps and samples of a run */
    check_fork_during_reports(w);
    return preload_check_done();
  }
  size_t counts[2] = {0, 0};
  samples_fn *samples = (samples_fn *)dlsym(RTLD_DEFAULT, "scr_profile_samples");
  if (samples) samples(NULL, count_sample, counts);
  printf("index_bytes=%zu samples=%zu pinning=%zu\n", index_n * KIB, counts[0], counts[1]);
  check_write_errors(w);
  if (argc > 3) CHECK(w(NULL, argv[3], SCR_PROFILE_TOP) == SCR_OK);
  return preload_check_done();
}
