/* The thread's cache (core/src/process/tcache.c) and its options:
 * cache_bytes, cache_medium, cache_max, cache_grow; which blocks it keeps (a parked
 * arena's, the segment map's marks).  A process of its own, so that
 * which arenas exist is known: the main thread's arena 0 and the arenas
 * of the threads each test starts. */
#include "arena_probe.h"
#include "check.h"
#include "internal.h" /* the segment map's marks */
#include "scralloc.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static void run_thread(void *(*fn)(void *), void *arg) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, arg) == 0) pthread_join(t, NULL);
}


/* What one free of a block of 8000 bytes (class 8192) did to the freeing
 * thread's arena: its retained (empty, kept) pages of the class, and its
 * live blocks, as the arena publishes them; and whether the next malloc
 * of the class got the same block back. */
struct one_free {
  unsigned arena;
  long retained_delta, allocs_delta;
  int same_block;
};
static void *free_one(void *arg) {
  struct one_free *r = arg;
  unsigned c = class_of_size(8192);
  void *p = scr_malloc(8000);
  memset(p, 1, 8000);
  r->arena = arena_with_live(8192);
  struct scr_stats s0, s1;
  scr_arena_stats(r->arena, &s0);
  scr_free(p);
  scr_arena_stats(r->arena, &s1);
  r->retained_delta = (long)s1.classes[c].retained - (long)s0.classes[c].retained;
  r->allocs_delta = (long)s1.allocs - (long)s0.allocs;
  void *q = scr_malloc(8000);
  r->same_block = q == p;
  scr_free(q);
  return NULL;
}

static void test_defaults(void) {
  CHECK_EQ(scr_process_option_get("cache_bytes"), 16384);
  CHECK_EQ(scr_process_option_get("cache_medium"), 2);
  CHECK_EQ(scr_process_option_get("cache_max"), 65536);
  CHECK(scr_process_option_set("cache_max", "4096") == SCR_OK);
  CHECK(scr_process_option_set("cache_max", "70000") == SCR_EINVAL); /* out of range: refused */
  CHECK_EQ(scr_process_option_get("cache_max"), 4096);
  CHECK(scr_process_option_set("cache_max", "65536") == SCR_OK);
  CHECK(scr_process_option_set("cache_medium", "lots") == SCR_EINVAL);
  CHECK_EQ(scr_process_option_get("cache_medium_after"), 16);
}

/* Pages of class c in arena i, as it publishes them. */
static uint64_t class_pages(unsigned i, unsigned c) {
  struct scr_stats st;
  CHECK(scr_arena_stats(i, &st) == SCR_OK);
  return st.classes[c].pages;
}

/* The main thread claimed arena 0 while no other arena was held: its
 * list of a medium class stays closed until its 16th malloc of the class,
 * so a block freed before goes back to its run, which empties and goes
 * back too (a run of 40 KiB blocks, one of them used).  From then on the
 * list keeps the block and the run stays.  A thread that claims an arena
 * while another is held keeps its medium blocks from the first. */
static void *one_medium_free(void *arg) {
  unsigned c = class_of_size(40960);
  void *p = scr_malloc(40000);
  memset(p, 3, 40000);
  unsigned arena = arena_with_live(40960);
  scr_free(p);
  *(uint64_t *)arg = class_pages(arena, c);
  return NULL;
}
/* A thread that frees before it mallocs takes an arena at that free
 * (below); when it can have none (here the new arena's first OS call
 * fails: no arena is parked yet), the block goes home as before, and
 * free leaves errno as it was. */
static void quiet(int err, const char *msg, void *arg) { (void)err; (void)msg; (void)arg; }
struct claim_fails {
  void *p;
  int errno_after;
  uint64_t claims;
};
static void *free_while_no_arena_can_be_had(void *arg) {
  struct claim_fails *r = arg;
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  errno = EINTR;
  scr_debug_fail_os_call(1);
  scr_free(r->p);
  r->errno_after = errno;
  scr_debug_fail_os_call(0);
  scr_process_stats(&s1);
  r->claims = s1.claims - s0.claims;
  return NULL;
}
static void test_a_failed_claim_in_free_keeps_errno(void) {
  struct claim_fails r = {memset(scr_malloc(48), 8, 48), 0, 99};
  scr_set_error_handler(quiet, NULL); /* the failed mapping's report */
  run_thread(free_while_no_arena_can_be_had, &r);
  scr_set_error_handler(NULL, NULL);
  CHECK_EQ(r.claims, 0);
  CHECK_EQ(r.errno_after, EINTR);
  CHECK(scr_process_validate() == SCR_OK);
}

