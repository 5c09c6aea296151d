/* Retention of the process allocator (docs/process.md, "What goes back,
 * and when"): freed memory stays committed until it has gone unused for
 * the decay delay, so a thread that frees and allocates bursts reuses its
 * freed pages without madvise, while the helper thread gives back what a
 * thread freed before it went idle; memory taken again soon after it went
 * back counts as refaulted and backs the delay off; retain_max caps what
 * stays; an exiting thread's arena gives back what it kept above
 * retain_bytes at park; freed huge blocks serve later requests of other
 * sizes and other threads; and a trim from one thread reaches the arenas
 * of threads that are alive and busy.
 * Runs in the debug, ASan+UBSan and TSan builds. */
#include "arena_probe.h"
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
  LIVE_BLOCK = 8192,
  LIVE_BLOCKS = 1024,       /* 8 MiB kept live */
  BURST_BLOCK = 100 << 10,  /* two pages each */
  BURST_BLOCKS = 48,        /* 4.7 MiB freed and allocated again each round */
  ROUNDS = 6,
};

struct burst_result {
  uint64_t madvise_calls;  /* the arena's, over rounds 2..ROUNDS */
  unsigned arena;          /* the arena the thread held */
  uint64_t dirty_before_exit;
};

/* Builds a live set, then allocates, writes and frees a burst per round;
 * counts its arena's madvise calls after the first round. */
static void *burst_thread(void *arg) {
  struct burst_result *r = arg;
  void *mark = scr_malloc(57000); /* its arena is the one with a block of class 57344 */
  void **live = scr_malloc(LIVE_BLOCKS * sizeof(void *));
  for (int i = 0; i < LIVE_BLOCKS; i++) {
    live[i] = scr_malloc(LIVE_BLOCK);
    memset(live[i], 7, LIVE_BLOCK);
  }
  void *burst[BURST_BLOCKS];
  struct scr_stats st0, st1;
  memset(&st0, 0, sizeof st0);
  r->arena = arena_with_live(57344);
  CHECK(r->arena != UINT32_MAX);
  for (int round = 0; round < ROUNDS; round++) {
    if (round == 1) scr_arena_stats(r->arena, &st0);
    for (int i = 0; i < BURST_BLOCKS; i++) {
      burst[i] = scr_malloc(BURST_BLOCK);
      CHECK(burst[i] != NULL);
      memset(burst[i], round, BURST_BLOCK);
    }
    for (int i = 0; i < BURST_BLOCKS; i++) scr_free(burst[i]);
  }
  scr_arena_stats(r->arena, &st1);
  r->madvise_calls = st1.madvise_calls - st0.madvise_calls;
  r->dirty_before_exit = st1.dirty_bytes;
  for (int i = 0; i < LIVE_BLOCKS; i++) scr_free(live[i]);
  scr_free(live);
  scr_free(mark);
  return NULL;
}

static struct burst_result run_bursts(void) {
  struct burst_result r;
  memset(&r, 0, sizeof r);
  pthread_t t;
  pthread_create(&t, NULL, burst_thread, &r);
  pthread_join(t, NULL);
  return r;
}

/* The thread's freed bursts wait committed and the next round takes
 * them: no madvise.  With a hard cap below a burst (retain_max 1 MiB) the
 * same rounds give pages back every round: the test would fail if the
 * decay did not keep them. */
static void test_bursts_reuse_freed_pages(void) {
  scr_process_option_set("retain_max", "1M");
  struct burst_result fixed = run_bursts();
  scr_process_option_set("retain_max", "0");
  struct burst_result ratio = run_bursts();
  printf("  madvise calls over %d rounds: %llu with retain_max 1M, %llu with the decay alone\n", ROUNDS - 1,
         (unsigned long long)fixed.madvise_calls, (unsigned long long)ratio.madvise_calls);
  CHECK(fixed.madvise_calls >= ROUNDS - 1);
  CHECK(ratio.madvise_calls <= 2);
  /* what the thread kept above retain_bytes went back when it exited */
  CHECK(ratio.dirty_before_exit >= (uint64_t)2 << 20);
  struct scr_stats st;
  CHECK(scr_arena_stats(ratio.arena, &st) == SCR_OK);
  printf("  dirty before exit %llu KiB, after park %llu KiB\n", (unsigned long long)(ratio.dirty_before_exit >> 10),
         (unsigned long long)(st.dirty_bytes >> 10));
  CHECK(st.dirty_bytes + st.retained_bytes <= (uint64_t)512 << 10);
}

static struct scr_process_stats pstats(void) {
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  return ps;
}

