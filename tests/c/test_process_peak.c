/* The process allocator's committed bytes and their peak
 * (scr_process_stats: committed, committed_peak): current for every
 * thread's arena the moment memory is committed or given back, not as of
 * the holder's last snapshot, so that a sampling thread sees another
 * thread's large allocation at once; and equal, once the threads are
 * quiet, to the bytes scr_stats() sums over the arenas and the huge
 * cache, through the huge cache's puts, takes, splits and growths.  The
 * live bytes of large and huge blocks in scr_stats() are current too.
 * Runs in the debug, ASan+UBSan and TSan builds. */
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define MIB ((uint64_t)1 << 20)
enum { BIG = 200 << 20, SMALL = 64 << 10, SMALLS = BIG / SMALL };

static _Atomic int step; /* the allocating thread's progress; the sampler's answer in ack */
static _Atomic int ack;

static void wait_for(_Atomic int *v, int value) {
  while (atomic_load(v) < value) usleep(200);
}

static void *allocator_thread(void *arg) {
  (void)arg;
  void *big = scr_malloc(BIG); /* one huge block, not written: committed all the same */
  CHECK(big != NULL);
  atomic_store(&step, 1);
  wait_for(&ack, 1);
  scr_free(big);
  static void *blocks[SMALLS];
  for (int i = 0; i < SMALLS; i++) CHECK((blocks[i] = scr_malloc(SMALL)) != NULL);
  atomic_store(&step, 2);
  wait_for(&ack, 2);
  for (int i = 0; i < SMALLS; i++) scr_free(blocks[i]);
  return NULL;
}

static struct scr_process_stats pstats(void) {
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  return ps;
}

/* Another thread's 200 MB, as one huge block and as 3,200 blocks of
 * 64 KiB, is in committed as soon as its malloc returns: the thread makes
 * no further call, so no snapshot of its arena carries it. */
static void another_threads_memory_is_seen_at_once(void) {
  uint64_t before = pstats().committed;
  pthread_t t;
  atomic_store(&step, 0), atomic_store(&ack, 0);
  pthread_create(&t, NULL, allocator_thread, NULL);
  wait_for(&step, 1);
  struct scr_process_stats ps = pstats();
  CHECK(ps.committed >= before + BIG);
  CHECK(ps.committed_peak >= ps.committed);
  struct scr_stats st; /* its live big blocks too, as they are now */
  scr_stats(&st);
  CHECK(st.heap_used >= BIG && st.large_bytes >= BIG && st.heap_total >= st.heap_used);
  printf("  one huge block: committed %.1f MiB (before %.1f MiB)\n", (double)ps.committed / MIB,
         (double)before / MIB);
  atomic_store(&ack, 1);
  wait_for(&step, 2);
  ps = pstats();
  CHECK(ps.committed >= before + BIG);
  printf("  %d blocks of 64 KiB: committed %.1f MiB, peak %.1f MiB\n", SMALLS, (double)ps.committed / MIB,
         (double)ps.committed_peak / MIB);
  atomic_store(&ack, 2);
  pthread_join(t, NULL);
  CHECK(pstats().committed_peak >= before + BIG);
}

/* Huge blocks through the huge cache (a budget that keeps them): a put,
 * a take that leaves a tail (cut or cached), a take that grows. */
static void *huge_reuse_thread(void *arg) {
  (void)arg;
  void *a = scr_malloc(64 * MIB);
  scr_free(a);                    /* cached */
  void *b = scr_malloc(20 * MIB); /* taken and cut */
  void *c = scr_malloc(24 * MIB);
  scr_free(b);
  void *d = scr_malloc(90 * MIB); /* taken and grown */
  scr_free(c);
  scr_free(d);
  return NULL;
}

/* With no thread allocating, committed is what scr_stats() sums (every
 * arena published when its thread parked; the caller's is exact). */
static void committed_is_the_sum_once_quiet(void) {
  pthread_t t;
  pthread_create(&t, NULL, huge_reuse_thread, NULL);
  pthread_join(t, NULL);
  void *mine = scr_malloc(5 * MIB);
  struct scr_stats st;
  scr_stats(&st);
  struct scr_process_stats ps = pstats();
  CHECK_EQ(ps.committed, st.bytes);
  CHECK(ps.huge_cache_puts >= 2 && ps.huge_cache_hits >= 2);
  printf("  committed %.2f MiB, scr_stats bytes %.2f MiB, huge cache %.2f MiB, peak %.2f MiB\n",
         (double)ps.committed / MIB, (double)st.bytes / MIB, (double)ps.huge_cache_bytes / MIB,
         (double)ps.committed_peak / MIB);
  scr_free(mine);
  scr_trim();
  scr_stats(&st);
  ps = pstats();
  CHECK_EQ(ps.committed, st.bytes);
  CHECK(ps.rss_peak > 0);
}

int main(void) {
  /* no discard nor decay while the figures are compared */
  scr_process_option_set("decay_ms", "3600000");
  TEST(another_threads_memory_is_seen_at_once);
  TEST(committed_is_the_sum_once_quiet);
  return check_done();
}