static void test_the_first_arenas_medium_lists_open_late(void) {
  unsigned c = class_of_size(40960);
  CHECK(c < SCR_CLASS_COUNT);
  CHECK_EQ(class_pages(0, c), 0); /* the main thread has not used the class */
  for (int i = 1; i <= 20; i++) {
    unsigned char *p = scr_malloc(40000);
    CHECK(p != NULL && arena_with_live(40960) == 0);
    memset(p, i, 40000);
    scr_free(p);
    CHECK_EQ(class_pages(0, c), i < 16 ? 0 : 1); /* the run went back; from the 16th, the block stays */
  }
  void *a = scr_malloc(40000), *b = scr_malloc(40000);
  scr_free(a);
  scr_free(b);
  CHECK(scr_malloc(40000) == b); /* the list's newest */
  CHECK(scr_malloc(40000) == a);
  scr_free(a);
  scr_free(b);
  uint64_t pages_after_free = 0;
  run_thread(one_medium_free, &pages_after_free);
  CHECK_EQ(pages_after_free, 1); /* kept at once */
}

/* One free_one in a new thread: the freed block was counted as free and
 * came back at the next malloc; retained pages moved by retained_delta.
 * The arena it ran in. */
static unsigned check_one_free(long retained_delta) {
  struct one_free r = {0};
  run_thread(free_one, &r);
  CHECK(r.arena != UINT32_MAX);
  CHECK_EQ(r.retained_delta, retained_delta);
  CHECK_EQ(r.allocs_delta, -1);
  CHECK(r.same_block);
  return r.arena;
}

/* By default the freed block stays in the thread's cache: its page is
 * still in use (no retained page more), the arena's figures count it as
 * free, and the next malloc gets it back. */
static void test_a_kept_block_keeps_its_page(void) { check_one_free(0); }

/* cache_max=4096: the block goes back to its page at once, which empties
 * and is kept as the class's retained page (another class could take
 * it); the next malloc gets the same block from that page.  A thread
 * takes the options when it claims its arena: the same arena, claimed
 * again with the default, keeps the block again. */
static void test_cache_max_sends_big_blocks_home(void) {
  CHECK(scr_process_option_set("cache_max", "4096") == SCR_OK);
  unsigned arena = check_one_free(1);
  CHECK(scr_process_option_set("cache_max", "65536") == SCR_OK);
  CHECK_EQ(check_one_free(0), arena);
}

/* A full list of a class of 4 KiB or more grows by a block at each
 * further free while the arena's grown bytes stay within cache_grow (a
 * bound for each thread, whatever other threads hold); trim, like a park,
 * takes the caps back to their bases, so the next round grows again.
 * Blocks of 8000 bytes (class 8192, base cap 2); the counts are the
 * process's cache_grows. */
enum { GROW_N = 24 };
static void *grow_rounds(void *arg) {
  uint64_t *grows = arg;
  for (int round = 0; round < 2; round++) {
    void *p[GROW_N];
    for (int i = 0; i < GROW_N; i++) {
      p[i] = scr_malloc(8000);
      memset(p[i], i, 8000);
    }
    struct scr_process_stats s0, s1;
    scr_process_stats(&s0);
    for (int i = 0; i < GROW_N; i++) scr_free(p[i]);
    scr_process_stats(&s1);
    grows[round] = s1.cache_grows - s0.cache_grows;
    scr_trim();
  }
  return NULL;
}
static void check_grows(const char *budget, uint64_t want) {
  CHECK(scr_process_option_set("cache_grow", budget) == SCR_OK);
  uint64_t grows[2] = {99, 99};
  run_thread(grow_rounds, grows);
  CHECK_EQ(grows[0], want);
  CHECK_EQ(grows[1], want);
}
static void test_full_big_lists_grow_within_the_budget(void) {
  CHECK_EQ(scr_process_option_get("cache_grow"), (uint64_t)4 << 20);
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  CHECK_EQ(ps.arenas_owned, 1); /* the main thread's; the test's thread makes 2 */
  check_grows("4M", GROW_N - 2);  /* every block past the base cap */
  check_grows("64K", 8);          /* eight blocks of 8 KiB, though another thread holds an arena */
  check_grows("0", 0);            /* fixed caps */
  CHECK(scr_process_option_set("cache_grow", "4M") == SCR_OK);
}

/* A run: a thread's list of a small class (base cap 64 blocks) grows
 * with the frees past the cap, up to 1,024 blocks, within the same
 * bound, so that a run of 1,000 mallocs and frees is served by the list,
 * in the main thread alone and in a thread while the main thread holds
 * its arena too; blocks of 48 B, a run of RUN_N. */
