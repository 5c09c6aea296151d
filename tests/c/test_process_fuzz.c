/* Seeded random runs of the process allocator with its policies mixed.
 * Each round, in a child process of its own, draws a set of options
 * (cache sizes and growth, the pool, discards with short delays and
 * poison, the retain budget), then runs a churn of threads that malloc,
 * calloc, aligned_alloc, realloc (sometimes to zero bytes) and free, hand
 * blocks to each other through a shared array, leave blocks behind when
 * they exit, sleep (so that they block, as threads that take turns do), and free sets
 * with scr_free_many (now and then one of 16,384 blocks, which it frees in
 * address order), keep a few of a run of small blocks and trim (big
 * slots' insides go back: core/src/interior.c), while the main thread changes
 * options, trims, takes statistics, runs the validator and forks (the
 * child frees blocks the parent's threads made, allocates, starts a
 * thread).  Every block
 * carries a cookie (its size, a pattern from its address) checked before
 * it is freed or reallocated; calloc's blocks must read as zero and
 * aligned blocks be aligned.  At the round's end every block is freed
 * and trimmed: no live block may remain.
 *
 * Runs in the debug (validators), ASan+UBSan and TSan builds.
 * SCR_FUZZ_SEED replays one round's seed; SCR_FUZZ_ROUNDS, SCR_FUZZ_OPS
 * (operations per thread) and SCR_FUZZ_FIRST (the first round's seed)
 * run it longer or elsewhere; SCR_FUZZ_VERBOSE=1 prints each round's
 * options and counters.  A failing round prints its seed and options. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t next(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* ---- blocks with cookies ---- */

/* Bytes a cookie covers: the size word, up to 64 pattern bytes, the last
 * byte.  The pattern comes from the address the block had when it was
 * written (kept in the second word), so a block a realloc moved keeps
 * checking against what was written. */
enum { COOKIE_MIN = 24 };
static _Atomic unsigned long bad_cookies, bad_zero, bad_align, bad_usable, failed_allocs;
static _Atomic unsigned long bad_calls; /* a refused option, an empty JSON, a validator's no, a failed fork child */

static uint8_t pattern_of(uintptr_t a) { return (uint8_t)((a >> 4) ^ (a >> 12) ^ 0x5A); }

static void cookie_write(uint8_t *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  memcpy(p, &n, sizeof n);
  memcpy(p + 8, &a, sizeof a);
  size_t fill = n - 16 < 64 ? n - 16 : 64;
  memset(p + 16, pattern_of(a), fill);
  p[n - 1] = pattern_of(a);
}

/* The block's size, after checking its cookie; 0 when it is broken. */
static size_t cookie_check(const uint8_t *p) {
  size_t n;
  uintptr_t a;
  memcpy(&n, p, sizeof n);
  memcpy(&a, p + 8, sizeof a);
  int ok = n >= COOKIE_MIN && n <= ((size_t)8 << 20) && scr_usable_size(p) >= n;
  if (ok) {
    uint8_t b = pattern_of(a);
    size_t fill = n - 16 < 64 ? n - 16 : 64;
    for (size_t i = 0; ok && i < fill; i++) ok = p[16 + i] == b;
    ok = ok && p[n - 1] == b;
  }
  if (!ok) {
    atomic_fetch_add(&bad_cookies, 1);
    return 0;
  }
  return n;
}

static size_t pick_size(uint64_t *s) {
  uint64_t r = next(s) % 1000;
  if (r < 600) return COOKIE_MIN + next(s) % 232;           /* small */
  if (r < 900) return 256 + next(s) % 3840;                 /* to 4 KiB */
  if (r < 985) return 4096 + next(s) % 61440;               /* to 64 KiB: growing lists, medium runs */
  if (r < 998) return 65537 + next(s) % (1u << 20);         /* large */
  return ((size_t)1 << 20) + next(s) % ((size_t)3 << 20);   /* huge */
}

