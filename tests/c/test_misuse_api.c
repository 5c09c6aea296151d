/* The C API given bad arguments: every call returns its documented error
 * code or does nothing (scralloc.h says which, next to each function),
 * and never crashes; the unchecked heap calls detect misuse (double free,
 * interior, never allocated, foreign) and ignore the call, reported
 * through the error handler; the process allocator's calls count misuse
 * by kind (SCRALLOC_ON_ERROR=ignore here: abort, the default, would end
 * the test; tests/preload/misuse_check.py runs that in children). */
#include "check.h"
#include "scralloc.h"
#include <errno.h>
#include <string.h>

static int handler_calls, handler_last;
static void count_errors(int err, const char *msg, void *arg) {
  (void)msg, (void)arg;
  handler_calls++;
  handler_last = err;
}

/* Calls the error handler reports once with err. */
#define EXPECT_REPORT(call, err)                                  \
  do {                                                            \
    int calls_before_ = handler_calls;                            \
    call;                                                         \
    CHECK_EQ(handler_calls, calls_before_ + 1);                   \
    CHECK_EQ(handler_last, (err));                                \
  } while (0)

static void null_heap(void) {
  errno = 0;
  CHECK(scr_heap_malloc(NULL, 10) == NULL);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(scr_heap_calloc(NULL, 1, 10) == NULL);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(scr_heap_aligned_alloc(NULL, 64, 10) == NULL);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(scr_heap_realloc(NULL, NULL, 10) == NULL);
  CHECK_EQ(errno, EINVAL);
  int x;
  scr_heap_free(NULL, &x); /* no-op */
  CHECK_EQ(scr_heap_usable_size(NULL, &x), 0);
  CHECK_EQ(scr_heap_trim(NULL), 0);
  struct scr_stats st;
  memset(&st, 0xff, sizeof st);
  scr_heap_stats(NULL, &st);
  CHECK_EQ(st.allocs, 0); /* zeroed */
  char buf[64] = "x";
  CHECK_EQ(scr_heap_stats_json(NULL, buf, sizeof buf), 0);
  CHECK_EQ(buf[0], '\0');
  EXPECT_REPORT(CHECK_EQ(scr_heap_validate(NULL), SCR_EINVAL), SCR_EINVAL); /* docs/misuse.md: reported */
  CHECK_EQ(scr_heap_check(NULL, &x), SCR_EINVAL);
  CHECK_EQ(scr_heap_free_checked(NULL, &x), SCR_EINVAL);
  void *out = &x;
  CHECK_EQ(scr_heap_realloc_checked(NULL, NULL, 10, &out), SCR_EINVAL);
  size_t n = 7;
  CHECK_EQ(scr_heap_usable_size_checked(NULL, &x, &n), SCR_EINVAL);
  CHECK_EQ(n, 7);
  scr_options o;
  scr_heap_options(NULL, &o); /* no-op */
  scr_heap_destroy(NULL);     /* no-op */
}

