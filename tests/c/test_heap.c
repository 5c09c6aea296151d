/* Allocation, calloc zeroing, realloc, large and huge blocks. */
#include "check.h"
#include "scralloc.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static struct scr_stats stats(scr_heap *h) {
  struct scr_stats st;
  scr_heap_stats(h, &st);
  return st;
}

static void fill(void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) ((uint8_t *)p)[i] = (uint8_t)(seed + i * 31);
}
static int filled(const void *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != (uint8_t)(seed + i * 31)) return 0;
  return 1;
}
static int all_zero(const void *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i]) return 0;
  return 1;
}

static void malloc_zero_returns_distinct_blocks(void) {
  scr_heap *h = scr_heap_new(NULL);
  void *a = scr_heap_malloc(h, 0), *b = scr_heap_malloc(h, 0);
  CHECK(a && b && a != b);
  CHECK_EQ(scr_heap_usable_size(h, a), 16);
  scr_heap_free(h, a);
  scr_heap_free(h, b);
  scr_heap_free(h, NULL); /* no-op */
  CHECK_EQ(scr_heap_usable_size(h, NULL), 0);
  CHECK_EQ(stats(h).allocs, 0);
  scr_heap_destroy(h);
  scr_heap_destroy(NULL);
}

static void blocks_do_not_overlap(void) {
  scr_heap *h = scr_heap_new(NULL);
  enum { N = 3000 };
  static void *p[N];
  static size_t n[N];
  for (int i = 0; i < N; i++) {
    n[i] = (size_t)(i * 7919) % 40000 + 1;
    p[i] = scr_heap_malloc(h, n[i]);
    CHECK(p[i] != NULL);
    fill(p[i], n[i], (unsigned)i);
  }
  for (int i = 0; i < N; i++) CHECK(filled(p[i], n[i], (unsigned)i));
  CHECK_EQ(stats(h).allocs, N);
  for (int i = 0; i < N; i += 2) scr_heap_free(h, p[i]);
  for (int i = 1; i < N; i += 2) CHECK(filled(p[i], n[i], (unsigned)i));
  for (int i = 1; i < N; i += 2) scr_heap_free(h, p[i]);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  struct scr_stats st = stats(h);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(st.heap_used, 0);
  scr_heap_trim(h);
  st = stats(h);
  CHECK_EQ(st.mmaps, 0);
  CHECK_EQ(st.bytes, 0);
  scr_heap_destroy(h);
}

/* calloc zeroes fresh blocks, recycled blocks (free list), blocks of a
 * retained page reused by another class, and decommitted pages. */
static void calloc_zeroes_every_kind_of_memory(void) {
  scr_options o;
  scr_options_init(&o);
  o.retain = 1;
  scr_heap *h = scr_heap_new(&o);
  size_t sizes[] = {8, 64, 1000, 16384, 40000, 100000, 2u << 20};
  for (unsigned round = 0; round < 3; round++) {
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      void *p = scr_heap_calloc(h, 1, sizes[i]);
      CHECK(p && all_zero(p, sizes[i]));
      memset(p, 0xAB, scr_heap_usable_size(h, p));
      scr_heap_free(h, p);
      p = scr_heap_calloc(h, sizes[i], 1);
      CHECK(p && all_zero(p, sizes[i]));
      memset(p, 0xCD, scr_heap_usable_size(h, p));
      scr_heap_free(h, p);
    }
    if (round == 1) scr_heap_trim(h); /* round 2 runs on decommitted pages */
  }
  /* a retained page of class 64 reused by class 48 */
  void *a = scr_heap_malloc(h, 64);
  memset(a, 0xEE, 64);
  scr_heap_free(h, a);
  void *b = scr_heap_calloc(h, 3, 16);
  CHECK(b && all_zero(b, 48));
  scr_heap_free(h, b);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* Pages of the machine's size in [p, p + n) that are in RAM. */
