/* Remote frees (core/src/process/remote.c): another thread's frees of an
 * arena's blocks wait in the arena's ring (one at a time) or on its stack
 * (lists), and the owner takes them back before it takes a new page.
 * A process of its own: the main thread's arena and one freeing thread's.
 * The test reads the remote frees waiting (scr_process_stats) and an
 * arena's remote stack (process.h) while the threads it sequences stand
 * still. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* core/src/process/process.h (internal, linked in from the static
 * library; its header cannot be included here): the caller's arena (the
 * first field of _scr_tl), whose first field is its remote stack. */
typedef struct scr_arena scr_arena;
extern __thread struct { scr_arena *arena; unsigned fast; } _scr_tl __attribute__((tls_model("initial-exec")));
enum { FIRST = 32 };

enum { N = 300, SIZE = 64, MAX = 8192 }; /* N: more than an arena's ring holds (the rest wait on its stack) */
static void *blocks[MAX];
static pthread_barrier_t step;

/* Blocks on an arena's remote stack (nobody pushes or drains while the
 * test counts). */
static unsigned remote_length(scr_arena *a) {
  unsigned n = 0;
  for (void *p = atomic_load((_Atomic(void *) *)a); p; p = *(void **)p) n++;
  return n;
}

/* Remote frees not yet taken back, of every arena, read by a thread that
 * holds no arena (the caller's statistics would take its own back). */
static void *read_waiting(void *out) {
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  *(uint64_t *)out = ps.remote_pending;
  return NULL;
}
static uint64_t remote_waiting(void) {
  uint64_t n = UINT64_MAX;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, read_waiting, &n) == 0);
  pthread_join(t, NULL);
  return n;
}

/* Claims its own arena, frees FIRST of the main thread's blocks, waits,
 * frees the rest, and exits (its arena parks). */
static void *freer(void *arg) {
  (void)arg;
  scr_free(scr_malloc(SIZE)); /* an arena of its own */
  for (int i = 0; i < FIRST; i++) scr_free(blocks[i]);
  pthread_barrier_wait(&step);
  pthread_barrier_wait(&step);
  for (int i = FIRST; i < N; i++) scr_free(blocks[i]);
  return NULL;
}

static void test_remote_frees_wait_until_the_owner_takes_a_page(void) {
  scr_arena *mine = _scr_tl.arena;
  CHECK(mine != NULL);
  /* blocks of SIZE until one ends a 64 KiB page: that page (the class's
   * first) is carved to its end, and the next malloc would take a page */
  int m = 0;
  do {
    blocks[m] = memset(scr_malloc(SIZE), 7, SIZE);
  } while (((uintptr_t)blocks[m++] + SIZE) % 65536 != 0 && m < MAX);
  CHECK(m >= N && m < MAX);
  CHECK_EQ(remote_waiting(), 0);
  pthread_barrier_init(&step, NULL, 2);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, freer, NULL) == 0);
  pthread_barrier_wait(&step);
  CHECK_EQ(remote_waiting(), FIRST); /* each pushed at its free */
  pthread_barrier_wait(&step);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&step);
  CHECK_EQ(remote_waiting(), N);
  /* The page of SIZE's class has no slot left; the next malloc takes the
   * freed blocks back before it takes a page (one of them: whichever the
   * page's free list gives first). */
  void *p = scr_malloc(SIZE);
  CHECK_EQ(remote_waiting(), 0);
  int reused = 0;
  for (int i = 0; i < N; i++) reused |= blocks[i] == p;
  CHECK(reused);
  scr_free(p);
  for (int i = N; i < m; i++) scr_free(blocks[i]);
  CHECK(scr_process_validate() == SCR_OK);
}

/* Another thread's realloc of the main arena's block: in place while it
 * fits (no heap of the owner changes), moved into its own arena when it
 * grows, the old block where the thread's free of it would go. */
static void *reallocer(void *arg) {
  char **b = arg;
  scr_free(scr_malloc(SIZE)); /* an arena of its own */
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  uint64_t moves = ps.realloc_moves;
  char *same = scr_realloc(b[0], 90);   /* 112 B usable: fits */
  char *moved = scr_realloc(b[1], 4000);
  CHECK(same == b[0]);
  CHECK(moved != NULL && moved != b[1]);
  CHECK(same[0] == 1 && same[89] == 1 && moved[0] == 2 && moved[99] == 2);
  scr_process_stats(&ps);
  CHECK_EQ(ps.realloc_moves, moves + 1);
  b[1] = moved;
  return NULL;
}

static void test_realloc_of_another_arenas_block(void) {
  char *b[2] = {memset(scr_malloc(100), 1, 100), memset(scr_malloc(100), 2, 100)};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, reallocer, b) == 0);
  pthread_join(t, NULL);
  CHECK(scr_heap_of(b[0], NULL) != scr_heap_of(b[1], NULL));
  scr_free(b[0]);
  scr_free(b[1]);
  CHECK(scr_process_validate() == SCR_OK);
}

/* A thread's cache holds blocks of two other arenas; at its trim they go
 * home, each arena's onto its own stack (one CAS per arena). */
static scr_arena *other_arena;
static void *other_blocks[8];
static void *holder(void *arg) {
  (void)arg;
  for (int i = 0; i < 8; i++) other_blocks[i] = scr_malloc(SIZE);
  other_arena = _scr_tl.arena;
  pthread_barrier_wait(&step); /* blocks made */
  pthread_barrier_wait(&step); /* the freer trimmed: hold the arena till the count */
  return NULL;
}
static void *cache_freer(void *arg) {
  void **mine = arg;
  scr_free(scr_malloc(SIZE)); /* an arena of its own, with a cache */
  for (int i = 0; i < 8; i++) {
    scr_free(mine[i]);
    scr_free(other_blocks[i]);
  }
  scr_trim();
  return NULL;
}

static void test_cached_blocks_go_home_by_owner(void) {
  scr_process_option_set("cache_max", "65536");
  scr_arena *me = _scr_tl.arena;
  void *mine[8];
  for (int i = 0; i < 8; i++) mine[i] = scr_malloc(SIZE);
  pthread_barrier_init(&step, NULL, 2);
  pthread_t th, tf;
  CHECK(pthread_create(&th, NULL, holder, NULL) == 0);
  pthread_barrier_wait(&step);
  CHECK(pthread_create(&tf, NULL, cache_freer, mine) == 0);
  pthread_join(tf, NULL);
  CHECK_EQ(remote_length(me), 8);
  CHECK_EQ(remote_length(other_arena), 8);
  pthread_barrier_wait(&step);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&step);
  scr_process_option_set("cache_max", "0");
  CHECK(scr_process_validate() == SCR_OK);
}

int main(void) {
  /* every malloc and free goes to the heap (no thread cache), no
   * discarding */
  scr_process_option_set("cache_max", "0");
  scr_process_option_set("discard", "0");
  scr_free(scr_malloc(1)); /* the main thread's arena */
  TEST(test_remote_frees_wait_until_the_owner_takes_a_page);
  TEST(test_realloc_of_another_arenas_block);
  TEST(test_cached_blocks_go_home_by_owner);
  return check_done();
}
