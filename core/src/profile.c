/* Sampled allocation sites: the countdown, the stacks, the live samples
 * (scr_profile_samples; docs/profile.md).
 *
 * Sampling, as tcmalloc and jemalloc do it: every heap and every arena
 * counts the bytes it hands out down from a number drawn from an
 * exponential distribution of mean `rate`; the allocation that takes the
 * count below zero is sampled, and the next count is drawn.  Each byte
 * then has the same chance to be sampled, and a sample of s bytes stands
 * for s / (1 - exp(-s / rate)) live bytes (the estimate is unbiased).
 *
 * A sampled block stays where the allocator put it (the blame needs the
 * page it pins), and its free finds the sample through the page: a page
 * with live sampled blocks has slot_limit 0 (types.h), which sends every
 * free of its blocks to the slow side, which calls _scr_prof_freed.  The
 * hit paths pay the countdown on malloc and nothing on free.
 *
 * Stacks: libgcc's _Unwind_Backtrace (DWARF call-frame information, which
 * every x86-64 object carries for its exceptions), as jemalloc's libgcc
 * backend: programs under LD_PRELOAD are seldom built with frame pointers;
 * then by the frame sizes it found, without it ("stacks" below).  Neither
 * allocates.  Samples are kept in one table, open addressing
 * by address, under one lock; the free side looks an address up without
 * the lock first (most frees that reach it are of the page's other
 * blocks).  Sites (equal stacks) are interned and never freed; their
 * memory, and the tables', comes from mmap, never from a heap. */
#include "internal.h"
#include "heap_fast.h"
#include <sys/mman.h>
#include <unwind.h>

_Atomic size_t _scr_prof_live; /* live samples */

typedef struct prof_site {
  struct prof_site *next; /* same bucket */
  uint64_t hash;
  uint32_t depth;         /* native frames */
  uint32_t lang_len;      /* bytes of lang, 0: none */
  const char *lang;       /* NUL-terminated, after the frames */
  const void *frames[];
} prof_site;

/* A live sample.  addr: 0 empty, 1 removed (a tombstone), else the block. */
typedef struct prof_rec {
  _Atomic uintptr_t addr;
  const scr_heap *heap; /* NULL: the process allocator's */
  size_t size, rate;
  prof_site *site;
} prof_rec;

typedef struct prof_table {
  size_t mask;     /* slots - 1 */
  prof_rec rec[];
} prof_table;

#define PROF_BUCKETS 4096
#define PROF_CHUNK ((size_t)1 << 20)

static struct {
  pthread_mutex_t lock;          /* everything below */
  _Atomic(prof_table *) tab;     /* NULL until the first sample; old tables stay mapped (lock-free readers) */
  size_t used;                   /* slots not empty (live and removed) */
  prof_site *bucket[PROF_BUCKETS];
  char *chunk;                   /* bump storage for sites */
  size_t chunk_left;
  scr_profile_lang_hook *lang;   /* written under the lock, read without it */
  void *lang_arg;
  uint64_t seeds;                /* countdowns seeded so far */
} prof = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __thread int prof_busy; /* this thread is taking a sample: its allocations are not sampled */

static void *prof_map(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

/* ---- the countdown ---- */

static uint64_t prof_mix(uint64_t x) { /* splitmix64's finalizer */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ln(x) for a normal x > 0: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
 * ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| < 0.172, whose series
 * to s^11 is within 1e-10 (libm is not among the library's links). */
static double prof_ln(double x) {
  union {
    double d;
    uint64_t u;
  } b = {x};
  int e = (int)((b.u >> 52) & 0x7ff) - 1023;
  b.u = (b.u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m = b.d;
  if (m > 1.4142135623730951) m *= 0.5, e++;
  double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11)))));
  return 2.0 * (s + s * p) + e * 0.6931471805599453;
}

