/* Seeded random walks of heap operations against a model: every live
 * block's bytes, no overlap, alignment, counters equal to the model, bad
 * frees classified, and zero mmaps/bytes after trimming an empty heap.
 * Each walk draws the heap's options (byte caps, thresholds, MADV_FREE,
 * a limit in a quarter of them) and now and then makes one of the next
 * OS calls fail: an allocation may then fail (a limit too), but must
 * leave the heap as it was, and everything must come back once the OS
 * recovers.  SCR_FUZZ_STEPS and SCR_FUZZ_SEED (environment) run it
 * longer or replay a failure; a failure prints the seed and step. */
#include "check.h"
#include "scralloc.h"
#include <stdint.h>
#include <string.h>

typedef struct { uint8_t *p; size_t n; uint8_t tag; } blk;
enum { MAXLIVE = 512 };

static uint64_t rng;
static uint64_t next(void) { /* xorshift64* */
  rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}
static size_t pick_size(void) {
  switch (next() % 10) {
  case 0: return next() % 17;
  case 1: case 2: case 3: return next() % 512;
  case 4: case 5: return next() % SCR_SMALL_MAX + 1;
  case 6: return next() % (256 * 1024);
  case 7: return next() % (2u << 20);
  case 8: return (next() % 5) << 20;
  default: return next() % 4096;
  }
}

static int check_block(const blk *b) {
  for (size_t i = 0; i < b->n; i++)
    if (b->p[i] != (uint8_t)(b->tag + i)) return 0;
  return 1;
}
static void fill(blk *b) { for (size_t i = 0; i < b->n; i++) b->p[i] = (uint8_t)(b->tag + i); }

/* Could n more bytes take the heap past its limit?  (A block takes its
 * size rounded up to pages, and maybe a page of metadata or a run's
 * rounding besides.) */
static int near_limit(const scr_heap *h, const scr_options *o, size_t n) {
  if (o->limit_bytes == 0) return 0;
  struct scr_stats st;
  scr_heap_stats(h, &st);
  return st.bytes + n + 4 * SCR_PAGE_SIZE > o->limit_bytes;
}