static void *make(uint64_t *s) {
  size_t n = pick_size(s);
  uint8_t *p;
  unsigned how = (unsigned)(next(s) % 10);
  if (how == 0) {
    p = scr_calloc(1, n);
    if (p) { /* zero throughout (sampled past 8 KiB) */
      size_t step = n <= 8192 ? 1 : 61;
      for (size_t i = 0; i < n; i += step)
        if (p[i]) {
          atomic_fetch_add(&bad_zero, 1);
          break;
        }
    }
  } else if (how == 1) {
    size_t align = (size_t)16 << (next(s) % 9); /* 16 B - 4 KiB */
    p = scr_aligned_alloc(align, n);
    if (p && ((uintptr_t)p & (align - 1))) atomic_fetch_add(&bad_align, 1);
  } else {
    p = scr_malloc(n);
  }
  if (p == NULL) {
    atomic_fetch_add(&failed_allocs, 1);
    return NULL;
  }
  if (scr_usable_size(p) < n) atomic_fetch_add(&bad_usable, 1);
  cookie_write(p, n);
  return p;
}

static void drop(void *p) {
  if (p == NULL) return;
  cookie_check(p);
  scr_free(p);
}

/* Moves p to a block of another size; the prefix both share must come
 * along. */
static void *resize(void *p, uint64_t *s) {
  size_t n = cookie_check(p);
  if (n == 0) return p; /* counted; leave it */
  size_t m = pick_size(s);
  uint8_t head[80];
  size_t keep = n < sizeof head ? n : sizeof head;
  memcpy(head, p, keep);
  uint8_t *q = scr_realloc(p, m);
  if (q == NULL) {
    atomic_fetch_add(&failed_allocs, 1);
    return p; /* the old block stands */
  }
  if (memcmp(q, head, keep < m ? keep : m) != 0) atomic_fetch_add(&bad_cookies, 1);
  cookie_write(q, m);
  return q;
}

/* ---- one round ---- */

enum { SLOTS = 256, LOCAL = 48, MANY = 24, BIG_SET = 16384 };
static _Atomic(void *) slots[SLOTS];
static unsigned ops_per_thread = 1500;
static unsigned forks_done;
enum { ROUND_LIMIT_S = 120 }; /* a round takes about a second, ten under TSan */

typedef struct {
  uint64_t seed;
  unsigned sleepy; /* 1 in this many operations sleeps (0: never) */
} worker_arg;

/* A run of blocks of one small size of which about one in 128 stays live
 * (into the thread's local blocks) and the rest are freed, then a trim:
 * pages with live blocks and free slots among them (the insides of big
 * ones go back: core/src/interior.c) that later mallocs and callocs of
 * the size take again, and frees of the blocks left check. */
enum { SIEVE = 2048 };
static void sieve(void **local, uint64_t *s) {
  void **run = scr_malloc(SIEVE * sizeof *run);
  if (run == NULL) {
    atomic_fetch_add(&failed_allocs, 1);
    return;
  }
  size_t m = COOKIE_MIN + next(s) % 1000;
  size_t n = 0;
  for (size_t j = 0; j < SIEVE; j++) {
    uint8_t *p = scr_malloc(m);
    if (p == NULL) {
      atomic_fetch_add(&failed_allocs, 1);
      continue;
    }
    cookie_write(p, m);
    run[n++] = p;
  }
  for (size_t j = 0; j < n; j++) {
    if (next(s) % 128 == 0) {
      unsigned k = (unsigned)(next(s) % LOCAL);
      drop(local[k]);
      local[k] = run[j];
    } else {
      drop(run[j]);
    }
  }
  scr_free(run);
  scr_trim();
}