struct huge_job { size_t n; void *freed; };
static void *huge_freer(void *arg) {
  struct huge_job *j = arg;
  uint8_t *p = scr_malloc(j->n);
  CHECK(p != NULL);
  memset(p, 0x5a, j->n);
  j->freed = p;
  scr_free(p);
  return NULL;
}

/* A huge block one thread freed serves another thread's request of
 * another size: smaller (its tail unmapped) or larger (grown); a calloc
 * from it reads as zero; it is still known as freed (a second free is a
 * double free); trim gives back what the cache holds. */
static void test_huge_blocks_reused_by_any_thread(void) {
  scr_trim();
  struct scr_process_stats ps0 = pstats();
  size_t n = (size_t)3 << 20;
  struct huge_job job = {n, NULL};
  pthread_t t;
  pthread_create(&t, NULL, huge_freer, &job);
  pthread_join(t, NULL);
  void *freed = job.freed;
  struct scr_process_stats ps1 = pstats();
  CHECK_EQ(ps1.huge_cache_puts, ps0.huge_cache_puts + 1);
  struct scr_stats st;
  scr_stats(&st);
  CHECK(st.cached_bytes >= n);
  /* a double free of the cached block is told as one */
  scr_process_option_set("on_error", "ignore");
  scr_free(freed);
  CHECK_EQ(pstats().double_frees, ps1.double_frees + 1);
  scr_process_option_set("on_error", "abort");

  uint64_t mmaps0 = st.mmap_calls;
  uint8_t *p = scr_malloc((size_t)2 << 20); /* smaller: the tail goes */
  CHECK(p == freed);
  CHECK(p[0] == 0x5a); /* reused, not a fresh mapping */
  CHECK_EQ(pstats().huge_cache_hits, ps1.huge_cache_hits + 1);
  scr_stats(&st);
  CHECK_EQ(st.mmap_calls, mmaps0);
  scr_free(p);
  size_t big = (size_t)7 << 19; /* 3.5 MiB */
  uint8_t *q = scr_calloc(1, big); /* larger: grown, and zeroed */
  CHECK(q != NULL);
  bool zero = q[big - 1] == 0;
  for (size_t i = 0; i < big; i += 4096) zero &= q[i] == 0;
  CHECK(zero);
  CHECK_EQ(pstats().huge_cache_hits, ps1.huge_cache_hits + 2);
  scr_free(q);
  scr_stats(&st);
  CHECK(st.cached_blocks >= 1);
  CHECK(scr_trim() >= big);
  scr_stats(&st);
  CHECK_EQ(st.cached_bytes, 0);
}

static void *free_it(void *p) {
  scr_free(p); /* another thread's block: a remote free, which writes the freed-block key into it */
  return NULL;
}

/* A huge block that another thread freed (its second word then holds the
 * freed-block key) serves a malloc from the cache; a realloc of it to a
 * small size copies its first bytes into a small block, which must not
 * then look freed: its free is not a double free. */
static void test_reused_block_is_not_freed(void) {
  scr_trim();
  size_t n = (size_t)2 << 20;
  uint8_t *p = scr_malloc(n);
  p[0] = 1;
  pthread_t t;
  pthread_create(&t, NULL, free_it, p);
  pthread_join(t, NULL);
  for (int i = 0; i < 64; i++) scr_free(scr_malloc(20000)); /* the owner drains its remote frees */
  struct scr_process_stats ps0 = pstats();
  uint8_t *q = scr_malloc(n); /* from the cache, as it was (first bytes unwritten) */
  CHECK_EQ(pstats().huge_cache_hits, ps0.huge_cache_hits + 1);
  uint8_t *r = scr_realloc(q, 100); /* moves: its first 100 bytes come along */
  CHECK(r != NULL);
  scr_process_option_set("on_error", "ignore");
  scr_free(r);
  CHECK_EQ(pstats().double_frees, ps0.double_frees);
  scr_process_option_set("on_error", "abort");
}

/* A cached block taken for a much smaller request leaves the part of its
 * tail past the next 4 MiB boundary in the cache, resident, as a block of
 * its own, which serves the next request without a new mapping. */