enum { RUN_N = 1000 };
static void *run_rounds(void *arg) {
  uint64_t *grows = arg;
  for (int round = 0; round < 2; round++) {
    static void *p[RUN_N];
    for (int i = 0; i < RUN_N; i++) p[i] = memset(scr_malloc(48), i, 48);
    struct scr_process_stats s0, s1;
    scr_process_stats(&s0);
    for (int i = 0; i < RUN_N; i++) scr_free(p[i]);
    scr_process_stats(&s1);
    grows[round] = s1.cache_grows - s0.cache_grows;
  }
  scr_trim();
  return NULL;
}
static void test_small_lists_grow_to_a_run(void) {
  CHECK(scr_process_option_set("cache_grow", "4M") == SCR_OK);
  uint64_t grows[2] = {99, 99};
  run_rounds(grows); /* the main thread, alone (the others' arenas are parked) */
  CHECK_EQ(grows[0], RUN_N - 64); /* every free past the base cap */
  CHECK_EQ(grows[1], 0);          /* the second run fits the grown list */
  grows[0] = grows[1] = 99;
  run_thread(run_rounds, grows); /* a thread while the main thread holds its arena */
  CHECK_EQ(grows[0], RUN_N - 64);
  CHECK_EQ(grows[1], 0);
  CHECK(scr_process_option_set("cache_grow", "0") == SCR_OK);
  grows[0] = grows[1] = 99;
  run_rounds(grows);
  CHECK_EQ(grows[0], 0); /* fixed caps */
  CHECK(scr_process_option_set("cache_grow", "4M") == SCR_OK);
}

/* Decay reaches the thread's cache: at the holder's tick after a decay
 * delay (100 ms here), a list that no malloc found empty in that time sends
 * its blocks home (cache_gc_blocks counts them), even while the thread
 * only takes blocks of its cache (its sampler's countdown ticks); a list
 * that a malloc finds empty in every round keeps them.  Blocks of 8000
 * bytes (class 8192), a list grown to 24 or 64; for 400 ms, either 1 KiB
 * pairs (the list of 8000 left unused) or rounds of 65 blocks of 8000. */
static uint64_t ms_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}
static void *unused_lists(void *arg) {
  uint64_t *got = arg; /* in: 0 pairs, 1 rounds; out: the blocks sent home */
  int rounds = (int)*got;
  static void *p[65];
  for (int i = 0; i < 24; i++) p[i] = memset(scr_malloc(8000), i, 8000);
  for (int i = 0; i < 24; i++) scr_free(p[i]);
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  for (uint64_t t0 = ms_now(); ms_now() - t0 < 400;) {
    for (int i = 0; i < 65 && rounds; i++) p[i] = memset(scr_malloc(8000), i, 8000);
    for (int i = 0; i < 65 && rounds; i++) scr_free(p[i]);
    for (int i = 0; i < 1000 && !rounds; i++) scr_free(memset(scr_malloc(1024), i, 1024));
  }
  scr_process_stats(&s1);
  *got = s1.cache_gc_blocks - s0.cache_gc_blocks;
  return NULL;
}
static void test_lists_left_unused_go_home(void) {
  CHECK(scr_process_option_set("decay_ms", "100") == SCR_OK);
  uint64_t got = 0;
  run_thread(unused_lists, &got);
  CHECK(got >= 24);      /* the 8000s, and the 1 KiB list's block now and then */
  CHECK(got < 24 + 10);
  got = 1;
  run_thread(unused_lists, &got);
  CHECK_EQ(got, 0);      /* emptied every round */
  CHECK(scr_process_option_set("decay_ms", "1000") == SCR_OK);
}

/* The gc gives back a grown cap with the blocks: a list grown to 64
 * blocks of 8000 and then emptied by mallocs, left unused for 400 ms
 * (decay 100 ms), grows again block by block when 64 are freed into it;
 * a cap kept grown would have taken them without a grow. */
static void *regrow_after_gc(void *arg) {
  uint64_t *grows = arg;
  static void *p[64];
  struct scr_process_stats s0, s1;
  for (int i = 0; i < 64; i++) p[i] = memset(scr_malloc(8000), i, 8000);
  for (int i = 0; i < 64; i++) scr_free(p[i]); /* the list grows to 64 */
  for (int i = 0; i < 64; i++) p[i] = scr_malloc(8000); /* and is emptied */
  for (uint64_t t0 = ms_now(); ms_now() - t0 < 400;)
    for (int i = 0; i < 1000; i++) scr_free(memset(scr_malloc(1024), i, 1024));
  scr_process_stats(&s0);
  for (int i = 0; i < 64; i++) scr_free(p[i]);
  scr_process_stats(&s1);
  *grows = s1.cache_grows - s0.cache_grows;
  return NULL;
}
static void test_an_empty_list_left_unused_gives_back_its_cap(void) {
  CHECK(scr_process_option_set("decay_ms", "100") == SCR_OK);
  uint64_t grows = 0;
  run_thread(regrow_after_gc, &grows);
  CHECK(grows >= 32); /* from its base of 2 blocks */
  CHECK(scr_process_option_set("decay_ms", "1000") == SCR_OK);
}

