/* Threads that take turns (core/src/process/turns.c): a thread whose heap
 * calls came 20 us apart or more on average over turns_after windows of
 * 1024 while holding its arena keeps no block above
 * turns_cache_max in its cache (and at most turns_keep of empty pages),
 * and its cache lists do not grow.
 * A process of its own: the main thread's arena and one thread at a time;
 * a thread holding the only arena takes turns with nobody. */
#include "arena_probe.h"
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 2048, SIZE = 2000 }; /* 4 MiB of blocks of one class, more than 1024 heap calls */



struct run {
  int blocks;                 /* times the thread sleeps (blocks, 2 ms each) first */
  long turn_takers;           /* process count after the allocations, less before */
  long retained_delta;        /* the arena's retained pages of class 8192 across one free */
  uint64_t kept_after_frees;  /* retained and dirty bytes once N blocks were freed */
  long grows;                 /* cache_grows across a burst of frees of 4 KiB blocks */
};

static void *worker(void *arg) {
  struct run *r = arg;
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  scr_free(scr_malloc(16)); /* claims the arena: its context switches count from here */
  /* 12 x 2 ms: the first window of 1024 heap calls takes more than 20 ms */
  for (int i = 0; i < r->blocks; i++) nanosleep(&(struct timespec){0, 2000000}, NULL);
  static void *v[N];
  for (int i = 0; i < N; i++) {
    v[i] = scr_malloc(SIZE);
    memset(v[i], 3, SIZE);
  }
  scr_process_stats(&p1);
  r->turn_takers = (long)(p1.turn_takers - p0.turn_takers);
  /* the cache: a block of 8 KiB freed */
  unsigned c = class_of_size(8192);
  void *p = scr_malloc(8000);
  unsigned arena = arena_with_live(8192);
  struct scr_stats s0, s1;
  scr_arena_stats(arena, &s0);
  scr_free(p);
  scr_arena_stats(arena, &s1);
  r->retained_delta = (long)s1.classes[c].retained - (long)s0.classes[c].retained;
  /* the list of 4 KiB blocks (4 kept by default) past a burst of 24 frees:
   * grown by 20 (recycle.c), unless the thread takes turns */
  void *b[24];
  for (int i = 0; i < 24; i++) b[i] = memset(scr_malloc(4000), 5, 4000);
  struct scr_process_stats g0, g1;
  scr_process_stats(&g0);
  for (int i = 0; i < 24; i++) scr_free(b[i]);
  scr_process_stats(&g1);
  r->grows = (long)(g1.cache_grows - g0.cache_grows);
  /* the empty pages kept */
  for (int i = 0; i < N; i++) scr_free(v[i]);
  scr_free(scr_malloc(8000)); /* a heap call: the arena publishes (and the keep share is applied) */
  for (int i = 0; i < 64; i++) scr_free(scr_malloc(100000)); /* ticks */
  scr_arena_stats(arena, &s1);
  r->kept_after_frees = s1.retained_bytes + s1.dirty_bytes;
  return NULL;
}

static struct run run_worker(int blocks) {
  struct run r = {.blocks = blocks};
  pthread_t t;
  if (pthread_create(&t, NULL, worker, &r) == 0) pthread_join(t, NULL);
  return r;
}

/* A thread that does not block keeps its cache and the share of kept
 * pages of a program of two threads (4 MiB / 2). */
static void test_a_thread_that_does_not_block(void) {
  struct run r = run_worker(0);
  CHECK_EQ(r.turn_takers, 0);
  CHECK_EQ(r.retained_delta, 0); /* the block stayed in the cache, its page in use */
  CHECK_EQ(r.grows, 20);
  fprintf(stderr, "  kept %llu KiB\n", (unsigned long long)(r.kept_after_frees >> 10));
  CHECK(r.kept_after_frees > ((uint64_t)1 << 20));
}

/* One that slept 12 times (24 ms in its first window) takes turns: the 8 KiB block goes back to
 * its page (which empties and is retained); by default it keeps the same
 * share of empty pages as any thread. */
static void test_a_thread_that_blocks_takes_turns(void) {
  struct run r = run_worker(12);
  CHECK_EQ(r.turn_takers, 1);
  CHECK_EQ(r.retained_delta, 1);
  CHECK_EQ(r.grows, 0); /* a turn taker's lists keep their caps */
  CHECK(r.kept_after_frees > ((uint64_t)1 << 20));
}

/* turns_keep=512K: it keeps at most that. */
static void test_turns_keep(void) {
  CHECK(scr_process_option_set("turns_keep", "512K") == SCR_OK);
  struct run r = run_worker(12);
  CHECK_EQ(r.turn_takers, 1);
  fprintf(stderr, "  kept %llu KiB\n", (unsigned long long)(r.kept_after_frees >> 10));
  CHECK(r.kept_after_frees <= ((uint64_t)512 << 10));
  CHECK(scr_process_option_set("turns_keep", "0") == SCR_OK);
}