static void test_huge_block_tail_stays_cached(void) {
  scr_trim();
  size_t big = (size_t)9 << 20;
  uint8_t *p = scr_malloc(big);
  memset(p, 0x77, big);
  scr_free(p);
  struct scr_process_stats ps0 = pstats();
  struct scr_stats st0, st1;
  scr_stats(&st0);
  uint8_t *a = scr_malloc((size_t)2 << 20); /* the 9 MiB block, cut */
  CHECK(a == p);
  struct scr_process_stats ps1 = pstats();
  CHECK_EQ(ps1.huge_cache_hits, ps0.huge_cache_hits + 1);
  CHECK_EQ(ps1.huge_cache_puts, ps0.huge_cache_puts + 1); /* its tail */
  CHECK(ps1.huge_cache_bytes >= ((size_t)5 << 20));
  uint8_t *b = scr_malloc((size_t)4 << 20); /* the tail, resident */
  CHECK(b == p + ((size_t)4 << 20)); /* the next segment boundary, past its header page */
  CHECK(b[0] == 0x77 && b[((size_t)4 << 20) - 1] == 0x77);
  scr_stats(&st1);
  CHECK_EQ(st1.mmap_calls, st0.mmap_calls);
  CHECK_EQ(pstats().huge_cache_hits, ps0.huge_cache_hits + 2);
  scr_process_option_set("on_error", "ignore"); /* the tail's block was never handed out as such before */
  size_t usable = scr_usable_size(b); /* the tail's 5 MiB: within a quarter more than asked */
  CHECK(usable >= ((size_t)4 << 20) && usable <= ((size_t)5 << 20));
  scr_process_option_set("on_error", "abort");
  memset(a, 1, (size_t)2 << 20);
  memset(b, 2, (size_t)4 << 20);
  scr_free(a);
  scr_free(b);
  scr_trim();
  struct scr_stats st;
  scr_stats(&st);
  CHECK_EQ(st.cached_bytes, 0);
}

/* A cached block taken for a smaller request keeps at most a quarter more
 * than asked before its next 4 MiB boundary; a request the cache cannot
 * serve (a fresh mapping) gives back as many bytes of the oldest cached
 * block, from its tail, where what stays still holds a huge block. */
static void test_huge_cache_keeps_a_quarter_and_trims(void) {
  scr_trim();
  size_t ps = (size_t)sysconf(_SC_PAGESIZE), mib = (size_t)1 << 20;
  uint8_t *p = scr_malloc(40 * mib);
  memset(p, 0x33, 40 * mib);
  scr_free(p);
  uint8_t *a = scr_malloc(2 * mib); /* p's head, its tail cached on its own */
  CHECK(a == p);
  size_t usable = scr_usable_size(a);
  CHECK(usable >= 2 * mib && usable <= 2 * mib + mib / 2 + ps);
  struct scr_process_stats ps0 = pstats();
  CHECK(ps0.huge_cache_bytes >= 36 * mib && ps0.huge_cache_bytes <= 37 * mib);
  /* an alignment no cached block has: a new mapping of 8 MiB + 2 MiB */
  uint8_t *b = scr_aligned_alloc(8 * mib, 2 * mib);
  CHECK(b != NULL && ((uintptr_t)b & (8 * mib - 1)) == 0);
  struct scr_process_stats ps1 = pstats();
  CHECK_EQ(ps1.huge_cache_bytes, ps0.huge_cache_bytes - 10 * mib);
  CHECK_EQ(ps1.huge_cache_evicted, ps0.huge_cache_evicted + 10 * mib);
  struct scr_stats st;
  scr_stats(&st);
  CHECK(st.cached_blocks >= 1);
  uint8_t *c = scr_malloc(20 * mib); /* the trimmed tail, resident */
  CHECK(c != NULL && c[0] == 0x33 && c[20 * mib - 1] == 0x33);
  scr_free(a);
  scr_free(b);
  scr_free(c);
  scr_trim();
  /* the oldest cached block has an aligned block's offset: what would stay
   * after the growth holds no huge block past it, so it goes whole */
  uint8_t *q = scr_aligned_alloc(8 * mib, 3 * mib);
  CHECK(q != NULL);
  scr_free(q);
  ps0 = pstats();
  CHECK_EQ(ps0.huge_cache_blocks, 1);
  uint8_t *r = scr_malloc(5 * mib);
  CHECK(r != NULL);
  memset(r, 1, 5 * mib);
  ps1 = pstats();
  CHECK_EQ(ps1.huge_cache_blocks, 0);
  CHECK_EQ(ps1.huge_cache_evicted, ps0.huge_cache_evicted + ps0.huge_cache_bytes);
  scr_free(r);
  scr_trim();
}

/* The helper thread unmaps a cached huge block the decay delay after it
 * was freed, without any call from the program. */
static void test_huge_blocks_decay(void) {
  scr_trim();
  scr_process_option_set("decay_ms", "50");
  struct scr_process_stats ps0 = pstats();
  void *p = scr_malloc((size_t)3 << 20);
  memset(p, 1, (size_t)3 << 20);
  scr_free(p);
  for (int i = 0; i < 64; i++) scr_free(scr_malloc(20000)); /* heap calls: the tick wakes the helper */
  struct scr_stats st;
  scr_stats(&st);
  CHECK(st.cached_bytes >= ((size_t)3 << 20));
  for (int i = 0; i < 200 && pstats().huge_cache_decayed == ps0.huge_cache_decayed; i++) usleep(10000);
  scr_stats(&st);
  CHECK(pstats().huge_cache_decayed >= ps0.huge_cache_decayed + ((size_t)3 << 20));
  CHECK_EQ(st.cached_bytes, 0);
  scr_process_option_set("decay_ms", "2000");
}

