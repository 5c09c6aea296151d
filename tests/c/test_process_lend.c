/* Lending (core/src/process/lend.c): a thread about to carve fresh memory
 * for a class takes the free slots a finished thread left in its parked
 * arena.  A process of its own, so that which arenas exist and what they
 * hold is known: the main thread's arena and one parked arena. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>

enum { LEFT = 8192, SIZE = 200, TAKEN = 2048 };
static void *left[LEFT];

/* Leaves LEFT / 2 free slots of SIZE's class (about 900 KiB) in its
 * arena, which is parked when it returns. */
static void *leaver(void *arg) {
  (void)arg;
  for (int i = 0; i < LEFT; i++) left[i] = scr_malloc(SIZE);
  for (int i = 0; i < LEFT; i += 2) scr_free(left[i]);
  return NULL;
}

static int cmp_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
  return x < y ? -1 : x > y;
}

static void test_free_slots_are_lent(void) {
  CHECK(scr_process_option_set("discard", "0") == SCR_OK);
  scr_free(scr_malloc(16)); /* the main thread holds arena 0 */
  pthread_t t;
  pthread_create(&t, NULL, leaver, NULL);
  pthread_join(t, NULL);
  struct scr_process_stats p0, p1;
  struct scr_stats a0, a1;
  scr_process_stats(&p0);
  CHECK_EQ(p0.arenas_parked, 1);
  CHECK(scr_arena_stats(1, &a0) == SCR_OK);
  void *freed[LEFT / 2];
  for (int i = 0; i < LEFT / 2; i++) freed[i] = left[2 * i];
  qsort(freed, LEFT / 2, sizeof freed[0], cmp_ptr);
  static void *mine[TAKEN];
  unsigned lent = 0;
  for (int i = 0; i < TAKEN; i++) {
    mine[i] = scr_malloc(SIZE);
    memset(mine[i], 0x3c, SIZE);
    lent += bsearch(&mine[i], freed, LEFT / 2, sizeof freed[0], cmp_ptr) != NULL;
  }
  scr_process_stats(&p1);
  CHECK(scr_arena_stats(1, &a1) == SCR_OK);
  /* The main arena had no page of the class: every block came from the
   * parked arena's free slots, a cache list (64 blocks) per lend. */
  CHECK_EQ(lent, TAKEN);
  CHECK_EQ(p1.lends - p0.lends, TAKEN / 64);
  CHECK_EQ(a1.mmaps, a0.mmaps);   /* no growth there */
  CHECK_EQ(a1.bytes, a0.bytes);
  CHECK_EQ(a1.allocs, a0.allocs + TAKEN); /* the lent blocks are that arena's */
  CHECK_EQ(p1.arenas_parked, 1);  /* parked again after each lend */
  CHECK(scr_process_validate() == SCR_OK);
  /* Freed, they go back to the parked arena (its remote stack). */
  for (int i = 0; i < TAKEN; i++) scr_free(mine[i]);
  for (int i = 1; i < LEFT; i += 2) scr_free(left[i]);
  scr_trim();
  CHECK(scr_arena_stats(1, &a1) == SCR_OK);
  CHECK_EQ(a1.allocs, 0);
}

/* Nothing to lend: the parked arena has no slots of this class, so the
 * main thread carves its own (and, having looked once, does not take the
 * process lock again for the next SCR_LEND_BACKOFF heap calls). */
static void test_nothing_to_lend(void) {
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  for (int i = 0; i < 4096; i++) scr_free(scr_malloc(3000)); /* no parked slots of this class */
  scr_process_stats(&p1);
  CHECK_EQ(p1.lends, p0.lends);
  CHECK(scr_process_validate() == SCR_OK);
}

/* SCRALLOC_LEND=0: the same thread carves its own pages. */
static void test_lend_off(void) {
  CHECK(scr_process_option_set("lend", "0") == SCR_OK);
  pthread_t t;
  pthread_create(&t, NULL, leaver, NULL);
  pthread_join(t, NULL);
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  static void *mine[TAKEN];
  for (int i = 0; i < TAKEN; i++) mine[i] = scr_malloc(SIZE); /* as in the first test, which lent */
  scr_process_stats(&p1);
  CHECK_EQ(p1.lends, p0.lends);
  for (int i = 0; i < TAKEN; i++) scr_free(mine[i]);
  for (int i = 1; i < LEFT; i += 2) scr_free(left[i]);
  CHECK(scr_process_option_set("lend", "1") == SCR_OK);
}

int main(void) {
  TEST(test_free_slots_are_lent);
  TEST(test_nothing_to_lend);
  TEST(test_lend_off);
  return check_done();
}