static void *worker(void *arg) {
  worker_arg *w = arg;
  uint64_t s = w->seed;
  void *local[LOCAL] = {0};
  unsigned ops = ops_per_thread / 2 + (unsigned)(next(&s) % ops_per_thread);
  for (unsigned i = 0; i < ops; i++) {
    unsigned k = (unsigned)(next(&s) % LOCAL);
    switch (next(&s) % 16) {
    case 0: case 1: case 2: case 3: case 4: /* replace a local block */
      drop(local[k]);
      local[k] = make(&s);
      break;
    case 5: case 6: case 7: case 8: { /* swap one through the shared array */
      void *mine = local[k] ? local[k] : make(&s);
      local[k] = NULL;
      drop(atomic_exchange(&slots[next(&s) % SLOTS], mine));
      break;
    }
    case 9: case 10: /* take one from the shared array: often another thread's */
      drop(local[k]);
      local[k] = atomic_exchange(&slots[next(&s) % SLOTS], NULL);
      break;
    case 11: case 12:
      if (local[k] && next(&s) % 16 == 0) { /* to zero bytes: freed, as free() */
        cookie_check(local[k]);
        void *q = scr_realloc(local[k], 0);
        local[k] = NULL;
        if (q != NULL) scr_free(q); /* a minimal block instead is allowed too */
      } else if (local[k]) {
        local[k] = resize(local[k], &s);
      }
      break;
    case 13: { /* a set freed at once; now and then one big enough to be freed in address order */
      static void *big_set[BIG_SET];
      static _Atomic int big_set_busy;
      void *set[MANY], **v = set;
      size_t want = MANY, n = 0;
      if (next(&s) % 256 == 0 && !atomic_exchange(&big_set_busy, 1)) v = big_set, want = BIG_SET;
      for (size_t j = 0; j < want; j++) {
        void *p;
        if (want == MANY) {
          p = make(&s);
        } else { /* small blocks: many to a page, so that the order shows */
          size_t m = COOKIE_MIN + next(&s) % 200;
          if ((p = scr_malloc(m)) != NULL) cookie_write(p, m);
        }
        if (p) v[n++] = p;
      }
      for (size_t j = 0; j < n; j++) cookie_check(v[j]);
      scr_free_many(v, n);
      if (v == big_set) atomic_store(&big_set_busy, 0);
      break;
    }
    case 14:
      if (w->sleepy && next(&s) % w->sleepy == 0) usleep(50 + (useconds_t)(next(&s) % 400));
      else if (next(&s) % 8 == 0) sched_yield();
      break;
    default:
      if (next(&s) % 256 == 0) sieve(local, &s);
      else if (next(&s) % 64 == 0) scr_trim();
      break;
    }
  }
  /* At exit, a few blocks stay behind in the shared array for other
   * threads (and the main thread) to free after this one is gone. */
  for (unsigned k = 0; k < LOCAL; k++) {
    if (local[k] && next(&s) % 4 == 0) drop(atomic_exchange(&slots[next(&s) % SLOTS], local[k]));
    else drop(local[k]);
  }
  return NULL;
}

/* One option of the draw: a name and the values it takes. */
typedef struct {
  const char *name;
  const char *values[6];
} option_draw;

static const option_draw draws[] = {
    {"cache_bytes", {"0", "1024", "16384", "65536"}},
    {"cache_medium", {"0", "2", "8"}},
    {"cache_max", {"0", "1024", "4096", "65536"}},
    {"cache_grow", {"0", "65536", "2M", "64M"}},
    {"pool", {"0", "1"}},
    {"discard", {"0", "1", "2"}},
    {"retain_max", {"0", "1M", "4M"}},
    {"decay_ms", {"0", "5", "1000"}},
    {"decay_max_ms", {"5", "50", "10000"}},
};
enum { NDRAWS = sizeof draws / sizeof draws[0] };

static unsigned nvalues(const option_draw *d) {
  unsigned n = 0;
  while (n < 6 && d->values[n]) n++;
  return n;
}

static void set_random_option(uint64_t *s, char *log, size_t len) {
  const option_draw *d = &draws[next(s) % NDRAWS];
  const char *v = d->values[next(s) % nvalues(d)];
  if (scr_process_option_set(d->name, v) != SCR_OK) {
    fprintf(stderr, "  option %s=%s refused\n", d->name, v);
    atomic_fetch_add(&bad_calls, 1);
  }
  if (log) {
    size_t used = strlen(log);
    snprintf(log + used, len - used, " %s=%s", d->name, v);
  }
}

#if defined(__SANITIZE_THREAD__)
/* A child forked while a worker had finished but was not yet joined
 * inherits it, and TSan would call that a leaked thread at the child's
 * exit; the parent joins every worker.  And the fork handler holds the
 * allocator's locks across fork (process/fork.c: the pool's 52 classes,
 * each arena's snapshot, the profile's, the decay's), more than the 64
 * that TSan's deadlock detector tracks at once in a thread once a round
 * has 8 arenas; the tests that do not fork keep the detector. */
const char *__tsan_default_options(void);
__attribute__((visibility("default"))) const char *__tsan_default_options(void) {
  return "report_thread_leaks=0 detect_deadlocks=0";
}
#endif

static void *fork_child_thread(void *arg) {
  uint64_t s = (uintptr_t)arg;
  for (int i = 0; i < 200; i++) drop(make(&s));
  return NULL;
}

