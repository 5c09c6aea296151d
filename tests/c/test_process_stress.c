/* Threaded stress of the process allocator: blocks handed between threads
 * through a shared array, a producer/consumer queue with reallocs of
 * foreign blocks, thread churn with blocks outliving their threads, fork
 * while other threads allocate, address-ordered teardown.  Every block
 * carries a cookie (its size and a pattern from its address) checked
 * before it is freed.  Runs in the debug, ASan+UBSan and TSan builds. */
#include "arena_probe.h"
#include "check.h"
#include "scralloc.h"
#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>

#if defined(__SANITIZE_THREAD__)
/* test_fork: the fork handler holds more of the allocator's locks across
 * fork than the 64 TSan's deadlock detector tracks at once in a thread
 * (test_process_fuzz.c says which). */
const char *__tsan_default_options(void);
__attribute__((visibility("default"))) const char *__tsan_default_options(void) { return "detect_deadlocks=0"; }
#endif
#include <unistd.h>

static _Atomic unsigned long bad_cookies; /* checked by the main thread */
static unsigned scale = 1;                /* SCR_TEST_SCALE: more iterations */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* Sizes: mostly small, some medium, a few large (past the size classes). */
static size_t pick_size(uint64_t *s) {
  uint64_t r = rng_next(s) % 1000;
  if (r < 900) return 1 + rng_next(s) % 256;
  if (r < 995) return 257 + rng_next(s) % 16000;
  return 20000 + rng_next(s) % 300000;
}

/* Cookie: the size in the first word, a byte pattern after it. */
static void *cookie_alloc(size_t n) {
  if (n < 16) n = 16;
  uint8_t *p = scr_malloc(n);
  if (p == NULL) return NULL;
  memcpy(p, &n, sizeof n);
  uint8_t b = (uint8_t)((uintptr_t)p >> 4);
  size_t fill = n - sizeof n < 64 ? n - sizeof n : 64;
  memset(p + sizeof n, b, fill);
  p[n - 1] = b;
  return p;
}

static size_t cookie_check(const void *q) {
  const uint8_t *p = q;
  size_t n;
  memcpy(&n, p, sizeof n);
  uint8_t b = (uint8_t)((uintptr_t)p >> 4);
  size_t fill = n - sizeof n < 64 ? n - sizeof n : 64;
  int ok = n >= 16 && n <= 400000 && scr_usable_size(p) >= n && p[n - 1] == b;
  for (size_t i = 0; ok && i < fill; i++) ok = p[sizeof n + i] == b;
  if (!ok) atomic_fetch_add(&bad_cookies, 1);
  return n;
}

static void cookie_free(void *p) {
  if (p == NULL) return;
  cookie_check(p);
  scr_free(p);
}

/* ---- 1: a shared array; each thread swaps its fresh block for a slot's ---- */

#define SLOTS 1024
static _Atomic(void *) slots[SLOTS];

static void *swap_worker(void *arg) {
  uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
  unsigned iters = 20000 * scale;
  for (unsigned i = 0; i < iters; i++) {
    void *mine = cookie_alloc(pick_size(&s));
    void *old = atomic_exchange(&slots[rng_next(&s) % SLOTS], mine);
    cookie_free(old);
  }
  return NULL;
}

static void test_shared_array(void) {
  enum { T = 4 };
  pthread_t t[T];
  for (uintptr_t i = 0; i < T; i++) CHECK(pthread_create(&t[i], NULL, swap_worker, (void *)(i + 1)) == 0);
  for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < SLOTS; i++) cookie_free(atomic_exchange(&slots[i], NULL));
  CHECK_EQ(atomic_load(&bad_cookies), 0);
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  CHECK(ps.remote_frees > 0);
  CHECK(ps.claims >= T);
}

/* ---- 2: producer/consumer through a bounded queue; consumers realloc ---- */

#define QCAP 256
static struct {
  pthread_mutex_t m;
  pthread_cond_t not_empty, not_full;
  void *q[QCAP];
  unsigned head, count, producers_left;
} pc = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, {0}, 0, 0, 0};

static void *producer(void *arg) {
  uint64_t s = (uintptr_t)arg * 7919 + 3;
  unsigned iters = 15000 * scale;
  for (unsigned i = 0; i < iters; i++) {
    void *p = cookie_alloc(pick_size(&s));
    pthread_mutex_lock(&pc.m);
    while (pc.count == QCAP) pthread_cond_wait(&pc.not_full, &pc.m);
    pc.q[(pc.head + pc.count++) % QCAP] = p;
    pthread_cond_signal(&pc.not_empty);
    pthread_mutex_unlock(&pc.m);
  }
  pthread_mutex_lock(&pc.m);
  pc.producers_left--;
  pthread_cond_broadcast(&pc.not_empty);
  pthread_mutex_unlock(&pc.m);
  return NULL;
}

