/* The OS layer's aligned mapping: one mmap at an aligned hint, the
 * fallback (over-allocate, then trim head and tail) when the kernel puts
 * the mapping elsewhere because something else sits at the hint, and the
 * hints' range, which that does not change. */
#include "check.h"
#include "internal.h"
#include <pthread.h>
#include <sys/mman.h>

static void hint_lands_with_one_mmap(void) {
  scr_os_counters c = {0};
  void *p = _scr_os_map_aligned(SCR_SEGMENT_SIZE, SCR_SEGMENT_SIZE, &c);
  CHECK(p != NULL);
  CHECK(((uintptr_t)p & (SCR_SEGMENT_SIZE - 1)) == 0);
  void *q = _scr_os_map_aligned(SCR_SEGMENT_SIZE, SCR_SEGMENT_SIZE, &c);
  CHECK(q != NULL && ((uintptr_t)q & (SCR_SEGMENT_SIZE - 1)) == 0);
  CHECK_EQ(c.mmap_calls, 2);
  CHECK_EQ(c.munmap_calls, 0);
  CHECK_EQ(_scr_os_unmap(q, SCR_SEGMENT_SIZE, &c), 0);
  CHECK_EQ(_scr_os_unmap(p, SCR_SEGMENT_SIZE, &c), 0);
}

/* The fallback needs the kernel to put the hinted mapping at an unaligned
 * place.  Linux aligns large anonymous mappings to 2 MiB itself, so a
 * 4 MiB alignment would often come out right by chance; 256 MiB rarely
 * does, and each test retries the few times it does. */
#define BIG_ALIGN ((size_t)256 << 20)
#define TRIES 8

/* Map and unmap once: the next hint is that same place.  Then put a
 * mapping of our own there, so that the kernel must choose elsewhere. */
static void *occupy_next_hint(void) {
  scr_os_counters c = {0};
  void *p = _scr_os_map_aligned(SCR_SEGMENT_SIZE, BIG_ALIGN, &c);
  CHECK(p != NULL);
  CHECK_EQ(_scr_os_unmap(p, SCR_SEGMENT_SIZE, &c), 0);
  void *blocker = mmap(p, SCR_SEGMENT_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  CHECK(blocker == p);
  return blocker;
}

static void occupied_hint_falls_back_to_trimming(void) {
  int fell_back = 0;
  /* A try whose mapping came out aligned keeps it (and its blocker) until
   * the end, so that the kernel's next choice lies elsewhere: an unmapped
   * place would be chosen again, aligned again. */
  void *kept[2 * TRIES];
  int nkept = 0;
  for (int t = 0; t < TRIES && !fell_back; t++) {
    void *blocker = occupy_next_hint();
    scr_os_counters f = {0};
    void *q = _scr_os_map_aligned(SCR_SEGMENT_SIZE, BIG_ALIGN, &f);
    CHECK(q != NULL && q != blocker);
    CHECK(((uintptr_t)q & (BIG_ALIGN - 1)) == 0);
    if (f.mmap_calls == 2) { /* the hint, then size + align */
      fell_back = 1;
      CHECK(f.munmap_calls >= 2 && f.munmap_calls <= 3); /* the misplaced one, then head and/or tail */
      ((volatile char *)q)[SCR_SEGMENT_SIZE - 1] = 1;    /* the whole range is ours */
    } else {
      CHECK_EQ(f.mmap_calls, 1); /* the kernel's own place happened to be aligned */
      CHECK_EQ(f.munmap_calls, 0);
      kept[nkept++] = q, kept[nkept++] = blocker;
      continue;
    }
    CHECK_EQ(_scr_os_unmap(q, SCR_SEGMENT_SIZE, &f), 0);
    munmap(blocker, SCR_SEGMENT_SIZE);
  }
  for (int i = 0; i < nkept; i++) munmap(kept[i], SCR_SEGMENT_SIZE);
  CHECK(fell_back);
  /* a heap still works afterwards */
  scr_heap *h = scr_heap_new(NULL);
  void *b = scr_heap_malloc(h, 100);
  CHECK(b != NULL);
  scr_heap_free(h, b);
  scr_heap_destroy(h);
}

/* Hints stay in their range (below 32 TiB, above 17 TiB) whatever the
 * kernel does with one: a mapping it put elsewhere (up among the thread
 * stacks and libraries) does not move the next hint there, and threads
 * that map at once each take a place of their own below the last. */
#define HINT_TOP ((uintptr_t)0x200000000000ull)
#define HINT_BOTTOM ((uintptr_t)0x110000000000ull)
static int in_hint_range(const void *p) { return (uintptr_t)p >= HINT_BOTTOM && (uintptr_t)p < HINT_TOP; }
static void *map_many(void *arg) {
  scr_os_counters *c = arg;
  void *p[16];
  for (int i = 0; i < 16; i++) {
    p[i] = _scr_os_map_aligned(SCR_SEGMENT_SIZE, SCR_SEGMENT_SIZE, c);
    if (p[i] == NULL || ((uintptr_t)p[i] & (SCR_SEGMENT_SIZE - 1)) || !in_hint_range(p[i])) c->failures += 100;
  }
  for (int i = 0; i < 16; i++) if (p[i]) munmap(p[i], SCR_SEGMENT_SIZE);
  return NULL;
}
static void hints_stay_in_their_range(void) {
  void *blocker = occupy_next_hint();
  scr_os_counters f = {0};
  void *q = _scr_os_map_aligned(SCR_SEGMENT_SIZE, BIG_ALIGN, &f);
  CHECK(q != NULL && q != blocker);
  scr_os_counters c = {0};
  void *next = _scr_os_map_aligned(SCR_SEGMENT_SIZE, SCR_SEGMENT_SIZE, &c);
  CHECK(next != NULL && in_hint_range(next));
  CHECK_EQ(c.mmap_calls, 1);
  CHECK_EQ(c.munmap_calls, 0);
  _scr_os_unmap(next, SCR_SEGMENT_SIZE, &c);
  _scr_os_unmap(q, SCR_SEGMENT_SIZE, &f);
  munmap(blocker, SCR_SEGMENT_SIZE);
  /* four threads at once: every mapping at its hint, one mmap each */
  pthread_t t[4];
  scr_os_counters tc[4] = {{0}};
  for (int i = 0; i < 4; i++) CHECK(pthread_create(&t[i], NULL, map_many, &tc[i]) == 0);
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_EQ(tc[i].failures, 0);
    CHECK_EQ(tc[i].mmap_calls, 16);
    CHECK_EQ(tc[i].munmap_calls, 0);
  }
}