/* fork while the workers run (the helper thread may be discarding): the
 * child, alone, checks and frees blocks the parent's threads left in the
 * shared array, allocates, starts a thread, trims and validates; it exits
 * 0 when all held. */
static void fork_while_running(uint64_t *s) {
  uint64_t seed = next(s) | 1;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(ROUND_LIMIT_S);
    uint64_t cs = seed;
    for (unsigned i = 0; i < SLOTS; i += 3) drop(atomic_exchange(&slots[i], NULL));
    void *mine[64];
    for (int i = 0; i < 64; i++) mine[i] = make(&cs);
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    /* TSan ends a child of a threaded process that starts a thread; in
     * ASan's, the thread's start may wait forever on a lock of ASan's own
     * allocator that a parent's thread held at the fork. */
    int started = 1;
    fork_child_thread((void *)(uintptr_t)(seed + 1));
#else
    pthread_t t;
    int started = pthread_create(&t, NULL, fork_child_thread, (void *)(uintptr_t)(seed + 1)) == 0;
#endif
    for (int i = 0; i < 64; i++) drop(mine[i]);
#if !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
    if (started) pthread_join(t, NULL);
#endif
    scr_trim();
    int ok = atomic_load(&bad_cookies) == 0 && atomic_load(&bad_zero) == 0 && atomic_load(&bad_align) == 0 &&
             atomic_load(&failed_allocs) == 0 && started && scr_process_validate() == SCR_OK;
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "  a child forked while the workers ran failed (status %d)\n", status);
    atomic_fetch_add(&bad_calls, 1);
  }
  forks_done++;
}

/* The round in the calling (child) process: 0 when every check held. */
static int round_body(uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  char opts[1024] = "";
  for (unsigned i = 0; i < 12; i++) set_random_option(&s, opts, sizeof opts);
  unsigned alive = 2 + (unsigned)(next(&s) % 5), total = alive + (unsigned)(next(&s) % 12);
  unsigned sleepy = (unsigned)(next(&s) % 3) == 0 ? 0 : 8 + (unsigned)(next(&s) % 64);

  pthread_t t[32];
  worker_arg args[32];
  unsigned started = 0, joined = 0;
  for (; started < alive; started++) {
    args[started] = (worker_arg){next(&s) | 1, sleepy};
    if (pthread_create(&t[started], NULL, worker, &args[started]) != 0) return 1;
  }
  /* Meanwhile: join the oldest, start another; now and then change an
   * option, trim, look at the statistics, validate. */
  while (joined < started) {
    for (unsigned k = 0; k < 3; k++) {
      switch (next(&s) % 6) {
      case 0: set_random_option(&s, NULL, 0); break;
      case 1: scr_trim(); break;
      case 2: {
        struct scr_stats st;
        struct scr_process_stats ps;
        scr_stats(&st);
        scr_process_stats(&ps);
        char json[8192];
        if (scr_process_stats_json(json, sizeof json) == 0) atomic_fetch_add(&bad_calls, 1);
        for (unsigned i = 0; i < ps.arenas; i++) /* each arena's snapshot, while its holder runs */
          if (scr_arena_stats(i, &st) != SCR_OK) atomic_fetch_add(&bad_calls, 1);
        if (scr_process_option_get("cache_bytes") == UINT64_MAX) atomic_fetch_add(&bad_calls, 1);
        break;
      }
      case 3:
        if (scr_process_validate() != SCR_OK) atomic_fetch_add(&bad_calls, 1);
        break;
      case 4:
        if (next(&s) % 4 == 0) fork_while_running(&s);
        break;
      default: usleep(200); break;
      }
    }
    pthread_join(t[joined++], NULL);
    if (started < total) {
      args[started] = (worker_arg){next(&s) | 1, sleepy};
      if (pthread_create(&t[started], NULL, worker, &args[started]) != 0) return 1;
      started++;
    }
  }
  for (unsigned i = 0; i < SLOTS; i++) drop(atomic_exchange(&slots[i], NULL));

  /* Everything is freed: after a trim (which drains the parked arenas'
   * remote frees), no arena holds a live block.  An arena the discard
   * helper has borrowed that moment is not on the parked list for the
   * trim to drain; it is once the helper is done, so a round looks again
   * for up to a second before it calls that a leak. */
  struct scr_stats st;
  struct scr_process_stats ps;
  for (int tries = 0; tries < 100; tries++) {
    scr_trim();
    scr_stats(&st);
    scr_process_stats(&ps);
    if (st.allocs == 0 && st.large_allocs == 0 && ps.remote_pending == 0) break;
    usleep(10000);
  }
  int ok = atomic_load(&bad_cookies) == 0 && atomic_load(&bad_zero) == 0 && atomic_load(&bad_align) == 0 &&
           atomic_load(&bad_usable) == 0 && atomic_load(&failed_allocs) == 0 && atomic_load(&bad_calls) == 0 &&
           st.allocs == 0 &&
           st.large_allocs == 0 && ps.remote_pending == 0 && ps.foreign_frees == 0 &&
           scr_process_validate() == SCR_OK;
  if (!ok)
    fprintf(stderr,
            "  round seed %llu:%s\n  threads %u (%u at once), sleepy %u: bad cookies %lu, not zero %lu, "
            "misaligned %lu, short %lu, failed allocs %lu, failed calls %lu; left %llu blocks (%llu large), %llu "
            "remote pending, %llu foreign frees\n",
            (unsigned long long)seed, opts, total, alive, sleepy, atomic_load(&bad_cookies), atomic_load(&bad_zero),
            atomic_load(&bad_align), atomic_load(&bad_usable), atomic_load(&failed_allocs), atomic_load(&bad_calls),
            (unsigned long long)st.allocs, (unsigned long long)st.large_allocs,
            (unsigned long long)ps.remote_pending, (unsigned long long)ps.foreign_frees);
  if (getenv("SCR_FUZZ_VERBOSE"))
    printf("  seed %llu:%s\n    %llu claims, %llu parks, %llu pool takes, %llu cache grows, "
           "%llu remote frees, %llu discards, %llu "
           "realloc moves, %u forks, %llu KiB given back inside free slots, %llu huge blocks reused, %llu trims asked\n",
           (unsigned long long)seed, opts, (unsigned long long)ps.claims, (unsigned long long)ps.parks,
           (unsigned long long)ps.pool_takes, (unsigned long long)ps.cache_grows,
           (unsigned long long)ps.remote_frees, (unsigned long long)ps.discards,
           (unsigned long long)ps.realloc_moves, forks_done, (unsigned long long)(ps.interior_bytes >> 10),
           (unsigned long long)ps.huge_cache_hits, (unsigned long long)ps.trim_answers);
  return ok ? 0 : 1;
}

