/* Bad input: every kind of wrong address through the checked API, absurd
 * sizes and alignments, and the error handler.  After each error the heap
 * validates, its counters are unchanged, and it keeps working. */
#include "check.h"
#include "scralloc.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>

static struct scr_stats stats(scr_heap *h) {
  struct scr_stats st;
  scr_heap_stats(h, &st);
  return st;
}

static int handler_calls, handler_last;
static void count_errors(int err, const char *msg, void *arg) {
  (void)msg;
  (void)arg;
  handler_calls++;
  handler_last = err;
}

/* The error for p, checked through free, usable_size and realloc, with
 * nothing changed in the heap. */
static void expect_error(scr_heap *h, void *p, int err) {
  struct scr_stats before = stats(h);
  size_t n = 12345;
  void *out = (void *)1;
  CHECK_EQ(scr_heap_check(h, p), err);
  CHECK_EQ(scr_heap_free_checked(h, p), err);
  CHECK_EQ(scr_heap_usable_size_checked(h, p, &n), err);
  CHECK_EQ(n, 12345);
  CHECK_EQ(scr_heap_realloc_checked(h, p, 100, &out), err);
  CHECK(out == NULL);
  struct scr_stats after = stats(h);
  CHECK_EQ(after.allocs, before.allocs);
  CHECK_EQ(after.bytes, before.bytes);
  CHECK_EQ(after.heap_used, before.heap_used);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
}

static void foreign_addresses(void) {
  scr_heap *h = scr_heap_new(NULL), *other = scr_heap_new(NULL);
  int on_stack;
  void *libc = malloc(64);
  void *theirs = scr_heap_malloc(other, 64);
  expect_error(h, &on_stack, SCR_EFOREIGN);
  expect_error(h, libc, SCR_EFOREIGN);
  expect_error(h, theirs, SCR_EFOREIGN);
  expect_error(h, (void *)1, SCR_EFOREIGN);
  expect_error(h, (void *)UINTPTR_MAX, SCR_EFOREIGN);
  expect_error(h, (void *)(uintptr_t)0xffff800000000000ull, SCR_EFOREIGN);
  expect_error(h, (void *)foreign_addresses, SCR_EFOREIGN);
  CHECK_EQ(scr_heap_free_checked(h, NULL), SCR_OK);
  CHECK_EQ(scr_heap_check(h, NULL), SCR_EFOREIGN);
  CHECK_EQ(scr_heap_free_checked(other, theirs), SCR_OK);
  free(libc);
  scr_heap_destroy(other);
  scr_heap_destroy(h);
}

static void interior_and_never_allocated(void) {
  scr_heap *h = scr_heap_new(NULL);
  char *small = scr_heap_malloc(h, 100);       /* class 112 */
  char *span = scr_heap_malloc(h, 200000);     /* four pages */
  char *huge = scr_heap_malloc(h, 5u << 20);   /* own mapping */
  char *big_class = scr_heap_malloc(h, 14000); /* 4 slots of 14336 per page */
  expect_error(h, small + 16, SCR_EINTERIOR);
  expect_error(h, small + 1, SCR_EINTERIOR);
  expect_error(h, small + 112 * 3, SCR_ENOTALLOC);  /* a slot not carved yet */
  expect_error(h, span + 8, SCR_EINTERIOR);
  expect_error(h, span + 3 * SCR_PAGE_SIZE, SCR_EINTERIOR); /* a later page of the block */
  expect_error(h, huge + 4096, SCR_EINTERIOR);
  expect_error(h, huge - 4096, SCR_ENOTALLOC);   /* the mapping's header page */
  expect_error(h, big_class + 14336 * 4, SCR_ENOTALLOC); /* the page's unused tail */
  uintptr_t seg = (uintptr_t)small & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1);
  expect_error(h, (void *)seg, SCR_ENOTALLOC);                            /* metadata page */
  expect_error(h, span + 4 * SCR_PAGE_SIZE, SCR_ENOTALLOC); /* a free page: the one after the run (runs start low) */
  CHECK_EQ(scr_heap_free_checked(h, small), SCR_OK);
  CHECK_EQ(scr_heap_free_checked(h, span), SCR_OK);
  CHECK_EQ(scr_heap_free_checked(h, huge), SCR_OK);
  CHECK_EQ(scr_heap_free_checked(h, big_class), SCR_OK);
  CHECK_EQ(stats(h).allocs, 0);
  scr_heap_destroy(h);
}