static void *consumer(void *arg) {
  uint64_t s = (uintptr_t)arg * 104729 + 5;
  for (;;) {
    pthread_mutex_lock(&pc.m);
    while (pc.count == 0 && pc.producers_left) pthread_cond_wait(&pc.not_empty, &pc.m);
    if (pc.count == 0) {
      pthread_mutex_unlock(&pc.m);
      return NULL;
    }
    void *p = pc.q[pc.head];
    pc.head = (pc.head + 1) % QCAP;
    pc.count--;
    pthread_cond_signal(&pc.not_full);
    pthread_mutex_unlock(&pc.m);
    if (rng_next(&s) % 4 == 0) {
      /* realloc a foreign block: it moves into this thread's arena */
      size_t n = cookie_check(p);
      size_t m = n + rng_next(&s) % 512;
      uint8_t *q = scr_realloc(p, m);
      if (q == NULL) {
        atomic_fetch_add(&bad_cookies, 1);
        continue;
      }
      uint8_t b = (uint8_t)((uintptr_t)q >> 4), old = q[n - 1];
      (void)old;
      /* re-cookie at the new address and size */
      memcpy(q, &m, sizeof m);
      memset(q + sizeof m, b, m - sizeof m < 64 ? m - sizeof m : 64);
      q[m - 1] = b;
      p = q;
    }
    cookie_free(p);
  }
}

static void test_producer_consumer(void) {
  enum { P = 2, C = 2 };
  pthread_t tp[P], tc[C];
  pc.producers_left = P;
  for (uintptr_t i = 0; i < C; i++) CHECK(pthread_create(&tc[i], NULL, consumer, (void *)(i + 1)) == 0);
  for (uintptr_t i = 0; i < P; i++) CHECK(pthread_create(&tp[i], NULL, producer, (void *)(i + 1)) == 0);
  for (int i = 0; i < P; i++) pthread_join(tp[i], NULL);
  for (int i = 0; i < C; i++) pthread_join(tc[i], NULL);
  CHECK_EQ(atomic_load(&bad_cookies), 0);
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  CHECK(ps.realloc_moves > 0);
}

/* ---- 3: thread churn; blocks outlive their threads ---- */

#define KEEP 64
static void *kept[64][KEEP];

static void *churn_worker(void *arg) {
  uintptr_t id = (uintptr_t)arg;
  uint64_t s = id * 31 + 17;
  void *local[128];
  for (int r = 0; r < 20; r++) {
    for (int i = 0; i < 128; i++) local[i] = cookie_alloc(pick_size(&s));
    for (int i = 0; i < 128; i++) cookie_free(local[i]);
  }
  for (int i = 0; i < KEEP; i++) kept[id][i] = cookie_alloc(pick_size(&s));
  /* free some blocks kept by an earlier thread (it has exited) */
  if (id >= 4)
    for (int i = 0; i < KEEP; i++) {
      cookie_free(kept[id - 4][i]);
      kept[id - 4][i] = NULL;
    }
  return NULL;
}

static void test_thread_churn(void) {
  enum { WAVE = 4, WAVES = 16 };
  struct scr_process_stats before, after;
  scr_process_stats(&before);
  for (uintptr_t w = 0; w < WAVES; w++) {
    pthread_t t[WAVE];
    for (uintptr_t i = 0; i < WAVE; i++) CHECK(pthread_create(&t[i], NULL, churn_worker, (void *)(w * WAVE + i)) == 0);
    for (int i = 0; i < WAVE; i++) pthread_join(t[i], NULL);
  }
  for (int id = 0; id < WAVE * WAVES; id++)
    for (int i = 0; i < KEEP; i++)
      if (kept[id][i]) {
        cookie_free(kept[id][i]);
        kept[id][i] = NULL;
      }
  /* those frees went to parked arenas: every 256th push frees a batch in */
  for (int i = 0; i < 200; i++) {
    scr_process_stats(&after);
    if (after.parked_drains > before.parked_drains && after.remote_pending == 0) break;
    usleep(5000);
  }
  CHECK(after.parked_drains > before.parked_drains);
  CHECK_EQ(atomic_load(&bad_cookies), 0);
  CHECK(after.claims - before.claims >= WAVE * WAVES);
  /* parked arenas are reused: far fewer arenas than threads */
  CHECK(after.arenas <= before.arenas + 2 * WAVE + 2);
  CHECK(after.parks >= before.parks + WAVE * WAVES);
  CHECK(scr_process_validate() == SCR_OK);
}