/* Polls (10 ms steps, up to 5 s) until the decay has given back at
 * least `bytes` more than `before` (scr_process_stats' decay_bytes). */
static uint64_t wait_decay(uint64_t before, uint64_t bytes) {
  uint64_t now = pstats().decay_bytes;
  for (int i = 0; i < 500 && now < before + bytes; i++) {
    usleep(10000);
    now = pstats().decay_bytes;
  }
  return now - before;
}

/* The figures of what went back, and how: freed pages go back once they
 * have gone unused for the decay delay (the helper's pass: no trim, no
 * call from the program), with MADV_DONTNEED by default or MADV_FREE
 * under madv_free_below, and the kernel's LazyFree shows the latter until
 * it reclaims them. */
static void test_advice_figures(void) {
  enum { N = 2048, SIZE = 2048 }; /* 4 MiB of 2 KiB blocks: 64 pages */
  static void *b[N];
  scr_trim();
  struct scr_stats st0, st1;
  scr_stats(&st0);
  struct scr_process_stats ps0 = pstats();
  for (int i = 0; i < N; i++) memset(b[i] = scr_malloc(SIZE), 5, SIZE);
  scr_process_option_set("decay_ms", "50");
  for (int i = 0; i < N; i++) scr_free(b[i]);
  CHECK(pstats().free_committed >= (uint64_t)2 << 20); /* kept, waiting for the delay */
  uint64_t back = wait_decay(ps0.decay_bytes, (uint64_t)2 << 20);
  scr_process_option_set("decay_ms", "2000");
  scr_stats(&st1);
  struct scr_process_stats ps1 = pstats();
  bool lazy_mode = getenv("SCRALLOC_MADV_FREE_BELOW") != NULL;
  uint64_t dontneed = st1.dontneed_bytes - st0.dontneed_bytes, lazy = st1.lazy_free_bytes - st0.lazy_free_bytes;
  printf("  %llu decay passes gave back %llu KiB: %llu KiB with MADV_DONTNEED, %llu KiB with MADV_FREE (%llu KiB "
         "pending in the kernel); %llu KiB free kept committed\n",
         (unsigned long long)(ps1.decay_passes - ps0.decay_passes), (unsigned long long)(back >> 10),
         (unsigned long long)(dontneed >> 10), (unsigned long long)(lazy >> 10),
         (unsigned long long)(ps1.lazy_free_pending >> 10), (unsigned long long)(ps1.free_committed >> 10));
  CHECK(back >= (uint64_t)3 << 19); /* the thread cache keeps some of the blocks */
  CHECK(ps1.decay_passes >= ps0.decay_passes + 2);
  CHECK(st1.purge_passes >= st0.purge_passes + 1);
  if (lazy_mode) {
    CHECK(lazy >= (uint64_t)1 << 20);
    CHECK(ps1.lazy_free_pending > 0); /* nothing presses the kernel to take them this soon */
  } else {
    CHECK(dontneed >= (uint64_t)1 << 20);
    CHECK_EQ(lazy, 0);
    CHECK_EQ(ps1.lazy_free_pending, 0);
  }
}

/* Whether the OS page at p is resident. */
static int resident(const void *p);

/* A thread that frees a burst and then sleeps, making no call at all,
 * still has the burst's pages given back after the decay delay: the
 * helper thread runs the pass on the arena it holds.  (Under a space
 * budget, or with the holder's own clock, they stayed until the thread's
 * next call.) */
static _Atomic int idle_stage;
static void *idle_thread(void *arg) {
  uint8_t **b = arg;
  enum { N = 1024, SIZE = 4096 }; /* 4 MiB: 64 pages */
  for (int i = 0; i < N; i++) memset(b[i] = scr_malloc(SIZE), 3, SIZE);
  for (int i = 0; i < N; i++) scr_free(b[i]);
  atomic_store(&idle_stage, 1);
  while (atomic_load(&idle_stage) != 2) usleep(1000); /* no allocator call meanwhile */
  return NULL;
}

