/* Retention of empty pages, trim, close, and the seed's reproducer:
 * 200,000 alloc/free pairs cost no syscall with retain = 1 and one page
 * acquisition and release each with retain = 0 and no purge delay; with
 * the default delay, none either way.  The tests of retain and its cap
 * (heap_with) turn the delay off, so that what they see is retention
 * alone; those of the delay (purging_heap) set it. */
#include "check.h"
#include "scralloc.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static struct scr_stats stats(scr_heap *h) {
  struct scr_stats st;
  scr_heap_stats(h, &st);
  return st;
}

static scr_heap *heap_with(unsigned retain, size_t retain_bytes) {
  scr_options o;
  scr_options_init(&o);
  o.retain = retain;
  o.purge_delay_ms = 0;
  if (retain_bytes) o.retain_bytes = retain_bytes;
  return scr_heap_new(&o);
}

#define PAIRS 200000

/* The seed's loop: one block allocated, touched and freed, PAIRS times. */
static struct scr_stats run_pairs(scr_heap *h, size_t size) {
  for (int k = 0; k < PAIRS; k++) {
    void *p = scr_heap_malloc(h, size);
    *(volatile char *)p = 1;
    scr_heap_free(h, p);
  }
  return stats(h);
}

static void seed_reproducer_retain_1(void) {
  size_t sizes[] = {64, 4096};
  for (int i = 0; i < 2; i++) {
    scr_heap *h = heap_with(1, 0);
    struct scr_stats st = run_pairs(h, sizes[i]);
    CHECK_EQ(st.mmap_calls, 1);   /* the first segment */
    CHECK_EQ(st.munmap_calls, 0);
    CHECK_EQ(st.madvise_calls, 0);
    CHECK_EQ(st.page_acquires, 1);
    CHECK_EQ(st.allocs, 0);
    CHECK_EQ(st.mmaps, 1);        /* the seed's end state: Mmaps=1 Bytes=65536 */
    CHECK_EQ(st.bytes, 65536);
    CHECK_EQ(st.retained_pages, 1);
    CHECK_EQ(scr_heap_trim(h), 65536);
    st = stats(h);
    CHECK_EQ(st.mmaps, 0);
    CHECK_EQ(st.bytes, 0);
    CHECK_EQ(st.munmap_calls, 1);
    scr_heap_destroy(h);
  }
}

static void seed_reproducer_retain_0(void) {
  size_t sizes[] = {64, 4096};
  for (int i = 0; i < 2; i++) {
    scr_heap *h = heap_with(0, 0);
    struct scr_stats st = run_pairs(h, sizes[i]);
    /* free-on-empty: one page acquisition and release per pair, and as
     * the segment empties each time, one mmap and one munmap */
    CHECK_EQ(st.page_acquires, PAIRS);
    CHECK_EQ(st.page_releases, PAIRS);
    CHECK(st.mmap_calls >= PAIRS && st.mmap_calls <= PAIRS + 4);
    CHECK(st.munmap_calls >= PAIRS && st.munmap_calls <= PAIRS + 8);
    CHECK_EQ(st.mmaps, 0);
    CHECK_EQ(st.bytes, 0);
    scr_heap_destroy(h);
  }
  /* The defaults' purge delay keeps the page a while instead: retain = 0
   * costs no syscall either (the delay's passes: the tests below). */
  for (int i = 0; i < 2; i++) {
    scr_options o;
    scr_options_init(&o);
    o.retain = 0;
    scr_heap *h = scr_heap_new(&o);
    struct scr_stats st = run_pairs(h, sizes[i]);
    CHECK_EQ(st.mmap_calls, 1);
    CHECK_EQ(st.munmap_calls + st.madvise_calls, 0);
    CHECK_EQ(st.dirty_bytes, 2 * SCR_PAGE_SIZE); /* a class's first two pages are fresh ones (below) */
    scr_heap_destroy(h);
  }
  /* With another block alive in the segment, the page is decommitted
   * (madvise) instead of unmapped. */
  scr_heap *h = heap_with(0, 0);
  void *keep = scr_heap_malloc(h, 1000);
  for (int k = 0; k < 1000; k++) scr_heap_free(h, scr_heap_malloc(h, 64));
  struct scr_stats st = stats(h);
  CHECK_EQ(st.mmap_calls, 1);
  CHECK_EQ(st.madvise_calls, 1000);
  CHECK_EQ(st.decommits, 1000);
  CHECK_EQ(st.bytes, 65536);
  scr_heap_free(h, keep);
  CHECK_EQ(stats(h).mmaps, 0);
  scr_heap_destroy(h);
}