/* A realloc that moves a block of a size class goes through the thread's
 * cache, as the malloc and free it stands for: the new block is the last
 * one freed of its class, and a buffer grown by doubling and then freed,
 * time after time, takes the same blocks again.  (Through the heap, every
 * step took a block of a page while the frees filled the cache's lists:
 * sixteen pages of 16 KiB blocks.)  In a thread, an arena of its own. */
struct regrow { int same_block, kept_data; uint64_t pages; };
static void *regrow(void *arg) {
  struct regrow *r = arg;
  void *last = scr_malloc(16000);
  scr_free(last);
  unsigned char *p = scr_realloc(memset(scr_malloc(8000), 7, 8000), 16000);
  r->same_block = p == last;
  r->kept_data = p[0] == 7 && p[7999] == 7;
  scr_free(p);
  void *marker = scr_malloc(3000); /* class 3072: finds the thread's arena */
  for (int round = 0; round < 200; round++) {
    unsigned char *b = NULL;
    for (size_t n = 8; n <= 16384; n *= 2) {
      b = scr_realloc(b, n);
      memset(b + n / 2, round & 0xff, n / 2);
    }
    scr_free(b);
  }
  r->pages = class_pages(arena_with_live(3072), class_of_size(16384));
  scr_free(marker);
  return NULL;
}
static void test_realloc_moves_through_the_cache(void) {
  struct regrow r = {0, 0, 99};
  run_thread(regrow, &r);
  CHECK(r.same_block);
  CHECK(r.kept_data);
  CHECK(r.pages <= 1);
}

/* A realloc that moves another arena's block: the old block goes where
 * the thread's free of it would, its cache (not home through the
 * owner's ring), for its next malloc of the class. */
static void *realloc_other(void *arg) {
  char *b = arg;
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  char *moved = scr_realloc(b, 4000);
  CHECK(moved != NULL && moved != b && moved[99] == 5);
  void *again = scr_malloc(100);
  scr_process_stats(&s1);
  CHECK(again == b);
  CHECK_EQ(s1.remote_frees, s0.remote_frees);
  scr_free(again);
  scr_free(moved);
  return NULL;
}
static void test_realloc_leaves_another_arenas_block_in_the_cache(void) {
  char *b = memset(scr_malloc(100), 5, 100); /* arena 0's */
  run_thread(realloc_other, b);
}

/* Other arenas' blocks past a full list go to the pool in batches of half
 * a list.  A thread that claimed its arena with shorter lists (or none)
 * leaves the batches to others; they are still there for a thread with
 * the default lists.  Every block stays accounted for (checked builds
 * report a block freed twice; ASan a use after free). */