static void test_idle_thread_decays(void) {
  scr_trim();
  static uint8_t *b[1024];
  atomic_store(&idle_stage, 0);
  scr_process_option_set("decay_ms", "50");
  pthread_t t;
  pthread_create(&t, NULL, idle_thread, b);
  while (atomic_load(&idle_stage) != 1) usleep(1000);
  int before = 0, after = 0;
  for (int i = 0; i < 1024; i += 16) before += resident(b[i] + 64) == 1;
  for (int k = 0; k < 500; k++) {
    after = 0;
    for (int i = 0; i < 1024; i += 16) after += resident(b[i] + 64) == 1;
    if (after <= 8) break;
    usleep(10000);
  }
  atomic_store(&idle_stage, 2);
  pthread_join(t, NULL);
  scr_process_option_set("decay_ms", "2000");
  printf("  an idle thread's freed pages: %d of 64 sampled resident after its frees, %d after the decay\n", before,
         after);
  CHECK(before >= 32);
  CHECK(after <= 8); /* a retained page, and the pages of blocks the thread's cache keeps */
}

/* A thread that frees a burst, pauses past the decay delay and takes the
 * same amount again faults the pages in after they went back: refaults,
 * which double the delay until the pause no longer outlasts it; the
 * stats count them. */
static uint64_t refault_top_delay; /* the longest decay delay a round saw */

static void *refault_thread(void *arg) {
  (void)arg;
  enum { N = 32, SIZE = 131072 }; /* 4 MiB of large blocks */
  void *b[N];
  for (int round = 0; round < 8; round++) {
    for (int i = 0; i < N; i++) memset(b[i] = scr_malloc(SIZE), round, SIZE);
    for (int i = 0; i < N; i++) scr_free(b[i]);
    usleep(250000);
    uint64_t d = pstats().decay_delay_ms;
    if (d > refault_top_delay) refault_top_delay = d;
  }
  return NULL;
}

static void test_refaults_back_off(void) {
  scr_trim();
  scr_process_option_set("decay_ms", "100");
  scr_process_option_set("decay_max_ms", "3200");
  struct scr_process_stats ps0 = pstats();
  pthread_t t;
  pthread_create(&t, NULL, refault_thread, NULL);
  pthread_join(t, NULL);
  struct scr_process_stats ps1 = pstats();
  printf("  refaulted after return: %llu KiB; delay backed off %llu times, now %llu ms\n",
         (unsigned long long)((ps1.refault_bytes - ps0.refault_bytes) >> 10),
         (unsigned long long)(ps1.decay_backoffs - ps0.decay_backoffs), (unsigned long long)ps1.decay_delay_ms);
  CHECK(ps1.refault_bytes >= ps0.refault_bytes + ((uint64_t)1 << 20));
  /* At least one back-off: a second needs a round's pause (250 ms) to
   * outlast the doubled delay (200 ms) and the helper's pass after it,
   * which a loaded machine does not promise (CI saw one back-off once).
   * A round saw the delay backed off (it stays so for four quiet passes,
   * longer than a round; where it ends depends on the rounds' timing). */
  CHECK(ps1.decay_backoffs >= ps0.decay_backoffs + 1);
  printf("  longest delay seen by a round: %llu ms\n", (unsigned long long)refault_top_delay);
  CHECK(refault_top_delay >= 200);
  scr_process_option_set("decay_ms", "2000"); /* and the back-off starts again */
  scr_process_option_set("decay_max_ms", "10000");
  CHECK_EQ(pstats().decay_delay_ms, 2000);
}

static _Atomic int busy_stop, busy_ready;
static _Atomic unsigned busy_arena = UINT32_MAX;

/* Keeps freed pages dirty, then calls the allocator without pause (each
 * call reaches its heap: blocks past the thread's cache) until told to
 * stop. */
static void *busy_thread(void *arg) {
  (void)arg;
  void *mark = scr_malloc(57000);
  void *burst[BURST_BLOCKS];
  for (int i = 0; i < BURST_BLOCKS; i++) memset(burst[i] = scr_malloc(BURST_BLOCK), 1, BURST_BLOCK);
  void *live = scr_malloc((size_t)8 << 20);
  for (int i = 0; i < BURST_BLOCKS; i++) scr_free(burst[i]);
  atomic_store(&busy_arena, arena_with_live(57344));
  atomic_store(&busy_ready, 1);
  while (!atomic_load(&busy_stop)) scr_free(scr_malloc(200000));
  scr_free(live);
  scr_free(mark);
  return NULL;
}

/* scr_trim from the main thread reaches the arena of a thread that is
 * alive and busy: the thread trims at its next tick. */