/* ---- 4: fork while other threads allocate ---- */

static _Atomic int stop_allocating;

static void *busy_worker(void *arg) {
  uint64_t s = (uintptr_t)arg + 99;
  void *ring[64] = {0};
  unsigned i = 0;
  while (!atomic_load(&stop_allocating)) {
    cookie_free(ring[i % 64]);
    ring[i % 64] = cookie_alloc(pick_size(&s));
    i++;
  }
  for (int k = 0; k < 64; k++) cookie_free(ring[k]);
  return NULL;
}

static void test_fork(void) {
  enum { T = 3 };
  pthread_t t[T];
  for (uintptr_t i = 0; i < T; i++) CHECK(pthread_create(&t[i], NULL, busy_worker, (void *)(i + 1)) == 0);
  usleep(20000);
  for (int f = 0; f < 4; f++) {
    pid_t pid = fork();
    if (pid == 0) {
      uint64_t s = 12345;
      void *ps[256];
      for (int r = 0; r < 20; r++) {
        for (int i = 0; i < 256; i++) ps[i] = cookie_alloc(pick_size(&s));
        for (int i = 0; i < 256; i++) cookie_free(ps[i]);
      }
      struct scr_stats st;
      scr_stats(&st); /* takes every snapshot lock: they must be free */
      _exit(atomic_load(&bad_cookies) == 0 ? 0 : 3);
    }
    CHECK(pid > 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    usleep(5000);
  }
  atomic_store(&stop_allocating, 1);
  for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
  CHECK_EQ(atomic_load(&bad_cookies), 0);
}

/* ---- 5: address-ordered teardown ---- */

static void test_free_many(void) {
  enum { N = 20000 };
  void **v = scr_malloc(N * sizeof *v);
  CHECK(v != NULL);
  if (v == NULL) return;
  uint64_t s = 777;
  for (int i = 0; i < N; i++) v[i] = scr_malloc(48);
  for (int i = N - 1; i > 0; i--) { /* shuffle */
    int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
    void *t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
  scr_free_many(v, N);
  for (int i = 1; i < N; i++) CHECK((uintptr_t)v[i - 1] > (uintptr_t)v[i]);
  /* the free lists now hand the blocks back in ascending order */
  unsigned ascending = 0;
  for (int i = 0; i < N; i++) v[i] = scr_malloc(48);
  for (int i = 1; i < N; i++) ascending += (uintptr_t)v[i] > (uintptr_t)v[i - 1];
  CHECK(ascending > N * 9 / 10);
  scr_free_many(v, N);
  scr_free(v);
  scr_free_many(NULL, 0);
}

/* ---- 6: the API's edges ---- */

/* A thread claims an arena of its own at its first allocation, whichever
 * entry point makes it, and parks it at exit. */
static void *first_call(void *arg) {
  const char *entry = arg;
  void *p = strcmp(entry, "calloc") == 0    ? scr_calloc(3, 10)
            : strcmp(entry, "realloc") == 0 ? scr_realloc(NULL, 30)
            : strcmp(entry, "aligned") == 0 ? scr_aligned_alloc(64, 30)
                                            : scr_malloc(30);
  CHECK(p != NULL);
  scr_free(p);
  scr_free(scr_malloc(100));
  return NULL;
}

static void test_first_call_claims_an_arena(void) {
  static const char *const entries[] = {"malloc", "calloc", "realloc", "aligned"};
  for (unsigned i = 0; i < 4; i++) {
    struct scr_process_stats p0, p1;
    scr_process_stats(&p0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, first_call, (void *)entries[i]) == 0);
    pthread_join(t, NULL);
    scr_process_stats(&p1);
    CHECK_EQ(p1.claims - p0.claims, 1);
    CHECK_EQ(p1.parks - p0.parks, 1);
  }
  CHECK(scr_process_validate() == SCR_OK);
}

static void test_api_edges(void) {
  CHECK(scr_usable_size(NULL) == 0);
  scr_free(NULL);
  int local;
  CHECK(scr_process_option_set("on_error", "ignore") == SCR_OK); /* the default, abort, would end the test */
  scr_free(&local); /* not ours: counted and ignored */
  CHECK(scr_usable_size(&local) == 0);
  void *p = scr_realloc(NULL, 100);
  CHECK(p != NULL && scr_usable_size(p) >= 100);
  p = scr_realloc(p, 100000);
  CHECK(p != NULL && scr_usable_size(p) >= 100000);
  CHECK(scr_realloc(p, 0) == NULL);
  void *z = scr_calloc(1000, 10);
  CHECK(z != NULL);
  int allzero = 1;
  for (int i = 0; i < 10000; i++) allzero &= ((unsigned char *)z)[i] == 0;
  CHECK(allzero);
  scr_free(z);
  CHECK(scr_calloc(SIZE_MAX / 2, 4) == NULL);
  void *a = scr_aligned_alloc(4096, 100);
  CHECK(a != NULL && ((uintptr_t)a & 4095) == 0);
  scr_free(a);
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  CHECK(ps.foreign_frees >= 1);
  /* A block of a heap the program made itself is not scr_free's: reported
   * as foreign and ignored, it stays the heap's (no malloc hands it out). */
  scr_heap *own = scr_heap_new(NULL);
  CHECK(own != NULL);
  void *hb = scr_heap_malloc(own, 48);
  uint64_t foreign_before = ps.foreign_frees;
  scr_free(hb);
  scr_process_stats(&ps);
  CHECK_EQ(ps.foreign_frees, foreign_before + 1);
  void *next = scr_malloc(48);
  CHECK(next != hb);
  scr_free(next);
  struct scr_stats hs;
  scr_heap_stats(own, &hs);
  CHECK_EQ(hs.allocs, 1);
  scr_heap_free(own, hb);
  scr_heap_destroy(own);
  char json[8192];
  size_t n = scr_process_stats_json(json, sizeof json);
  CHECK(n > 0 && n < sizeof json && json[0] == '{');
  CHECK(scr_process_option_set("no_such_option", "1") != SCR_OK);
  CHECK(scr_process_option_set("decay_max_ms", "250") == SCR_OK);
  CHECK(scr_process_option_get("decay_max_ms") == 250);
  CHECK(scr_process_option_set("decay_max_ms", "10000") == SCR_OK);
  CHECK(scr_process_option_set("on_error", "abort") == SCR_OK);
}

/* Blocks the thread keeps for reuse: the next malloc of the class gets
 * the last one freed back, the figures count them as free, and a double
 * free of one, or a free of a block's interior, is counted and ignored
 * (SCRALLOC_ON_ERROR=ignore; in every build). */
static void test_recycling(void) {
  scr_trim(); /* nothing pending anywhere */
  struct scr_stats before, mid, after;
  scr_stats(&before);
  void *p[10];
  for (int i = 0; i < 10; i++) p[i] = scr_malloc(48);
  scr_stats(&mid);
  CHECK_EQ(mid.allocs, before.allocs + 10);
  CHECK_EQ(mid.heap_used, before.heap_used + 10 * 48);
  for (int i = 0; i < 10; i++) scr_free(p[i]);
  scr_stats(&after);
  CHECK_EQ(after.allocs, before.allocs);
  CHECK_EQ(after.heap_used, before.heap_used);
  CHECK_EQ(after.classes[scr_size_class(48)].live, before.classes[scr_size_class(48)].live);
  void *q = scr_malloc(40); /* the same class: the block freed last */
  CHECK(q == p[9]);
  scr_free(q);
  struct scr_process_stats ps0, ps1;
  scr_process_stats(&ps0);
  CHECK(scr_process_option_set("on_error", "ignore") == SCR_OK);
  scr_free(q);
  char *r = scr_malloc(48);
  CHECK(r == q); /* the double free was ignored: q was kept once */
  scr_free(r + 16);
  CHECK(scr_process_option_set("on_error", "abort") == SCR_OK);
  scr_process_stats(&ps1);
  CHECK_EQ(ps1.double_frees - ps0.double_frees, 1);
  CHECK_EQ(ps1.interior_frees - ps0.interior_frees, 1);
  scr_free(r);
  scr_stats(&after);
  CHECK_EQ(after.allocs, before.allocs);
}

/* The pool: another arena's blocks that a thread frees past a full cache
 * list wait in the pool, counted as free, instead of on their owner's
 * remote stack; a thread whose list is empty and whose own page has no
 * free slot takes them.  3000 B blocks: a list of six that may not grow
 * (cache_grow 0), batches of three. */
enum { POOL_SIZE = 3000, POOL_OWNED = 24, POOL_TAKEN = 1000 };
static pthread_barrier_t pool_hold;
static void *pool_owner(void *arg) {
  void **v = arg;
  for (int i = 0; i < POOL_OWNED; i++) v[i] = scr_malloc(POOL_SIZE);
  pthread_barrier_wait(&pool_hold); /* main frees them */
  pthread_barrier_wait(&pool_hold); /* the taker has run: the owner held its arena all along */
  return NULL;
}
static void *pool_taker(void *arg) {
  void **v = arg;
  for (int i = 0; i < POOL_TAKEN; i++) {
    v[i] = scr_malloc(POOL_SIZE);
    memset(v[i], 0x5a, POOL_SIZE);
  }
  return NULL;
}
static void test_pool(void) {
  CHECK(scr_process_option_set("cache_grow", "0") == SCR_OK);
  scr_trim(); /* the caller's lists and the pool start empty */
  struct scr_stats s0, s1;
  struct scr_process_stats p0, p1, p2;
  scr_stats(&s0);
  scr_process_stats(&p0);
  void *owned[POOL_OWNED];
  pthread_t t;
  pthread_barrier_init(&pool_hold, NULL, 2);
  pthread_create(&t, NULL, pool_owner, owned);
  pthread_barrier_wait(&pool_hold);
  for (int i = 0; i < POOL_OWNED; i++) scr_free(owned[i]);
  scr_stats(&s1);
  scr_process_stats(&p1);
  /* six kept, then one batch of three per three frees; none remote */
  CHECK_EQ(p1.pool_puts - p0.pool_puts, (POOL_OWNED - 6) / 3);
  CHECK_EQ(p1.remote_frees, p0.remote_frees);
  CHECK_EQ(s1.allocs, s0.allocs); /* kept and pooled blocks count as free */
  CHECK_EQ(s1.heap_used, s0.heap_used);
  /* a pooled block freed again, with room in the list: counted, ignored */
  struct scr_process_stats pd0, pd1;
  scr_process_stats(&pd0);
  void *newest = scr_malloc(POOL_SIZE);
  CHECK(newest == owned[POOL_OWNED - 1]);
  CHECK(scr_process_option_set("on_error", "ignore") == SCR_OK);
  scr_free(owned[0]);
  CHECK(scr_process_option_set("on_error", "abort") == SCR_OK);
  scr_process_stats(&pd1);
  CHECK_EQ(pd1.double_frees - pd0.double_frees, 1);
  scr_free(newest);
  void **taken = scr_malloc(POOL_TAKEN * sizeof *taken);
  pthread_t u;
  pthread_create(&u, NULL, pool_taker, taken);
  pthread_join(u, NULL);
  scr_process_stats(&p2);
  CHECK_EQ(p2.pool_takes - p1.pool_takes, (POOL_OWNED - 6) / 3);
  unsigned found = 0; /* the pooled blocks went to the taker, once each */
  for (int i = 0; i < POOL_OWNED; i++)
    for (int j = 0; j < POOL_TAKEN; j++) found += taken[j] == owned[i];
  CHECK_EQ(found, POOL_OWNED - 6);
  pthread_barrier_wait(&pool_hold);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&pool_hold);
  for (int j = 0; j < POOL_TAKEN; j++) scr_free(taken[j]);
  scr_free(taken);
  for (int i = 0; i < 6; i++) scr_free(scr_malloc(POOL_SIZE)); /* the six kept ones */
  CHECK(scr_process_option_set("cache_grow", "4M") == SCR_OK);
}

