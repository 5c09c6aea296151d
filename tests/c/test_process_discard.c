/* Park/claim and the delayed discard: RSS (smaps_rollup) drops after the
 * decay delay, the returned pages read as zero, the delay doubles when
 * threads come back and fault them in again (refaults), a program that exits within the delay returns nothing,
 * poison mode faults, a finished thread's blocks freed by another go
 * back at once; plus small pages and the dontdump advice. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define MIB ((size_t)1 << 20)

/* What the allocator holds committed, KiB (scr_stats' bytes). */
static long committed_kib(void) {
  struct scr_stats st;
  scr_stats(&st);
  return (long)(st.bytes >> 10);
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  if (!f) f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "Rss: %ld kB", &v) == 1 || sscanf(line, "VmRSS: %ld kB", &v) == 1) break;
  }
  fclose(f);
  return v;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static struct scr_process_stats pstats(void) {
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  return ps;
}

/* Wait until the discard count passes `n` (at most ms). */
static int wait_discards(uint64_t n, unsigned ms) {
  for (unsigned t = 0; t < ms; t += 10) {
    if (pstats().discards > n) return 1;
    sleep_ms(10);
  }
  return 0;
}

/* A thread that touches `bytes` of blocks, frees them all and exits. */
static void *fill_and_free(void *arg) {
  size_t bytes = (size_t)(uintptr_t)arg, n = bytes / BLOCK;
  void **v = scr_malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) {
    v[i] = scr_malloc(BLOCK);
    memset(v[i], 0xAB, BLOCK);
  }
  for (size_t i = 0; i < n; i++) scr_free(v[i]);
  scr_free(v);
  return NULL;
}

static void run_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) == 0) pthread_join(t, NULL);
}

static _Atomic unsigned zero_blocks, checked_blocks;

static void *claim_and_check_zero(void *arg) {
  (void)arg;
  enum { N = 1024 };
  void *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = scr_malloc(BLOCK);
    const unsigned char *p = v[i];
    int z = 1;
    for (int k = 0; k < BLOCK && z; k++) z = p[k] == 0;
    atomic_fetch_add(&zero_blocks, (unsigned)z);
    atomic_fetch_add(&checked_blocks, 1);
  }
  for (int i = 0; i < N; i++) scr_free(v[i]);
  return NULL;
}

static void test_discard_returns_rss(void) {
  struct scr_process_stats before = pstats();
  run_thread(fill_and_free, (void *)(uintptr_t)(24 * MIB));
  long parked = rss_kib();
  struct scr_process_stats now = pstats();
  CHECK(now.parks > before.parks);
  CHECK_EQ(now.discards, before.discards); /* not before the delay */
  CHECK(wait_discards(before.discards, 3000));
  long after = rss_kib();
  fprintf(stderr, "  rss parked %ld KiB, after discard %ld KiB\n", parked, after);
  CHECK(parked - after >= 12 * 1024);
  CHECK(pstats().discard_bytes - before.discard_bytes >= 12 * MIB);

  /* the next thread claims the discarded arena: its pages read as zero,
   * they count as refaults (taken again within twice the delay), and the
   * decay's next pass doubles the delay, the discards' too */
  run_thread(claim_and_check_zero, NULL);
  CHECK(atomic_load(&checked_blocks) == 1024);
  CHECK(atomic_load(&zero_blocks) >= 1000);
  struct scr_process_stats ps = pstats();
  fprintf(stderr, "  refaulted %llu KiB\n", (unsigned long long)((ps.refault_bytes - before.refault_bytes) >> 10));
  CHECK(ps.refault_bytes - before.refault_bytes >= 1000 * BLOCK);
  for (unsigned t = 0; t < 3000 && ps.decay_backoffs == before.decay_backoffs; t += 10) {
    sleep_ms(10);
    ps = pstats();
  }
  CHECK(ps.decay_backoffs > before.decay_backoffs);
  CHECK(ps.decay_delay_ms >= 200 && ps.decay_delay_ms <= 400);
}

/* Partly used pages: after the discard their free blocks are relinked in
 * address order, so the next owner gets them ascending. */
