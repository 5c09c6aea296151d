/* The classifier (core/src/classify.c) against addresses that change
 * hands: a heap that gave a block's memory back remembers the run (a
 * second free of it is a double free), but once another heap maps the
 * address, a block there is that heap's, foreign to the first. */
#include "check.h"
#include "scralloc.h"
#include <stdint.h>

enum { SIZE = 64, TRIES = 64 };

static scr_heap *heap_keeping_nothing(void) {
  scr_options o;
  scr_options_init(&o);
  o.retain = 0; /* a page goes back as its last block is freed, and its segment with it */
  o.retain_bytes = 0;
  return scr_heap_new(&o);
}

static void given_back_then_reused_by_another_heap(void) {
  scr_heap *a = heap_keeping_nothing(), *b = heap_keeping_nothing();
  /* a first segment and free: what the segment map maps for it stays */
  CHECK_EQ(scr_heap_free_checked(a, scr_heap_malloc(a, SIZE)), SCR_OK);
  void *p = scr_heap_malloc(a, SIZE);
  CHECK(p != NULL);
  CHECK_EQ(scr_heap_free_checked(a, p), SCR_OK);
  CHECK_EQ(scr_heap_check(a, p), SCR_EDOUBLEFREE); /* its segment went back: the run is remembered */
  /* The other heap maps memory until one of its blocks lands on p (the
   * place of the last segment mapped, when it is unmapped, is where the
   * next mapping goes: prim/os.c). */
  void *held[TRIES];
  int n = 0, found = 0;
  while (n < TRIES && !found) {
    held[n] = scr_heap_malloc(b, SIZE);
    found = held[n] == p;
    n++;
  }
  CHECK(found);
  if (found) {
    CHECK_EQ(scr_heap_check(b, p), SCR_OK);
    CHECK_EQ(scr_heap_check(a, p), SCR_EFOREIGN); /* not a double free: another heap's live block */
    CHECK_EQ(scr_heap_free_checked(a, p), SCR_EFOREIGN);
    CHECK_EQ(scr_heap_check(b, p), SCR_OK); /* still live */
  }
  for (int i = 0; i < n; i++) CHECK_EQ(scr_heap_free_checked(b, held[i]), SCR_OK);
  scr_heap_destroy(b);
  scr_heap_destroy(a);
}

int main(void) {
  TEST(given_back_then_reused_by_another_heap);
  return check_done();
}