/* A thread whose own page could still carve blocks of the class takes the
 * pool's batch first (malloc.c: the slow side's common case carves only
 * while the pool holds none of the class): fresh memory waits while other
 * arenas' freed blocks are there. */
static pthread_barrier_t carve_step;
static void *carver(void *arg) {
  void **got = arg;
  got[0] = scr_malloc(POOL_SIZE); /* its arena and a page of the class, with room to carve */
  pthread_barrier_wait(&carve_step); /* main fills the pool */
  pthread_barrier_wait(&carve_step);
  got[1] = scr_malloc(POOL_SIZE); /* its list is empty */
  return NULL;
}
static void test_the_pool_before_carving(void) {
  CHECK(scr_process_option_set("cache_grow", "0") == SCR_OK);
  scr_trim();
  void *got[2], *owned[POOL_OWNED];
  pthread_t c, t;
  pthread_barrier_init(&carve_step, NULL, 2);
  pthread_barrier_init(&pool_hold, NULL, 2);
  pthread_create(&c, NULL, carver, got);
  pthread_barrier_wait(&carve_step);
  pthread_create(&t, NULL, pool_owner, owned);
  pthread_barrier_wait(&pool_hold);
  for (int i = 0; i < POOL_OWNED; i++) scr_free(owned[i]);
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  pthread_barrier_wait(&carve_step);
  pthread_join(c, NULL);
  scr_process_stats(&p1);
  CHECK_EQ(p1.pool_takes - p0.pool_takes, 1);
  unsigned pooled = 0;
  for (int i = 0; i < POOL_OWNED; i++) pooled += got[1] == owned[i];
  CHECK_EQ(pooled, 1);
  pthread_barrier_wait(&pool_hold);
  pthread_join(t, NULL);
  pthread_barrier_destroy(&pool_hold);
  pthread_barrier_destroy(&carve_step);
  scr_free(got[0]);
  scr_free(got[1]);
  scr_trim(); /* the rest of the pool goes home */
  CHECK(scr_process_validate() == SCR_OK);
  CHECK(scr_process_option_set("cache_grow", "4M") == SCR_OK);
}

