/* One misuse of the malloc API per run, under LD_PRELOAD=libscralloc.so
 * (a program that links nothing but libc): tests/preload/misuse_check.py
 * runs every case in a child, with SCRALLOC_ON_ERROR=abort (the child
 * must die of SIGABRT after the one line it printed as "expect:") and
 * =warn (the child must print that line, go on, and pass what follows).
 *
 *   misuse_check CASE
 *
 * Cross-thread cases (xthread-CALL-WHO-SIZE): the main thread mallocs a
 * block of SIZE (16, 1k, 200k, 3m, 64m), a second thread frees it, and
 * the second call (CALL: free or realloc) comes from WHO: the second
 * thread again, a third one, or the owner (the main thread), while the
 * second thread still holds its arena.  race-SIZE: two threads released
 * by a barrier free one block of the main thread at once, RACES times;
 * exactly one of the two frees is reported each time (misuse_check.py
 * checks RACES lines under warn), and each thread then mallocs and keeps
 * a block of the size, so that a block the race handed out twice shows
 * as an overlap.  race-SIZE-home: the racers hold no arena (the block
 * goes home to the main thread's arena) and keep nothing.
 *
 * Before the misuse the program prints on stdout the exact stderr line
 * scralloc must write ("expect: scralloc: free(0x...): double free").
 * After it (warn mode), it allocates 10,000 blocks of the misused size
 * and 10,000 of mixed sizes, checks that no two live blocks overlap (none
 * is handed out twice, and none overlaps the blocks it still holds), frees
 * them, and runs the process validator (scr_process_validate, looked up
 * in the preloaded library).  Exit status 0 when all of that holds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define AFTER 10000

typedef struct { uintptr_t start, end; } span;

#define RACES 1000

static span live[2 * AFTER + 3 * RACES + 16];
static size_t nlive;

static void hold(void *p, size_t n) {
  live[nlive].start = (uintptr_t)p;
  live[nlive].end = (uintptr_t)p + n;
  nlive++;
}

static int by_start(const void *a, const void *b) {
  uintptr_t x = ((const span *)a)->start, y = ((const span *)b)->start;
  return x < y ? -1 : x > y;
}

/* Allocates AFTER blocks of `size` (of a size above 64 KiB, 64: the
 * machine's memory) and AFTER of mixed sizes up to 64 KiB, writes each
 * whole, and checks that no two live blocks (those, and the ones held
 * before) overlap.  0 when none does. */
static int nothing_handed_out_twice(size_t size) {
  void **blocks = calloc(2 * AFTER, sizeof(void *));
  if (blocks == NULL) return 1;
  size_t held = nlive;
  for (int i = 0; i < 2 * AFTER; i++) {
    size_t n = i < AFTER ? size : (size_t)16 << (i % 13);
    if (i < AFTER && size > ((size_t)64 << 10) && i >= (size > ((size_t)4 << 20) ? 4 : 64)) n = 16;
    blocks[i] = malloc(n);
    if (blocks[i] == NULL) {
      fprintf(stderr, "malloc(%zu) failed\n", n);
      return 1;
    }
    memset(blocks[i], 0xa5, n);
    hold(blocks[i], n);
  }
  qsort(live, nlive, sizeof live[0], by_start);
  int bad = 0;
  for (size_t i = 1; i < nlive; i++) {
    if (live[i].start < live[i - 1].end) {
      fprintf(stderr, "overlap: [%#lx, %#lx) and [%#lx, %#lx)\n", (unsigned long)live[i - 1].start,
              (unsigned long)live[i - 1].end, (unsigned long)live[i].start, (unsigned long)live[i].end);
      bad = 1;
    }
  }
  for (int i = 0; i < 2 * AFTER; i++) free(blocks[i]);
  free(blocks);
  nlive = held;
  return bad;
}

static void expect(const char *call, const void *p, const char *what) {
  printf("expect: scralloc: %s(%p): %s\n", call, p, what);
  fflush(stdout);
}

static void (*volatile free_fn)(void *) = free;
static void *free_in_thread(void *p) {
  free_fn(p);
  return NULL;
}

static void *free_twice_in_thread(void *p) {
  free_fn(p);
  expect("free", p, "double free");
  free_fn(p);
  return NULL;
}

/* The misuse of each case; returns the size whose blocks are checked
 * afterwards. */
/* Called through volatile pointers: the compiler neither warns about the
 * misuse (it is the point) nor elides a malloc and free it can see. */
static void *(*volatile do_malloc)(size_t) = malloc;
static void (*volatile do_free)(void *) = free;
static void *(*volatile do_realloc)(void *, size_t) = realloc;
static size_t (*volatile do_usable_size)(void *) = malloc_usable_size;

/* The cross-thread cases: a block of `size` the main thread malloced,
 * freed by thread 2, then freed or realloced by `who`. */