static void null_outputs_and_names(void) {
  scr_heap *h = scr_heap_new(NULL);
  scr_heap_stats(h, NULL);    /* no-op */
  scr_heap_options(h, NULL);  /* no-op */
  CHECK(scr_heap_stats_json(h, NULL, 0) > 10); /* the length it needs */
  CHECK_EQ(scr_stats_json(NULL, NULL, 0), 0);
  CHECK_EQ(scr_heap_realloc_checked(h, NULL, 10, NULL), SCR_EINVAL);
  void *p = scr_heap_malloc(h, 10);
  CHECK_EQ(scr_heap_usable_size_checked(h, p, NULL), SCR_OK); /* out is optional */
  scr_heap_free(h, p);
  scr_options_init(NULL);     /* no-op */
  scr_options_from_env(NULL); /* no-op */
  scr_options o;
  scr_options_init(&o);
  CHECK_EQ(scr_options_set(NULL, "retain", "1"), SCR_EINVAL);
  CHECK_EQ(scr_options_set(&o, NULL, "1"), SCR_EINVAL);
  CHECK_EQ(scr_options_set(&o, "retain", NULL), SCR_EINVAL);
  scr_stats(NULL);            /* no-op */
  scr_process_stats(NULL);    /* no-op */
  CHECK_EQ(scr_arena_stats(0, NULL), SCR_EINVAL);
  CHECK(scr_process_stats_json(NULL, 0) > 10);
  CHECK_EQ(scr_process_option_set(NULL, "1"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_set("retain_max", NULL), SCR_EINVAL);
  CHECK_EQ(scr_process_option_get(NULL), UINT64_MAX);
  scr_free_many(NULL, 3);     /* no-op */
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* Addresses below the first segment, on a heap that has freed nothing:
 * the free fast path's segment cache is empty then. */
static void low_addresses(void) {
  scr_heap *h = scr_heap_new(NULL);
  EXPECT_REPORT(scr_heap_free(h, (void *)1), SCR_EFOREIGN);
  EXPECT_REPORT(scr_heap_free(h, (void *)4096), SCR_EFOREIGN);
  EXPECT_REPORT(scr_heap_free(h, (void *)(uintptr_t)(SCR_SEGMENT_SIZE - 16)), SCR_EFOREIGN);
  CHECK_EQ(scr_heap_check(h, (void *)1), SCR_EFOREIGN);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

static void destroyed_heap(void) {
  scr_heap *h = scr_heap_new(NULL);
  void *p = scr_heap_malloc(h, 100);
  CHECK(p != NULL);
  scr_heap_destroy(h);
  /* the magic word tells, until the descriptor is taken by a new heap */
  EXPECT_REPORT(scr_heap_destroy(h), SCR_EINVAL);
  errno = 0;
  EXPECT_REPORT(CHECK(scr_heap_malloc(h, 10) == NULL), SCR_EINVAL);
  CHECK_EQ(errno, EINVAL);
  EXPECT_REPORT(scr_heap_free(h, p), SCR_EINVAL);
  CHECK_EQ(scr_heap_check(h, p), SCR_EINVAL);
  EXPECT_REPORT(CHECK_EQ(scr_heap_validate(h), SCR_EINVAL), SCR_EINVAL);
  struct scr_stats st;
  scr_heap_stats(h, &st);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(scr_heap_trim(h), 0);
  /* a new heap takes a destroyed descriptor and is whole */
  scr_heap *g = scr_heap_new(NULL);
  void *q = scr_heap_malloc(g, 100);
  CHECK(q != NULL);
  scr_heap_free(g, q);
  scr_heap_stats(g, &st);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(scr_heap_validate(g), SCR_OK);
  scr_heap_destroy(g);
}

/* The unchecked heap calls detect each misuse, report it and ignore the
 * call: the heap stays valid and nothing is handed out twice. */
static void unchecked_heap_misuse(void) {
  scr_heap *h = scr_heap_new(NULL);
  char *keep = scr_heap_malloc(h, 112), *p = scr_heap_malloc(h, 112);
  scr_heap_free(h, p);
  EXPECT_REPORT(scr_heap_free(h, p), SCR_EDOUBLEFREE);
  void *a = scr_heap_malloc(h, 112), *b = scr_heap_malloc(h, 112);
  CHECK(a == p && b != p);
  EXPECT_REPORT(scr_heap_free(h, keep + 16), SCR_EINTERIOR);
  EXPECT_REPORT(scr_heap_free(h, keep + 8), SCR_EINTERIOR);
  EXPECT_REPORT(scr_heap_free(h, keep + 112 * 20), SCR_ENOTALLOC); /* a slot never carved */
  errno = 0;
  scr_heap_free(h, a);
  EXPECT_REPORT(CHECK(scr_heap_realloc(h, a, 300) == NULL), SCR_EDOUBLEFREE);
  CHECK_EQ(errno, EINVAL);
  EXPECT_REPORT(CHECK_EQ(scr_heap_usable_size(h, a), 0), SCR_EDOUBLEFREE);
  char *large = scr_heap_malloc(h, 200 << 10), *huge = scr_heap_malloc(h, 3 << 20);
  EXPECT_REPORT(scr_heap_free(h, large + 4096), SCR_EINTERIOR);
  EXPECT_REPORT(scr_heap_free(h, huge + 64), SCR_EINTERIOR);
  scr_heap_free(h, large);
  scr_heap_free(h, huge);
  EXPECT_REPORT(scr_heap_free(h, large), SCR_EDOUBLEFREE);
  EXPECT_REPORT(scr_heap_free(h, huge), SCR_EDOUBLEFREE);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_free(h, b);
  scr_heap_free(h, keep);
  struct scr_stats st;
  scr_heap_stats(h, &st);
  CHECK_EQ(st.allocs, 0);
  scr_heap_destroy(h);
}

/* With retain=0 a page goes back as its last block is freed (and its
 * segment with it): a second free of that block is a double free for
 * the unchecked calls as for scr_heap_check, one answer, while the run
 * is among those the heap gave back last. */
static void retain0_double_free_one_answer(void) {
  scr_options o;
  scr_options_init(&o);
  o.retain = 0;
  size_t sizes[] = {64, 40000, 200 << 10};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    scr_heap *h = scr_heap_new(&o);
    void *p = scr_heap_malloc(h, sizes[i]);
    scr_heap_free(h, p);
    CHECK_EQ(scr_heap_check(h, p), SCR_EDOUBLEFREE);
    EXPECT_REPORT(scr_heap_free(h, p), SCR_EDOUBLEFREE);
    errno = 0;
    EXPECT_REPORT(CHECK(scr_heap_realloc(h, p, 10) == NULL), SCR_EDOUBLEFREE);
    CHECK_EQ(errno, EINVAL);
    EXPECT_REPORT(CHECK_EQ(scr_heap_usable_size(h, p), 0), SCR_EDOUBLEFREE);
    CHECK_EQ(scr_heap_free_checked(h, p), SCR_EDOUBLEFREE);
    CHECK_EQ(scr_heap_validate(h), SCR_OK);
    scr_heap_destroy(h);
  }
}

static uint64_t misuse_count(const struct scr_process_stats *s) {
  return s->double_frees + s->interior_frees + s->unallocated_frees + s->foreign_frees;
}

/* The process allocator counts each misuse by kind and, with
 * on_error=ignore, ignores the call. */
static void process_misuse_counted(void) {
  CHECK_EQ(scr_process_option_get("on_error"), 0); /* abort */
  CHECK_EQ(scr_process_option_set("on_error", "sometimes"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_set("on_error", "3"), SCR_EINVAL); /* out of range: refused */
  CHECK_EQ(scr_process_option_set("on_error", "warn"), SCR_OK);
  CHECK_EQ(scr_process_option_get("on_error"), 1);
  CHECK_EQ(scr_process_option_set("on_error", "ignore"), SCR_OK);
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  char *p = scr_malloc(112), *keep = scr_malloc(1400);
  scr_free(p);
  scr_free(p);                          /* double free */
  scr_free(keep + 16);                  /* interior */
  scr_free(keep + 20 * 1408);           /* never carved */
  int local;
  scr_free(&local);                     /* foreign */
  scr_free((void *)1);                  /* foreign */
  errno = 0;
  CHECK(scr_realloc(p, 300) == NULL);   /* a freed block */
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(scr_usable_size(p), 0);      /* a freed block */
  void *x = scr_malloc(112), *y = scr_malloc(112);
  CHECK(x == p && y != p);              /* p was kept once */
  scr_process_stats(&s1);
  CHECK_EQ(s1.double_frees - s0.double_frees, 3);
  CHECK_EQ(s1.interior_frees - s0.interior_frees, 1);
  CHECK_EQ(s1.unallocated_frees - s0.unallocated_frees, 1);
  CHECK_EQ(s1.foreign_frees - s0.foreign_frees, 2);
  CHECK_EQ(misuse_count(&s1) - misuse_count(&s0), 7);
  char json[16384];
  size_t n = scr_process_stats_json(json, sizeof json);
  CHECK(n < sizeof json && strstr(json, "\"double_frees\":") != NULL);
  scr_free(x);
  scr_free(y);
  scr_free(keep);
  CHECK_EQ(scr_process_validate(), SCR_OK);
  CHECK_EQ(scr_process_option_set("on_error", "abort"), SCR_OK);
}

/* A live block never holds the freed-block key: a large block made of
 * pages that size-class blocks were freed on (their second words hold the
 * key) and moved down to a size class by realloc hands its second word to
 * the small block, whose free must not look like a double free. */
static void realloc_down_from_reused_pages(void) {
  CHECK_EQ(scr_process_option_set("on_error", "ignore"), SCR_OK);
  struct scr_process_stats s0, s1;
  scr_process_stats(&s0);
  enum { N = 8192 }; /* eight 64 KiB pages of 64-B blocks */
  static void *small[N];
  for (int i = 0; i < N; i++) small[i] = scr_malloc(64);
  for (int i = 0; i < N; i++) scr_free(small[i]);
  for (int round = 0; round < 16; round++) {
    char *big = scr_malloc(192 << 10); /* page runs, some of them those pages */
    CHECK(big != NULL);
    big[0] = 1;                        /* the program writes its first bytes only */
    char *down = scr_realloc(big, 57);
    CHECK(down != NULL && down[0] == 1);
    scr_free(down);
  }
  scr_process_stats(&s1);
  CHECK_EQ(misuse_count(&s1) - misuse_count(&s0), 0);
  CHECK_EQ(scr_process_validate(), SCR_OK);
  CHECK_EQ(scr_process_option_set("on_error", "abort"), SCR_OK);
}

/* Out-of-range process options are refused, not clamped. */
static void process_options_out_of_range(void) {
  uint64_t before = scr_process_option_get("discard");
  CHECK_EQ(scr_process_option_set("discard", "18446744073709551615"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_get("discard"), before);
  CHECK_EQ(scr_process_option_set("pool", "2"), SCR_EINVAL); /* above its maximum, 1 */
  CHECK_EQ(scr_process_option_set("stats", "json"), SCR_OK);
  CHECK_EQ(scr_process_option_get("stats"), 3);
  CHECK_EQ(scr_process_option_set("stats", "0"), SCR_OK);
}

int main(void) {
  scr_set_error_handler(count_errors, NULL);
  TEST(null_heap);
  TEST(null_outputs_and_names);
  TEST(low_addresses);
  TEST(destroyed_heap);
  TEST(unchecked_heap_misuse);
  TEST(retain0_double_free_one_answer);
  TEST(process_misuse_counted);
  TEST(realloc_down_from_reused_pages);
  TEST(process_options_out_of_range);
  scr_set_error_handler(NULL, NULL);
  return check_done();
}