static void quiet(int err, const char *msg, void *arg) { (void)err; (void)msg; (void)arg; }

static void a_failure_in_the_fallback_is_survived(void) {
  /* fail each of the fallback's calls in turn: the hinted mmap, the
   * misplaced mapping's unmap, the big mmap, the head or tail trim */
  scr_set_error_handler(quiet, NULL);
  for (unsigned long n = 1; n <= 4; n++) {
    int tested = 0;
    void *kept[2 * TRIES]; /* as above: an aligned try's mapping stays until the end */
    int nkept = 0;
    for (int t = 0; t < TRIES && !tested; t++) {
      scr_os_counters c = {0};
      void *blocker = occupy_next_hint();
      scr_debug_fail_os_call(n);
      void *q = _scr_os_map_aligned(SCR_SEGMENT_SIZE, BIG_ALIGN, &c);
      scr_debug_fail_os_call(0);
      tested = c.failures >= 1; /* else the fallback was not taken: again */
      if (tested && q == NULL) CHECK(n <= 3);
      if (!tested && q) {
        kept[nkept++] = q, kept[nkept++] = blocker;
        continue;
      }
      if (q) {
        /* either no failure, or the failing call was a trim: aligned and usable */
        CHECK(((uintptr_t)q & (BIG_ALIGN - 1)) == 0);
        ((volatile char *)q)[0] = 1;
        _scr_os_unmap(q, SCR_SEGMENT_SIZE, &c);
      }
      munmap(blocker, SCR_SEGMENT_SIZE);
    }
    for (int i = 0; i < nkept; i++) munmap(kept[i], SCR_SEGMENT_SIZE);
    CHECK(tested);
  }
  scr_set_error_handler(NULL, NULL);
}

int main(void) {
  TEST(hint_lands_with_one_mmap);
  TEST(occupied_hint_falls_back_to_trimming);
  TEST(hints_stay_in_their_range);
  TEST(a_failure_in_the_fallback_is_survived);
  return check_done();
}