/* A round in a child, so that each starts from the same process state
 * and a crash names its seed. */
static int run_round(uint64_t seed) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(ROUND_LIMIT_S); /* a hang fails the round, naming its seed */
    int r = round_body(seed);
    fflush(NULL);
    _exit(r);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 1;
  fprintf(stderr, "  round seed %llu failed (%s %d); replay: SCR_FUZZ_SEED=%llu\n", (unsigned long long)seed,
          WIFSIGNALED(status) ? "signal" : "exit", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
          (unsigned long long)seed);
  return 0;
}

static unsigned rounds = 12;
static uint64_t first_seed = 1;
static int replay;

static void test_random_rounds(void) {
  unsigned passed = 0;
  for (unsigned r = 0; r < rounds; r++) {
    int ok = run_round(first_seed + r);
    CHECK(ok);
    passed += ok;
    if (replay) break;
  }
  printf("  %u rounds passed (seeds %llu-%llu, %u operations a thread)\n", passed,
         (unsigned long long)first_seed, (unsigned long long)(first_seed + (replay ? 0 : rounds - 1)),
         ops_per_thread);
}

int main(void) {
  const char *v;
  if ((v = getenv("SCR_FUZZ_SEED")) != NULL) first_seed = strtoull(v, NULL, 10), replay = 1;
  else if ((v = getenv("SCR_FUZZ_FIRST")) != NULL) first_seed = strtoull(v, NULL, 10);
  if ((v = getenv("SCR_FUZZ_ROUNDS")) != NULL && atoi(v) > 0) rounds = (unsigned)atoi(v);
  if ((v = getenv("SCR_FUZZ_OPS")) != NULL && atoi(v) > 0) ops_per_thread = (unsigned)atoi(v);
  scr_free(scr_malloc(1)); /* the main thread's arena exists before the first fork */
  TEST(test_random_rounds);
  return check_done();
}
