/* The sampler across threads (also under ThreadSanitizer): threads
 * malloc with sampling on and hand every block to the next thread, which
 * frees it; at the end no sample is left and the pages' slot limits are
 * right (the validator), and a snapshot taken meanwhile is consistent. */
#include "check.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "scralloc.h"

#define THREADS 4
#define ROUNDS 200
#define BATCH 256

static _Atomic(void **) mailbox[THREADS];
static atomic_int stop_snapshots;

static void *worker(void *arg) {
  unsigned me = (unsigned)(uintptr_t)arg, next = (me + 1) % THREADS;
  for (int r = 0; r < ROUNDS; r++) {
    void **batch = scr_malloc(BATCH * sizeof(void *));
    for (int i = 0; i < BATCH; i++) batch[i] = scr_malloc((size_t)(16 + (i * 37 + r) % 3000));
    void **expected = NULL;
    while (!atomic_compare_exchange_weak(&mailbox[next], &expected, batch)) expected = NULL;
    void **mine;
    while ((mine = atomic_exchange(&mailbox[me], NULL)) == NULL) sched_yield();
    for (int i = 0; i < BATCH; i++) scr_free(mine[i]);
    scr_free(mine);
  }
  return NULL;
}

static int add(const scr_profile_sample *s, void *arg) {
  *(double *)arg += s->bytes + s->pinned;
  return 0;
}

static void *snapshots(void *arg) {
  (void)arg;
  while (!atomic_load(&stop_snapshots)) {
    double sum = 0;
    scr_profile_samples(NULL, add, &sum);
  }
  return NULL;
}

static size_t live_samples(void) {
  size_t n = 0;
  scr_profile_samples(NULL, NULL, NULL); /* NULL fn: 0, nothing visited */
  double sum = 0;
  n = scr_profile_samples(NULL, add, &sum);
  return n;
}

static void test_handoff(void) {
  CHECK_EQ(scr_process_option_set("profile_rate", "2048"), SCR_OK);
  size_t before = live_samples();
  pthread_t t[THREADS], snap;
  pthread_create(&snap, NULL, snapshots, NULL);
  /* the first batch each thread receives is its predecessor's first */
  for (unsigned i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
  for (unsigned i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  atomic_store(&stop_snapshots, 1);
  pthread_join(snap, NULL);
  for (unsigned i = 0; i < THREADS; i++) {
    void **left = atomic_exchange(&mailbox[i], NULL);
    CHECK(left == NULL);
  }
  scr_process_option_set("profile_rate", "0");
  CHECK_EQ(live_samples(), before);
  CHECK_EQ(scr_process_validate(), SCR_OK);
}

int main(void) {
  TEST(test_handoff);
  return check_done();
}
