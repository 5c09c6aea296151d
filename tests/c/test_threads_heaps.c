/* Heaps on several threads at once (each heap used by one thread): the
 * process-wide parts of the core (segment map, mapping hint, failure
 * counter) must be safe.  Runs in the ThreadSanitizer lane too. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>

enum { THREADS = 4, ROUNDS = 12, LIVE = 200 };

static void *worker(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  long bad = 0;
  for (int r = 0; r < ROUNDS; r++) {
    scr_options o;
    scr_options_init(&o);
    o.retain = (unsigned)(r % 3);
    scr_heap *h = scr_heap_new(&o);
    void *p[LIVE];
    size_t n[LIVE];
    for (int i = 0; i < LIVE; i++) {
      seed = seed * 1103515245u + 12345u;
      n[i] = (seed >> 8) % (i % 20 == 0 ? 2500000 : 5000) + 1;
      p[i] = scr_heap_malloc(h, n[i]);
      if (!p[i]) { bad++; continue; }
      memset(p[i], i & 0xff, n[i]);
    }
    for (int i = 0; i < LIVE; i++) {
      if (!p[i]) continue;
      if (((unsigned char *)p[i])[n[i] - 1] != (i & 0xff)) bad++;
      if (scr_heap_free_checked(h, p[i]) != SCR_OK) bad++;
    }
    scr_heap_trim(h);
    struct scr_stats st;
    scr_heap_stats(h, &st);
    if (st.allocs || st.mmaps || st.bytes) bad++;
    scr_heap_destroy(h);
  }
  return (void *)bad;
}

static void heaps_on_many_threads(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < THREADS; i++) {
    void *bad;
    pthread_join(t[i], &bad);
    CHECK_EQ((long)bad, 0);
  }
}

int main(void) {
  TEST(heaps_on_many_threads);
  return check_done();
}