static void test_trim_reaches_busy_threads(void) {
  atomic_store(&busy_stop, 0);
  atomic_store(&busy_ready, 0);
  pthread_t t;
  pthread_create(&t, NULL, busy_thread, NULL);
  while (!atomic_load(&busy_ready)) usleep(1000);
  unsigned a = atomic_load(&busy_arena);
  CHECK(a != UINT32_MAX);
  struct scr_stats st;
  scr_arena_stats(a, &st);
  uint64_t dirty0 = st.dirty_bytes;
  struct scr_process_stats ps0 = pstats();
  scr_trim();
  uint64_t dirty1 = dirty0;
  for (int i = 0; i < 500 && pstats().trim_answers == ps0.trim_answers; i++) usleep(2000);
  scr_arena_stats(a, &st);
  dirty1 = st.dirty_bytes;
  struct scr_process_stats ps1 = pstats();
  atomic_store(&busy_stop, 1);
  pthread_join(t, NULL);
  printf("  busy thread's arena: %llu KiB dirty before the trim, %llu KiB after; %llu KiB given back by it\n",
         (unsigned long long)(dirty0 >> 10), (unsigned long long)(dirty1 >> 10),
         (unsigned long long)((ps1.trim_answer_bytes - ps0.trim_answer_bytes) >> 10));
  CHECK(dirty0 >= (uint64_t)2 << 20);
  CHECK(ps1.trim_answers >= ps0.trim_answers + 1);
  CHECK(ps1.trim_answer_bytes - ps0.trim_answer_bytes >= dirty0 / 2);
  CHECK(dirty1 < dirty0 / 2);
}

static int resident(const void *p) {
  unsigned char v = 0;
  uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
  if (mincore((void *)((uintptr_t)p & ~(ps - 1)), ps, &v) != 0) return -1;
  return v & 1;
}

enum { SLOT = 16384, SLOTS = 64 };

/* Free 16 KiB slots among live ones: scr_trim gives back the OS pages
 * inside each free slot past its first (which keeps the free list's link
 * and the freed-block key: a second free is still a double free); the
 * live slots are untouched; the slots serve mallocs and callocs again
 * (calloc's read as zero). */
static void test_interior_return(void) {
  uint8_t *p[SLOTS];
  for (int i = 0; i < SLOTS; i++) {
    p[i] = scr_malloc(SLOT);
    CHECK(p[i] != NULL);
    memset(p[i], i & 3 ? 0xAA : (uint8_t)i, SLOT);
  }
  for (int i = 0; i < SLOTS; i++)
    if (i & 3) scr_free(p[i]);
  struct scr_process_stats ps0 = pstats();
  scr_trim();
  struct scr_process_stats ps1 = pstats();
  uint64_t got = ps1.interior_bytes - ps0.interior_bytes, lazy = ps1.interior_lazy_bytes - ps0.interior_lazy_bytes;
  printf("  %llu KiB given back inside free slots (%llu KiB with MADV_FREE)\n", (unsigned long long)(got >> 10),
         (unsigned long long)(lazy >> 10));
  CHECK(got >= (uint64_t)(SLOTS * 3 / 4 - 2) * (SLOT - 4096)); /* every free slot's 12 KiB (one may sit in a cache) */
  bool lazy_mode = getenv("SCRALLOC_MADV_FREE_BELOW") != NULL;
  if (lazy_mode) CHECK(lazy == got);
  else CHECK(lazy == 0);
  unsigned gone = 0, kept = 0;
  for (int i = 0; i < SLOTS; i++) {
    if (i & 3) {
      gone += !lazy_mode && resident(p[i] + 8192) == 0;
    } else {
      bool same = true;
      for (int k = 0; k < SLOT; k += 512) same &= p[i][k] == (uint8_t)i;
      kept += same && resident(p[i] + 8192) == 1;
    }
  }
  if (!lazy_mode) CHECK(gone >= SLOTS * 3 / 4 - 2);
  CHECK_EQ(kept, SLOTS / 4);
  /* a second trim finds them given back already */
  scr_trim();
  CHECK_EQ(pstats().interior_bytes, ps1.interior_bytes);
  /* the freed-block key survived in each slot's first page */
  scr_process_option_set("on_error", "ignore");
  scr_free(p[1]);
  CHECK_EQ(pstats().double_frees, ps1.double_frees + 1);
  scr_process_option_set("on_error", "abort");
  /* the slots serve again; callocs read as zero */
  uint8_t *q[SLOTS];
  bool zero = true;
  for (int i = 0; i < SLOTS; i++) {
    q[i] = i & 1 ? scr_calloc(1, SLOT) : scr_malloc(SLOT);
    CHECK(q[i] != NULL);
    if (i & 1)
      for (int k = 0; k < SLOT; k += 64) zero &= q[i][k] == 0;
    memset(q[i], 0x11, SLOT);
  }
  CHECK(zero);
  for (int i = 0; i < SLOTS; i++) {
    if ((i & 3) == 0) {
      bool same = true;
      for (int k = 0; k < SLOT; k += 512) same &= p[i][k] == (uint8_t)i;
      CHECK(same);
      scr_free(p[i]);
    }
    scr_free(q[i]);
  }
}