enum { N = 4096, SIZE = 48 };
static void *blocks[N];
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage;
static void wait_stage(int s) {
  pthread_mutex_lock(&m);
  while (stage < s) pthread_cond_wait(&cv, &m);
  pthread_mutex_unlock(&m);
}
static void set_stage(int s) {
  pthread_mutex_lock(&m);
  stage = s;
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&m);
}
static void *owner(void *arg) { /* allocates, then stays (the pool takes no parked arena's blocks) */
  (void)arg;
  for (int i = 0; i < N; i++) {
    blocks[i] = scr_malloc(SIZE);
    memset(blocks[i], 0x5a, SIZE);
  }
  set_stage(1);
  wait_stage(3);
  return NULL;
}
static void *freer(void *arg) { /* frees the owner's blocks, then stays (park flushes the pool) */
  (void)arg;
  scr_free(scr_malloc(16)); /* holds an arena (a thread with none frees onto the owner's stack) */
  wait_stage(1);
  for (int i = 0; i < N; i++) scr_free(blocks[i]);
  set_stage(2);
  wait_stage(3);
  return NULL;
}
static _Atomic unsigned taken_ok;
static void *taker(void *arg) { /* arg blocks of SIZE, written, freed; then stays (a park empties the pool) */
  unsigned n = (unsigned)(uintptr_t)arg;
  void *p[256];
  for (unsigned i = 0; i < n; i++) {
    p[i] = scr_malloc(SIZE);
    memset(p[i], 0x11, SIZE);
  }
  for (unsigned i = 0; i < n; i++) scr_free(p[i]);
  atomic_fetch_add(&taken_ok, 1);
  wait_stage(3);
  return NULL;
}
static pthread_t start_taker(unsigned n) {
  pthread_t t;
  unsigned before = atomic_load(&taken_ok);
  pthread_create(&t, NULL, taker, (void *)(uintptr_t)n);
  while (atomic_load(&taken_ok) == before) sched_yield();
  return t;
}
static void test_short_lists_leave_long_batches(void) {
  pthread_t o, f, t[3];
  pthread_create(&o, NULL, owner, NULL);
  pthread_create(&f, NULL, freer, NULL);
  wait_stage(2);
  struct scr_process_stats p0, p1, p2;
  scr_process_stats(&p0);
  CHECK(p0.pool_puts > 0);
  CHECK(scr_process_option_set("cache_bytes", "16") == SCR_OK); /* one block of 48 */
  t[0] = start_taker(32);
  CHECK(scr_process_option_set("cache_max", "0") == SCR_OK); /* no cache */
  t[1] = start_taker(32);
  scr_process_stats(&p1);
  CHECK_EQ(p1.pool_takes, p0.pool_takes);
  CHECK(scr_process_option_set("cache_bytes", "16K") == SCR_OK);
  CHECK(scr_process_option_set("cache_max", "64K") == SCR_OK);
  t[2] = start_taker(32);
  scr_process_stats(&p2);
  CHECK(p2.pool_takes > p1.pool_takes);
  set_stage(3);
  pthread_join(o, NULL);
  pthread_join(f, NULL);
  for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
  /* A thread with no lists among parked arenas with free slots of the
   * class: its blocks are written and freed intact (the checked builds'
   * validators and ASan watch). */
  CHECK(scr_process_option_set("cache_max", "0") == SCR_OK);
  run_thread(taker, (void *)256);
  CHECK(scr_process_option_set("cache_max", "64K") == SCR_OK);
  CHECK_EQ(atomic_load(&taken_ok), 4);
  CHECK(scr_process_validate() == SCR_OK);
}

/* A full list that may not grow (cache_grow 0) hands its newer half on
 * (as tcmalloc's thread cache does: one walk, over the blocks that leave)
 * and keeps the older half: after 65 of arena 0's blocks are freed into
 * a list of 64, the freeing thread's next mallocs take the block it
 * freed last, then the 32nd. */
enum { HALF_SIZE = 48, HALF_CAP = 64 };
static void *half[HALF_CAP + 1];
static void *free_past_a_full_list(void *arg) {
  (void)arg;
  scr_free(scr_malloc(16)); /* holds an arena */
  scr_trim();               /* its lists at their caps, empty; no batch in the pool */
  for (int i = 0; i <= HALF_CAP; i++) scr_free(half[i]);
  void *last = scr_malloc(HALF_SIZE), *next = scr_malloc(HALF_SIZE);
  CHECK(last == half[HALF_CAP]);
  CHECK(next == half[HALF_CAP / 2 - 1]);
  scr_free(next);
  scr_free(last);
  return NULL;
}
static void test_a_full_list_hands_on_its_newer_half(void) {
  CHECK_EQ(16384 / HALF_SIZE > HALF_CAP, 1); /* the list's cap is SCR_TCACHE_CLASS_MAX */
  for (int i = 0; i <= HALF_CAP; i++) half[i] = memset(scr_malloc(HALF_SIZE), 3, HALF_SIZE); /* arena 0's */
  CHECK(scr_process_option_set("cache_grow", "0") == SCR_OK);
  run_thread(free_past_a_full_list, NULL);
  CHECK(scr_process_option_set("cache_grow", "4M") == SCR_OK);
}

/* Another arena's blocks past a full list go to the pool while it has
 * room, where other threads take them, and only then grow the list:
 * blocks of 48 B (a list of 64, batches of 32, SCR_POOL_BATCHES 8 a
 * class); the counts are the process's pool_puts and cache_grows. */
