/* Breadth suite: threads of random sizes, realloc, and blocks passed
 * through a queue.  Each thread allocates blocks of 1 B-64 KiB (every
 * power-of-two range alike, so most are small) and now and then 1-8 MiB,
 * reallocs a fifth of them to another size (checking the contents came
 * along), and passes them in batches of 32 through a shared queue;
 * whichever thread takes a batch checks and frees its blocks.
 *
 *     proc_mixed_queue [threads] [blocks per thread] */
#include <pthread.h>

#include "suite_prog.h"

#define MAX_THREADS 256
#define BATCH 32
#define QCAP 256 /* batches in the queue */
struct item {
  unsigned char *p;
  size_t size;
};
static struct item queue[QCAP][BATCH];
static size_t q_head, q_len;
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static long per_thread = 150000;
static unsigned long bad;

static size_t pick(uint64_t *s) {
  if (rnd(s) % 2000 == 0) return rnd_in(s, (size_t)1 << 20, ((size_t)8 << 20) + 1);
  return 1 + (size_t)(rnd(s) % ((uint64_t)1 << (rnd(s) % 17)));
}

static unsigned long check_free(struct item *it) {
  unsigned long wrong = !stamp_ok(it->p, it->size);
  free(it->p);
  return wrong;
}

static void *run(void *arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  struct item mine[BATCH], got[BATCH];
  unsigned long wrong = 0;
  for (long k = 0; k < per_thread; k += BATCH) {
    for (int i = 0; i < BATCH; i++) {
      size_t sz = pick(&s);
      unsigned char *p = must(malloc(sz));
      stamp(p, sz);
      if (rnd(&s) % 5 == 0) {
        size_t to = pick(&s);
        p = must(realloc(p, to));
        size_t kept = sz < to ? sz : to;
        if (kept >= 8 && stamped_size(p) != sz) wrong++;
        stamp(p, to);
        sz = to;
      }
      mine[i] = (struct item){p, sz};
    }
    int took = 0;
    pthread_mutex_lock(&q_mu);
    if (q_len == QCAP || (q_len > QCAP / 2 && rnd(&s) % 2)) { /* take a batch (usually another thread's) */
      memcpy(got, queue[q_head], sizeof got);
      q_head = (q_head + 1) % QCAP;
      q_len--;
      took = 1;
    }
    memcpy(queue[(q_head + q_len++) % QCAP], mine, sizeof mine);
    pthread_mutex_unlock(&q_mu);
    if (took)
      for (int i = 0; i < BATCH; i++) wrong += check_free(&got[i]);
  }
  __atomic_fetch_add(&bad, wrong, __ATOMIC_RELAXED);
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[threads] [blocks per thread]";
  int threads = (int)arg_num(argc, argv, 1, 8, 1, MAX_THREADS, "threads");
  per_thread = arg_num(argc, argv, 2, 150000, 1, 1000000000, "blocks per thread");
  pthread_t t[MAX_THREADS];
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, run, (void *)(uintptr_t)(i + 1));
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  for (; q_len; q_len--, q_head = (q_head + 1) % QCAP)
    for (int i = 0; i < BATCH; i++) bad += check_free(&queue[q_head][i]);
  printf("mixed_queue blocks=%ld bad=%lu\n", (long)threads * per_thread, bad);
  return bad != 0;
}