#if defined(__SANITIZE_ADDRESS__)
/* ASan builds poison the blocks a thread keeps: a use after free of one is
 * reported (in a child, which ASan ends). */
static void test_kept_block_use_after_free(void) {
  char *p = scr_malloc(64);
  scr_free(p); /* kept for this thread's next malloc of the class */
  CHECK(check_read_kills_child(p, 10));
  char *q = scr_malloc(64); /* unpoisoned when handed out again */
  CHECK(q == p);
  memset(q, 1, 64);
  scr_free(q);
}
#endif

/* Threads that finish one after another: each holds an arena from the
 * start, and thread k grows only once thread k-1 has exited, while the
 * main thread frees what k-1 left (remote frees into an arena that is
 * parked, and drained by the pusher).  Cookies checked; every block
 * comes back. */
enum { CHAIN = 6, CHAIN_BLOCKS = 24576 }; /* ~3 MiB of 16-255 B blocks per thread */
static void *chain_kept[CHAIN][CHAIN_BLOCKS];
static pthread_barrier_t chain_hold;
static sem_t chain_go[CHAIN];

static void *chain_worker(void *arg) {
  unsigned k = (unsigned)(uintptr_t)arg;
  uint64_t s = k * 7919 + 5;
  void *first = cookie_alloc(64); /* holds an arena */
  pthread_barrier_wait(&chain_hold);
  while (sem_wait(&chain_go[k]) != 0) {
  }
  for (int i = 0; i < CHAIN_BLOCKS; i++) chain_kept[k][i] = cookie_alloc(16 + rng_next(&s) % 240);
  for (int i = 0; i < CHAIN_BLOCKS; i += 2) cookie_free(chain_kept[k][i]), chain_kept[k][i] = NULL;
  cookie_free(first);
  return NULL;
}