static int run(uint64_t seed, unsigned steps, unsigned retain) {
  rng = seed * 0x9E3779B97F4A7C15ull + 1;
  scr_options o;
  scr_options_init(&o);
  o.retain = retain;
  o.large_cache = (unsigned)(next() % 5);
  /* purge passes come due only when the test moves the clock (by 0, 5 or
   * 10 minutes, against a 10-minute delay), so a seed replays exactly */
  o.purge_delay_ms = next() % 2 ? 0 : 600000;
  o.decommit_batch = next() % 2 ? 0 : (size_t)(1 + next() % 8) << 16; /* 1-8 pages */
  /* the byte caps and thresholds drawn too (these draws move the walk:
   * a seed recorded before they were drawn walks another way now) */
  static const size_t retain_bytes[] = {0, 64 << 10, 512 << 10, SIZE_MAX /* the default: no cap */};
  static const size_t cache_bytes[] = {0, 1 << 20, 16 << 20};
  static const size_t huge_at[] = {SCR_SMALL_MAX, 256 << 10, 1 << 20, 2 << 20};
  static const size_t madv_free[] = {0, 64 << 10, 1 << 20};
  o.retain_bytes = retain_bytes[next() % 4];
  o.large_cache_bytes = cache_bytes[next() % 3];
  o.huge_threshold = huge_at[next() % 4];
  o.madv_free_below = madv_free[next() % 3];
  o.limit_bytes = next() % 4 ? 0 : (size_t)(16 + next() % 48) << 20; /* a quarter of the runs: 16-63 MiB */
  scr_heap *h = scr_heap_new(&o);
  /* An injected OS failure (scr_debug_fail_os_call) lands on the
   * process's os_fail_at-th OS call.  An allocation may fail (and must
   * leave the heap as it was) under a limit, or when that call was made
   * within the step; once it has been, the OS has recovered. */
  unsigned long os_fail_at = 0, calls_before = 0;
#define MAY_FAIL(n) \
  (near_limit(h, &o, (n)) || (os_fail_at != 0 && calls_before < os_fail_at && scr_debug_os_calls() >= os_fail_at))
  static blk live[MAXLIVE];
  unsigned nlive = 0, fails = 0;
  uint8_t *freed[16] = {0};
  uint64_t used = 0;
#define FAILED(what) do { fprintf(stderr, "  fuzz seed=%llu retain=%u step=%u: %s\n", (unsigned long long)seed, retain, step, what); fails++; goto out; } while (0)
  for (unsigned step = 0; step < steps; step++) {
    if (os_fail_at != 0 && scr_debug_os_calls() >= os_fail_at) os_fail_at = 0; /* it landed */
    calls_before = scr_debug_os_calls();
    unsigned op = (unsigned)(next() % 100);
    if (op < 35 && nlive < MAXLIVE) {                  /* malloc / calloc / aligned */
      size_t n = pick_size(), align = 0;
      blk b = {0};
      unsigned kind = (unsigned)(next() % 3);
      if (kind == 0) b.p = scr_heap_malloc(h, n);
      else if (kind == 1) b.p = scr_heap_calloc(h, 1, n);
      else { align = (size_t)1 << (next() % 22); b.p = scr_heap_aligned_alloc(h, align, n); }
      if (!b.p) {
        if (MAY_FAIL(n + align)) continue;
        FAILED("allocation failed");
      }
      if (kind == 1) for (size_t i = 0; i < n; i++) if (b.p[i]) FAILED("calloc not zero");
      if (align && ((uintptr_t)b.p & (align - 1))) FAILED("misaligned");
      if ((uintptr_t)b.p % SCR_MIN_ALIGN) FAILED("below minimum alignment");
      if (scr_heap_usable_size(h, b.p) < n) FAILED("usable size below request");
      b.n = n;
      b.tag = (uint8_t)next();
      fill(&b);
      used += scr_heap_usable_size(h, b.p);
      live[nlive++] = b;
    } else if (op < 65 && nlive) {                     /* free */
      unsigned i = (unsigned)(next() % nlive);
      if (!check_block(&live[i])) FAILED("block contents changed");
      used -= scr_heap_usable_size(h, live[i].p);
      if (scr_heap_free_checked(h, live[i].p) != SCR_OK) FAILED("free of a live block refused");
      freed[step % 16] = live[i].p;
      live[i] = live[--nlive];
    } else if (op < 80 && nlive) {                     /* realloc */
      unsigned i = (unsigned)(next() % nlive);
      if (!check_block(&live[i])) FAILED("block contents changed before realloc");
      size_t n = pick_size();
      if (n == 0) n = 1;
      used -= scr_heap_usable_size(h, live[i].p);
      void *q;
      if (scr_heap_realloc_checked(h, live[i].p, n, &q) != SCR_OK || !q) {
        if (!MAY_FAIL(n)) FAILED("realloc failed");
        used += scr_heap_usable_size(h, live[i].p); /* the block stands as it was */
        if (!check_block(&live[i])) FAILED("a failed realloc changed the block");
        continue;
      }
      size_t keep = n < live[i].n ? n : live[i].n;
      live[i].p = q;
      live[i].n = keep;
      if (!check_block(&live[i])) FAILED("realloc lost contents");
      live[i].n = n;
      fill(&live[i]);
      used += scr_heap_usable_size(h, q);
    } else if (op < 88) {                              /* bad frees */
      uint8_t *bad = freed[next() % 16];
      if (nlive && next() % 2) bad = live[next() % nlive].p + 1 + next() % 15;
      int live_hit = 0;
      for (unsigned i = 0; bad && i < nlive; i++) live_hit |= live[i].p == bad;
      if (bad && !live_hit && scr_heap_free_checked(h, bad) == SCR_OK) FAILED("a bad free was accepted");
    } else if (op < 90) {
      scr_heap_trim(h);
    } else if (op < 92) {
      scr_debug_advance_clock((next() % 3) * 300000); /* purge passes come due */
    } else if (op < 93) { /* one of the next few OS calls fails */
      unsigned long n = 1 + next() % 4;
      os_fail_at = scr_debug_os_calls() + n;
      scr_debug_fail_os_call(n);
    } else {
      if (scr_heap_validate(h) != SCR_OK) FAILED("validator");
      /* no overlap: sort-free O(n^2) on a small set */
      for (unsigned i = 0; i < nlive; i++)
        for (unsigned j = i + 1; j < nlive; j++) {
          uint8_t *a = live[i].p, *b = live[j].p;
          size_t an = scr_heap_usable_size(h, a), bn = scr_heap_usable_size(h, b);
          if (a < b + bn && b < a + an) FAILED("blocks overlap");
        }
    }
    struct scr_stats st;
    scr_heap_stats(h, &st);
    if (st.allocs != nlive) FAILED("allocs differs from the model");
    if (st.heap_used != used) FAILED("heap_used differs from the model");
    if (o.limit_bytes && st.bytes > o.limit_bytes) FAILED("committed bytes past the limit");
  }
  {
    unsigned step = steps;
    scr_debug_fail_os_call(0); /* the OS recovers: everything must come back */
    os_fail_at = 0;
    for (unsigned i = 0; i < nlive; i++) {
      if (!check_block(&live[i])) FAILED("block contents changed at the end");
      scr_heap_free(h, live[i].p);
    }
    nlive = 0;
    scr_heap_trim(h);
    struct scr_stats st;
    scr_heap_stats(h, &st);
    if (st.allocs || st.mmaps || st.bytes) FAILED("trim of an empty heap left memory");
  }
out:
  scr_debug_fail_os_call(0);
  scr_heap_destroy(h);
#undef MAY_FAIL
  return fails == 0;
}

static unsigned long env_num(const char *name, unsigned long def) {
  const char *v = getenv(name);
  return v ? strtoul(v, NULL, 10) : def;
}

/* Reports of the injected OS failures (a munmap kept for a later trim)
 * are counted, not printed; any other report is a failure. */
static unsigned long os_failure_reports, other_reports;
static void count_reports(int err, const char *msg, void *arg) {
  (void)arg;
  if (err == SCR_ENOMEM) {
    os_failure_reports++;
  } else {
    other_reports++;
    fprintf(stderr, "  report: %s\n", msg);
  }
}

static void random_walks(void) {
  scr_set_error_handler(count_reports, NULL);
  unsigned steps = (unsigned)env_num("SCR_FUZZ_STEPS", 2000);
  unsigned long seed = env_num("SCR_FUZZ_SEED", 0);
  unsigned long seeds = seed ? 1 : env_num("SCR_FUZZ_SEEDS", 4);
  for (unsigned long s = 0; s < seeds; s++)
    for (unsigned retain = 0; retain <= 2; retain++) /* 1: the default, a class's idle page its one */
      CHECK(run(seed ? seed : s + 1, steps, retain));
  scr_set_error_handler(NULL, NULL);
  CHECK_EQ(other_reports, 0);
  printf("  %lu reports of injected OS failures\n", os_failure_reports);
}

int main(void) {
  TEST(random_walks);
  return check_done();
}
