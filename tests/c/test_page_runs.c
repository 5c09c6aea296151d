/* Runs of pages for large blocks: the bit helpers the segments count and
 * find runs with, and where a large block lands once a segment holds
 * holes of given lengths (segment.c: a run of n free pages). */
#include "check.h"
#include "internal.h"
#include "scralloc.h"
#include <stdint.h>

static unsigned popcount_slowly(uint64_t m) {
  unsigned n = 0;
  for (; m; m >>= 1) n += (unsigned)(m & 1);
  return n;
}

static void popcount_counts_every_bit(void) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  CHECK_EQ(_scr_popcount(0), 0);
  CHECK_EQ(_scr_popcount(~(uint64_t)0), 64);
  for (unsigned i = 0; i < 64; i++) CHECK_EQ(_scr_popcount((uint64_t)1 << i), 1);
  for (int i = 0; i < 10000; i++) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint64_t m = s & (s >> (i % 7)); /* sparse and dense masks */
    CHECK_EQ(_scr_popcount(m), popcount_slowly(m));
  }
  for (unsigned first = 0; first < 64; first++)
    for (unsigned n = 1; first + n <= 64; n++) CHECK_EQ(_scr_popcount(_scr_run_mask(first, n)), n);
}

#define RUN3 (3 * SCR_PAGE_SIZE)
#define BLOCKS ((int)((SCR_PAGES_PER_SEGMENT - SCR_FIRST_PAGE) / 3)) /* 21 fill a segment's 63 pages */

/* One segment full of 3-page blocks; then a hole of 3 pages takes a
 * block of 3 where it is, and of holes of 6 and 9 pages, a block of 7
 * takes the second (the first run of 7 free pages), one of 5 the first,
 * and one of 10, which fits in no hole, a new segment. */
static void large_blocks_land_in_holes_of_their_length(void) {
  scr_heap *h = scr_heap_new(NULL);
  CHECK(h != NULL);
  void *b[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) {
    b[i] = scr_heap_malloc(h, RUN3);
    CHECK(b[i] != NULL);
    CHECK(_scr_segment_of(b[i]) == _scr_segment_of(b[0]));
  }
  scr_heap_free(h, b[15]);
  void *p = scr_heap_malloc(h, RUN3);
  CHECK(p == b[15]);
  const int freed[] = {2, 3, 10, 11, 12};
  for (int i = 0; i < 5; i++) scr_heap_free(h, b[freed[i]]);
  void *q7 = scr_heap_malloc(h, 7 * SCR_PAGE_SIZE);
  CHECK(q7 == b[10]);
  void *q5 = scr_heap_malloc(h, 5 * SCR_PAGE_SIZE);
  CHECK(q5 == b[2]);
  void *r = scr_heap_malloc(h, 10 * SCR_PAGE_SIZE);
  CHECK(r != NULL && _scr_segment_of(r) != _scr_segment_of(b[0]));
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_free(h, r);
  scr_heap_free(h, q5);
  scr_heap_free(h, q7);
  scr_heap_free(h, p);
  for (int i = 0; i < BLOCKS; i++)
    if (i != 2 && i != 3 && i != 10 && i != 11 && i != 12 && i != 15) scr_heap_free(h, b[i]);
  scr_heap_destroy(h);
}

/* A single page (a size class's) comes from the top of its segment and a
 * run from the bottom, so that class pages do not split the free space
 * between runs: two runs taken around a class page lie side by side. */
static void single_pages_from_the_top_runs_from_the_bottom(void) {
  scr_heap *h = scr_heap_new(NULL);
  CHECK(h != NULL);
  void *a = scr_heap_malloc(h, 4 * SCR_PAGE_SIZE - 4096); /* a run of 4 pages */
  void *s = scr_heap_malloc(h, 100);                    /* a page of class 112 */
  void *b = scr_heap_malloc(h, 4 * SCR_PAGE_SIZE - 4096);
  CHECK(a != NULL && s != NULL && b != NULL);
  const scr_segment *seg = _scr_segment_of(a);
  CHECK(_scr_segment_of(s) == seg && _scr_segment_of(b) == seg);
  uintptr_t base = (uintptr_t)seg;
  CHECK_EQ(((uintptr_t)a - base) >> SCR_PAGE_SHIFT, SCR_FIRST_PAGE);
  CHECK_EQ(((uintptr_t)s - base) >> SCR_PAGE_SHIFT, SCR_PAGES_PER_SEGMENT - 1);
  CHECK_EQ(((uintptr_t)b - base) >> SCR_PAGE_SHIFT, SCR_FIRST_PAGE + 4);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_free(h, a);
  scr_heap_free(h, s);
  scr_heap_free(h, b);
  scr_heap_destroy(h);
}

int main(void) {
  TEST(popcount_counts_every_bit);
  TEST(large_blocks_land_in_holes_of_their_length);
  TEST(single_pages_from_the_top_runs_from_the_bottom);
  return check_done();
}