/* Fill n pages of one class, then free everything. */
static void fill_and_free(scr_heap *h, size_t size, unsigned pages) {
  size_t per_page = SCR_PAGE_SIZE / scr_class_size((unsigned)scr_size_class(size));
  size_t n = per_page * pages;
  void **p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = scr_heap_malloc(h, size);
  for (size_t i = 0; i < n; i++) scr_heap_free(h, p[i]);
  free(p);
}

static void retain_4_keeps_four_pages_per_class(void) {
  scr_heap *h = heap_with(4, 0);
  fill_and_free(h, 256, 6);
  struct scr_stats st = stats(h);
  unsigned c = (unsigned)scr_size_class(256);
  CHECK_EQ(st.classes[c].retained, 4);
  CHECK_EQ(st.classes[c].pages, 4);
  CHECK_EQ(st.retained_pages, 4);
  CHECK_EQ(st.retained_bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(st.bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(st.page_releases, 2);
  /* Another class takes those four pages first, then keeps its own four. */
  fill_and_free(h, 2048, 5);
  st = stats(h);
  CHECK_EQ(st.classes[c].retained, 0);
  CHECK_EQ(st.classes[scr_size_class(2048)].retained, 4);
  CHECK_EQ(st.retained_pages, 4);
  CHECK_EQ(st.page_acquires, 6 + 1);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  CHECK_EQ(scr_heap_trim(h), 4 * SCR_PAGE_SIZE);
  st = stats(h);
  CHECK_EQ(st.retained_pages, 0);
  CHECK_EQ(st.mmaps, 0);
  CHECK_EQ(st.bytes, 0);
  scr_heap_destroy(h);
}

static void retain_1_and_0_per_class(void) {
  scr_heap *h = heap_with(1, 0);
  fill_and_free(h, 100, 3);
  CHECK_EQ(stats(h).retained_pages, 1);
  scr_heap_destroy(h);
  h = heap_with(0, 0);
  fill_and_free(h, 100, 3);
  CHECK_EQ(stats(h).retained_pages, 0);
  CHECK_EQ(stats(h).mmaps, 0);
  scr_heap_destroy(h);
}

/* A retained page serves another class without any syscall. */
static void retained_pages_serve_any_class(void) {
  scr_heap *h = heap_with(1, 0);
  scr_heap_free(h, scr_heap_malloc(h, 64));
  struct scr_stats before = stats(h);
  CHECK_EQ(before.retained_pages, 1);
  void *p = scr_heap_calloc(h, 1, 1000);
  struct scr_stats after = stats(h);
  CHECK_EQ(after.mmap_calls, before.mmap_calls);
  CHECK_EQ(after.madvise_calls, before.madvise_calls);
  CHECK_EQ(after.page_acquires, before.page_acquires);
  CHECK_EQ(after.retained_pages, 0);
  CHECK_EQ(after.classes[scr_size_class(64)].pages, 0);
  CHECK_EQ(after.classes[scr_size_class(1000)].pages, 1);
  scr_heap_free(h, p);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* A retained page that its class takes again is carved again from its
 * start: its next blocks lie side by side in the order they are made,
 * whatever order the program freed the page's blocks in (the page that
 * empties at the head of its queue stays idle with its list, as
 * mimalloc keeps a queue's only page).  An old block of it that was not
 * handed out again is a double free. */
static void a_retained_page_is_carved_again_in_address_order(void) {
  scr_heap *h = heap_with(4, 0);
  size_t size = 256, per_page = SCR_PAGE_SIZE / size, n = 3 * per_page;
  void **p = malloc(n * sizeof *p), **q = malloc(n * sizeof *q);
  for (size_t i = 0; i < n; i++) p[i] = scr_heap_malloc(h, size);
  for (size_t i = 0; i < n; i++) scr_heap_free(h, p[(i * 7) % n]); /* scattered: 7 and n coprime */
  CHECK_EQ(stats(h).retained_pages, 3);
  size_t m = per_page + 8, side_by_side = 0;
  for (size_t i = 0; i < m; i++) q[i] = scr_heap_malloc(h, size);
  for (size_t i = 1; i < m; i++) side_by_side += (char *)q[i] == (char *)q[i - 1] + size;
  CHECK(side_by_side >= 7); /* the retained page's first 8 (none with a scattered list) */
  size_t old = 0;
  for (size_t i = 0; i < n && old == 0; i++) {
    int again = 0;
    for (size_t k = 0; k < m; k++) again |= q[k] == p[i];
    if (!again && scr_heap_check(h, p[i]) == SCR_EDOUBLEFREE) old = i + 1;
  }
  CHECK(old != 0);
  for (size_t i = 0; i < m; i++) CHECK_EQ(scr_heap_check(h, q[i]), SCR_OK);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  free(p);
  free(q);
  scr_heap_destroy(h);
}

/* The byte cap bounds all retained pages of the heap together. */
static void retained_bytes_cap(void) {
  scr_heap *h = heap_with(4, 2 * SCR_PAGE_SIZE);
  fill_and_free(h, 32, 2);
  fill_and_free(h, 512, 2);
  fill_and_free(h, 8192, 2);
  struct scr_stats st = stats(h);
  CHECK_EQ(st.retained_pages, 2);
  CHECK_EQ(st.bytes, 2 * SCR_PAGE_SIZE);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
  h = heap_with(4, 0);
  scr_options o;
  scr_heap_options(h, &o);
  CHECK_EQ(o.retain_bytes, SIZE_MAX); /* no cap by default: the purge delay bounds what waits */
  scr_heap_destroy(h);
}

/* After every block is freed and trim runs, allocs == mmaps == bytes == 0. */
static void trim_brings_counters_to_zero(void) {
  scr_heap *h = heap_with(8, 0);
  enum { N = 5000 };
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = scr_heap_malloc(h, (size_t)(i % 300) * 97 + (i % 7 == 0 ? 300000 : 0));
  struct scr_stats st = stats(h);
  CHECK_EQ(st.allocs, N);
  CHECK(st.heap_used > 0 && st.heap_used <= st.heap_total);
  for (int i = 0; i < N; i++) scr_heap_free(h, p[i]);
  st = stats(h);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(st.heap_used, 0);
  CHECK(st.bytes > 0);
  size_t given = scr_heap_trim(h);
  CHECK_EQ(given, st.bytes);
  st = stats(h);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(st.mmaps, 0);
  CHECK_EQ(st.bytes, 0);
  CHECK_EQ(st.reserved_bytes, 0);
  CHECK_EQ(scr_heap_trim(h), 0);
  CHECK_EQ(st.mmap_calls, st.munmap_calls); /* the hint landed: no trimming munmaps */
  scr_heap_destroy(h);
}

/* purge_delay_ms: a freed page stays committed (no madvise) and is the
 * first taken again; a page-level call after the delay decommits it; trim
 * gives back every dirty page at once. */
/* No retained pages, no large cache: what is freed is dirty or gone. */
static scr_heap *purging_heap(unsigned delay_ms, size_t retain_bytes) {
  scr_options o;
  scr_options_init(&o);
  o.retain = 0;
  o.large_cache = 0;
  o.purge_delay_ms = delay_ms;
  if (retain_bytes) o.retain_bytes = retain_bytes;
  return scr_heap_new(&o);
}

static void purge_delay_keeps_freed_pages_a_while(void) {
  scr_heap *h = purging_heap(100000, 0); /* 100 s: real time never makes a pass due */
  void *keep = scr_heap_malloc(h, 1000); /* the segment stays mapped */
  void *a = scr_heap_malloc(h, 200000);  /* a run of 4 pages */
  scr_heap_free(h, a);
  struct scr_stats st = stats(h);
  CHECK_EQ(st.madvise_calls, 0);
  CHECK_EQ(st.dirty_bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(st.bytes, 5 * SCR_PAGE_SIZE);
  /* taken again without a fault or a syscall: the same pages */
  void *b = scr_heap_malloc(h, 200000);
  CHECK(b == a);
  CHECK_EQ(stats(h).dirty_bytes, 0);
  scr_heap_free(h, b);
  /* a small class's first page is fresh (below), and emptied goes back
   * as a dirty page too */
  scr_heap_free(h, scr_heap_malloc(h, 64));
  st = stats(h);
  CHECK_EQ(st.dirty_bytes, 5 * SCR_PAGE_SIZE);
  CHECK_EQ(st.madvise_calls, 0);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  /* after the delay, the next page-level call runs a purge pass, which
   * only ages the dirty pages (new to old); the pass after that gives
   * back those still unused */
  scr_debug_advance_clock(60000);
  scr_heap_free(h, scr_heap_malloc(h, 70000)); /* takes 2 of them and frees them again: new */
  CHECK_EQ(stats(h).madvise_calls, 0);
  scr_debug_advance_clock(60000);
  scr_heap_free(h, scr_heap_malloc(h, 70000));
  st = stats(h);
  CHECK(st.madvise_calls > 0);
  CHECK(st.dirty_bytes <= 2 * SCR_PAGE_SIZE);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  /* trim: every dirty page goes, and with the last block the segment */
  scr_heap_trim(h);
  st = stats(h);
  CHECK_EQ(st.dirty_bytes, 0);
  CHECK_EQ(st.bytes, SCR_PAGE_SIZE);
  scr_heap_free(h, keep);
  scr_debug_advance_clock(200000);
  scr_heap_trim(h);
  st = stats(h);
  CHECK_EQ(st.mmaps, 0);
  CHECK_EQ(st.bytes, 0);
  scr_heap_destroy(h);
}

/* Does this kernel take MADV_DONTNEED through process_madvise for the
 * calling process (Linux 6.13 on)?  Then a purge pass is one call. */
static int kernel_batches_decommits(void) {
#ifdef SYS_process_madvise
  void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 0;
  struct iovec r = {m, 4096};
  int ok = syscall(SYS_process_madvise, -10000 /* PIDFD_SELF_THREAD */, &r, (size_t)1, MADV_DONTNEED, 0u) == 4096;
  munmap(m, 4096);
  return ok;
#else
  return 0;
#endif
}

/* A purge pass (here trim's) gives back scattered runs in one system call
 * where the kernel takes a batch, one madvise each where it does not (or
 * a test says so); the runs read as zero afterwards.  A failed call
 * leaves them committed for the next trim. */
static void purge_pass_decommits_in_one_call(void) {
  enum { N = 16, SIZE = 70000 }; /* 2-page large blocks, side by side */
  scr_heap *h = purging_heap(100000, 64 * SCR_PAGE_SIZE);
  void *keep = scr_heap_malloc(h, 1000);
  unsigned char *b[N];
  int batched = kernel_batches_decommits();
  for (int round = 0; round < 3; round++) {
    if (round == 2) { /* as on a kernel that refuses the batch */
      scr_debug_batch_decommits(0);
      batched = 0;
    }
    for (int i = 0; i < N; i++) {
      b[i] = scr_heap_malloc(h, SIZE);
      CHECK(b[i] != NULL);
      memset(b[i], 0xAB, SIZE);
    }
    for (int i = 0; i < N; i += 2) scr_heap_free(h, b[i]); /* 8 runs, a live block between each two */
    struct scr_stats before = stats(h);
    CHECK_EQ(before.dirty_bytes, N * SCR_PAGE_SIZE);
    if (round == 1) { /* the call fails: nothing is given back yet */
      scr_debug_fail_os_call(1);
      scr_heap_trim(h);
      struct scr_stats st = stats(h);
      CHECK_EQ(st.bytes, before.bytes);
      CHECK_EQ(st.os_failures, before.os_failures + 1);
      CHECK_EQ(st.dirty_bytes, 0);
      CHECK_EQ(scr_heap_validate(h), SCR_OK);
      before = st;
    }
    scr_heap_trim(h);
    struct scr_stats st = stats(h);
    CHECK_EQ(st.madvise_calls - before.madvise_calls, batched ? 1u : N / 2u);
    CHECK_EQ(st.decommits - before.decommits, N / 2);
    CHECK_EQ(before.bytes - st.bytes, N * SCR_PAGE_SIZE);
    for (int i = 0; i < N; i += 2) CHECK(b[i][0] == 0 && b[i][SIZE - 1] == 0);
    for (int i = 1; i < N; i += 2) CHECK(b[i][0] == 0xAB && b[i][SIZE - 1] == 0xAB);
    CHECK_EQ(scr_heap_validate(h), SCR_OK);
    for (int i = 1; i < N; i += 2) scr_heap_free(h, b[i]);
    scr_heap_trim(h);
  }
  scr_debug_batch_decommits(1);
  scr_heap_free(h, keep);
  scr_heap_destroy(h);
}

/* decommit_batch: runs freed past the budget (retain_bytes 0 here) wait,
 * committed and counted as dirty, and are the first taken again; once
 * they add up to the batch they go back in one call, as they do at a
 * purge pass or a trim. */
static void pages_past_the_budget_go_back_in_batches(void) {
  enum { N = 16, SIZE = 70000 }; /* 2-page large blocks, side by side */
  scr_options o;
  scr_options_init(&o);
  o.retain = 0;
  o.large_cache = 0;
  o.retain_bytes = 0;
  o.purge_delay_ms = 100000; /* real time never makes a pass due */
  o.decommit_batch = 8 * SCR_PAGE_SIZE;
  scr_heap *h = scr_heap_new(&o);
  void *keep = scr_heap_malloc(h, 1000);
  int batched = kernel_batches_decommits();
  unsigned char *b[N];
  for (int i = 0; i < N; i++) {
    b[i] = scr_heap_malloc(h, SIZE);
    CHECK(b[i] != NULL);
    memset(b[i], 0xAB, SIZE);
  }
  struct scr_stats st0 = stats(h), st;
  for (int i = 0; i < 6; i += 2) scr_heap_free(h, b[i]); /* 3 runs, a live block between each two */
  st = stats(h);
  CHECK_EQ(st.madvise_calls, st0.madvise_calls);
  CHECK_EQ(st.dirty_bytes, 6 * SCR_PAGE_SIZE);
  CHECK_EQ(st.bytes, st0.bytes);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  /* a waiting run is taken again before fresh pages, with no call */
  unsigned char *again = scr_heap_malloc(h, SIZE);
  CHECK(again == b[0] || again == b[2] || again == b[4]);
  CHECK_EQ(stats(h).dirty_bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(stats(h).bytes, st0.bytes);
  scr_heap_free(h, again);
  /* the fourth run makes 8 pages: the four go back together */
  scr_heap_free(h, b[6]);
  st = stats(h);
  CHECK_EQ(st.madvise_calls - st0.madvise_calls, batched ? 1u : 4u);
  CHECK_EQ(st.decommits - st0.decommits, 4);
  CHECK_EQ(st.dirty_bytes, 0);
  CHECK_EQ(st0.bytes - st.bytes, 8 * SCR_PAGE_SIZE);
  for (int i = 0; i < 8; i += 2) CHECK(b[i][0] == 0 && b[i][SIZE - 1] == 0);
  for (int i = 1; i < 8; i += 2) CHECK(b[i][0] == 0xAB && b[i][SIZE - 1] == 0xAB);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  /* a trim takes a waiting run */
  scr_heap_free(h, b[8]);
  CHECK_EQ(stats(h).dirty_bytes, 2 * SCR_PAGE_SIZE);
  scr_heap_trim(h);
  CHECK_EQ(stats(h).dirty_bytes, 0);
  CHECK(b[8][0] == 0);
  /* so does the purge pass, when one is due */
  st0 = stats(h);
  scr_heap_free(h, b[10]);
  scr_debug_advance_clock(200000);
  scr_heap_free(h, b[12]); /* the pass runs at this page-level call */
  st = stats(h);
  CHECK_EQ(st.dirty_bytes, 0);
  CHECK_EQ(st.madvise_calls - st0.madvise_calls, batched ? 1u : 2u);
  CHECK_EQ(st0.bytes - st.bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  for (int i = 1; i < N; i += 2) scr_heap_free(h, b[i]);
  for (int i = 14; i < N; i += 2) scr_heap_free(h, b[i]);
  scr_heap_free(h, keep);
  scr_heap_trim(h);
  st = stats(h);
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(st.bytes, 0);
  scr_heap_destroy(h);
}

/* A small class's first two pages in a heap come from pages never
 * touched, its third from pages still committed; with no untouched page
 * left in any segment, the first takes a committed one too (no mapping). */
static void a_new_class_takes_fresh_pages_first(void) {
  scr_heap *h = purging_heap(100000, 0); /* freed pages stay committed */
  void *keep = scr_heap_malloc(h, 1000);
  char *big = scr_heap_malloc(h, 4 * SCR_PAGE_SIZE);
  scr_heap_free(h, big);
  CHECK_EQ(stats(h).dirty_bytes, 4 * SCR_PAGE_SIZE);
  enum { PER_PAGE = SCR_PAGE_SIZE / 64 };
  static char *b[3 * PER_PAGE];
  for (int i = 0; i < 3 * PER_PAGE; i++) {
    b[i] = scr_heap_malloc(h, 64);
    int committed = b[i] >= big && b[i] < big + 4 * SCR_PAGE_SIZE;
    CHECK_EQ(committed, i >= 2 * PER_PAGE);
  }
  CHECK_EQ(stats(h).dirty_bytes, 3 * SCR_PAGE_SIZE);
  for (int i = 0; i < 3 * PER_PAGE; i++) scr_heap_free(h, b[i]);
  scr_heap_free(h, keep);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);

  /* one segment, every page but the first committed and free */
  enum { SEGMENT_PAGES = SCR_SEGMENT_SIZE / SCR_PAGE_SIZE };
  h = purging_heap(100000, 0);
  keep = scr_heap_malloc(h, 1000);
  void *runs[4];
  for (int i = 0; i < 3; i++) runs[i] = scr_heap_malloc(h, 16 * SCR_PAGE_SIZE);
  runs[3] = scr_heap_malloc(h, (SEGMENT_PAGES - 2 - 48) * SCR_PAGE_SIZE);
  CHECK_EQ(stats(h).mmap_calls, 1);
  for (int i = 0; i < 4; i++) scr_heap_free(h, runs[i]);
  CHECK_EQ(stats(h).dirty_bytes, (SEGMENT_PAGES - 2) * SCR_PAGE_SIZE);
  void *p = scr_heap_malloc(h, 64);
  CHECK(p != NULL);
  CHECK_EQ(stats(h).mmap_calls, 1);
  CHECK_EQ(stats(h).dirty_bytes, (SEGMENT_PAGES - 3) * SCR_PAGE_SIZE);
  scr_heap_free(h, p);
  scr_heap_free(h, keep);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);

  /* at its limit_bytes, a new class takes a committed page, not a fresh
   * one the limit does not allow */
  scr_options o;
  scr_options_init(&o);
  o.retain = 0;
  o.purge_delay_ms = 100000;
  o.limit_bytes = 5 * SCR_PAGE_SIZE;
  h = scr_heap_new(&o);
  keep = scr_heap_malloc(h, 1000);
  big = scr_heap_malloc(h, 4 * SCR_PAGE_SIZE);
  CHECK(big != NULL);
  scr_heap_free(h, big);
  CHECK_EQ(stats(h).bytes, 5 * SCR_PAGE_SIZE);
  p = scr_heap_malloc(h, 64);
  CHECK(p >= (void *)big && p < (void *)(big + 4 * SCR_PAGE_SIZE));
  CHECK_EQ(stats(h).bytes, 5 * SCR_PAGE_SIZE);
  scr_heap_free(h, p);
  scr_heap_free(h, keep);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* Only a class's first pages are taken fresh: pages of a class that
 * emptied and fills again come from the committed ones it freed (else
 * they would wait for the purge while fresh ones fault in). */
static void a_class_takes_fresh_pages_only_at_first(void) {
  scr_heap *h = purging_heap(100000, 0); /* freed pages stay committed */
  void *keep = scr_heap_malloc(h, 1000);
  enum { PER_PAGE = SCR_PAGE_SIZE / 64 };
  static void *b[2 * PER_PAGE];
  uint64_t bytes = 0;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 2 * PER_PAGE; i++) b[i] = scr_heap_malloc(h, 64);
    if (round == 0) bytes = stats(h).bytes;
    CHECK_EQ(stats(h).bytes, bytes);   /* no page more than the first round's */
    CHECK_EQ(stats(h).dirty_bytes, 0); /* the freed ones were taken again */
    for (int i = 0; i < 2 * PER_PAGE; i++) scr_heap_free(h, b[i]);
    CHECK_EQ(stats(h).dirty_bytes, 2 * SCR_PAGE_SIZE);
  }
  scr_heap_free(h, keep);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* The dirty pages and the retained pages share the retain_bytes cap:
 * beyond it a freed page is decommitted at once. */
static void purge_delay_respects_the_byte_cap(void) {
  scr_heap *h = purging_heap(100000, 3 * SCR_PAGE_SIZE);
  void *keep = scr_heap_malloc(h, 1000);
  void *a = scr_heap_malloc(h, 2 * SCR_PAGE_SIZE);
  void *b = scr_heap_malloc(h, 2 * SCR_PAGE_SIZE);
  scr_heap_free(h, a); /* 2 dirty pages: within the cap */
  CHECK_EQ(stats(h).dirty_bytes, 2 * SCR_PAGE_SIZE);
  CHECK_EQ(stats(h).madvise_calls, 0);
  scr_heap_free(h, b); /* 2 more would pass it: decommitted now */
  struct scr_stats st = stats(h);
  CHECK_EQ(st.dirty_bytes, 2 * SCR_PAGE_SIZE);
  CHECK_EQ(st.madvise_calls, 1);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_free(h, keep);
  scr_heap_trim(h);
  CHECK_EQ(stats(h).mmaps, 0);
  scr_heap_destroy(h);
}

/* A heap that goes on reusing the pages it holds, with no page-level call
 * (its small classes' pages fill and free again), still gives back the
 * pages it freed a purge delay later: the small classes' slow path runs
 * the pass when it is due.  (A delay of 100 s that the test's clock
 * moves: real time never makes a pass due.) */
static void an_active_heap_gives_back_a_delay_later(void) {
  scr_options o;
  scr_options_init(&o);
  o.purge_delay_ms = 100000;
  scr_heap *h = scr_heap_new(&o);
  CHECK_EQ(scr_class_size((unsigned)scr_size_class(64)), 64);
  enum { PAGES = 4, PER = SCR_PAGE_SIZE / 64 };
  void **p = malloc(PAGES * PER * sizeof *p);
  for (size_t i = 0; i < PAGES * PER; i++) p[i] = scr_heap_malloc(h, 64);
  for (size_t i = 0; i < PAGES * PER; i += 2) scr_heap_free(h, p[i]); /* four pages half used */
  scr_heap_free(h, scr_heap_malloc(h, 200000));                        /* a run of 4 pages, dirty */
  struct scr_stats st = stats(h);
  CHECK_EQ(st.dirty_bytes, 4 * SCR_PAGE_SIZE);
  uint64_t bytes = st.bytes;
  /* Each phase fills a page's free half and goes on to the next page: a
   * slow path.  Before the delay, nothing goes; the first pass due ages
   * the run, the second gives it back. */
  size_t at = 0;
  for (int phase = 0; phase < 3; phase++) {
    if (phase) scr_debug_advance_clock(60000);
    for (size_t k = 0; k < PER / 2 + (phase == 0); k++, at += 2) p[at] = scr_heap_malloc(h, 64);
    st = stats(h);
    CHECK_EQ(st.page_acquires, PAGES + 4); /* no page-level call */
    CHECK_EQ(st.dirty_bytes, phase < 2 ? 4 * SCR_PAGE_SIZE : 0);
    CHECK_EQ(st.bytes, phase < 2 ? bytes : bytes - 4 * SCR_PAGE_SIZE);
  }
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  free(p);
  scr_heap_destroy(h);
}

/* A heap under limit_bytes gives back the pages it keeps for the purge
 * before it refuses a request: kept pages never make a malloc fail. */
static void a_limit_takes_back_the_pages_kept_for_the_purge(void) {
  scr_options o;
  scr_options_init(&o);
  o.limit_bytes = (size_t)3 << 19; /* 1.5 MiB */
  scr_heap *h = scr_heap_new(&o);
  void *keep = scr_heap_malloc(h, 64);
  scr_heap_free(h, scr_heap_malloc(h, 600000)); /* 10 pages, dirty */
  CHECK_EQ(stats(h).dirty_bytes, 10 * SCR_PAGE_SIZE);
  void *b = scr_heap_malloc(h, 1000000); /* 16 pages: 27 with the dirty ones */
  CHECK(b != NULL);
  struct scr_stats st = stats(h);
  CHECK_EQ(st.dirty_bytes, 0);
  CHECK(st.bytes <= o.limit_bytes);
  errno = 0;
  CHECK(scr_heap_malloc(h, 1000000) == NULL); /* past the limit with nothing kept: refused */
  CHECK_EQ(errno, ENOMEM);
  scr_heap_free(h, b);
  scr_heap_free(h, keep);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_destroy(h);
}

/* Medium classes (20-64 KiB) live in runs of 4 pages.  The seed's loop on
 * a 40 KiB block costs one run and no syscall after it (the run is
 * retained); a run holds six such blocks side by side; the checked API
 * tells an interior pointer and a double free in any page of a run.  With
 * a purge delay an emptied run goes back as dirty pages, which a block of
 * another size takes without a fault. */
static void medium_classes_live_in_runs(void) {
  scr_heap *h = heap_with(1, 0);
  struct scr_stats st = run_pairs(h, 40000);
  CHECK_EQ(st.mmap_calls, 1);
  CHECK_EQ(st.madvise_calls, 0);
  CHECK_EQ(st.page_acquires, 4);
  CHECK_EQ(st.bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(st.retained_pages, 4);
  unsigned c = (unsigned)scr_size_class(40000);
  CHECK_EQ(scr_class_size(c), 40960);
  char *b[6];
  for (int i = 0; i < 6; i++) {
    b[i] = scr_heap_malloc(h, 40000);
    CHECK(b[i] == b[0] + (size_t)i * 40960);
    CHECK_EQ(scr_heap_usable_size(h, b[i]), 40960);
  }
  st = stats(h);
  CHECK_EQ(st.page_acquires, 4);
  CHECK_EQ(st.classes[c].pages, 1);
  CHECK_EQ(st.classes[c].live, 6);
  CHECK_EQ(scr_heap_check(h, b[5]), SCR_OK); /* in the run's fourth page */
  CHECK_EQ(scr_heap_check(h, b[5] + 100), SCR_EINTERIOR);
  CHECK_EQ(scr_heap_check(h, b[5] + 40960), SCR_ENOTALLOC); /* the run's unused tail */
  void *next = scr_heap_malloc(h, 40000); /* a second run */
  CHECK_EQ(stats(h).page_acquires, 8);
  scr_heap_free(h, next); /* its run is the class's retained one */
  CHECK_EQ(scr_heap_free_checked(h, b[3]), SCR_OK);
  CHECK_EQ(scr_heap_free_checked(h, b[3]), SCR_EDOUBLEFREE);
  for (int i = 0; i < 6; i++) if (i != 3) CHECK_EQ(scr_heap_free_checked(h, b[i]), SCR_OK);
  st = stats(h); /* the first run, emptied past retain = 1, went back */
  CHECK_EQ(st.madvise_calls, 1);
  CHECK_EQ(st.bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(scr_heap_check(h, b[0]), SCR_EDOUBLEFREE); /* a block of a run given back */
  CHECK_EQ(scr_heap_check(h, b[0] + 40960 * 6), SCR_ENOTALLOC); /* its never carved tail */
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  CHECK_EQ(scr_heap_trim(h), 4 * SCR_PAGE_SIZE);
  scr_heap_destroy(h);

  scr_options o;
  scr_options_init(&o);
  o.purge_delay_ms = 100000; /* real time never makes a pass due */
  o.large_cache = 0;
  h = scr_heap_new(&o);
  void *keep = scr_heap_malloc(h, 1000);
  void *a = scr_heap_malloc(h, 40000);
  scr_heap_free(h, a);
  st = stats(h);
  CHECK_EQ(st.retained_pages, 0); /* not retained for its class: */
  CHECK_EQ(st.dirty_bytes, 4 * SCR_PAGE_SIZE);
  CHECK_EQ(st.madvise_calls, 0);
  void *big = scr_heap_malloc(h, 200000); /* a large block of 4 pages: the run's (at its colour) */
  CHECK(((uintptr_t)big & ~(uintptr_t)(SCR_PAGE_SIZE - 1)) == (uintptr_t)a);
  CHECK_EQ(stats(h).dirty_bytes, 0);
  CHECK_EQ(stats(h).madvise_calls, 0);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  scr_heap_free(h, big);
  scr_heap_free(h, keep);
  scr_heap_trim(h);
  CHECK_EQ(stats(h).mmaps, 0);
  scr_heap_destroy(h);
}

int main(void) {
  TEST(seed_reproducer_retain_1);
  TEST(seed_reproducer_retain_0);
  TEST(purge_delay_keeps_freed_pages_a_while);
  TEST(purge_delay_respects_the_byte_cap);
  TEST(purge_pass_decommits_in_one_call);
  TEST(pages_past_the_budget_go_back_in_batches);
  TEST(a_new_class_takes_fresh_pages_first);
  TEST(a_class_takes_fresh_pages_only_at_first);
  TEST(retain_4_keeps_four_pages_per_class);
  TEST(retain_1_and_0_per_class);
  TEST(retained_pages_serve_any_class);
  TEST(a_retained_page_is_carved_again_in_address_order);
  TEST(retained_bytes_cap);
  TEST(trim_brings_counters_to_zero);
  TEST(medium_classes_live_in_runs);
  TEST(an_active_heap_gives_back_a_delay_later);
  TEST(a_limit_takes_back_the_pages_kept_for_the_purge);
  return check_done();
}