enum { POOLED_LIST = 64, POOLED_FULL = POOLED_LIST + 32 * 8, POOLED_N = POOLED_FULL + 40 };
static void *pooled[POOLED_N];
static void *fill_the_pool_then_grow(void *arg) {
  uint64_t *got = arg;
  scr_free(scr_malloc(16)); /* holds an arena */
  scr_trim();               /* its lists empty at their caps, the pool empty */
  struct scr_process_stats s0, s1, s2;
  scr_process_stats(&s0);
  for (int i = 0; i < POOLED_FULL; i++) scr_free(pooled[i]);
  scr_process_stats(&s1);
  for (int i = POOLED_FULL; i < POOLED_N; i++) scr_free(pooled[i]);
  scr_process_stats(&s2);
  got[0] = s1.pool_puts - s0.pool_puts;
  got[1] = s1.cache_grows - s0.cache_grows;
  got[2] = s2.pool_puts - s1.pool_puts;
  got[3] = s2.cache_grows - s1.cache_grows;
  scr_trim(); /* the list and the pool go home */
  return NULL;
}
static void test_another_arenas_blocks_fill_the_pool_before_the_list_grows(void) {
  for (int i = 0; i < POOLED_N; i++) pooled[i] = memset(scr_malloc(48), 5, 48); /* arena 0's */
  uint64_t got[4] = {99, 99, 99, 99};
  run_thread(fill_the_pool_then_grow, got);
  CHECK_EQ(got[0], 8); /* a batch at each overflow past the list */
  CHECK_EQ(got[1], 0);
  CHECK_EQ(got[2], 0); /* the pool full: */
  CHECK_EQ(got[3], POOLED_N - POOLED_FULL); /* the list grows */
  CHECK(scr_process_validate() == SCR_OK);
}

/* A thread that frees before it ever mallocs takes an arena at its first
 * free of a small block, and its cache keeps another arena's blocks (a
 * list of 64 blocks of 48 B holds the 40): none goes home until the
 * thread exits, when its arena parks and the cache's blocks go home. */
enum { FREE_ONLY_N = 40 };
static void *free_only[FREE_ONLY_N];
static void *free_without_malloc(void *arg) {
  uint64_t *got = arg;
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  for (int i = 0; i < FREE_ONLY_N; i++) scr_free(free_only[i]);
  scr_process_stats(&s1);
  got[0] = s1.claims - s0.claims;
  got[1] = s1.remote_frees - s0.remote_frees;
  return NULL;
}
static void test_a_thread_that_only_frees_keeps_the_blocks(void) {
  for (int i = 0; i < FREE_ONLY_N; i++) free_only[i] = memset(scr_malloc(48), 6, 48); /* arena 0's */
  uint64_t got[2] = {99, 99};
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  run_thread(free_without_malloc, got);
  scr_process_stats(&s1);
  CHECK_EQ(got[0], 1); /* its arena, at its first free */
  CHECK_EQ(got[1], 0); /* every block kept in its cache */
  CHECK_EQ(s1.remote_frees - s0.remote_frees, FREE_ONLY_N); /* home at its exit */
  CHECK(scr_process_validate() == SCR_OK);
}

/* With sampling off the sampler's countdown still runs out, every
 * SCR_PROF_IDLE bytes (it looks at the rate then): that malloc samples
 * nothing and takes the block the thread's cache holds, as any other.
 * 2,000 pairs of 8000 B run it out four times. */
static void *reuse_past_the_idle_countdown(void *arg) {
  (void)arg;
  unsigned missed = 0;
  void *p = scr_malloc(8000);
  for (int i = 0; i < 2000; i++) {
    memset(p, i, 8000);
    scr_free(p);
    void *q = scr_malloc(8000);
    missed += q != p;
    p = q;
  }
  scr_free(p);
  CHECK_EQ(missed, 0);
  return NULL;
}
static void test_an_idle_countdown_takes_the_cached_block(void) {
  CHECK_EQ(scr_process_option_get("profile_rate"), 0);
  run_thread(reuse_past_the_idle_countdown, NULL);
}

/* ---- calloc and aligned_alloc ---- */

/* calloc takes the block the thread's cache kept last, as malloc would,
 * and zeroes the bytes asked for; an overflowing count * size is ENOMEM. */
static void test_calloc_takes_a_kept_block_zeroed(void) {
  static const size_t sizes[] = {24, 100, 1000, 3000, 9000};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    unsigned char *p = scr_malloc(n);
    memset(p, 0xAB, n);
    scr_free(p);
    unsigned char *q = scr_calloc(n / 4, 4);
    CHECK(q == p);
    size_t nonzero = 0;
    for (size_t k = 0; k < n; k++) nonzero += q[k] != 0;
    CHECK_EQ(nonzero, 0);
    scr_free(q);
  }
  errno = 0;
  CHECK(scr_calloc(SIZE_MAX / 2, 3) == NULL);
  CHECK_EQ(errno, ENOMEM);
}

/* So does aligned_alloc with an alignment every block has (16 and less),
 * and a larger one that every block of a class has (that class's kept
 * block); one that is not a power of two is EINVAL. */
