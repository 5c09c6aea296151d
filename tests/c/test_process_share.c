/* The shared arena (core/src/process/share.c): threads that take turns
 * allocate from one arena; a thread that finds it taken or runs hot
 * claims its own; the last thread to leave parks it.  The main thread,
 * the process's first, holds an arena of its own, so that the shared
 * arena's members are the tests' threads. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static struct scr_process_stats pstats(void) {
  struct scr_process_stats p;
  scr_process_stats(&p);
  return p;
}

/* ---- two threads taking turns through a baton ---- */

enum { TURNS = 64, BLOCKS = 32, SIZE = 3000 };

static pthread_mutex_t baton_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t baton_cv = PTHREAD_COND_INITIALIZER;
static int baton;                 /* whose turn: 0 or 1 */
static void *handed[BLOCKS];      /* blocks the last turn left for the next to check and free */
static void *freed_last[BLOCKS];  /* addresses the last turn freed */
static int reused;                /* mallocs that got an address the other thread had freed */

static void wait_turn(int me) {
  pthread_mutex_lock(&baton_lock);
  while (baton != me) pthread_cond_wait(&baton_cv, &baton_lock); /* blocks: the thread takes turns */
}
static void pass_turn(int me) {
  baton = 1 - me;
  pthread_cond_signal(&baton_cv);
  pthread_mutex_unlock(&baton_lock);
}

static void *turn_taker(void *arg) {
  int me = (int)(intptr_t)arg;
  for (int t = 0; t < TURNS; t++) {
    wait_turn(me);
    /* the other thread's blocks: cookies intact, then freed */
    for (int i = 0; i < BLOCKS; i++) {
      if (handed[i] == NULL) continue;
      CHECK(((unsigned char *)handed[i])[0] == (unsigned char)(1 - me) &&
            ((unsigned char *)handed[i])[SIZE - 1] == (unsigned char)(1 - me));
      scr_free(handed[i]);
      freed_last[i] = handed[i];
    }
    for (int i = 0; i < BLOCKS; i++) {
      void *p = scr_malloc(SIZE);
      CHECK(p != NULL);
      for (int j = 0; j < BLOCKS; j++) reused += freed_last[j] == p;
      memset(p, me, SIZE);
      handed[i] = p;
    }
    pass_turn(me);
  }
  return NULL;
}

static void test_threads_taking_turns_share_one_arena(void) {
  struct scr_process_stats p0 = pstats();
  pthread_t th[2];
  baton = 0;
  memset(handed, 0, sizeof handed);
  reused = 0;
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, turn_taker, (void *)(intptr_t)i);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < BLOCKS; i++) scr_free(handed[i]); /* the main thread's frees: remote to the parked arena */
  struct scr_process_stats p1 = pstats();
  CHECK_EQ(p1.share_joins - p0.share_joins, 2);
  CHECK_EQ(p1.share_leaves - p0.share_leaves, 2); /* at exit at the latest */
  /* The shared arena claimed once for both and parked when the last left.
   * A thread's exit frees (its thread-locals) may find the mutex taken by
   * the other's last turn: that thread then leaves and its exit claims
   * and parks an arena of its own (seen under ThreadSanitizer on a
   * loaded machine), so these are bounds. */
  CHECK(p1.claims - p0.claims >= 1 && p1.claims - p0.claims <= 3);
  CHECK(p1.parks - p0.parks >= 1 && p1.parks - p0.parks <= 3);
  CHECK(p1.remote_frees - p0.remote_frees >= BLOCKS); /* each frees the other's blocks at home */
  /* each turn's mallocs reuse what the turn freed of the other thread's
   * blocks: with an arena each, none would */
  CHECK(reused >= (TURNS * 2 - 1) * BLOCKS / 2);
  CHECK(scr_process_validate() == SCR_OK);
}

/* ---- a thread that does not block claims its own ---- */

static void *hot_loop(void *arg) {
  uint64_t calls = *(uint64_t *)arg;
  for (uint64_t i = 0; i < calls / 2; i++) scr_free(scr_malloc(64 + i % 512));
  return NULL;
}