#define HALF_N 4096
static void *half_kept[HALF_N];
static void *free_every_other_shuffled(void *arg) {
  (void)arg;
  uint64_t s = 88172645463325252ull;
  for (int i = 0; i < HALF_N; i++) half_kept[i] = scr_malloc(48);
  int idx[HALF_N / 2];
  for (int i = 0; i < HALF_N / 2; i++) idx[i] = 2 * i;
  for (int i = HALF_N / 2 - 1; i > 0; i--) { /* free in a random order */
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    int j = (int)(s % (uint64_t)(i + 1)), t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
  for (int i = 0; i < HALF_N / 2; i++) {
    scr_free(half_kept[idx[i]]);
    half_kept[idx[i]] = NULL;
  }
  return NULL;
}

static unsigned ascending_pairs;
static void *alloc_count_ascending(void *arg) {
  (void)arg;
  void *v[HALF_N / 2];
  for (int i = 0; i < HALF_N / 2; i++) v[i] = scr_malloc(48);
  for (int i = 1; i < HALF_N / 2; i++) ascending_pairs += (uintptr_t)v[i] > (uintptr_t)v[i - 1];
  for (int i = 0; i < HALF_N / 2; i++) scr_free(v[i]);
  return NULL;
}

static void test_relink_in_address_order(void) {
  struct scr_process_stats before = pstats();
  run_thread(free_every_other_shuffled, NULL);
  CHECK(wait_discards(before.discards, 3000));
  run_thread(alloc_count_ascending, NULL);
  CHECK(ascending_pairs > (HALF_N / 2) * 9 / 10);
  for (int i = 0; i < HALF_N; i++) scr_free(half_kept[i]);
}

static void test_dontdump(void) {
  run_thread(fill_and_free, (void *)(uintptr_t)(20 * MIB));
  struct scr_process_stats ps = pstats();
  CHECK(ps.dontdump_segments > 0 || scr_process_option_get("dontdump") == 0);
}

/* ---- subprocesses (re-exec of this binary with an environment) ---- */

static const char *self;

static int run_self(const char *mode, const char *const env[]) {
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; env[i]; i++) putenv((char *)env[i]);
    execl(self, self, mode, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* mode "quick": park an arena and exit at once: nothing is discarded. */
static int mode_quick(void) {
  run_thread(fill_and_free, (void *)(uintptr_t)(4 * MIB));
  return pstats().discards == 0 && pstats().parks == 1 ? 0 : 1;
}

static void *poison_target;
static void *fill_keep_first(void *arg) {
  (void)arg;
  enum { N = 2048 };
  void **v = scr_malloc(N * sizeof *v);
  for (int i = 0; i < N; i++) {
    v[i] = scr_malloc(BLOCK);
    memset(v[i], 1, BLOCK);
  }
  poison_target = v[N / 2];
  for (int i = 0; i < N; i++) scr_free(v[i]);
  scr_free(v);
  return NULL;
}

/* Does the mapping that holds p carry `flag` in its VmFlags (smaps)?
 * -1 when p is in no mapping or smaps cannot be read. */
static int vma_flag(const void *p, const char *flag) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int in = 0, found = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    } else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      char want[8];
      snprintf(want, sizeof want, " %s", flag);
      found = 0;
      for (char *q = line + 8; (q = strstr(q, want)) != NULL; q += strlen(want))
        if (q[strlen(want)] == ' ' || q[strlen(want)] == '\n') found = 1;
      break;
    }
  }
  fclose(f);
  return found;
}

/* mode "small_pages" (a fresh process): an arena that has carved 12 MiB
 * stays on small pages: no region of its segments is advised
 * MADV_HUGEPAGE, and under THP "always" they are MADV_NOHUGEPAGE. */
static int mode_small_pages(void) {
  enum { N = (12 << 20) / BLOCK };
  static void *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = scr_malloc(BLOCK);
    if (v[i] == NULL) return 2;
    memset(v[i], 1, BLOCK);
  }
  for (int i = 0; i < N; i += N / 8) {
    if (vma_flag(v[i], "hg") == 1) return 3;
    if (pstats().thp_mode == 2 && vma_flag(v[i], "nh") == 0) return 4;
  }
  return 0;
}

/* mode "drain" / "drain_other" (caps as the defaults, decay delay
 * 300 ms): a finished thread's blocks freed by the main thread, alone or
 * while another thread holds an arena.  Either way the pages those frees
 * empty go back at once, by the heap's caps and the budget, not at the
 * discard. */
enum { HOLD_N = (16 << 20) / BLOCK };
static void *hold_blocks[HOLD_N];
static void *fill_hold_blocks(void *arg) {
  (void)arg;
  for (int i = 0; i < HOLD_N; i++) {
    hold_blocks[i] = scr_malloc(BLOCK);
    if (hold_blocks[i]) memset(hold_blocks[i], 7, BLOCK);
  }
  return NULL;
}
static _Atomic int sleeper_go;
static void *sleeper(void *arg) {
  (void)arg;
  void *p = scr_malloc(64); /* holds an arena until told */
  while (!atomic_load(&sleeper_go)) sleep_ms(1);
  scr_free(p);
  return NULL;
}
static int mode_drain(int other) {
  scr_free(scr_malloc(64)); /* the main thread holds an arena */
  pthread_t t;
  if (other && pthread_create(&t, NULL, sleeper, NULL) != 0) return 2;
  while (other && pstats().arenas_owned < 2) sleep_ms(1);
  run_thread(fill_hold_blocks, NULL);
  struct scr_process_stats s0 = pstats();
  long full = rss_kib(), full_bytes = committed_kib();
  for (int i = 0; i < HOLD_N; i++) scr_free(hold_blocks[i]);
  long freed = rss_kib(), freed_bytes = committed_kib();
  struct scr_process_stats s1 = pstats();
  int rc = 0;
  if (s1.discards != s0.discards) rc = 7;                     /* too soon for the discard */
  else if (freed_bytes > full_bytes - 8 * 1024) rc = 8;       /* gone back at once (most of 16 MiB) */
#ifndef __SANITIZE_THREAD__ /* which keeps the shadow of pages given back until their mapping goes */
  else if (freed > full - 8 * 1024) rc = 9;                   /* and so has the RSS */
#endif
  if (other) {
    atomic_store(&sleeper_go, 1);
    pthread_join(t, NULL);
  }
  if (rc) fprintf(stderr, "drain%s: rc %d, RSS %ld -> %ld kB, committed %ld -> %ld kB\n", other ? "_other" : "", rc,
                  full, freed, full_bytes, freed_bytes);
  return rc;
}