static void test_small_alignments_take_a_kept_block(void) {
  for (size_t align = 1; align <= 16; align *= 2) {
    void *p = scr_malloc(200);
    scr_free(p);
    void *q = scr_aligned_alloc(align, 200);
    CHECK(q == p);
    scr_free(q);
  }
  void *r = scr_aligned_alloc(256, 200);
  CHECK(r != NULL && (uintptr_t)r % 256 == 0);
  scr_free(r);
  /* a larger alignment that every block of a class has takes that
   * class's kept block too: 64 and 150 B (class 160 is not a multiple of
   * 64: class 192), 4096 and 3000 B (class 4096), 512 and 600 B (classes
   * 640, 768 and 896 are not multiples of 512: class 1024) */
  size_t cases[][3] = {{64, 192, 150}, {4096, 4096, 3000}, {512, 1000, 600}};
  for (int i = 0; i < 3; i++) {
    void *k = scr_malloc(cases[i][1]);
    scr_free(k);
    void *a = scr_aligned_alloc(cases[i][0], cases[i][2]);
    CHECK(a == k && (uintptr_t)a % cases[i][0] == 0);
    scr_free(a);
  }
  errno = 0;
  CHECK(scr_aligned_alloc(24, 200) == NULL);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(scr_aligned_alloc(0, 200) == NULL);
  CHECK_EQ(errno, EINVAL);
}

/* ---- blocks of a parked arena ---- */

/* A finished thread's blocks that the main thread frees: kept in its
 * list of the class while another thread holds an arena (threads still
 * running reuse them), sent home to the parked arena when none does (so
 * that its pages can go back).  Class 4096: its list keeps 4 (16 KiB). */
enum { PARKED_N = 16, PARKED_SIZE = 4000 };
static void *parked_blocks[PARKED_N];
static void *fill_parked(void *arg) {
  (void)arg;
  for (int i = 0; i < PARKED_N; i++) {
    parked_blocks[i] = scr_malloc(PARKED_SIZE);
    memset(parked_blocks[i], 3, PARKED_SIZE);
  }
  return NULL;
}
static _Atomic int sleeper_state; /* 1 holds an arena, 2 told to go */
static void *sleeper(void *arg) {
  (void)arg;
  void *p = scr_malloc(64);
  atomic_store(&sleeper_state, 1);
  while (atomic_load(&sleeper_state) != 2) sched_yield();
  scr_free(p);
  return NULL;
}
/* The remote frees the main thread's frees of a finished thread's
 * blocks made, with another thread holding an arena meanwhile or not. */
static uint64_t remote_frees_of_parked_blocks(int other) {
  scr_trim(); /* the main thread's lists start empty */
  pthread_t t;
  atomic_store(&sleeper_state, 0);
  if (other) {
    pthread_create(&t, NULL, sleeper, NULL);
    while (atomic_load(&sleeper_state) != 1) sched_yield();
  }
  run_thread(fill_parked, NULL); /* its arena is parked when it exits */
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  CHECK_EQ(p0.arenas_owned, other ? 2u : 1u);
  for (int i = 0; i < PARKED_N; i++) scr_free(parked_blocks[i]);
  scr_process_stats(&p1);
  if (other) {
    atomic_store(&sleeper_state, 2);
    pthread_join(t, NULL);
  }
  scr_trim();
  return p1.remote_frees - p0.remote_frees;
}
static void test_a_parked_arenas_blocks_are_kept_while_others_run(void) {
  CHECK_EQ(remote_frees_of_parked_blocks(0), PARKED_N);
  CHECK_EQ(remote_frees_of_parked_blocks(1), PARKED_N - 4);
  CHECK(scr_process_validate() == SCR_OK);
}

/* The segment map marks each arena's segments with its id + 1 (what a
 * free reads to tell its own arena's blocks and other arenas' without
 * reading the segment), and a heap the program made with 0. */
static unsigned mark_arena;
static uintptr_t mark_seen;
static void *mark_probe(void *arg) {
  (void)arg;
  void *p = scr_malloc(8000);
  memset(p, 1, 8000);
  mark_arena = arena_with_live(8192);
  mark_seen = _scr_segmap_mark(_scr_segmap_entry(p));
  scr_free(p);
  return NULL;
}
static void test_segment_map_marks(void) {
  void *p = scr_malloc(100);
  CHECK_EQ(_scr_segmap_mark(_scr_segmap_entry(p)), 1); /* arena 0, the main thread's */
  CHECK(_scr_segmap_seg(_scr_segmap_entry(p)) == _scr_segmap_get(p));
  scr_free(p);
  run_thread(mark_probe, NULL);
  CHECK(mark_arena != UINT32_MAX && mark_arena > 0);
  CHECK_EQ(mark_seen, (uintptr_t)mark_arena + 1);
  scr_heap *own = scr_heap_new(NULL);
  void *q = scr_heap_malloc(own, 100);
  CHECK_EQ(_scr_segmap_mark(_scr_segmap_entry(q)), 0);
  scr_heap_free(own, q);
  scr_heap_destroy(own);
}

