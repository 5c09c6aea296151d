/* Breadth suite: threads that start, allocate, hand blocks to others and
 * end, over and over.  Each generation starts its threads together; thread
 * i allocates blocks (16 B-4 KiB, mostly small), frees the blocks that
 * thread i+1 of the previous generation (a thread that has exited) left in
 * its mailbox, leaves its own in mailbox i, and exits.
 *
 *     proc_handoff [threads per generation] [generations] [blocks per thread] */
#include <pthread.h>

#include "suite_prog.h"

#define MAX_THREADS 256
static int threads = 4;
static long generations = 500, per_thread = 1000;
static unsigned char **mailbox[MAX_THREADS]; /* mailbox[i][0..per_thread): stamped blocks or NULL */
static unsigned long bad;

struct job {
  int id;
  long gen;
  unsigned char **mine; /* filled here, then put in mailbox[id] by main */
};

static void *run(void *arg) {
  struct job *j = arg;
  uint64_t s = (uint64_t)(j->gen * MAX_THREADS + j->id) * 0x9e3779b97f4a7c15ull + 1;
  unsigned char **mine = must(malloc((size_t)per_thread * sizeof *mine));
  for (long k = 0; k < per_thread; k++) {
    uint64_t r = rnd(&s) % 100;
    size_t sz = r < 70 ? rnd_in(&s, 16, 128) : r < 95 ? rnd_in(&s, 128, 1024) : rnd_in(&s, 1024, 4097);
    mine[k] = must(malloc(sz));
    stamp(mine[k], sz);
  }
  unsigned char **theirs = mailbox[(j->id + 1) % threads];
  unsigned long wrong = 0;
  if (theirs) {
    for (long k = 0; k < per_thread; k++) {
      size_t sz = stamped_size(theirs[k]);
      wrong += sz < 16 || sz > 4096 || !stamp_ok(theirs[k], sz);
      free(theirs[k]);
    }
    free(theirs);
  }
  __atomic_fetch_add(&bad, wrong, __ATOMIC_RELAXED);
  j->mine = mine;
  return NULL;
}

int main(int argc, char **argv) {
  prog_usage = "[threads per generation] [generations] [blocks per thread]";
  threads = (int)arg_num(argc, argv, 1, 4, 1, MAX_THREADS, "threads per generation");
  generations = arg_num(argc, argv, 2, 500, 1, 10000000, "generations");
  per_thread = arg_num(argc, argv, 3, 1000, 1, 10000000, "blocks per thread");
  pthread_t t[MAX_THREADS];
  struct job jobs[MAX_THREADS];
  for (long g = 0; g < generations; g++) {
    for (int i = 0; i < threads; i++) {
      jobs[i] = (struct job){i, g, NULL};
      if (pthread_create(&t[i], NULL, run, &jobs[i]) != 0) return 3;
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < threads; i++) mailbox[i] = jobs[i].mine;
  }
  for (int i = 0; i < threads; i++) {
    for (long k = 0; k < per_thread; k++) free(mailbox[i][k]);
    free(mailbox[i]);
  }
  printf("handoff blocks=%ld bad=%lu\n", (long)threads * generations * per_thread, bad);
  return bad != 0;
}