/* exp(-x) for x >= 0: 2^-k * exp(-r), r = x - k ln 2 in [0, ln 2). */
static double prof_exp_neg(double x) {
  if (x > 700) return 0;
  int k = (int)(x / 0.6931471805599453);
  double r = x - k * 0.6931471805599453, term = 1, sum = 1;
  for (int i = 1; i < 20; i++) sum += (term *= -r / i);
  while (k-- > 0) sum *= 0.5;
  return sum;
}

/* The estimated live bytes a sample of size bytes taken at rate stands for. */
static double prof_weight(size_t size, size_t rate) {
  double s = size ? (double)size : 1.0, q = 1.0 - prof_exp_neg(s / (double)rate);
  return q > 0 ? s / q : s;
}

uint64_t _scr_prof_next(scr_prof_countdown *c, uint64_t now) {
  uint64_t was = c->rate;
  c->rate = now;
  if (now == 0) {
    c->left = SCR_PROF_IDLE;
    return 0;
  }
  if (c->rng == 0) {
    uint64_t n = __atomic_add_fetch(&prof.seeds, 1, __ATOMIC_RELAXED);
    c->rng = prof_mix((uintptr_t)c ^ _scr_os_random_u64() ^ (n * 0x9e3779b97f4a7c15ull)) | 1;
  }
  c->rng ^= c->rng << 13; /* xorshift64 */
  c->rng ^= c->rng >> 7;
  c->rng ^= c->rng << 17;
  double u = (double)((c->rng >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
  double left = -prof_ln(u) * (double)now;
  c->left = left >= 9e18 ? INT64_MAX : (int64_t)left;
  /* An idle count that ran out samples nothing: its allocations were
   * counted while sampling was off. */
  return was;
}

/* ---- stacks ----
 *
 * libgcc's unwinder interprets each frame's call-frame information, some
 * thousand instructions a frame.  Most frames have the same size at the
 * same return address every time (the stack pointer's distance to the
 * frame's CFA there does not change): a walk that knows that size for
 * every return address on the stack needs no interpretation, the frame
 * above starting at CFA and its return address at CFA - 8 (the x86-64
 * ABI).  So every walk of the unwinder records each return address's
 * frame size, and a later walk whose addresses all have a size recorded,
 * seen twice alike, follows them; one that meets an address without one
 * (or one that changed: alloca, a realigned stack) asks the unwinder
 * again.  libunwind's unw_backtrace keeps a cache of the same kind.  The
 * walk reads the stack only between the sampler's frame and the highest
 * CFA the unwinder found on this thread. */

typedef struct {
  const void **pcs;
  uintptr_t *cfas;
  unsigned n, max;
} prof_walk;

static _Unwind_Reason_Code prof_frame(struct _Unwind_Context *ctx, void *arg) {
  prof_walk *w = arg;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0 || w->n == w->max) return _URC_END_OF_STACK;
  w->pcs[w->n] = (const void *)ip;
  w->cfas[w->n++] = _Unwind_GetCFA(ctx);
  return _URC_NO_REASON;
}

/* Frame sizes by return address: key 0 empty; val = size << 8 | state
 * (PROF_FS_SEEN once, PROF_FS_SURE twice alike, PROF_FS_NEVER differed,
 * PROF_FS_LAST the unwinder's walks end there).  Written under
 * prof_fs_lock, read without it. */
#define PROF_FS_SLOTS 8192
enum { PROF_FS_SEEN = 1, PROF_FS_SURE = 2, PROF_FS_NEVER = 3, PROF_FS_LAST = 4 };
static struct {
  _Atomic uintptr_t key;
  _Atomic uint64_t val;
} prof_fs[PROF_FS_SLOTS];
static pthread_mutex_t prof_fs_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread uintptr_t prof_stack_top; /* the highest CFA the unwinder found on this thread */

static uint64_t prof_fs_get(uintptr_t ip) {
  for (size_t i = (size_t)prof_mix(ip) % PROF_FS_SLOTS, n = 0; n < 16; i = (i + 1) % PROF_FS_SLOTS, n++) {
    uintptr_t k = atomic_load_explicit(&prof_fs[i].key, memory_order_acquire);
    if (k == ip) return atomic_load_explicit(&prof_fs[i].val, memory_order_relaxed);
    if (k == 0) return 0;
  }
  return 0;
}

/* (under prof_fs_lock) */
static void prof_fs_learn(uintptr_t ip, uint64_t size, unsigned state) {
  for (size_t i = (size_t)prof_mix(ip) % PROF_FS_SLOTS, n = 0; n < 16; i = (i + 1) % PROF_FS_SLOTS, n++) {
    uintptr_t k = atomic_load_explicit(&prof_fs[i].key, memory_order_relaxed);
    if (k != 0 && k != ip) continue;
    uint64_t v = atomic_load_explicit(&prof_fs[i].val, memory_order_relaxed), now;
    if (k == 0) now = size << 8 | state;
    else if ((v & 0xff) == PROF_FS_NEVER) return;
    else if (state == PROF_FS_LAST) now = (v & 0xff) == PROF_FS_LAST ? v : (uint64_t)PROF_FS_NEVER;
    else if ((v & 0xff) == PROF_FS_LAST) now = PROF_FS_NEVER;
    else now = (v >> 8) == size ? size << 8 | PROF_FS_SURE : (uint64_t)PROF_FS_NEVER;
    atomic_store_explicit(&prof_fs[i].val, now, memory_order_relaxed);
    if (k == 0) atomic_store_explicit(&prof_fs[i].key, ip, memory_order_release);
    return;
  }
}

#define PROF_SKIP_MAX 12 /* the allocator's own frames above the caller's */
#define PROF_WALK_MAX (SCR_PROFILE_MAX_FRAMES + PROF_SKIP_MAX)

/* The return addresses on the stack from the caller of this function,
 * innermost first, by the recorded frame sizes, else by the unwinder
 * (which records what it finds).  One function, so that both walks start
 * at the same return address. */
static __attribute__((noinline)) unsigned prof_walk_stack(const void **pcs) {
  uintptr_t cfa = (uintptr_t)__builtin_dwarf_cfa(), bound = prof_stack_top;
  uintptr_t ip = (uintptr_t)__builtin_return_address(0);
  unsigned n = 0;
  while (bound != 0) {
    pcs[n++] = (const void *)ip;
    uint64_t v = prof_fs_get(ip);
    if ((v & 0xff) == PROF_FS_LAST || n == PROF_WALK_MAX) return n;
    if ((v & 0xff) != PROF_FS_SURE) break;
    uintptr_t next = cfa + (v >> 8);
    if (next <= cfa || next > bound) break;
    cfa = next;
    ip = *(const uintptr_t *)(cfa - 8);
  }
  uintptr_t cfas[PROF_WALK_MAX + 1];
  const void *all[PROF_WALK_MAX + 1];
  prof_walk w = {all, cfas, 0, PROF_WALK_MAX + 1};
  _Unwind_Backtrace(prof_frame, &w); /* frame 0: this function */
  if (w.n < 2) return 0;
  n = w.n - 1;
  memcpy(pcs, all + 1, n * sizeof *pcs);
  pthread_mutex_lock(&prof_fs_lock);
  /* (callback i reports return address all[i] with the CFA of the frame
   * that returns there: the stack pointer at all[i] in its function,
   * whose own CFA is callback i + 1's) */
  for (unsigned i = 1; i < w.n; i++) {
    if (i + 1 == w.n && w.n <= PROF_WALK_MAX) prof_fs_learn((uintptr_t)all[i], 0, PROF_FS_LAST);
    else if (i + 1 < w.n && cfas[i + 1] > cfas[i]) prof_fs_learn((uintptr_t)all[i], cfas[i + 1] - cfas[i], PROF_FS_SEEN);
  }
  pthread_mutex_unlock(&prof_fs_lock);
  if (cfas[w.n - 1] > prof_stack_top) prof_stack_top = cfas[w.n - 1];
  return n;
}

/* The caller's stack into pcs (innermost first), from the frame that
 * `caller` (the entry point's return address) returns into. */
static unsigned prof_stack(const void **pcs, const void *caller) {
  const void *all[PROF_WALK_MAX];
  unsigned n = prof_walk_stack(all);
  unsigned from = 0;
  for (unsigned i = 0; i < n && i < PROF_SKIP_MAX; i++)
    if (all[i] == caller) {
      from = i;
      break;
    }
  if (n <= from) { /* no unwind information: the caller alone */
    pcs[0] = caller;
    return caller != NULL;
  }
  n = n - from < SCR_PROFILE_MAX_FRAMES ? n - from : SCR_PROFILE_MAX_FRAMES;
  memcpy(pcs, all + from, n * sizeof *pcs);
  return n;
}

/* ---- sites and the table (under prof.lock) ---- */

static void *prof_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > prof.chunk_left) {
    size_t want = n > PROF_CHUNK ? n : PROF_CHUNK;
    char *c = prof_map(want);
    if (c == NULL) return NULL;
    prof.chunk = c;
    prof.chunk_left = want;
  }
  void *p = prof.chunk;
  prof.chunk += n;
  prof.chunk_left -= n;
  return p;
}