/* One run of the chain. */
static void chain_run(struct scr_process_stats *ps0, struct scr_process_stats *ps1) {
  struct scr_stats st0, st1;
  scr_trim();
  scr_stats(&st0);
  scr_process_stats(ps0);
  pthread_t t[CHAIN];
  pthread_barrier_init(&chain_hold, NULL, CHAIN + 1);
  for (unsigned k = 0; k < CHAIN; k++) sem_init(&chain_go[k], 0, 0);
  for (uintptr_t k = 0; k < CHAIN; k++) CHECK(pthread_create(&t[k], NULL, chain_worker, (void *)k) == 0);
  pthread_barrier_wait(&chain_hold);
  for (unsigned k = 0; k < CHAIN; k++) {
    sem_post(&chain_go[k]);
    if (k > 0) /* while thread k grows */
      for (int i = 1; i < CHAIN_BLOCKS; i += 2) cookie_free(chain_kept[k - 1][i]), chain_kept[k - 1][i] = NULL;
    pthread_join(t[k], NULL);
  }
  for (int i = 1; i < CHAIN_BLOCKS; i += 2) cookie_free(chain_kept[CHAIN - 1][i]), chain_kept[CHAIN - 1][i] = NULL;
  pthread_barrier_destroy(&chain_hold);
  for (unsigned k = 0; k < CHAIN; k++) sem_destroy(&chain_go[k]);
  scr_trim(); /* drains what waits on parked arenas */
  scr_stats(&st1);
  scr_process_stats(ps1);
  CHECK_EQ(atomic_load(&bad_cookies), 0);
  CHECK_EQ(st1.allocs, st0.allocs);
  CHECK(scr_process_validate() == SCR_OK);
}

/* The main thread's frees reach the finished threads' parked arenas;
 * every block comes back, cookies intact. */
static void test_parked_chain(void) {
  struct scr_process_stats ps0, ps1;
  chain_run(&ps0, &ps1);
  CHECK(ps1.parked_drains > ps0.parked_drains);
}