static void double_frees(void) {
  scr_heap *h = scr_heap_new(NULL);
  void *keep = scr_heap_malloc(h, 64); /* keeps the page in use */
  void *small = scr_heap_malloc(h, 64);
  void *span = scr_heap_malloc(h, 100000);
  void *huge = scr_heap_malloc(h, 3u << 20);
  CHECK_EQ(scr_heap_free_checked(h, small), SCR_OK);
  CHECK_EQ(scr_heap_free_checked(h, span), SCR_OK); /* to the large cache */
  CHECK_EQ(scr_heap_free_checked(h, huge), SCR_OK);
  expect_error(h, small, SCR_EDOUBLEFREE);
  expect_error(h, span, SCR_EDOUBLEFREE);
  expect_error(h, huge, SCR_EDOUBLEFREE);
  /* the freed slot is handed out again and is then valid */
  void *again = scr_heap_malloc(h, 64);
  CHECK(again == small);
  CHECK_EQ(scr_heap_free_checked(h, again), SCR_OK);
  /* once its memory went back (to the segment, or to the OS), a freed
   * block is still a double free: the heap remembers the runs it gave back */
  scr_heap_trim(h);
  expect_error(h, huge, SCR_EDOUBLEFREE);
  expect_error(h, span, SCR_EDOUBLEFREE);
  CHECK_EQ(scr_heap_free_checked(h, keep), SCR_OK);
  scr_heap_trim(h);
  CHECK_EQ(stats(h).mmaps, 0);
  expect_error(h, keep, SCR_EDOUBLEFREE);
  expect_error(h, small, SCR_EDOUBLEFREE); /* a slot of the same page */
  expect_error(h, (char *)small + 16, SCR_EFOREIGN); /* not a block start */
  scr_heap_destroy(h);
}

/* retain = 0, no large cache: every free gives its page (and segment) back
 * at once.  The last 16 runs given back are remembered; past them a freed
 * block is foreign or never allocated, an error all the same. */