static prof_site *prof_intern(const void *const *pcs, unsigned depth, const char *lang, size_t lang_len) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned i = 0; i < depth; i++) h = prof_mix(h ^ (uintptr_t)pcs[i]);
  for (size_t i = 0; i < lang_len; i++) h = (h ^ (unsigned char)lang[i]) * 0x100000001b3ull;
  h = prof_mix(h ^ depth ^ (lang_len << 32));
  prof_site **b = &prof.bucket[h % PROF_BUCKETS];
  for (prof_site *s = *b; s; s = s->next)
    if (s->hash == h && s->depth == depth && s->lang_len == lang_len &&
        memcmp(s->frames, pcs, depth * sizeof *pcs) == 0 && (lang_len == 0 || memcmp(s->lang, lang, lang_len) == 0))
      return s;
  prof_site *s = prof_alloc(sizeof *s + depth * sizeof *pcs + lang_len + 1);
  if (s == NULL) return NULL;
  s->hash = h;
  s->depth = depth;
  memcpy(s->frames, pcs, depth * sizeof *pcs);
  s->lang_len = (uint32_t)lang_len;
  char *text = (char *)&s->frames[depth];
  if (lang_len) memcpy(text, lang, lang_len);
  text[lang_len] = '\0';
  s->lang = lang_len ? text : NULL;
  s->next = *b;
  *b = s;
  return s;
}

