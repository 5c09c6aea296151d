/* A failing mmap, munmap, madvise or mremap at every OS call site: run a
 * scenario that reaches each of them once without failures, then again
 * with the n-th OS call failing, for every n.  Each time the heap must
 * validate, keep every live block intact, keep working once the OS
 * recovers, and come back to zero after frees and a trim. */
#include "check.h"
#include "scralloc.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>

enum { SLOTS = 64 };
typedef struct { void *p; size_t n; } live_t;

static void fill(live_t *b, unsigned k) { memset(b->p, (int)(k * 7 + 1), b->n); }
static int intact(const live_t *b, unsigned k) {
  for (size_t i = 0; i < b->n; i++)
    if (((uint8_t *)b->p)[i] != (uint8_t)(k * 7 + 1)) return 0;
  return 1;
}

static void put(scr_heap *h, live_t *b, unsigned k, size_t n) {
  b->p = scr_heap_malloc(h, n);
  b->n = b->p ? n : 0;
  if (b->p) fill(b, k);
}

static void drop(scr_heap *h, live_t *b) {
  scr_heap_free(h, b->p);
  b->p = NULL;
  b->n = 0;
}

/* Touches every OS call site: segment maps (hint and fallback are both
 * possible), page decommit (retain 0 with a live neighbour), segment unmap,
 * huge map, large cache eviction unmap, mremap in place and moved, trim. */
static void scenario(scr_heap *h, live_t *b) {
  put(h, &b[0], 0, 100);                 /* first segment */
  put(h, &b[1], 1, 5000);
  drop(h, &b[1]);                        /* page decommit (madvise) */
  put(h, &b[2], 2, 200000);              /* span */
  put(h, &b[3], 3, 3u << 20);            /* huge mapping */
  if (b[3].p) {
    void *q = scr_heap_realloc(h, b[3].p, 9u << 20); /* mremap (in place or moved) */
    if (q) b[3].p = q; /* else b[3] is untouched */
  }
  for (unsigned k = 4; k < 12; k++) put(h, &b[k], k, (2u << 20) + k * 65536); /* more huge */
  for (unsigned k = 4; k < 12; k++) drop(h, &b[k]); /* cache fills, evicts (munmap) */
  for (unsigned k = 12; k < 40; k++) put(h, &b[k], k, 16384); /* several pages */
  for (unsigned k = 12; k < 40; k += 2) drop(h, &b[k]);
  /* with purge_delay_ms (1000 s; real time never makes a pass due, so the
   * OS calls are the same in every run), passes come due: dirty pages age, then
   * are decommitted */
  put(h, &b[40], 40, 300000);
  put(h, &b[41], 41, 300000);
  drop(h, &b[40]);
  drop(h, &b[41]);
  scr_debug_advance_clock(600000);
  put(h, &b[42], 42, 70000);
  scr_debug_advance_clock(600000);
  put(h, &b[43], 43, 70000);
  scr_heap_trim(h);                      /* munmap, madvise */
  void *a = scr_heap_aligned_alloc(h, 8u << 20, 100); /* over-allocate and trim */
  scr_heap_free(h, a);
  scr_heap_trim(h);
}

static unsigned reported;
static void count_reports(int err, const char *msg, void *arg) { (void)err; (void)msg; (void)arg; reported++; }

static void fail_each_call(unsigned purge_delay_ms, size_t decommit_batch) {
  scr_set_error_handler(count_reports, NULL); /* failed munmaps are reported */
  scr_options o;
  scr_options_init(&o);
  o.retain = 0;
  o.large_cache = 4;
  o.purge_delay_ms = purge_delay_ms;
  o.decommit_batch = decommit_batch;
  /* warm up (segment map leaves), then count the calls of one run */
  for (int warm = 0; warm < 2; warm++) {
    live_t b[SLOTS] = {{0}};
    scr_heap *h = scr_heap_new(&o);
    scenario(h, b);
    scr_heap_destroy(h);
  }
  unsigned long before = scr_debug_os_calls();
  live_t b0[SLOTS] = {{0}};
  scr_heap *h0 = scr_heap_new(&o);
  scenario(h0, b0);
  unsigned long calls = scr_debug_os_calls() - before;
  struct scr_stats st;
  scr_heap_stats(h0, &st);
  CHECK(st.mmap_calls > 0 && st.munmap_calls > 0 && st.madvise_calls > 0 && st.mremap_calls > 0);
  scr_heap_destroy(h0);
  printf("  scenario makes %lu OS calls; failing each in turn\n", calls);
  CHECK(calls > 20);

  unsigned failures_seen = 0;
  for (unsigned long n = 1; n <= calls + 1; n++) {
    live_t b[SLOTS] = {{0}};
    scr_debug_fail_os_call(n);
    errno = 0;
    scr_heap *h = scr_heap_new(&o);
    if (h == NULL) {
      CHECK_EQ(errno, ENOMEM);
      CHECK_EQ(n, 1);
      failures_seen++;
      continue;
    }
    scenario(h, b);
    scr_debug_fail_os_call(0);
    scr_heap_stats(h, &st);
    if (st.os_failures) failures_seen++;
    CHECK_EQ(scr_heap_validate(h), SCR_OK);
    for (unsigned k = 0; k < SLOTS; k++) {
      if (b[k].p && !intact(&b[k], k)) {
        fprintf(stderr, "  block %u damaged when OS call %lu failed\n", k, n);
        CHECK(!"block intact");
      }
    }
    /* usable again */
    void *p = scr_heap_malloc(h, 3000);
    CHECK(p != NULL);
    scr_heap_free(h, p);
    for (unsigned k = 0; k < SLOTS; k++)
      if (b[k].p) drop(h, &b[k]);
    scr_heap_trim(h);
    scr_heap_stats(h, &st);
    CHECK_EQ(st.allocs, 0);
    CHECK_EQ(st.mmaps, 0);
    CHECK_EQ(st.bytes, 0);
    CHECK_EQ(scr_heap_validate(h), SCR_OK);
    scr_heap_destroy(h);
  }
  printf("  %u runs saw an injected failure; %u reports\n", failures_seen, reported);
  scr_set_error_handler(NULL, NULL);
  CHECK(failures_seen >= calls - 2);
}

static void every_os_call_can_fail(void) { fail_each_call(0, 0); }
static void every_os_call_can_fail_with_a_purge_delay(void) { fail_each_call(1000000, 0); }
/* the batched decommit (one process_madvise for the runs freed past the
 * budget) failing, or the madvise of each run where it falls back */
static void every_os_call_can_fail_with_batched_decommits(void) { fail_each_call(0, (size_t)128 << 10); }

int main(void) {
  TEST(every_os_call_can_fail);
  TEST(every_os_call_can_fail_with_a_purge_delay);
  TEST(every_os_call_can_fail_with_batched_decommits);
  return check_done();
}
