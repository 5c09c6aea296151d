/* Breadth suite: producer/consumer.  Producer threads allocate batches of
 * small objects (16-256 B) and pass each batch through a bounded queue;
 * consumer threads check and free them: every object is freed by a thread
 * other than the one that allocated it.
 *
 *     proc_prodcons [producers] [consumers] [batches per producer] [objects per batch] */
#include <pthread.h>
#include <string.h>

#include "suite_prog.h"

#define QCAP 64
struct batch {
  size_t n;
  unsigned char *obj[]; /* stamped blocks of 16-256 B */
};
static struct batch *queue[QCAP];
static size_t q_head, q_len;
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_not_full = PTHREAD_COND_INITIALIZER, q_not_empty = PTHREAD_COND_INITIALIZER;
static long batches = 50000, per_batch = 64;
static int producers = 2, consumers = 2;
static unsigned long bad;

static void push(struct batch *b) {
  pthread_mutex_lock(&q_mu);
  while (q_len == QCAP) pthread_cond_wait(&q_not_full, &q_mu);
  queue[(q_head + q_len++) % QCAP] = b;
  pthread_cond_signal(&q_not_empty);
  pthread_mutex_unlock(&q_mu);
}

/* NULL once the producers are done (they push one NULL per consumer). */
static struct batch *pop(void) {
  pthread_mutex_lock(&q_mu);
  while (q_len == 0) pthread_cond_wait(&q_not_empty, &q_mu);
  struct batch *b = queue[q_head];
  q_head = (q_head + 1) % QCAP;
  q_len--;
  pthread_cond_signal(&q_not_full);
  pthread_mutex_unlock(&q_mu);
  return b;
}

static void *produce(void *arg) {
  uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
  for (long k = 0; k < batches; k++) {
    struct batch *b = must(malloc(sizeof *b + (size_t)per_batch * sizeof b->obj[0]));
    b->n = (size_t)per_batch;
    for (size_t i = 0; i < b->n; i++) {
      size_t sz = rnd(&s) % 4 ? rnd_in(&s, 16, 64) : rnd_in(&s, 64, 257);
      b->obj[i] = must(malloc(sz));
      stamp(b->obj[i], sz);
    }
    push(b);
  }
  return NULL;
}

static void *consume(void *arg) {
  (void)arg;
  unsigned long wrong = 0;
  for (struct batch *b; (b = pop()) != NULL;) {
    for (size_t i = 0; i < b->n; i++) {
      size_t sz = stamped_size(b->obj[i]);
      wrong += sz < 16 || sz > 256 || !stamp_ok(b->obj[i], sz);
      free(b->obj[i]);
    }
    free(b);
  }
  __atomic_fetch_add(&bad, wrong, __ATOMIC_RELAXED);
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[producers] [consumers] [batches per producer] [objects per batch]";
  producers = (int)arg_num(argc, argv, 1, 2, 1, 256, "producers");
  consumers = (int)arg_num(argc, argv, 2, 2, 1, 256, "consumers");
  batches = arg_num(argc, argv, 3, 50000, 1, 100000000, "batches per producer");
  per_batch = arg_num(argc, argv, 4, 64, 1, 1000000, "objects per batch");
  pthread_t p[256], c[256];
  for (int i = 0; i < consumers; i++) pthread_create(&c[i], NULL, consume, (void *)(uintptr_t)i);
  for (int i = 0; i < producers; i++) pthread_create(&p[i], NULL, produce, (void *)(uintptr_t)i);
  for (int i = 0; i < producers; i++) pthread_join(p[i], NULL);
  for (int i = 0; i < consumers; i++) push(NULL);
  for (int i = 0; i < consumers; i++) pthread_join(c[i], NULL);
  printf("prodcons objects=%ld bad=%lu\n", (long)producers * batches * per_batch, bad);
  return bad != 0;
}
