/* scr_heap_of: which heap's mapping holds an address, and the usable size
 * of the block there; the O(1) test that routes a free to its heap (the
 * Python binding's serve_python). */
#include "check.h"
#include "scralloc.h"
#include <stdint.h>
#include <stdlib.h>

static void each_block_names_its_heap_and_size(void) {
  scr_heap *a = scr_heap_new(NULL), *b = scr_heap_new(NULL);
  size_t sizes[] = {0, 1, 16, 17, 100, 1000, 4096, 20000, SCR_SMALL_MAX, SCR_SMALL_MAX + 1,
                    300000, (size_t)2 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *pa = scr_heap_malloc(a, sizes[i]), *pb = scr_heap_malloc(b, sizes[i]);
    size_t ua = 1, ub = 1;
    CHECK(scr_heap_of(pa, &ua) == a);
    CHECK(scr_heap_of(pb, &ub) == b);
    CHECK(scr_heap_of(pa, NULL) == a);
    CHECK_EQ(ua, scr_heap_usable_size(a, pa));
    CHECK_EQ(ub, scr_heap_usable_size(b, pb));
    CHECK(ua >= sizes[i]);
    if (sizes[i] <= SCR_SMALL_MAX)
      CHECK_EQ(ua, scr_class_size((unsigned)scr_size_class(sizes[i])));
    scr_heap_free(a, pa);
    scr_heap_free(b, pb);
  }
  scr_heap_destroy(a);
  scr_heap_destroy(b);
}

static void foreign_addresses_have_no_heap(void) {
  int local = 0;
  void *m = malloc(64);
  size_t u = 123;
  CHECK(scr_heap_of(NULL, &u) == NULL);
  CHECK_EQ(u, 0);
  u = 123;
  CHECK(scr_heap_of(&local, &u) == NULL);
  CHECK_EQ(u, 0);
  CHECK(scr_heap_of(m, NULL) == NULL);
  CHECK(scr_heap_of((void *)(uintptr_t)1, NULL) == NULL);
  CHECK(scr_heap_of((void *)~(uintptr_t)0xfff, NULL) == NULL);
  free(m);
}

/* Once a heap gives a mapping back, its addresses are no heap's. */
static void unmapped_memory_has_no_heap(void) {
  scr_options o;
  scr_options_init(&o);
  o.retain = 0;
  o.large_cache = 0;
  scr_heap *h = scr_heap_new(&o);
  void *huge = scr_heap_malloc(h, (size_t)4 << 20);
  CHECK(scr_heap_of(huge, NULL) == h);
  scr_heap_free(h, huge);
  scr_heap_trim(h);
  CHECK(scr_heap_of(huge, NULL) == NULL);
  void *p = scr_heap_malloc(h, 64);
  CHECK(scr_heap_of(p, NULL) == h);
  scr_heap_destroy(h);
  CHECK(scr_heap_of(p, NULL) == NULL);
}

int main(void) {
  TEST(each_block_names_its_heap_and_size);
  TEST(foreign_addresses_have_no_heap);
  TEST(unmapped_memory_has_no_heap);
  return check_done();
}