/* The main thread alone (it holds the only arena) sleeps as often and
 * takes turns with nobody: it keeps its cache.  Runs first, before the
 * main thread holds an arena. */
static void test_a_thread_alone(void) {
  struct run r = {.blocks = 12};
  worker(&r);
  CHECK_EQ(r.turn_takers, 0);
  CHECK_EQ(r.retained_delta, 0);
}

/* Heap calls: n blocks of SIZE malloc'd and freed, about 2n calls (all
 * but the cache's few blocks of the class go through the heap). */
static void heap_calls(int n) {
  static void *v[N];
  for (int i = 0; i < n; i++) v[i] = scr_malloc(SIZE);
  for (int i = 0; i < n; i++) scr_free(v[i]);
}

static uint64_t looks(void) {
  struct scr_process_stats p;
  scr_process_stats(&p);
  return p.turn_looks;
}

struct busy {
  int rounds_before;   /* rounds of heap calls before it starts to block */
  uint64_t looks;      /* looks at the clock over those rounds */
  int rounds_to_find;  /* rounds after its 12 sleeps until it was found (-1: never) */
};

static void *busy_worker(void *arg) {
  struct busy *b = arg;
  scr_free(scr_malloc(16)); /* claims the arena */
  uint64_t l0 = looks();
  for (int r = 0; r < b->rounds_before; r++) heap_calls(N);
  b->looks = looks() - l0;
  CHECK(scr_process_option_set("turns_after", "1") == SCR_OK); /* from here it can be found */
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  for (int i = 0; i < 12; i++) nanosleep(&(struct timespec){0, 2000000}, NULL);
  b->rounds_to_find = -1;
  for (int r = 0; r < 64 && b->rounds_to_find < 0; r++) {
    heap_calls(N);
    scr_process_stats(&p1);
    if (p1.turn_takers != p0.turn_takers) b->rounds_to_find = r + 1;
  }
  return NULL;
}

/* A busy thread looks at the clock once per 1024 heap calls (a vDSO read,
 * no system call): 100 rounds are some 400,000 heap calls, about 400
 * looks.  Once it blocks, the window that holds its 24 ms of sleep finds
 * it, in the first round after (the look may fall in the second). */
static void test_a_busy_thread_is_found_once_it_blocks(void) {
  struct busy b = {.rounds_before = 100};
  /* While it is busy it is not to be found, whatever blocks it on a
   * loaded machine (preemption, a fault waiting for the address space's
   * lock): the looks go on at their pace. */
  CHECK(scr_process_option_set("turns_after", "1000000") == SCR_OK);
  /* its lists keep their caps: every malloc and free past them is a heap call */
  CHECK(scr_process_option_set("cache_grow", "0") == SCR_OK);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, busy_worker, &b) == 0);
  pthread_join(t, NULL);
  CHECK(scr_process_option_set("cache_grow", "2M") == SCR_OK);
  fprintf(stderr, "  %llu looks over 100 rounds; found %d rounds after it blocked\n", (unsigned long long)b.looks,
          b.rounds_to_find);
  CHECK(b.looks >= 300);
  CHECK(b.looks <= 450);
  CHECK(b.rounds_to_find >= 1);
  CHECK(b.rounds_to_find <= 2);
}

/* turns_after=0: never. */
static void test_turns_off(void) {
  CHECK(scr_process_option_set("turns_after", "0") == SCR_OK);
  struct run r = run_worker(12);
  CHECK_EQ(r.turn_takers, 0);
  CHECK_EQ(r.retained_delta, 0);
  CHECK(scr_process_option_set("turns_after", "1") == SCR_OK);
}

int main(void) {
  /* empty pages wait for the purge as long as the test runs: what a thread
   * keeps is then its cap, not how long the test took (under
   * ThreadSanitizer on a loaded machine, 20 ms passed and 768 of 2048 KiB
   * were left) */
  setenv("SCRALLOC_PURGE_DELAY_MS", "3600000", 1);
  /* each thread on an arena of its own (share.c's shared arena: test_process_share) */
  scr_process_option_set("share", "0");
  scr_process_option_set("discard", "0");
  scr_process_option_set("switch_bytes", "0");
  scr_process_option_set("lend", "0");
  CHECK_EQ(scr_process_option_get("turns_after"), 0); /* off by default (turns.c says why) */
  CHECK(scr_process_option_set("turns_after", "1") == SCR_OK);
  CHECK_EQ(scr_process_option_get("turns_cache_max"), 4096);
  TEST(test_a_thread_alone); /* the main thread holds arena 0 from here */
  TEST(test_a_thread_that_does_not_block);
  TEST(test_a_thread_that_blocks_takes_turns);
  TEST(test_turns_keep);
  TEST(test_a_busy_thread_is_found_once_it_blocks);
  TEST(test_turns_off);
  CHECK(scr_process_validate() == SCR_OK);
  return check_done();
}