static size_t resident_pages(const void *p, size_t n) {
  size_t ps = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t from = ((uintptr_t)p + ps - 1) & ~(uintptr_t)(ps - 1), to = ((uintptr_t)p + n) & ~(uintptr_t)(ps - 1);
  unsigned char vec[64];
  size_t count = 0;
  for (uintptr_t a = from; a < to; a += 64 * ps) {
    size_t len = to - a < 64 * ps ? to - a : 64 * ps;
    CHECK(mincore((void *)a, len, vec) == 0);
    for (size_t i = 0; i < len / ps; i++) count += vec[i] & 1;
  }
  return count;
}

static int thp_always(void) {
  FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  char line[128] = "";
  if (f) {
    if (!fgets(line, sizeof line, f)) line[0] = '\0';
    fclose(f);
  }
  return strstr(line, "[always]") != NULL;
}

/* calloc of memory never handed out writes nothing: the pages of a fresh
 * zeroed block stay out of RAM until the program touches them (as with
 * glibc); a recycled block is zeroed. */
static void calloc_leaves_fresh_pages_untouched(void) {
  if (thp_always()) { /* a first touch would bring in 2 MiB */
    printf("  skipped: transparent huge pages are \"always\"\n");
    return;
  }
  scr_heap *h = scr_heap_new(NULL);
  size_t sizes[] = {9000, 60000}; /* a small class, a medium one */
  for (unsigned i = 0; i < 2; i++) {
    unsigned char *p = scr_heap_calloc(h, 1, sizes[i]);
    CHECK(p != NULL);
    CHECK_EQ(resident_pages(p, sizes[i]), 0);
    CHECK(all_zero(p, sizes[i]));
    memset(p, 0xAB, sizes[i]);
    scr_heap_free(h, p);
    unsigned char *q = scr_heap_calloc(h, 1, sizes[i]); /* the same block, now dirty */
    CHECK(q == p);
    CHECK(all_zero(q, sizes[i]));
    scr_heap_free(h, q);
  }
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

static void realloc_preserves_contents(void) {
  scr_heap *h = scr_heap_new(NULL);
  size_t steps[] = {1, 17, 100, 4096, 16384, 16385, 70000, 1u << 20, (1u << 20) + 1, 5u << 20, 40u << 20,
                    3u << 20, 200000, 5000, 40, 1};
  size_t cur = 0;
  void *p = NULL;
  for (unsigned i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    size_t keep = cur < steps[i] ? cur : steps[i];
    void *q = scr_heap_realloc(h, p, steps[i]);
    CHECK(q != NULL);
    CHECK(filled(q, keep, 7));
    CHECK(scr_heap_usable_size(h, q) >= steps[i]);
    fill(q, steps[i], 7);
    p = q;
    cur = steps[i];
    CHECK_EQ(stats(h).allocs, 1);
  }
  CHECK(scr_heap_realloc(h, p, 0) == NULL); /* frees */
  CHECK_EQ(stats(h).allocs, 0);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

static void realloc_stays_in_place_when_it_fits(void) {
  scr_heap *h = scr_heap_new(NULL);
  void *p = scr_heap_malloc(h, 100); /* class 112 */
  CHECK(scr_heap_realloc(h, p, 112) == p);
  CHECK(scr_heap_realloc(h, p, 60) == p);
  void *big = scr_heap_malloc(h, 100000); /* two pages */
  CHECK(scr_heap_realloc(h, big, 131072) == big);
  /* a span grows over the free pages after it */
  void *grown = scr_heap_realloc(h, big, 300000);
  CHECK(grown == big);
  /* a buffer growing into the medium classes by eighths (as Python's
   * writers grow) moves into 20 KiB, then into the largest, and stays */
  void *medium = scr_heap_malloc(h, 16000);
  unsigned moves = 0;
  for (size_t n = 18000; n <= SCR_SMALL_MAX; n += n / 8) {
    void *q = scr_heap_realloc(h, medium, n);
    CHECK(q != NULL);
    moves += q != medium;
    medium = q;
  }
  CHECK_EQ(scr_heap_usable_size(h, medium), SCR_SMALL_MAX);
  CHECK_EQ(moves, 2);
  /* shrinking below the medium classes moves it to a smaller block */
  void *small = scr_heap_realloc(h, medium, 1000);
  CHECK(small != medium);
  CHECK_EQ(scr_heap_usable_size(h, small), 1024);
  scr_heap_free(h, small);
  scr_heap_free(h, p);
  scr_heap_free(h, grown);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* A large block malloc asks for starts 4 cache lines into its run when
 * the run has that slack (large.c: its colour); one with no slack, and an
 * aligned one, start on the page.  The bytes before a coloured block are
 * no block's, the usable size and heap_used leave them out, and a second
 * free is still a double free once the run went back to its segment. */
static void large_blocks_start_a_colour_into_their_run(void) {
  scr_options o;
  scr_options_init(&o);
  o.large_cache = 0;
  scr_heap *h = scr_heap_new(&o);
  uint8_t *p = scr_heap_malloc(h, 200000); /* 4 pages, 62144 bytes of slack */
  uintptr_t run = (uintptr_t)p & ~(uintptr_t)(SCR_PAGE_SIZE - 1);
  CHECK_EQ((uintptr_t)p - run, 256);
  CHECK_EQ(scr_heap_usable_size(h, p), 4 * SCR_PAGE_SIZE - 256);
  CHECK_EQ(stats(h).heap_used, 4 * SCR_PAGE_SIZE - 256);
  CHECK_EQ(scr_heap_check(h, p), SCR_OK);
  CHECK_EQ(scr_heap_check(h, (void *)run), SCR_ENOTALLOC);
  CHECK_EQ(scr_heap_check(h, p + 16), SCR_EINTERIOR);
  CHECK_EQ(scr_heap_check(h, p + SCR_PAGE_SIZE), SCR_EINTERIOR);
  fill(p, 200000, 3);
  uint8_t *q = scr_heap_calloc(h, 1, 2 * SCR_PAGE_SIZE); /* no slack: on the page */
  CHECK_EQ((uintptr_t)q & (SCR_PAGE_SIZE - 1), 0);
  CHECK(all_zero(q, 2 * SCR_PAGE_SIZE));
  /* the colour needs SCR_COLOUR_LINES lines of slack: exactly that much
   * is enough, less is not */
  uint8_t *s = scr_heap_malloc(h, 3 * SCR_PAGE_SIZE - 256);
  CHECK_EQ((uintptr_t)s & (SCR_PAGE_SIZE - 1), 256);
  CHECK_EQ(scr_heap_usable_size(h, s), 3 * SCR_PAGE_SIZE - 256);
  uint8_t *t = scr_heap_malloc(h, 3 * SCR_PAGE_SIZE - 255);
  CHECK_EQ((uintptr_t)t & (SCR_PAGE_SIZE - 1), 0);
  CHECK_EQ(scr_heap_usable_size(h, t), 3 * SCR_PAGE_SIZE);
  scr_heap_free(h, s);
  scr_heap_free(h, t);
  uint8_t *r = scr_heap_aligned_alloc(h, 4096, 200000); /* aligned: on the page */
  CHECK_EQ((uintptr_t)r & (SCR_PAGE_SIZE - 1), 0);
  scr_heap_free(h, q);
  scr_heap_free(h, r);
  /* grown in place over the free pages after it, keeping its colour: the
   * request plus the colour decide the pages */
  uint8_t *g = scr_heap_realloc(h, p, 4 * SCR_PAGE_SIZE);
  CHECK(g == p);
  CHECK(filled(g, 200000, 3));
  CHECK(scr_heap_usable_size(h, g) >= 4 * SCR_PAGE_SIZE);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_free(h, g);
  CHECK_EQ(stats(h).heap_used, 0);
  CHECK_EQ(scr_heap_check(h, g), SCR_EDOUBLEFREE);
  CHECK_EQ(scr_heap_check(h, (void *)run), SCR_ENOTALLOC);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* Huge blocks move with mremap: no copy, and the counters follow. */
static void huge_realloc_uses_mremap(void) {
  scr_heap *h = scr_heap_new(NULL);
  size_t n = 8u << 20;
  void *p = scr_heap_malloc(h, n);
  fill(p, n, 3);
  struct scr_stats before = stats(h);
  void *q = scr_heap_realloc(h, p, 64u << 20);
  struct scr_stats after = stats(h);
  CHECK(q != NULL && filled(q, n, 3));
  CHECK(after.mremap_calls > before.mremap_calls);
  CHECK_EQ(after.mmaps, before.mmaps);
  CHECK(after.bytes >= before.bytes + (56u << 20));
  CHECK_EQ(scr_heap_check(h, q), SCR_OK);
  if (q != p) CHECK(scr_heap_check(h, p) != SCR_OK);
  scr_heap_free(h, q);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_trim(h);
  CHECK_EQ(stats(h).mmaps, 0);
  scr_heap_destroy(h);
}

/* A loop of 1 MiB and 8 MiB alloc/free maps once, thanks to the large
 * cache (which, with a purge delay, keeps huge mappings only: the 1 MiB
 * run would then wait as dirty pages). */
static void large_cache_stops_map_unmap_loops(void) {
  size_t sizes[] = {1u << 20, 8u << 20};
  for (unsigned i = 0; i < 2; i++) {
    scr_options no_delay;
    scr_options_init(&no_delay);
    no_delay.purge_delay_ms = 0;
    scr_heap *h = scr_heap_new(&no_delay);
    for (int k = 0; k < 1000; k++) {
      void *p = scr_heap_malloc(h, sizes[i]);
      CHECK(p != NULL);
      ((char *)p)[sizes[i] - 1] = 1;
      scr_heap_free(h, p);
    }
    struct scr_stats st = stats(h);
    CHECK(st.mmap_calls <= 2);
    CHECK_EQ(st.munmap_calls, 0);
    CHECK_EQ(st.cached_blocks, 1);
    CHECK(scr_heap_trim(h) >= sizes[i]);
    st = stats(h);
    CHECK_EQ(st.cached_blocks, 0);
    CHECK_EQ(st.mmaps, 0);
    CHECK_EQ(st.bytes, 0);
    scr_heap_destroy(h);
  }
  /* large_cache = 0: every free gives the block back */
  scr_options o;
  scr_options_init(&o);
  o.large_cache = 0;
  scr_heap *h = scr_heap_new(&o);
  for (int k = 0; k < 10; k++) scr_heap_free(h, scr_heap_malloc(h, 8u << 20));
  CHECK_EQ(stats(h).munmap_calls, 10);
  CHECK_EQ(stats(h).mmaps, 0);
  scr_heap_destroy(h);
}

/* The byte cap of the large cache evicts the oldest block. */
static void large_cache_is_bounded(void) {
  scr_options o;
  scr_options_init(&o);
  o.large_cache = 4;
  o.large_cache_bytes = 10u << 20;
  scr_heap *h = scr_heap_new(&o);
  void *p[8];
  for (int i = 0; i < 8; i++) p[i] = scr_heap_malloc(h, (2u << 20) + (size_t)i * 100000);
  for (int i = 0; i < 8; i++) scr_heap_free(h, p[i]);
  struct scr_stats st = stats(h);
  CHECK(st.cached_blocks <= 4);
  CHECK(st.cached_bytes <= (10u << 20));
  CHECK(st.cached_blocks >= 3);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

static void stats_json_is_complete(void) {
  scr_heap *h = scr_heap_new(NULL);
  void *p = scr_heap_malloc(h, 100);
  char small[16];
  size_t need = scr_heap_stats_json(h, small, sizeof small);
  CHECK(need > sizeof small);
  CHECK(strlen(small) < sizeof small);
  char *buf = malloc(need + 1);
  CHECK_EQ(scr_heap_stats_json(h, buf, need + 1), need);
  CHECK_EQ(strlen(buf), need);
  CHECK(strstr(buf, "\"allocs\":1,") != NULL);
  CHECK(strstr(buf, "\"classes\":[{\"block_size\":16,") != NULL);
  CHECK(buf[0] == '{' && buf[need - 1] == '}');
  free(buf);
  scr_heap_free(h, p);
  scr_heap_destroy(h);
}

static void destroy_unmaps_live_blocks(void) {
  scr_heap *h = scr_heap_new(NULL);
  for (int i = 0; i < 100; i++) scr_heap_malloc(h, (size_t)i * 5000);
  scr_heap_malloc(h, 30u << 20);
  unsigned long calls = scr_debug_os_calls();
  struct scr_stats st = stats(h);
  CHECK(st.mmaps >= 2);
  scr_heap_destroy(h); /* LeakSanitizer and the call count show it */
  CHECK(scr_debug_os_calls() >= calls + st.mmaps);
}

static void options_from_text_and_env(void) {
  scr_options o;
  scr_options_init(&o);
  CHECK_EQ(o.retain, 1);
  CHECK_EQ(scr_options_set(&o, "retain", "4"), SCR_OK);
  CHECK_EQ(o.retain, 4);
  CHECK_EQ(scr_options_set(&o, "large_cache_bytes", "64M"), SCR_OK);
  CHECK_EQ(o.large_cache_bytes, 64u << 20);
  CHECK_EQ(scr_options_set(&o, "retain_bytes", "1k"), SCR_OK);
  CHECK_EQ(o.retain_bytes, 1024);
  CHECK_EQ(scr_options_set(&o, "retain", "-1"), SCR_EINVAL);
  CHECK_EQ(scr_options_set(&o, "retain", "4x"), SCR_EINVAL);
  CHECK_EQ(scr_options_set(&o, "no_such_option", "1"), SCR_EINVAL);
  CHECK_EQ(scr_options_set(&o, "huge_threshold", "1"), SCR_EINVAL); /* below its minimum */
  setenv("SCRALLOC_RETAIN", "7", 1);
  setenv("SCRALLOC_LIMIT_BYTES", "1G", 1);
  scr_options_from_env(&o);
  CHECK_EQ(o.retain, 7);
  CHECK_EQ(o.limit_bytes, 1u << 30);
  unsetenv("SCRALLOC_RETAIN");
  unsetenv("SCRALLOC_LIMIT_BYTES");
}

static void limit_bytes_refuses_growth(void) {
  scr_options o;
  scr_options_init(&o);
  o.limit_bytes = 1u << 20;
  scr_heap *h = scr_heap_new(&o);
  errno = 0;
  CHECK(scr_heap_malloc(h, 2u << 20) == NULL);
  CHECK_EQ(errno, ENOMEM);
  int got = 0;
  void *p[128];
  for (int i = 0; i < 128; i++) {
    p[i] = scr_heap_malloc(h, 16384);
    if (p[i]) got++;
  }
  CHECK_EQ(got, 64); /* 16 pages of 4 blocks */
  CHECK_EQ(stats(h).bytes, 1u << 20);
  for (int i = 0; i < 128; i++) scr_heap_free(h, p[i]);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

int main(void) {
  TEST(malloc_zero_returns_distinct_blocks);
  TEST(blocks_do_not_overlap);
  TEST(calloc_zeroes_every_kind_of_memory);
  TEST(calloc_leaves_fresh_pages_untouched);
  TEST(realloc_preserves_contents);
  TEST(realloc_stays_in_place_when_it_fits);
  TEST(large_blocks_start_a_colour_into_their_run);
  TEST(huge_realloc_uses_mremap);
  TEST(large_cache_stops_map_unmap_loops);
  TEST(large_cache_is_bounded);
  TEST(stats_json_is_complete);
  TEST(destroy_unmaps_live_blocks);
  TEST(options_from_text_and_env);
  TEST(limit_bytes_refuses_growth);
  return check_done();
}