static size_t prof_slot(uintptr_t a, size_t mask) { return (size_t)prof_mix(a) & mask; }

static prof_rec *prof_find(prof_table *t, uintptr_t a) {
  if (t == NULL) return NULL;
  for (size_t i = prof_slot(a, t->mask);; i = (i + 1) & t->mask) {
    uintptr_t k = atomic_load_explicit(&t->rec[i].addr, memory_order_relaxed);
    if (k == a) return &t->rec[i];
    if (k == 0) return NULL;
  }
}

/* A slot for a new sample, the table grown (its live samples moved to a
 * new one) when more than half its slots are taken. */
static prof_rec *prof_insert_slot(uintptr_t a) {
  prof_table *t = atomic_load_explicit(&prof.tab, memory_order_relaxed);
  if (t == NULL || (prof.used + 1) * 2 > t->mask + 1) {
    size_t live = atomic_load_explicit(&_scr_prof_live, memory_order_relaxed);
    size_t slots = 1024;
    while (slots < (live + 1) * 4) slots *= 2;
    prof_table *n = prof_map(sizeof *n + slots * sizeof n->rec[0]);
    if (n == NULL) return NULL;
    n->mask = slots - 1;
    for (size_t i = 0; t && i <= t->mask; i++) {
      uintptr_t k = atomic_load_explicit(&t->rec[i].addr, memory_order_relaxed);
      if (k <= 1) continue;
      size_t j = prof_slot(k, n->mask);
      while (atomic_load_explicit(&n->rec[j].addr, memory_order_relaxed) != 0) j = (j + 1) & n->mask;
      n->rec[j].heap = t->rec[i].heap;
      n->rec[j].size = t->rec[i].size;
      n->rec[j].rate = t->rec[i].rate;
      n->rec[j].site = t->rec[i].site;
      atomic_store_explicit(&n->rec[j].addr, k, memory_order_relaxed);
    }
    prof.used = live;
    atomic_store_explicit(&prof.tab, n, memory_order_release);
    t = n;
  }
  size_t i = prof_slot(a, t->mask);
  for (;; i = (i + 1) & t->mask) {
    uintptr_t k = atomic_load_explicit(&t->rec[i].addr, memory_order_relaxed);
    if (k <= 1 || k == a) break;
  }
  if (atomic_load_explicit(&t->rec[i].addr, memory_order_relaxed) == 0) prof.used++;
  return &t->rec[i];
}