/* scr_free of a block of a heap the program made (unmarked in the
 * segment map) is a foreign free, whoever else holds an arena: the block
 * stays the heap's and no thread's cache keeps it (the free fast path
 * keeps another arena's blocks while another thread holds an arena, by
 * their marks). */
static void test_a_program_heaps_block_is_not_kept(void) {
  pthread_t t;
  atomic_store(&sleeper_state, 0);
  pthread_create(&t, NULL, sleeper, NULL);
  while (atomic_load(&sleeper_state) != 1) sched_yield();
  scr_heap *own = scr_heap_new(NULL);
  void *q = scr_heap_malloc(own, 100);
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  CHECK_EQ(p0.arenas_owned, 2);
  CHECK(scr_process_option_set("on_error", "ignore") == SCR_OK);
  scr_free(q); /* counted and ignored (the default, abort, would end the test) */
  CHECK(scr_process_option_set("on_error", "abort") == SCR_OK);
  scr_process_stats(&p1);
  CHECK_EQ(p1.foreign_frees - p0.foreign_frees, 1);
  void *r = scr_malloc(100);
  CHECK(r != q);
  scr_free(r);
  atomic_store(&sleeper_state, 2);
  pthread_join(t, NULL);
  CHECK_EQ(scr_heap_usable_size(own, q), 112);
  scr_heap_free(own, q);
  CHECK_EQ(scr_heap_validate(own), SCR_OK);
  scr_heap_destroy(own);
}

/* A block of no size class (a large block in a segment of the arena's, a
 * huge one in a segment of its own: page tag OTHER) goes to its heap at
 * once: the free fast path looks its list up by the tag without testing
 * it, and the list of tag OTHER never has room (with room, such a block
 * stayed there, live for the heap, and was never handed out again). */
static void test_blocks_of_no_class_go_home(void) {
  static const size_t sizes[] = {200000, (size_t)3 << 20};
  for (unsigned k = 0; k < 2; k++) {
    void *p = scr_malloc(sizes[k]);
    CHECK(p != NULL);
    memset(p, 5, sizes[k]);
    struct scr_stats s0, s1;
    CHECK(scr_arena_stats(0, &s0) == SCR_OK);
    scr_free(p);
    CHECK(scr_arena_stats(0, &s1) == SCR_OK);
    CHECK_EQ((long)s1.allocs - (long)s0.allocs, -1);
    CHECK(s0.heap_used - s1.heap_used >= sizes[k]);
  }
}

int main(void) {
  scr_process_option_set("discard", "0"); /* parked arenas keep what they hold */
  scr_free(scr_malloc(16)); /* the main thread holds arena 0 */
  TEST(test_defaults);
  TEST(test_a_failed_claim_in_free_keeps_errno); /* before any thread parks an arena */
  TEST(test_the_first_arenas_medium_lists_open_late);
  TEST(test_a_kept_block_keeps_its_page);
  TEST(test_cache_max_sends_big_blocks_home);
  TEST(test_full_big_lists_grow_within_the_budget);
  TEST(test_small_lists_grow_to_a_run);
  TEST(test_lists_left_unused_go_home);
  TEST(test_an_empty_list_left_unused_gives_back_its_cap);
  TEST(test_realloc_moves_through_the_cache);
  TEST(test_realloc_leaves_another_arenas_block_in_the_cache);
  TEST(test_short_lists_leave_long_batches);
  TEST(test_a_full_list_hands_on_its_newer_half);
  TEST(test_another_arenas_blocks_fill_the_pool_before_the_list_grows);
  TEST(test_a_thread_that_only_frees_keeps_the_blocks);
  TEST(test_an_idle_countdown_takes_the_cached_block);
  TEST(test_calloc_takes_a_kept_block_zeroed);
  TEST(test_small_alignments_take_a_kept_block);
  TEST(test_a_parked_arenas_blocks_are_kept_while_others_run);
  TEST(test_segment_map_marks);
  TEST(test_a_program_heaps_block_is_not_kept);
  TEST(test_blocks_of_no_class_go_home);
  return check_done();
}