/* mode "borrowed" (decay delay 2 ms): the main thread frees a finished
 * thread's blocks, and each batch of its remote frees borrows the parked
 * arena, so the helper's look at the due time often finds the arena off
 * the parked list.  It must look again when the arena is back: every
 * round ends with a discard. */
static int mode_borrowed(void) {
  scr_free(scr_malloc(64));
  for (int round = 0; round < 12; round++) {
    uint64_t before = pstats().discards;
    run_thread(fill_hold_blocks, NULL);
    for (int i = 0; i < HOLD_N; i++) scr_free(hold_blocks[i]);
    if (!wait_discards(before, 3000)) {
      fprintf(stderr, "borrowed: no discard in round %d\n", round);
      return 1;
    }
  }
  return 0;
}

static void on_segv(int sig) {
  (void)sig;
  _exit(42);
}

/* mode "poison": a discarded page faults; a thread that claims the arena
 * again gets usable memory. */
static int mode_poison(void) {
  run_thread(fill_keep_first, NULL);
  if (!wait_discards(0, 3000)) return 2;
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, on_segv);
    signal(SIGBUS, on_segv);
    volatile unsigned char *p = poison_target;
    unsigned char c = *p;
    _exit(c == 0 ? 3 : 4); /* readable: poison failed */
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 42)) return 5;
  run_thread(fill_and_free, (void *)(uintptr_t)(8 * MIB)); /* claims, unpoisons, uses */
  return 0;
}

static void test_exit_within_delay(void) {
  const char *env[] = {"SCRALLOC_DECAY_MS=1000", NULL};
  CHECK_EQ(run_self("quick", env), 0);
}

static void test_poison(void) {
  const char *env[] = {"SCRALLOC_DISCARD=poison", "SCRALLOC_DECAY_MS=50", "SCRALLOC_RETAIN=100000",
                       "SCRALLOC_RETAIN_BYTES=1G", NULL};
  CHECK_EQ(run_self("poison", env), 0);
}

static void test_arenas_stay_on_small_pages(void) {
  const char *env[] = {NULL};
  CHECK_EQ(run_self("small_pages", env), 0);
}

static void test_frees_of_a_finished_thread_go_back_at_once(void) {
  const char *env[] = {"SCRALLOC_RETAIN=1", "SCRALLOC_RETAIN_BYTES=512K", "SCRALLOC_DECAY_MS=300", NULL};
  CHECK_EQ(run_self("drain", env), 0);
  CHECK_EQ(run_self("drain_other", env), 0);
}

static void test_a_borrowed_arena_is_discarded_when_back(void) {
  const char *env[] = {"SCRALLOC_RETAIN=1", "SCRALLOC_RETAIN_BYTES=512K", "SCRALLOC_DECAY_MS=2",
                       "SCRALLOC_DECAY_MAX_MS=2", NULL};
  CHECK_EQ(run_self("borrowed", env), 0);
}

static void test_discard_off(void) {
  const char *env[] = {"SCRALLOC_DISCARD=0", "SCRALLOC_DECAY_MS=0", NULL};
  /* "quick" passes with discard off whatever the delay */
  CHECK_EQ(run_self("quick", env), 0);
}

int main(int argc, char **argv) {
  self = argv[0];
  if (argc > 1 && strcmp(argv[1], "quick") == 0) return mode_quick();
  if (argc > 1 && strcmp(argv[1], "poison") == 0) return mode_poison();
  if (argc > 1 && strcmp(argv[1], "small_pages") == 0) return mode_small_pages();
  if (argc > 1 && strcmp(argv[1], "drain") == 0) return mode_drain(0);
  if (argc > 1 && strcmp(argv[1], "borrowed") == 0) return mode_borrowed();
  if (argc > 1 && strcmp(argv[1], "drain_other") == 0) return mode_drain(1);
  /* Arenas keep every empty page (the core would otherwise give most of
   * them back at free time), so the discard has something to return. */
  setenv("SCRALLOC_RETAIN", "100000", 1);
  setenv("SCRALLOC_RETAIN_BYTES", "1G", 1);
  setenv("SCRALLOC_DECAY_MS", "100", 1);
  setenv("SCRALLOC_DECAY_MAX_MS", "400", 1);
  scr_process_option_set("discard", "1");
  TEST(test_discard_returns_rss);
  TEST(test_relink_in_address_order);
  TEST(test_dontdump);
  TEST(test_arenas_stay_on_small_pages);
  TEST(test_frees_of_a_finished_thread_go_back_at_once);
  TEST(test_a_borrowed_arena_is_discarded_when_back);
  TEST(test_exit_within_delay);
  TEST(test_poison);
  TEST(test_discard_off);
  return check_done();
}