/* The parked list under load: waves of short-lived threads that allocate,
 * free half and exit (parks, claims), while long-lived threads swap blocks
 * through a shared array (frees of parked arenas' blocks: drains) and
 * grow, and the discard helper runs with a short delay.  The
 * process validator checks the list (no cycle, counts, states) at every
 * park, claim and return of a borrowed arena in checked builds; cookies
 * are checked before every free. */
enum { TORTURE_SLOTS = 4096, TORTURE_WAVES = 30, TORTURE_WIDTH = 8 };
static _Atomic(void *) torture_slots[TORTURE_SLOTS];
static _Atomic int torture_stop;
static void *torture_short(void *arg) {
  uint64_t s = (uintptr_t)arg * 2654435761u + 1;
  void *mine[256];
  for (int i = 0; i < 256; i++) mine[i] = cookie_alloc(16 + rng_next(&s) % 3000);
  for (int i = 0; i < 256; i += 2) cookie_free(mine[i]);
  for (int i = 1; i < 256; i += 2)
    cookie_free(atomic_exchange(&torture_slots[rng_next(&s) % TORTURE_SLOTS], mine[i]));
  return NULL;
}
static void *torture_long(void *arg) {
  uint64_t s = (uintptr_t)arg * 7919 + 3;
  while (!atomic_load(&torture_stop))
    for (int k = 0; k < 64; k++)
      cookie_free(atomic_exchange(&torture_slots[rng_next(&s) % TORTURE_SLOTS], cookie_alloc(16 + rng_next(&s) % 3000)));
  return NULL;
}
static void test_parked_list_torture(void) {
  struct scr_process_stats p0, p1;
  scr_process_stats(&p0);
  CHECK(scr_process_option_set("discard", "1") == SCR_OK);
  CHECK(scr_process_option_set("decay_ms", "5") == SCR_OK);
  CHECK(scr_process_option_set("decay_max_ms", "20") == SCR_OK);
  pthread_t l[3];
  for (uintptr_t i = 0; i < 3; i++) CHECK(pthread_create(&l[i], NULL, torture_long, (void *)(i + 1)) == 0);
  for (unsigned w = 0; w < TORTURE_WAVES * scale; w++) {
    pthread_t t[TORTURE_WIDTH];
    for (uintptr_t i = 0; i < TORTURE_WIDTH; i++)
      CHECK(pthread_create(&t[i], NULL, torture_short, (void *)(w * TORTURE_WIDTH + i + 100)) == 0);
    for (int i = 0; i < TORTURE_WIDTH; i++) pthread_join(t[i], NULL);
  }
  atomic_store(&torture_stop, 1);
  for (int i = 0; i < 3; i++) pthread_join(l[i], NULL);
  for (int i = 0; i < TORTURE_SLOTS; i++) cookie_free(atomic_exchange(&torture_slots[i], NULL));
  CHECK(scr_process_option_set("discard", "0") == SCR_OK);
  CHECK(scr_process_option_set("decay_ms", "1000") == SCR_OK);
  CHECK(scr_process_option_set("decay_max_ms", "10000") == SCR_OK);
  scr_process_stats(&p1);
  CHECK_EQ(atomic_load(&bad_cookies), 0);
  CHECK(p1.parks - p0.parks >= TORTURE_WAVES * TORTURE_WIDTH);
  CHECK(scr_process_validate() == SCR_OK);
}

/* The hard cap on free memory kept committed (retain_max, 4 MiB here) is
 * shared by the threads holding arenas: a thread alone keeps freed pages
 * up to it; with nine threads holding arenas its share falls to
 * retain_bytes (512 KiB) and what it kept above goes back at its next
 * ticks. */
enum { SHARE_THREADS = 8, SHARE_BLOCKS = 24 };
static pthread_barrier_t share_hold;
static void *share_holder(void *arg) {
  (void)arg;
  scr_free(scr_malloc(100)); /* holds an arena */
  pthread_barrier_wait(&share_hold); /* all hold */
  pthread_barrier_wait(&share_hold); /* main has looked */
  return NULL;
}

static uint64_t dirty_now(void) {
  struct scr_stats st;
  scr_stats(&st);
  return st.dirty_bytes;
}

