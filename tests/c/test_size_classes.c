/* Size classes: the table, the class of every request, rounding waste,
 * and the alignment of blocks. */
#include "check.h"
#include "internal.h" /* _scr_class_aligned */
#include "scralloc.h"
#include <stdint.h>

static void classes_are_increasing_multiples_of_16(void) {
  CHECK_EQ(scr_class_size(0), 16);
  CHECK_EQ(scr_class_size(SCR_CLASS_COUNT - 1), SCR_SMALL_MAX);
  CHECK_EQ(scr_class_size(SCR_CLASS_COUNT), 0);
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    CHECK(scr_class_size(c) % SCR_MIN_ALIGN == 0);
    if (c) CHECK(scr_class_size(c) > scr_class_size(c - 1));
  }
}

/* Every request gets the smallest class that holds it. */
static void every_request_gets_the_smallest_class(void) {
  for (size_t n = 0; n <= SCR_SMALL_MAX; n++) {
    int c = scr_size_class(n);
    CHECK(c >= 0);
    if (c < 0) return;
    if (scr_class_size((unsigned)c) < n) { CHECK(!"class too small"); return; }
    if (c > 0 && scr_class_size((unsigned)c - 1) >= n && n > 0) { CHECK(!"not the smallest"); return; }
  }
  CHECK_EQ(scr_size_class(SCR_SMALL_MAX + 1), (unsigned long long)-1);
}

/* Waste: under 16 B (the alignment quantum) below 64 B; at most 25% of
 * the block for every class from 64 B on (under 12% in 1-4 KiB), and
 * several classes per doubling (not powers of two only). */
static void rounding_waste_is_bounded(void) {
  double worst = 0, worst_1k_4k = 0;
  for (size_t n = 1; n <= SCR_SMALL_MAX; n++) {
    size_t b = scr_class_size((unsigned)scr_size_class(n));
    if (b <= 64) {
      CHECK(b - n < 16);
    } else {
      double waste = (double)(b - n) / (double)b;
      if (waste > worst) worst = waste;
      if (n > 1024 && n <= 4096 && waste > worst_1k_4k) worst_1k_4k = waste;
    }
  }
  CHECK(worst <= 0.25);
  CHECK(worst_1k_4k < 0.12); /* eight classes per doubling there */
  printf("  worst waste above 64 B: %.1f%%\n", worst * 100);
  unsigned per_doubling = 0;
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++)
    if (scr_class_size(c) > 1024 && scr_class_size(c) <= 2048) per_doubling++;
  CHECK_EQ(per_doubling, 8);
}

static void blocks_are_aligned_and_usable(void) {
  scr_heap *h = scr_heap_new(NULL);
  for (size_t n = 0; n <= 20000; n += 7) {
    void *p = scr_heap_malloc(h, n);
    CHECK(p != NULL);
    CHECK(((uintptr_t)p % SCR_MIN_ALIGN) == 0);
    CHECK(scr_heap_usable_size(h, p) >= n);
    if (n <= SCR_SMALL_MAX) CHECK_EQ(scr_heap_usable_size(h, p), scr_class_size((unsigned)scr_size_class(n)));
    scr_heap_free(h, p);
  }
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

static void aligned_alloc_serves_every_power_of_two(void) {
  scr_heap *h = scr_heap_new(NULL);
  for (size_t align = 1; align <= ((size_t)64 << 20); align <<= 1) {
    size_t sizes[] = {1, 24, 100, 4000, 16384, 70000, 2u << 20};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      void *p = scr_heap_aligned_alloc(h, align, sizes[i]);
      CHECK(p != NULL);
      CHECK(((uintptr_t)p & (align - 1)) == 0);
      CHECK(scr_heap_usable_size(h, p) >= sizes[i]);
      CHECK_EQ(scr_heap_check(h, p), SCR_OK);
      scr_heap_free(h, p);
    }
  }
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_trim(h);
  struct scr_stats st;
  scr_heap_stats(h, &st);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(st.mmaps, 0);
  CHECK_EQ(st.bytes, 0);
  scr_heap_destroy(h);
}

/* The class of an aligned request is, for every size and every power of
 * two from 32 to 64 KiB, the first class from the request's (or the
 * alignment's) whose size is a multiple of the alignment: the definition,
 * which _scr_class_aligned computes without a search. */
static void aligned_requests_get_the_first_aligned_class(void) {
  for (size_t align = 32; align <= SCR_SMALL_MAX; align *= 2) {
    for (size_t n = 1; n <= SCR_SMALL_MAX + 1; n++) {
      size_t want = n < align ? align : n;
      unsigned c = want <= SCR_SMALL_MAX ? _scr_class_of(want) : SCR_CLASS_COUNT;
      while (c < SCR_CLASS_COUNT && _scr_class_sizes[c] % align != 0) c++;
      if (_scr_class_aligned(align, n) != c) {
        CHECK_EQ(_scr_class_aligned(align, n), c);
        return;
      }
    }
  }
}

int main(void) {
  TEST(classes_are_increasing_multiples_of_16);
  TEST(every_request_gets_the_smallest_class);
  TEST(rounding_waste_is_bounded);
  TEST(blocks_are_aligned_and_usable);
  TEST(aligned_alloc_serves_every_power_of_two);
  TEST(aligned_requests_get_the_first_aligned_class);
  return check_done();
}
