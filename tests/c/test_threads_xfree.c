/* Frees across threads of the process allocator (issue #38): a block that
 * one thread mallocs, a second frees, and a third (or the second again,
 * or its owner) frees or reallocs is reported once, whatever its size;
 * of two threads racing to free one block exactly one succeeds, and no
 * block is handed out twice.  on_error is "ignore": the misuses are
 * counted (scr_process_stats' double_frees), the calls ignored.  Runs in
 * the ThreadSanitizer lane too (tests/c/test_threads_*.c): the claim of a
 * freed block is one atomic exchange, so racing frees are no data race of
 * the allocator's own. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef __SANITIZE_THREAD__
enum { RACES = 100 };
#else
enum { RACES = 1000 };
#endif

static const size_t sizes[] = {16, 1024, 200 << 10, 3 << 20};

static uint64_t double_frees(void) {
  struct scr_process_stats st;
  scr_process_stats(&st);
  return st.double_frees;
}

/* ---- one block, freed by a second thread, then again by `who` ---- */

typedef struct {
  void *p;
  int realloc_;             /* the second call is realloc */
  int who;                  /* 0 the second thread again, 1 a third, 2 the owner */
  pthread_barrier_t freed;  /* the second thread freed p */
  pthread_barrier_t done;   /* the second call was made */
  void *realloc_result;
} xcase;

static void second_call(xcase *x) {
  if (x->realloc_) x->realloc_result = scr_realloc(x->p, 100);
  else scr_free(x->p);
}

static void *second(void *arg) {
  xcase *x = arg;
  scr_free(scr_malloc(64)); /* holds an arena */
  scr_free(x->p);
  if (x->who == 0) second_call(x);
  pthread_barrier_wait(&x->freed);
  pthread_barrier_wait(&x->done);
  return NULL;
}

static void *third(void *arg) {
  xcase *x = arg;
  scr_free(scr_malloc(64));
  pthread_barrier_wait(&x->freed);
  second_call(x);
  pthread_barrier_wait(&x->done);
  return NULL;
}

static void freed_twice_across_threads(void) {
  for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    for (int who = 0; who < 3; who++) {
      for (int re = 0; re < 2; re++) {
        xcase x = {.p = scr_malloc(sizes[s]), .realloc_ = re, .who = who, .realloc_result = (void *)1};
        unsigned n = who == 1 ? 3 : 2;
        pthread_barrier_init(&x.freed, NULL, n);
        pthread_barrier_init(&x.done, NULL, n);
        uint64_t before = double_frees();
        pthread_t t2, t3;
        pthread_create(&t2, NULL, second, &x);
        if (who == 1) pthread_create(&t3, NULL, third, &x);
        pthread_barrier_wait(&x.freed);
        if (who == 2) second_call(&x);
        pthread_barrier_wait(&x.done);
        pthread_join(t2, NULL);
        if (who == 1) pthread_join(t3, NULL);
        pthread_barrier_destroy(&x.freed);
        pthread_barrier_destroy(&x.done);
        if (double_frees() != before + 1 || (re && x.realloc_result != NULL))
          fprintf(stderr, "  size %zu, who %d, %s\n", sizes[s], who, re ? "realloc" : "free");
        CHECK_EQ(double_frees(), before + 1);
        if (re) CHECK(x.realloc_result == NULL);
      }
    }
  }
  CHECK_EQ(scr_process_validate(), 0);
}

/* ---- two threads free one block at once ---- */

static struct {
  size_t size;
  void *p;
  pthread_barrier_t go, freed, done;
} race;

/* kept: where the racer puts the block it mallocs after each race (NULL:
 * it holds no arena and mallocs nothing). */
static void *racer(void *arg) {
  void **kept = arg;
  if (kept) scr_free(scr_malloc(64));
  for (int i = 0; i < RACES; i++) {
    pthread_barrier_wait(&race.go);
    scr_free(race.p);
    pthread_barrier_wait(&race.freed);
    if (kept) kept[i] = scr_malloc(race.size);
    pthread_barrier_wait(&race.done);
  }
  return NULL;
}

static int by_address(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

static void racing_frees(void) {
  static void *kept[2 * RACES];
  for (unsigned s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    for (int keep = 0; keep < 2; keep++) {
      if (keep && sizes[s] > 1024) continue; /* kept: RACES blocks each */
      race.size = sizes[s];
      pthread_barrier_init(&race.go, NULL, 3);
      pthread_barrier_init(&race.freed, NULL, 2);
      pthread_barrier_init(&race.done, NULL, 3);
      uint64_t before = double_frees();
      pthread_t t[2];
      for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, racer, keep ? kept + k * RACES : NULL);
      int lost = 0;
      for (int i = 0; i < RACES; i++) {
        race.p = scr_malloc(race.size);
        uint64_t d = double_frees();
        pthread_barrier_wait(&race.go);
        pthread_barrier_wait(&race.done);
        lost += double_frees() != d + 1;
      }
      for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
      if (lost) fprintf(stderr, "  size %zu, keep %d: %d races without one report\n", sizes[s], keep, lost);
      CHECK_EQ(lost, 0);
      CHECK_EQ(double_frees(), before + RACES);
      if (keep) { /* no block handed out twice */
        qsort(kept, 2 * RACES, sizeof kept[0], by_address);
        int twice = 0;
        for (int i = 1; i < 2 * RACES; i++) twice += kept[i] == kept[i - 1];
        CHECK_EQ(twice, 0);
        for (int i = 0; i < 2 * RACES; i++) scr_free(kept[i]);
      }
      pthread_barrier_destroy(&race.go);
      pthread_barrier_destroy(&race.freed);
      pthread_barrier_destroy(&race.done);
    }
  }
  CHECK_EQ(scr_process_validate(), 0);
}

int main(void) {
  if (scr_process_option_set("on_error", "ignore") != 0) return 1;
  TEST(freed_twice_across_threads);
  TEST(racing_frees);
  return check_done();
}