static void test_a_hot_thread_claims_its_own(void) {
  uint64_t hot = scr_process_option_get("share_hot");
  CHECK_EQ(hot, 4096);
  uint64_t calls = 4 * hot;
  struct scr_process_stats p0 = pstats();
  pthread_t t;
  pthread_create(&t, NULL, hot_loop, &calls);
  pthread_join(t, NULL);
  struct scr_process_stats p1 = pstats();
  CHECK_EQ(p1.share_joins - p0.share_joins, 1);
  CHECK_EQ(p1.share_leaves - p0.share_leaves, 1);
  CHECK_EQ(p1.claims - p0.claims, 2); /* the shared arena, then its own */
  CHECK_EQ(p1.parks - p0.parks, 2);   /* the shared one when it left, its own at exit */
}

/* ---- two threads at once: each leaves (the mutex taken, or hot) ---- */

static pthread_barrier_t start;
static void *busy(void *arg) {
  (void)arg;
  pthread_barrier_wait(&start);
  void *keep[256];
  for (int r = 0; r < 64; r++) {
    for (int i = 0; i < 256; i++) {
      keep[i] = scr_malloc(16 + (size_t)(i * 7 % 2000));
      CHECK(keep[i] != NULL);
      memset(keep[i], 0x5a, 16);
    }
    for (int i = 0; i < 256; i++) {
      CHECK(((unsigned char *)keep[i])[15] == 0x5a);
      scr_free(keep[i]);
    }
  }
  return NULL;
}

static void test_threads_running_at_once_leave(void) {
  struct scr_process_stats p0 = pstats();
  pthread_t th[2];
  pthread_barrier_init(&start, NULL, 2);
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, busy, NULL);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&start);
  struct scr_process_stats p1 = pstats();
  /* 64 x 512 calls each: past share_hot without blocking, if share_contended
   * collisions within 256 calls came first */
  CHECK_EQ(p1.share_leaves - p0.share_leaves, p1.share_joins - p0.share_joins);
  uint64_t windows = scr_process_option_get("share_hot") / 256 + 1; /* of 256 calls, before share_hot */
  CHECK(p1.share_collisions - p0.share_collisions <= 2 * windows * scr_process_option_get("share_contended"));
  CHECK(p1.claims - p0.claims >= 2); /* an arena of its own each */
  CHECK(scr_process_validate() == SCR_OK);
}

/* ---- a thread that finds the shared arena taken waits for it ----
 * (share_contended times within 256 calls; with 1, it claims its own at
 * once).  The main thread holds the arena's lock while the thread makes
 * its first call: a collision the test makes happen. */

/* core/src/process/process.h (internal, linked in from the static library) */
void _scr_share_lock(void);
void _scr_share_unlock(void);

static uint64_t member_in_call; /* the thread was on the shared arena after its first call */
static void *first_call(void *arg) {
  (void)arg;
  unsigned char *p = scr_malloc(100);
  CHECK(p != NULL);
  memset(p, 0x33, 100);
  member_in_call = pstats().share_joins - pstats().share_leaves;
  scr_free(p);
  return NULL;
}

/* The thread's first call meets the lock held; the joins and claims it
 * made. */
static void collide_once(uint64_t *joins, uint64_t *claims) {
  struct scr_process_stats p0 = pstats();
  uint64_t on_before = p0.share_joins - p0.share_leaves;
  _scr_share_lock();
  pthread_t t;
  pthread_create(&t, NULL, first_call, NULL);
  for (int i = 0; i < 5000 && pstats().share_collisions == p0.share_collisions; i++) usleep(1000);
  CHECK_EQ(pstats().share_collisions - p0.share_collisions, 1);
  _scr_share_unlock();
  pthread_join(t, NULL);
  struct scr_process_stats p1 = pstats();
  member_in_call -= on_before;
  *joins = p1.share_joins - p0.share_joins;
  *claims = p1.claims - p0.claims;
  CHECK_EQ(p1.share_collisions - p0.share_collisions, 1);
  CHECK_EQ(p1.share_leaves - p0.share_leaves, *joins); /* at exit at the latest */
  CHECK(scr_process_validate() == SCR_OK);
}

static void test_a_thread_that_finds_the_shared_arena_taken_waits(void) {
  uint64_t joins, claims;
  CHECK_EQ(scr_process_option_get("share_contended"), 8);
  collide_once(&joins, &claims);
  CHECK_EQ(joins, 1);
  CHECK_EQ(member_in_call, 1); /* it waited and joined */
  CHECK_EQ(claims, 1);         /* the shared arena (parked when it exited) */

  CHECK(scr_process_option_set("share_contended", "1") == SCR_OK);
  collide_once(&joins, &claims);
  CHECK_EQ(joins, 0);
  CHECK_EQ(member_in_call, 0); /* it left at once, for an arena of its own */
  CHECK_EQ(claims, 1);
  CHECK(scr_process_option_set("share_contended", "8") == SCR_OK);
}