/* The page of size class that holds p, or NULL (a large or huge block). */
static scr_page *prof_small_page(const void *p) {
  scr_segment *seg = _scr_segmap_get(p);
  if (seg == NULL || seg->kind != SCR_SEG_NORMAL) return NULL;
  uintptr_t idx = ((uintptr_t)p - (uintptr_t)seg) >> SCR_PAGE_SHIFT;
  unsigned tag = scr_seg_tag(seg, idx);
  return tag < SCR_CLASS_COUNT ? _scr_class_page(seg, idx, tag) : NULL;
}

void _scr_prof_take(const scr_heap *key, void *p, size_t n, uint64_t rate, const void *caller) {
  if (prof_busy) return; /* an allocation of the sampler's own language hook */
  prof_busy = 1;
  const void *pcs[SCR_PROFILE_MAX_FRAMES];
  unsigned depth = prof_stack(pcs, caller);
  char lang[4096];
  size_t lang_len = 0;
  scr_profile_lang_hook *hook = __atomic_load_n(&prof.lang, __ATOMIC_ACQUIRE);
  if (hook) {
    lang_len = hook(lang, sizeof lang, __atomic_load_n(&prof.lang_arg, __ATOMIC_RELAXED));
    if (lang_len > sizeof lang) lang_len = sizeof lang;
  }
  pthread_mutex_lock(&prof.lock);
  prof_site *site = prof_intern(pcs, depth, lang, lang_len);
  prof_rec *r = site ? prof_insert_slot((uintptr_t)p) : NULL;
  if (r) {
    r->heap = key;
    r->size = n;
    r->rate = rate;
    r->site = site;
    if (atomic_exchange_explicit(&r->addr, (uintptr_t)p, memory_order_release) != (uintptr_t)p)
      atomic_fetch_add_explicit(&_scr_prof_live, 1, memory_order_relaxed);
    scr_page *pg = prof_small_page(p);
    if (pg) {
      __atomic_add_fetch(&pg->sampled, 1, __ATOMIC_RELAXED);
      _scr_page_publish_limit(pg);
    }
  }
  pthread_mutex_unlock(&prof.lock);
  prof_busy = 0;
}

/* The page's last sampled block is going: its slot limit back.  (Under
 * prof.lock, as a page is marked: no sample of the page can be taken
 * meanwhile; the holder's carve may publish at the same time, and either
 * store is at most the true limit: heap_fast.h.) */
static void prof_unmark(scr_page *pg) {
  if (__atomic_sub_fetch(&pg->sampled, 1, __ATOMIC_RELAXED) == 0) _scr_page_publish_limit(pg);
}