typedef struct xthread_case {
  void *p;
  const char *call;         /* "free" or "realloc" */
  const char *who;          /* "second", "third" or "owner" */
  pthread_barrier_t freed;  /* thread 2 freed p */
  pthread_barrier_t done;   /* the second call was made */
} xthread_case;

static void second_call(xthread_case *x) {
  if (strcmp(x->call, "free") == 0) {
    expect("free", x->p, "double free");
    do_free(x->p);
    return;
  }
  expect("realloc", x->p, "freed already");
  void *q = do_realloc(x->p, 100);
  if (q != NULL) {
    fprintf(stderr, "realloc of a freed block returned %p\n", q);
    exit(3);
  }
}

/* A thread that holds an arena (its first malloc claims one). */
static void claim_arena(void) { do_free(do_malloc(64)); }

static void *xthread_second(void *arg) {
  xthread_case *x = arg;
  claim_arena();
  do_free(x->p);
  if (strcmp(x->who, "second") == 0) second_call(x);
  pthread_barrier_wait(&x->freed);
  pthread_barrier_wait(&x->done); /* holds its arena (and its cache) until then */
  return NULL;
}

static void *xthread_third(void *arg) {
  xthread_case *x = arg;
  claim_arena();
  pthread_barrier_wait(&x->freed);
  second_call(x);
  pthread_barrier_wait(&x->done);
  return NULL;
}

static size_t xthread(const char *c) {
  static const struct { const char *name; size_t size; } sizes[] = {
      {"16", 16}, {"1k", 1 << 10}, {"200k", 200 << 10}, {"3m", 3 << 20}, {"64m", 64 << 20}};
  char call[16], who[16], size[16];
  if (sscanf(c, "xthread-%15[a-z]-%15[a-z]-%15s", call, who, size) != 3) return 0;
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    if (strcmp(size, sizes[i].name) != 0) continue;
    xthread_case x = {.p = do_malloc(sizes[i].size), .call = call, .who = who};
    bool third = strcmp(who, "third") == 0;
    pthread_barrier_init(&x.freed, NULL, 2 + third);
    pthread_barrier_init(&x.done, NULL, 2 + third);
    pthread_t t2, t3;
    pthread_create(&t2, NULL, xthread_second, &x);
    if (third) pthread_create(&t3, NULL, xthread_third, &x);
    pthread_barrier_wait(&x.freed);
    if (strcmp(who, "owner") == 0) second_call(&x);
    pthread_barrier_wait(&x.done);
    pthread_join(t2, NULL);
    if (third) pthread_join(t3, NULL);
    return sizes[i].size;
  }
  return 0;
}

/* race-SIZE: RACES times, the main thread mallocs a block and two threads
 * free it at once; each then mallocs a block of the size and keeps it. */
static struct {
  size_t size;
  void *p;                  /* the block of this race */
  pthread_barrier_t go;     /* the racers and the main thread: free it now */
  pthread_barrier_t freed;  /* both freed it (the racers) */
  pthread_barrier_t done;   /* both malloced their block */
} race;
static void *kept[2][RACES];

static void *racer(void *arg) {
  void **mine = arg; /* NULL: hold no arena, keep nothing */
  if (mine) claim_arena();
  for (int i = 0; i < RACES; i++) {
    pthread_barrier_wait(&race.go);
    do_free(race.p);
    pthread_barrier_wait(&race.freed);
    if (mine) {
      mine[i] = do_malloc(race.size);
      memset(mine[i], 0x5a, race.size);
    }
    pthread_barrier_wait(&race.done);
  }
  return NULL;
}

static size_t race_frees(const char *c) {
  char size[16], home[8] = "";
  if (sscanf(c, "race-%15[0-9a-z]-%7s", size, home) < 1) return 0;
  race.size = strcmp(size, "16") == 0 ? 16 : strcmp(size, "1k") == 0 ? 1 << 10 : strcmp(size, "200k") == 0 ? 200 << 10
              : strcmp(size, "3m") == 0 ? 3 << 20 : 0;
  bool keep = strcmp(home, "home") != 0;
  if (race.size == 0 || (!keep && race.size > 4 << 20) || (keep && race.size > 1 << 10)) return 0;
  pthread_barrier_init(&race.go, NULL, 3);
  pthread_barrier_init(&race.freed, NULL, 2);
  pthread_barrier_init(&race.done, NULL, 3);
  pthread_t t[2];
  for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, racer, keep ? kept[k] : NULL);
  for (int i = 0; i < RACES; i++) {
    race.p = do_malloc(race.size);
    expect("free", race.p, "double free");
    pthread_barrier_wait(&race.go);
    pthread_barrier_wait(&race.done);
  }
  for (int k = 0; k < 2; k++) {
    pthread_join(t[k], NULL);
    for (int i = 0; keep && i < RACES; i++) hold(kept[k][i], race.size);
  }
  return race.size;
}