static void test_keep_share(void) {
  scr_process_option_set("retain_max", "4M");
  scr_trim();
  uint64_t before = dirty_now();
  void *p[SHARE_BLOCKS];
  for (int i = 0; i < SHARE_BLOCKS; i++) p[i] = scr_malloc(100 << 10); /* two pages each */
  for (int i = 0; i < SHARE_BLOCKS; i++) scr_free(p[i]);
  uint64_t alone = dirty_now();
  CHECK(alone >= before + (uint64_t)SHARE_BLOCKS * 2 * SCR_PAGE_SIZE);
  pthread_t t[SHARE_THREADS];
  pthread_barrier_init(&share_hold, NULL, SHARE_THREADS + 1);
  for (int i = 0; i < SHARE_THREADS; i++) pthread_create(&t[i], NULL, share_holder, NULL);
  pthread_barrier_wait(&share_hold);
  /* Heap calls tick (a malloc the thread's cache serves does not): past
   * the 64 blocks the cache may hold, these mallocs reach the heap. */
  void *q[200];
  for (int i = 0; i < 200; i++) q[i] = scr_malloc(32);
  for (int i = 0; i < 200; i++) scr_free(q[i]);
  uint64_t shared = dirty_now();
  CHECK(shared <= before + ((uint64_t)512 << 10));
  pthread_barrier_wait(&share_hold);
  for (int i = 0; i < SHARE_THREADS; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&share_hold);
  scr_process_option_set("retain_max", "0");
}

/* Pages an arena frees past its share of retain_max go back in batches
 * of 256 KiB (the arenas' decommit_batch), one call a batch: 48 blocks of
 * two pages freed one by one took one madvise each before. */
enum { BATCH_BLOCKS = 48, BATCH_BLOCK = 100 << 10 };
static void *batch_freer(void *arg) {
  struct scr_stats *st = arg;
  void *mark = scr_malloc(57000); /* its arena is the one with a block of class 57344 */
  void *p[BATCH_BLOCKS];
  for (int i = 0; i < BATCH_BLOCKS; i++) {
    p[i] = scr_malloc(BATCH_BLOCK);
    memset(p[i], 1, BATCH_BLOCK);
  }
  unsigned a = arena_with_live(57344);
  CHECK(a != UINT32_MAX);
  scr_arena_stats(a, &st[0]);
  for (int i = 0; i < BATCH_BLOCKS; i++) scr_free(p[i]);
  scr_arena_stats(a, &st[1]);
  scr_free(mark);
  return NULL;
}

static void test_pages_past_the_share_go_back_in_batches(void) {
  scr_process_option_set("retain_max", "4M");
  struct scr_stats st[2];
  pthread_t t;
  pthread_create(&t, NULL, batch_freer, st);
  pthread_join(t, NULL);
  uint64_t pages = (st[0].bytes - st[1].bytes) / SCR_PAGE_SIZE, calls = st[1].madvise_calls - st[0].madvise_calls;
  printf("  %llu pages given back in %llu calls; %llu KiB left dirty\n", (unsigned long long)pages,
         (unsigned long long)calls, (unsigned long long)(st[1].dirty_bytes >> 10));
  CHECK(pages >= 32);                /* 6 MiB freed, a share of at most 4 MiB kept */
  CHECK(calls >= 1);
  CHECK(calls * 4 <= pages + 8);      /* a call per 4 pages (a purge pass may add one or two) */
  CHECK(st[1].dirty_bytes <= st[0].dirty_bytes + ((uint64_t)4 << 20) + ((uint64_t)256 << 10));
  scr_process_option_set("retain_max", "0");
}

static void test_trim_to_zero(void) {
  scr_trim();
  struct scr_stats st;
  scr_stats(&st);
  /* every block of every test was freed; trim drained the parked arenas */
  CHECK_EQ(st.allocs, 0);
  CHECK_EQ(st.large_allocs, 0);
  CHECK(scr_process_validate() == SCR_OK);
}

int main(void) {
  const char *sc = getenv("SCR_TEST_SCALE");
  if (sc && atoi(sc) > 0) scale = (unsigned)atoi(sc);
  /* keep the discard helper out of the way: test_trim_to_zero wants
   * every parked arena on the parked list */
  scr_process_option_set("discard", "0");
  TEST(test_api_edges);
  TEST(test_first_call_claims_an_arena);
  TEST(test_parked_chain);
  TEST(test_shared_array);
  TEST(test_producer_consumer);
  TEST(test_thread_churn);
  TEST(test_fork);
  TEST(test_parked_list_torture);
  TEST(test_free_many);
  TEST(test_recycling);
  TEST(test_pool);
  TEST(test_the_pool_before_carving);
  TEST(test_keep_share);
  TEST(test_pages_past_the_share_go_back_in_batches);
#if defined(__SANITIZE_ADDRESS__)
  TEST(test_kept_block_use_after_free);
#endif
  TEST(test_trim_to_zero);
  return check_done();
}