/* ---- scr_free_many on the shared arena: one call, blocks back in order ---- */

static unsigned ascending_after_free_many;
static uint64_t joins_in_free_many;
static void *free_many_member(void *arg) {
  (void)arg;
  enum { N = 20000 };
  static void *v[N];
  for (int i = 0; i < N; i++) v[i] = scr_malloc(48);
  uint64_t s = 777;
  for (int i = N - 1; i > 0; i--) { /* shuffle */
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((s >> 33) % (uint64_t)(i + 1));
    void *t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
  scr_free_many(v, N);
  for (int i = 0; i < N; i++) v[i] = scr_malloc(48);
  for (int i = 1; i < N; i++) ascending_after_free_many += (uintptr_t)v[i] > (uintptr_t)v[i - 1];
  joins_in_free_many = pstats().share_joins - pstats().share_leaves; /* still on it */
  scr_free_many(v, N);
  return NULL;
}

/* fn in a thread that stays on the shared arena however busy it runs. */
static void run_as_member(void *(*fn)(void *)) {
  CHECK(scr_process_option_set("share_hot", "1000000000") == SCR_OK);
  pthread_t t;
  pthread_create(&t, NULL, fn, NULL);
  pthread_join(t, NULL);
  CHECK(scr_process_option_set("share_hot", "4096") == SCR_OK);
}

static void test_free_many_on_the_shared_arena(void) {
  run_as_member(free_many_member);
  CHECK_EQ(joins_in_free_many, 1);
  CHECK(ascending_after_free_many > 20000 * 9 / 10);
}

/* ---- the shared arena's cache lists keep their caps ---- */

/* A member frees 24 blocks of 8000 bytes (class 8192, base cap 2): the
 * shared arena's list does not grow (recycle.c: its threads take turns),
 * where a thread's own arena's would (test_process_cache). */
static uint64_t grows_on_shared = 99;
static int member_during_frees;
static void *big_frees_member(void *arg) {
  (void)arg;
  void *p[24];
  for (int i = 0; i < 24; i++) {
    p[i] = scr_malloc(8000);
    memset(p[i], i, 8000);
  }
  uint64_t g0 = pstats().cache_grows;
  for (int i = 0; i < 24; i++) scr_free(p[i]);
  grows_on_shared = pstats().cache_grows - g0;
  member_during_frees = pstats().share_joins > pstats().share_leaves;
  return NULL;
}

static void test_the_shared_arenas_lists_do_not_grow(void) {
  run_as_member(big_frees_member);
  CHECK(member_during_frees);
  CHECK_EQ(grows_on_shared, 0);
}

/* ---- every entry point works on the shared arena ---- */

static int entry_points_ok;
static void *entry_points(void *arg) {
  (void)arg;
  int ok = 1;
  unsigned char *z = scr_calloc(100, 37);
  ok &= z != NULL;
  for (int i = 0; z && i < 3700; i++) ok &= z[i] == 0;
  memset(z, 7, 3700);
  z = scr_realloc(z, 100000); /* grows into a large block: moved, contents kept */
  ok &= z != NULL && z[0] == 7 && z[3699] == 7 && scr_usable_size(z) >= 100000;
  z = scr_realloc(z, 0);
  ok &= z == NULL;
  void *al = scr_aligned_alloc(4096, 5000);
  ok &= al != NULL && ((uintptr_t)al & 4095) == 0;
  scr_free(al);
  scr_free(NULL);
  ok &= scr_realloc(NULL, 10) != NULL; /* kept: freed by the main thread below */
  ok &= pstats().share_joins > pstats().share_leaves; /* still on it */
  scr_trim();
  entry_points_ok = ok;
  return NULL;
}

static void test_entry_points_on_the_shared_arena(void) {
  struct scr_process_stats p0 = pstats();
  pthread_t t;
  pthread_create(&t, NULL, entry_points, NULL);
  pthread_join(t, NULL);
  CHECK(entry_points_ok);
  CHECK_EQ(pstats().share_joins - p0.share_joins, 1);
  CHECK(scr_process_validate() == SCR_OK);
}

/* ---- fork while threads take turns on the shared arena ---- */

static _Atomic int stop_turns;
static void *turns_until_stopped(void *arg) {
  int me = (int)(intptr_t)arg;
  while (!atomic_load(&stop_turns)) {
    wait_turn(me);
    void *p[16];
    for (int i = 0; i < 16; i++) p[i] = scr_malloc(100 + (size_t)i * 300);
    for (int i = 0; i < 16; i++) scr_free(p[i]);
    pass_turn(me);
  }
  pthread_mutex_lock(&baton_lock); /* let the other one out */
  baton = 1 - me;
  pthread_cond_broadcast(&baton_cv);
  pthread_mutex_unlock(&baton_lock);
  return NULL;
}

static __attribute__((unused)) void *child_thread(void *arg) {
  (void)arg;
  void *p = scr_malloc(1000);
  memset(p, 1, 1000);
  scr_free(p);
  return p;
}

static void test_fork_while_threads_share(void) {
  pthread_t th[2];
  baton = 0;
  atomic_store(&stop_turns, 0);
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, turns_until_stopped, (void *)(intptr_t)i);
  for (int f = 0; f < 8; f++) {
    pid_t pid = fork();
    if (pid == 0) { /* the child: its own allocations, and a thread of its own on the shared arena */
      void *p = scr_malloc(5000);
      int ok = p != NULL;
#ifndef __SANITIZE_THREAD__ /* ThreadSanitizer does not start threads after a multi-threaded fork */
      pthread_t t;
      ok = ok && pthread_create(&t, NULL, child_thread, NULL) == 0 && pthread_join(t, NULL) == 0;
#endif
      scr_free(p);
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  atomic_store(&stop_turns, 1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK(scr_process_validate() == SCR_OK);
}

/* ---- share=0: every thread claims its own at its first allocation ---- */

static void *one_block(void *arg) {
  (void)arg;
  scr_free(scr_malloc(100));
  return NULL;
}

static void test_share_off(void) {
  CHECK(scr_process_option_set("share", "0") == SCR_OK);
  struct scr_process_stats p0 = pstats();
  pthread_t t;
  pthread_create(&t, NULL, one_block, NULL);
  pthread_join(t, NULL);
  struct scr_process_stats p1 = pstats();
  CHECK_EQ(p1.share_joins - p0.share_joins, 0);
  CHECK_EQ(p1.claims - p0.claims, 1);
  CHECK(scr_process_option_set("share", "1") == SCR_OK);
}

/* ---- a process's first call, whichever entry point: its thread's own arena only ---- */

static const char *self;
static int mode_first_call(const char *entry) {
  void *p = strcmp(entry, "calloc") == 0    ? scr_calloc(3, 10)
            : strcmp(entry, "realloc") == 0 ? scr_realloc(NULL, 30)
            : strcmp(entry, "aligned") == 0 ? scr_aligned_alloc(64, 30)
                                            : scr_malloc(30);
  scr_free(p);
  scr_free(scr_malloc(100));
  struct scr_process_stats ps = pstats();
  return p != NULL && ps.claims == 1 && ps.arenas == 1 && ps.share_joins == 0 ? 0 : 1;
}

static void test_first_call_claims_one_arena(void) {
  static const char *const entries[] = {"malloc", "calloc", "realloc", "aligned"};
  for (unsigned i = 0; i < 4; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(self, self, "first", entries[i], (char *)NULL);
      _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
    CHECK_EQ(WEXITSTATUS(status), 0);
  }
}

int main(int argc, char **argv) {
  self = argv[0];
  if (argc > 2 && strcmp(argv[1], "first") == 0) return mode_first_call(argv[2]);
  CHECK_EQ(scr_process_option_get("share"), 1);
  scr_process_option_set("discard", "0"); /* parked arenas keep their blocks: counts stay exact */
  scr_free(scr_malloc(16)); /* the first thread: an arena of its own */
  CHECK_EQ(pstats().claims, 1);
  CHECK_EQ(pstats().share_joins, 0);
  TEST(test_threads_taking_turns_share_one_arena);
  TEST(test_a_hot_thread_claims_its_own);
  TEST(test_threads_running_at_once_leave);
  TEST(test_a_thread_that_finds_the_shared_arena_taken_waits);
  TEST(test_free_many_on_the_shared_arena);
  TEST(test_the_shared_arenas_lists_do_not_grow);
  TEST(test_entry_points_on_the_shared_arena);
  TEST(test_fork_while_threads_share);
  TEST(test_share_off);
  TEST(test_first_call_claims_one_arena);
  CHECK(scr_process_validate() == SCR_OK);
  return check_done();
}