static size_t misuse(const char *c) {
  if (strcmp(c, "interior-small") == 0) {
    char *p = do_malloc(112);
    hold(p, 112);
    expect("free", p + 16, "not the start of a block");
    do_free(p + 16);
    return 112;
  }
  if (strcmp(c, "interior-small-8") == 0) {
    char *p = do_malloc(112);
    hold(p, 112);
    expect("free", p + 8, "not the start of a block");
    do_free(p + 8);
    return 112;
  }
  if (strcmp(c, "interior-large") == 0) {
    size_t n = 200 << 10;
    char *p = do_malloc(n);
    hold(p, n);
    expect("free", p + 4096, "not the start of a block");
    do_free(p + 4096);
    return n;
  }
  static const struct { const char *name; size_t size; } doubles[] = {
      {"double-small", 112}, {"double-medium", 40 << 10}, {"double-large", 200 << 10}, {"double-huge", 3 << 20}};
  for (unsigned i = 0; i < sizeof doubles / sizeof doubles[0]; i++) {
    if (strcmp(c, doubles[i].name) != 0) continue;
    void *p = do_malloc(doubles[i].size);
    do_free(p);
    expect("free", p, "double free");
    do_free(p);
    return doubles[i].size;
  }
  if (strcmp(c, "double-thread") == 0) {
    void *p = do_malloc(112);
    pthread_t t;
    pthread_create(&t, NULL, free_in_thread, p);
    pthread_join(t, NULL);
    expect("free", p, "double free");
    do_free(p);
    return 112;
  }
  if (strcmp(c, "double-other-arena") == 0) { /* freed by its owner, freed again by another thread */
    void *p = do_malloc(112);
    do_free(p);
    pthread_t t;
    expect("free", p, "double free");
    pthread_create(&t, NULL, free_in_thread, p);
    pthread_join(t, NULL);
    return 112;
  }
  if (strcmp(c, "double-remote-batch") == 0) { /* freed twice by another thread: the first waits in its batch */
    int (*set)(const char *, const char *) =
        (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "scr_process_option_set");
    if (set == NULL || set("cache_max", "0") != 0) exit(3); /* the thread keeps no block: its free is remote */
    void *p = do_malloc(112);
    pthread_t t;
    pthread_create(&t, NULL, free_twice_in_thread, p);
    pthread_join(t, NULL);
    return 112;
  }
  if (strcmp(c, "stack") == 0) {
    int local = 1;
    expect("free", &local, "not allocated by scralloc");
    do_free(&local);
    return 112;
  }
  if (strcmp(c, "never-allocated") == 0) {
    /* a class no one else uses here: its page has carved one slot */
    char *p = do_malloc(1400);
    hold(p, 1400);
    char *q = p + 5 * do_usable_size(p);
    expect("free", q, "never allocated");
    do_free(q);
    return 1400;
  }
  if (strcmp(c, "realloc-freed") == 0) {
    void *p = do_malloc(112);
    do_free(p);
    expect("realloc", p, "freed already");
    void *q = do_realloc(p, 200);
    if (q != NULL) {
      fprintf(stderr, "realloc of a freed block returned %p\n", q);
      exit(3);
    }
    return 112;
  }
  if (strcmp(c, "usable-size-freed") == 0) {
    void *p = do_malloc(112);
    do_free(p);
    expect("malloc_usable_size", p, "freed already");
    size_t n = do_usable_size(p);
    if (n != 0) {
      fprintf(stderr, "malloc_usable_size of a freed block: %zu\n", n);
      exit(3);
    }
    return 112;
  }
  if (strcmp(c, "one") == 0) {
    expect("free", (void *)1, "not allocated by scralloc");
    do_free((void *)1);
    return 112;
  }
  size_t n = strncmp(c, "xthread-", 8) == 0 ? xthread(c) : strncmp(c, "race-", 5) == 0 ? race_frees(c) : 0;
  if (n != 0) return n;
  if (strcmp(c, "clean") == 0) return 112; /* no misuse: the environment checks */
  if (strcmp(c, "big") == 0) { /* 200 MB held, then freed: the exit report's peak */
    char *volatile big = malloc(200 << 20);
    if (big == NULL) exit(3);
    free(big);
    return 112;
  }
  fprintf(stderr, "misuse_check: no case %s\n", c);
  exit(2);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: misuse_check CASE\n");
    return 2;
  }
  /* stdout's buffer is the test's own, not a malloc in the middle of a
   * case: the owner takes the blocks other threads freed back before it
   * takes a new page, and the buffer's malloc could land on the page a
   * case's freed block had emptied, a reuse no allocator can tell from
   * the double free the case makes next */
  static char out_buf[4096];
  setvbuf(stdout, out_buf, _IOLBF, sizeof out_buf);
  void *warm = malloc(64); /* the allocator has started */
  free(warm);
  size_t size = misuse(argv[1]);
  if (nothing_handed_out_twice(size)) return 1;
  int (*validate)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "scr_process_validate");
  if (validate == NULL || validate() != 0) {
    fprintf(stderr, "the process validator failed (or scralloc is not preloaded)\n");
    return 1;
  }
  printf("ok\n");
  return 0;
}