enum { SMALL_SLOT = 64, SMALL_PAGE = 65536, SMALL_SLOTS = SMALL_PAGE / SMALL_SLOT, SMALL_ALLOCS = 3 * SMALL_SLOTS };

/* The heap validator on the caller's arena (the debug build's asserts
 * run it at every state change too). */
static void check_arena_valid(const void *p) {
  CHECK_EQ(scr_heap_validate(scr_heap_of(p, NULL)), SCR_OK);
  CHECK_EQ(scr_process_validate(), SCR_OK);
}

/* Small slots (core/src/interior.c): a page of 64 B slots with a live
 * block at each end and every slot between them free keeps its OS pages
 * at scr_trim (a free slot's head, its link and key, is in each), so that
 * a second free of any of them is still a double free on the fast path's
 * checks; the slots serve again, callocs read as zero. */
static void test_small_slots_stay(void) {
  uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
  if (ps != 4096) {
    printf("  skipped: OS pages of %lu bytes\n", (unsigned long)ps);
    return;
  }
  static uint8_t *b[SMALL_ALLOCS];
  for (int i = 0; i < SMALL_ALLOCS; i++) {
    b[i] = scr_malloc(SMALL_SLOT);
    CHECK(b[i] != NULL);
    memset(b[i], 0x33, SMALL_SLOT);
  }
  /* a page all of whose slots are ours: its first slot is ours and so is
   * the slot SMALL_SLOTS - 1 places on (blocks come carved in order) */
  uint8_t *page = NULL;
  for (int i = 0; i < SMALL_ALLOCS && page == NULL; i++) {
    uintptr_t a = (uintptr_t)b[i];
    if (a % SMALL_PAGE != 0) continue;
    int n = 0;
    for (int k = 0; k < SMALL_ALLOCS; k++) n += (uintptr_t)b[k] - a < SMALL_PAGE;
    if (n == SMALL_SLOTS) page = b[i];
  }
  CHECK(page != NULL);
  if (page == NULL) return;
  uint8_t *first = page, *last = page + SMALL_PAGE - SMALL_SLOT;
  memset(first, 0xF1, SMALL_SLOT);
  memset(last, 0xF2, SMALL_SLOT);
  for (int i = 0; i < SMALL_ALLOCS; i++)
    if (b[i] != first && b[i] != last) scr_free(b[i]);
  check_arena_valid(first);
  struct scr_process_stats ps1 = pstats();
  scr_trim();
  check_arena_valid(first);
  unsigned kept = 0;
  for (int j = 0; j < 16; j++) kept += resident(page + j * 4096);
  CHECK_EQ(kept, 16);
  bool same = true;
  for (int k = 0; k < SMALL_SLOT; k++) same &= first[k] == 0xF1 && last[k] == 0xF2;
  CHECK(same);
  /* a second free of a slot in the middle of the page is a double free */
  scr_process_option_set("on_error", "ignore");
  scr_free(page + 5 * 4096);
  CHECK_EQ(pstats().double_frees, ps1.double_frees + 1);
  scr_free(page + SMALL_SLOT);
  CHECK_EQ(pstats().double_frees, ps1.double_frees + 2);
  scr_process_option_set("on_error", "abort");
  check_arena_valid(first);
  /* the page's slots serve again; callocs read zero */
  static uint8_t *q[SMALL_SLOTS];
  unsigned in_page = 0;
  bool zero = true;
  for (int i = 0; i < SMALL_SLOTS - 2; i++) {
    q[i] = i & 1 ? scr_calloc(1, SMALL_SLOT) : scr_malloc(SMALL_SLOT);
    CHECK(q[i] != NULL);
    in_page += (uintptr_t)(q[i] - page) < SMALL_PAGE;
    if (i & 1)
      for (int k = 0; k < SMALL_SLOT; k++) zero &= q[i][k] == 0;
    memset(q[i], 0x44, SMALL_SLOT);
  }
  printf("  %u of %u blocks taken again from the page\n", in_page, SMALL_SLOTS - 2);
  CHECK_EQ(in_page, SMALL_SLOTS - 2);
  CHECK(zero);
  check_arena_valid(first);
  for (int i = 0; i < SMALL_SLOTS - 2; i++) scr_free(q[i]);
  scr_free(first);
  scr_free(last);
  check_arena_valid(page);
  scr_trim();
}

enum { TAIL_OLD = 160, TAIL_SLOT = 192, TAIL_SLOTS = SMALL_PAGE / TAIL_SLOT };