static void double_frees_after_release(void) {
  scr_options opt;
  scr_options_init(&opt);
  opt.retain = 0;
  opt.large_cache = 0;
  scr_heap *h = scr_heap_new(&opt);
  void *huge = scr_heap_malloc(h, 3u << 20);
  CHECK_EQ(scr_heap_free_checked(h, huge), SCR_OK);
  CHECK_EQ(stats(h).mmaps, 0);
  expect_error(h, huge, SCR_EDOUBLEFREE);
  for (int i = 0; i < 15; i++) { /* 15 more runs: 16 remembered */
    void *p = scr_heap_malloc(h, 64);
    CHECK_EQ(scr_heap_free_checked(h, p), SCR_OK);
    expect_error(h, p, SCR_EDOUBLEFREE);
  }
  expect_error(h, huge, SCR_EDOUBLEFREE);
  void *p = scr_heap_malloc(h, 64); /* a small block never sits where the huge one did */
  CHECK_EQ(scr_heap_free_checked(h, p), SCR_OK);
  int r = scr_heap_check(h, huge);
  CHECK(r == SCR_EFOREIGN || r == SCR_ENOTALLOC);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

static void absurd_sizes_and_alignments(void) {
  scr_heap *h = scr_heap_new(NULL);
  size_t absurd[] = {SIZE_MAX, SIZE_MAX - 4096, SIZE_MAX / 2, (size_t)1 << 62, ((size_t)1 << 47) + 1};
  for (unsigned i = 0; i < sizeof absurd / sizeof absurd[0]; i++) {
    errno = 0;
    CHECK(scr_heap_malloc(h, absurd[i]) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(scr_heap_aligned_alloc(h, 64, absurd[i]) == NULL);
    CHECK_EQ(errno, ENOMEM);
    void *p = scr_heap_malloc(h, 10);
    errno = 0;
    CHECK(scr_heap_realloc(h, p, absurd[i]) == NULL);
    CHECK_EQ(errno, ENOMEM);
    void *out;
    CHECK_EQ(scr_heap_realloc_checked(h, p, absurd[i], &out), SCR_ENOMEM);
    CHECK_EQ(scr_heap_check(h, p), SCR_OK); /* untouched */
    scr_heap_free(h, p);
  }
  errno = 0;
  CHECK(scr_heap_calloc(h, SIZE_MAX / 2, 3) == NULL);
  CHECK_EQ(errno, ENOMEM);
  errno = 0;
  CHECK(scr_heap_calloc(h, (size_t)1 << 32, (size_t)1 << 32) == NULL);
  CHECK_EQ(errno, ENOMEM);
  size_t bad_align[] = {0, 3, 24, 1000, SIZE_MAX};
  for (unsigned i = 0; i < sizeof bad_align / sizeof bad_align[0]; i++) {
    errno = 0;
    CHECK(scr_heap_aligned_alloc(h, bad_align[i], 64) == NULL);
    CHECK_EQ(errno, EINVAL);
  }
  errno = 0;
  CHECK(scr_heap_aligned_alloc(h, (size_t)1 << 62, 64) == NULL);
  CHECK_EQ(errno, ENOMEM);
  /* realloc(p, 0) frees; realloc(NULL, n) allocates */
  void *p = scr_heap_realloc(h, NULL, 10);
  CHECK(p != NULL);
  CHECK(scr_heap_realloc(h, p, 0) == NULL);
  struct scr_stats st = stats(h);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* Unchecked calls with a foreign pointer go to the error handler and
 * change nothing. */
static void unchecked_misuse_reaches_the_handler(void) {
  scr_heap *h = scr_heap_new(NULL);
  int x;
  scr_set_error_handler(count_errors, NULL);
  handler_calls = 0;
  scr_heap_free(h, &x);
  CHECK_EQ(handler_calls, 1);
  CHECK_EQ(handler_last, SCR_EFOREIGN);
  errno = 0;
  CHECK(scr_heap_realloc(h, &x, 10) == NULL);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(handler_calls, 2);
  CHECK_EQ(scr_heap_usable_size(h, &x), 0);
  scr_set_error_handler(NULL, NULL);
  CHECK_EQ(stats(h).allocs, 0);
  scr_heap_destroy(h);
}

/* In AddressSanitizer builds a freed small block is poisoned: a use after
 * free is reported (in a child process, which ASan ends). */
#if defined(__SANITIZE_ADDRESS__)
static void use_after_free_is_caught_by_asan(void) {
  scr_heap *h = scr_heap_new(NULL);
  char *keep = scr_heap_malloc(h, 64), *p = scr_heap_malloc(h, 64);
  scr_heap_free(h, p);
  CHECK(check_read_kills_child(p, 10));
  void *again = scr_heap_malloc(h, 64); /* unpoisoned when handed out again */
  CHECK(again == p);
  memset(again, 1, 64);
  scr_heap_free(h, again);
  scr_heap_free(h, keep);
  scr_heap_destroy(h);
}
#endif

static void error_strings(void) {
  for (int e = SCR_OK; e <= SCR_EDOUBLEFREE; e++) CHECK(strlen(scr_strerror(e)) > 4);
  CHECK(strcmp(scr_strerror(SCR_EDOUBLEFREE), "double free") == 0);
  CHECK(strcmp(scr_strerror(99), "unknown error") == 0);
}

int main(void) {
  TEST(foreign_addresses);
  TEST(interior_and_never_allocated);
  TEST(double_frees);
  TEST(double_frees_after_release);
  TEST(absurd_sizes_and_alignments);
  TEST(unchecked_misuse_reaches_the_handler);
  TEST(error_strings);
#if defined(__SANITIZE_ADDRESS__)
  TEST(use_after_free_is_caught_by_asan);
#endif
  return check_done();
}