void _scr_prof_freed(const void *p) {
  scr_page *pg = prof_small_page(p);
  if (pg && __atomic_load_n(&pg->sampled, __ATOMIC_RELAXED) == 0) return;
  if (prof_find(atomic_load_explicit(&prof.tab, memory_order_acquire), (uintptr_t)p) == NULL) return;
  pthread_mutex_lock(&prof.lock);
  prof_rec *r = prof_find(atomic_load_explicit(&prof.tab, memory_order_relaxed), (uintptr_t)p);
  if (r) {
    atomic_store_explicit(&r->addr, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&_scr_prof_live, 1, memory_order_relaxed);
    if (pg) prof_unmark(pg);
  }
  pthread_mutex_unlock(&prof.lock);
}

void _scr_prof_drop_heap(const scr_heap *h) {
  if (atomic_load_explicit(&_scr_prof_live, memory_order_relaxed) == 0) return;
  pthread_mutex_lock(&prof.lock);
  prof_table *t = atomic_load_explicit(&prof.tab, memory_order_relaxed);
  for (size_t i = 0; t && i <= t->mask; i++)
    if (atomic_load_explicit(&t->rec[i].addr, memory_order_relaxed) > 1 && t->rec[i].heap == h) {
      atomic_store_explicit(&t->rec[i].addr, 1, memory_order_relaxed);
      atomic_fetch_sub_explicit(&_scr_prof_live, 1, memory_order_relaxed);
    }
  pthread_mutex_unlock(&prof.lock);
}

/* Across fork (process/fork.c): the child finds the tables whole. */
void _scr_prof_lock(void) {
  pthread_mutex_lock(&prof.lock);
  pthread_mutex_lock(&prof_fs_lock);
}
void _scr_prof_unlock(void) {
  pthread_mutex_unlock(&prof_fs_lock);
  pthread_mutex_unlock(&prof.lock);
}

void scr_profile_set_lang_hook(scr_profile_lang_hook *fn, void *arg) {
  pthread_mutex_lock(&prof.lock);
  __atomic_store_n(&prof.lang_arg, arg, __ATOMIC_RELAXED);
  __atomic_store_n(&prof.lang, fn, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&prof.lock);
}

/* ---- the snapshot and the blame ---- */

/* The free bytes of page pg's carved slots: what its live blocks keep
 * from going back.  The page
 * may be another thread's, whose holder writes `used` as it goes: the
 * figure is a report's, read without stopping that thread (hence no
 * ThreadSanitizer here: the race is the design). */
#if defined(__SANITIZE_THREAD__)
#define PROF_RACY __attribute__((no_sanitize("thread")))
#else
#define PROF_RACY
#endif
PROF_RACY static double prof_page_free(const scr_page *pg) {
  uint32_t cap = __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED), used = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
  if (used == 0 || used >= cap) return 0;
  return (double)(cap - used) * pg->block_size;
}

/* The free bytes of every partly used page of h (its segment list under
 * its lock, which maps and unmaps them; its pages as they are). */
PROF_RACY static double prof_heap_free(scr_heap *h) {
  double sum = 0;
  pthread_mutex_lock(&h->lock);
  for (scr_segment *seg = h->segments; seg; seg = seg->next) {
    if (seg->kind != SCR_SEG_NORMAL) continue;
    for (unsigned i = 1; i < SCR_PAGES_PER_SEGMENT; i++)
      if (seg->pages[i].kind == SCR_PAGE_SMALL) sum += prof_page_free(&seg->pages[i]);
  }
  pthread_mutex_unlock(&h->lock);
  return sum;
}

typedef struct {
  scr_profile_sample s;
  const scr_page *page;  /* its page of size class, or NULL */
  scr_heap *home;        /* the heap that holds it */
} prof_snap;