/* Tails (core/src/interior.c): a page of 192 B slots taken on memory
 * another class used (its bytes still there: the retained page of that
 * class, emptied with the threads' caches off) with one slot carved gives
 * back the OS pages past that slot at scr_trim; the page then carves the
 * rest, and callocs from it read as zero. */
static void test_tail(void) {
  uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
  uint64_t cache_max = scr_process_option_get("cache_max");
  scr_process_option_set("cache_max", "0"); /* frees go to their pages, which empty */
  static uint8_t *fresh[2 * TAIL_SLOTS], *old[4 * (SMALL_PAGE / TAIL_OLD)], *q[TAIL_SLOTS];
  /* the class's first two pages are fresh ones (heap.c: SCR_FRESH_PAGES) */
  for (int i = 0; i < 2 * TAIL_SLOTS; i++) CHECK((fresh[i] = scr_malloc(TAIL_SLOT)) != NULL);
  /* pages of another class, written and freed: committed pages to take */
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
    CHECK((old[i] = scr_malloc(TAIL_OLD)) != NULL);
    memset(old[i], 0xEE, TAIL_OLD);
  }
  for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) scr_free(old[i]);
  uint8_t *first = scr_malloc(TAIL_SLOT);
  CHECK(first != NULL);
  uint8_t *page = (uint8_t *)((uintptr_t)first & ~(uintptr_t)(SMALL_PAGE - 1));
  if (first != page || page[ps + 100] != 0xEE) {
    printf("  skipped: the page was not taken on used memory (%p, %p: %x)\n", (void *)first, (void *)page, page[ps + 100]);
  } else {
    struct scr_process_stats ps0 = pstats();
    scr_trim();
    struct scr_process_stats ps1 = pstats();
    check_arena_valid(first);
    printf("  %llu KiB given back in total\n", (unsigned long long)((ps1.interior_bytes - ps0.interior_bytes) >> 10));
    CHECK(ps1.interior_bytes - ps0.interior_bytes >= SMALL_PAGE - ps);
    CHECK_EQ(resident(page + ps), 0);
    CHECK_EQ(resident(page + SMALL_PAGE - ps), 0);
    CHECK_EQ(resident(first), 1);
    unsigned in_page = 0;
    bool zero = true;
    for (int i = 0; i < TAIL_SLOTS - 1; i++) {
      q[i] = scr_calloc(1, TAIL_SLOT);
      CHECK(q[i] != NULL);
      in_page += (uintptr_t)(q[i] - page) < SMALL_PAGE;
      for (int k = 0; k < TAIL_SLOT; k++) zero &= q[i][k] == 0;
      memset(q[i], 0x55, TAIL_SLOT);
    }
    printf("  %u of %u callocs from the page\n", in_page, TAIL_SLOTS - 1);
    CHECK_EQ(in_page, TAIL_SLOTS - 1);
    CHECK(zero);
    check_arena_valid(first);
    for (int i = 0; i < TAIL_SLOTS - 1; i++) scr_free(q[i]);
  }
  scr_free(first);
  for (int i = 0; i < 2 * TAIL_SLOTS; i++) scr_free(fresh[i]);
  char v[32];
  snprintf(v, sizeof v, "%llu", (unsigned long long)cache_max);
  scr_process_option_set("cache_max", v);
  scr_trim();
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "lazy") == 0) { /* MADV_FREE for every interior range */
    setenv("SCRALLOC_MADV_FREE_BELOW", "1G", 1);
    TEST(test_interior_return);
    TEST(test_advice_figures);
    TEST(test_small_slots_stay);
    return check_done();
  }
  /* The decay gives back pages unused for decay_ms; sanitizer builds are
   * slow enough for a round of a test to take the default's half. */
  setenv("SCRALLOC_DECAY_MS", "2000", 1);
  scr_process_option_set("discard", "0"); /* parked arenas keep their pages */
  TEST(test_bursts_reuse_freed_pages);
  TEST(test_huge_blocks_reused_by_any_thread);
  TEST(test_huge_block_tail_stays_cached);
  TEST(test_huge_cache_keeps_a_quarter_and_trims);
  TEST(test_reused_block_is_not_freed);
  TEST(test_huge_blocks_decay);
  TEST(test_advice_figures);
  TEST(test_idle_thread_decays);
  TEST(test_refaults_back_off);
  TEST(test_trim_reaches_busy_threads);
  TEST(test_interior_return);
  TEST(test_small_slots_stay);
  TEST(test_tail);
  {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s lazy", argv[0]);
    CHECK(system(cmd) == 0); /* the same with MADV_FREE */
  }
  scr_trim();
  CHECK(scr_process_validate() == SCR_OK);
  return check_done();
}