/* Shell sort of the samples by page (no allocation: the lock is held). */
static void prof_sort_by_page(prof_snap *v, size_t n) {
  static const size_t gaps[] = {1750, 701, 301, 132, 57, 23, 10, 4, 1};
  for (unsigned g = 0; g < sizeof gaps / sizeof gaps[0]; g++)
    for (size_t i = gaps[g]; i < n; i++) {
      prof_snap t = v[i];
      size_t j = i;
      for (; j >= gaps[g] && (uintptr_t)v[j - gaps[g]].page > (uintptr_t)t.page; j -= gaps[g]) v[j] = v[j - gaps[g]];
      v[j] = t;
    }
}

/* pinned: each page's free bytes shared among its samples by their
 * estimated bytes; then, per heap, scaled so that they add up to the free
 * bytes of all the heap's partly used pages (the pages without a sample
 * are shared as the sampled ones are). */
static void prof_blame(prof_snap *v, size_t n) {
  prof_sort_by_page(v, n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    double w = 0;
    for (; j < n && v[j].page == v[i].page; j++) w += v[j].s.bytes;
    double f = v[i].page ? prof_page_free(v[i].page) : 0;
    for (size_t k = i; k < j; k++) v[k].s.pinned = w > 0 ? f * v[k].s.bytes / w : 0;
    i = j;
  }
  for (size_t i = 0; i < n; i++) {
    scr_heap *h = v[i].home;
    if (h == NULL) continue;
    double raw = 0;
    for (size_t k = i; k < n; k++)
      if (v[k].home == h) raw += v[k].s.pinned;
    double scale = raw > 0 ? prof_heap_free(h) / raw : 0;
    for (size_t k = i; k < n; k++)
      if (v[k].home == h) {
        v[k].s.pinned *= scale;
        v[k].home = NULL; /* done */
      }
  }
}

size_t scr_profile_samples(const scr_heap *h, scr_profile_visit *fn, void *arg) {
  if (fn == NULL) return 0;
  int busy = prof_busy;
  prof_busy = 1; /* (nothing here allocates; a visit may, after the lock) */
  pthread_mutex_lock(&prof.lock);
  prof_table *t = atomic_load_explicit(&prof.tab, memory_order_relaxed);
  size_t n = 0;
  for (size_t i = 0; t && i <= t->mask; i++)
    if (atomic_load_explicit(&t->rec[i].addr, memory_order_relaxed) > 1 && (h == NULL || t->rec[i].heap == h)) n++;
  size_t bytes = n * sizeof(prof_snap);
  prof_snap *v = n ? prof_map(bytes) : NULL;
  if (v == NULL) n = 0;
  size_t k = 0;
  for (size_t i = 0; k < n && i <= t->mask; i++) {
    const prof_rec *r = &t->rec[i];
    uintptr_t a = atomic_load_explicit(&r->addr, memory_order_relaxed);
    if (a <= 1 || (h != NULL && r->heap != h)) continue;
    prof_snap *x = &v[k++];
    x->s.block = (const void *)a;
    x->s.size = r->size;
    x->s.rate = r->rate;
    x->s.bytes = prof_weight(r->size, r->rate);
    x->s.blocks = x->s.bytes / (double)(r->size ? r->size : 1);
    x->s.pinned = 0;
    x->s.heap = r->heap;
    x->s.site = r->site->hash;
    x->s.depth = r->site->depth;
    x->s.frames = r->site->frames;
    x->s.lang = r->site->lang;
    x->page = prof_small_page((const void *)a);
    scr_segment *seg = _scr_segmap_get((const void *)a);
    x->home = seg ? seg->heap : NULL;
  }
  if (n) prof_blame(v, n);
  pthread_mutex_unlock(&prof.lock);
  prof_busy = busy;
  size_t seen = 0;
  while (seen < n && fn(&v[seen].s, arg) == 0) seen++;
  if (v) munmap(v, bytes);
  return seen < n ? seen + 1 : seen;
}
