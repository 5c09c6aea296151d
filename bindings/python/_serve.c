/* Python's own allocations on a scralloc heap: Allocator.serve_python().
 *
 * PyMem_SetAllocator replaces the allocator of a domain (raw, mem, obj) for
 * the whole process.  For each domain ever served, one *router* is
 * installed over the allocator that was there before (its "base"):
 *
 *   malloc/calloc   -> the heap of the innermost open serve_python() block
 *                      that serves the domain (the router's target), else
 *                      the base;
 *   free/realloc p  -> the heap that made p, found in O(1) by scr_heap_of()
 *                      among the *routed* records, else the base.
 *
 * So objects made before a block are freed by the allocator that made them,
 * and objects made inside that outlive it keep being freed into the heap
 * after it ends: a record stays routed (and holds a reference to its
 * Allocator, so it can be neither closed nor deallocated) while any block
 * Python made on it is live.  Unused records are pruned, and the routers
 * taken out when nothing is routed, at safe points: the end of a block,
 * close(), and the module's peak and stats calls; never inside a hook.
 *
 * realloc across allocators: a block stays in place when its heap is the
 * target; a block of a heap that is no longer the target moves to the
 * target (or to the base), copying min(old usable size, new size) bytes,
 * which is exact because the heap knows the old size; a block of the base
 * is resized by the base (its size is known only there).
 *
 * Threads and locks.  mem and obj are called with the GIL held: the GIL
 * guards routers, records and heaps.  raw is called without it, so raw
 * hooks hold raw_mutex (which every change of the routers and the routed
 * list also takes, with the GIL), and a heap that serves raw is locked:
 * record->locked makes every hook and every method of its Allocator take
 * record->lock around the heap call.  Lock order: raw_mutex, then a
 * record's lock; no Python call is made while either is held.  Free-
 * threaded builds (no GIL) are refused.
 *
 * Invariants (under the GIL, raw_mutex held for changes):
 *   r->routed  <=>  r is in the routed list  <=>  r->owner holds a reference
 *   r->serving > 0 or r->live > 0  =>  r->routed
 *   routers[d].target != NULL  =>  routers[d].target->serving > 0
 *   r->used == the heap's heap_used (every allocation goes through a hook
 *              or a wrapper), r->peak >= r->used
 *   r->mine == the live blocks the Allocator's methods made; every other
 *              live block of the heap is Python's (made by a hook)
 *   r->kept  =>  the Allocator is closed, r->live > 0 or r->heap == NULL:
 *              the heap is destroyed by the free of Python's last block
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_serve.h"

enum { D_RAW, D_MEM, D_OBJ, D_COUNT };
static const char *const domain_names[D_COUNT] = {"raw", "mem", "obj"};
static const PyMemAllocatorDomain domain_ids[D_COUNT] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM,
                                                          PYMEM_DOMAIN_OBJ};

typedef struct {
  uint64_t calls;               /* malloc, calloc, realloc and free calls that reached the heap */
  int64_t blocks;               /* live blocks (made minus freed through this domain) */
  int64_t bytes;                /* their usable bytes */
} domain_figures;

typedef struct peak_snap peak_snap;

/* A set of block addresses: open addressing, linear probing, 0 marks an
 * empty slot (no block is at 0); cap is 0 or a power of two, and
 * count < cap / 2 after every scr_set_reserve. */
typedef struct {
  uintptr_t *slot;              /* cap slots (libc memory: no Python domain reaches it) */
  size_t cap;
  size_t count;
} addr_set;

/* A copy of a heap's live samples (scr_profile_samples), taken inside an
 * allocation hook: libc memory only, no Python object. */
struct peak_snap {
  size_t n, cap;
  scr_profile_sample *s;        /* frames and lang: copies, freed with it */
  unsigned char *kind;          /* 1: the Allocator's methods made it; 2: Python */
  uint64_t used;                /* heap_used when taken */
};

struct scr_py_record {
  scr_heap *heap;               /* NULL once destroyed */
  PyObject *owner;              /* the Allocator, strong while routed */
  pthread_mutex_t lock;         /* taken around heap calls when locked */
  int locked;                   /* the heap served raw once: always lock */
  int routed;                   /* in the routed list */
  int serving;                  /* open serve_python() blocks on this heap */
  int64_t live;                 /* blocks Python made here and has not freed */
  uint64_t used;                /* mirror of heap_used */
  uint64_t peak;                /* highest used since creation or reset_peak() */
  domain_figures dom[D_COUNT];
  addr_set mine;                /* blocks the Allocator's methods made, live */
  int kept;                     /* closed while Python's blocks lived: the heap waits for them */
  scr_py_record *next;          /* routed list */
  /* watch_peak: the live samples each time used reaches watch_next */
  uint64_t watch_from;          /* 0: not watching */
  uint64_t watch_next;          /* used at which the next snapshot is taken; 0: none */
  peak_snap *snap;              /* the latest snapshot (libc memory), or NULL */
};

typedef struct {
  PyMemAllocatorEx base;        /* the allocator installed before the router */
  PyMemAllocatorEx self;        /* the router's functions (ctx: this) */
  int installed;
  int dom;
  scr_py_record *target;        /* where new blocks go; NULL: the base */
} router;

static router routers[D_COUNT];
static scr_py_record *routed_list;
static pthread_mutex_t raw_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Process-wide sum of every record's used, and its peak (memory_usage()).
 * Under the GIL while no heap serves raw; relaxed atomics once one has
 * (raw hooks update them without the GIL). */
static uint64_t total_used, total_peak;
static int any_locked;          /* a heap served raw once */

/* ---- accounting ---------------------------------------------------- */

static inline void
rec_lock(scr_py_record *r)
{
  if (r->locked)
    pthread_mutex_lock(&r->lock);
}

static inline void
rec_unlock(scr_py_record *r)
{
  if (r->locked)
    pthread_mutex_unlock(&r->lock);
}

/* The frames hook runs with the GIL and never nests (the sampler takes
 * no sample inside it): while it walks, Python's new mem and obj blocks
 * (frame objects) go to the bases, so they neither take a record's lock
 * that this thread may hold (a heap that serves raw) nor land on the heap
 * being sampled.  Those targets change only under the GIL, which the hook
 * holds; raw's stays (the walk makes no raw block). */
static scr_py_record *hook_saved[D_COUNT];

void
_scr_py_hook_begin(void)
{
  hook_saved[D_MEM] = routers[D_MEM].target;
  hook_saved[D_OBJ] = routers[D_OBJ].target;
  routers[D_MEM].target = NULL;
  routers[D_OBJ].target = NULL;
}

void
_scr_py_hook_end(void)
{
  routers[D_MEM].target = hook_saved[D_MEM];
  routers[D_OBJ].target = hook_saved[D_OBJ];
}

static void peak_snapshot(scr_py_record *r);

static inline void
used_add(scr_py_record *r, size_t n)
{
  uint64_t t;
  r->used += n;
  if (r->used > r->peak) {
    r->peak = r->used;
    if (__builtin_expect(r->watch_next != 0 && r->used >= r->watch_next, 0))
      peak_snapshot(r);
  }
  if (any_locked) {
    t = __atomic_add_fetch(&total_used, (uint64_t)n, __ATOMIC_RELAXED);
    if (t > __atomic_load_n(&total_peak, __ATOMIC_RELAXED))
      __atomic_store_n(&total_peak, t, __ATOMIC_RELAXED);
  } else {
    t = total_used += n;
    if (t > total_peak)
      total_peak = t;
  }
}

static inline void
used_sub(scr_py_record *r, size_t n)
{
  r->used -= n;
  if (any_locked)
    __atomic_sub_fetch(&total_used, (uint64_t)n, __ATOMIC_RELAXED);
  else
    total_used -= n;
}

/* The block size of the class of n for n <= BUCKETED_MAX, by 16-byte
 * bucket (every class up to there is a multiple of 16, so a bucket has one
 * class; bucket_init checks it and leaves the table empty otherwise). */
#define BUCKETED_MAX 1024
static uint32_t bucket_usable[BUCKETED_MAX / 16 + 1];

static void
bucket_init(void)
{
  size_t b;
  for (b = 0; b <= BUCKETED_MAX / 16; b++) {
    size_t lo = b == 0 ? 0 : 16 * b - 15, hi = 16 * b;
    size_t ulo = scr_class_size((unsigned)scr_size_class(lo));
    if (ulo != scr_class_size((unsigned)scr_size_class(hi))) {
      memset(bucket_usable, 0, sizeof bucket_usable);
      return;
    }
    bucket_usable[b] = (uint32_t)ulo;
  }
}

/* The usable size malloc(n) gives: the class's block size for a small
 * request (no lookup), else the heap's answer. */
static inline size_t
usable_of(scr_heap *h, size_t n, void *p)
{
  if (n <= BUCKETED_MAX && bucket_usable[(n + 15) >> 4] != 0)
    return bucket_usable[(n + 15) >> 4];
  if (n <= SCR_SMALL_MAX)
    return scr_class_size((unsigned)scr_size_class(n));
  return scr_heap_usable_size(h, p);
}

static inline void
note_alloc(scr_py_record *r, int d, size_t usable)
{
  r->live++;
  r->dom[d].calls++;
  r->dom[d].blocks++;
  r->dom[d].bytes += (int64_t)usable;
  used_add(r, usable);
}

static inline void
note_free(scr_py_record *r, int d, size_t usable)
{
  r->live--;
  r->dom[d].calls++;
  r->dom[d].blocks--;
  r->dom[d].bytes -= (int64_t)usable;
  used_sub(r, usable);
}

/* The routed record whose heap made p, or NULL; *usable: p's usable size
 * when the record is not NULL. */
static inline scr_py_record *
owner_of(const void *p, size_t *usable)
{
  scr_heap *h = scr_heap_of(p, usable);
  scr_py_record *r;
  if (h == NULL)
    return NULL;
  for (r = routed_list; r != NULL; r = r->next)
    if (r->heap == h)
      return r;
  return NULL;
}

/* ---- the Allocator's own blocks ------------------------------------ */

static inline size_t
set_home(const addr_set *s, uintptr_t p)
{
  return (size_t)(((uint64_t)(p >> 4) * 0x9E3779B97F4A7C15ull) >> 20) & (s->cap - 1);
}

/* Room for one more address: 0, or -1 when out of memory. */
static int
set_reserve(addr_set *s)
{
  uintptr_t *old = s->slot;
  size_t i, oldcap = s->cap;
  if (2 * (s->count + 1) < s->cap)
    return 0;
  s->slot = calloc(oldcap ? 2 * oldcap : 64, sizeof *s->slot);
  if (s->slot == NULL) {
    s->slot = old;
    return -1;
  }
  s->cap = oldcap ? 2 * oldcap : 64;
  for (i = 0; i < oldcap; i++)
    if (old[i] != 0) {
      size_t j = set_home(s, old[i]);
      while (s->slot[j] != 0)
        j = (j + 1) & (s->cap - 1);
      s->slot[j] = old[i];
    }
  free(old);
  return 0;
}

/* The slot of p, or of the empty slot where p would go. */
static inline size_t
set_find(const addr_set *s, uintptr_t p)
{
  size_t i = set_home(s, p);
  while (s->slot[i] != 0 && s->slot[i] != p)
    i = (i + 1) & (s->cap - 1);
  return i;
}

static inline int
set_has(const addr_set *s, uintptr_t p)
{
  return s->cap != 0 && s->slot[set_find(s, p)] == p;
}

/* After set_reserve. */
static inline void
set_add(addr_set *s, uintptr_t p)
{
  size_t i = set_find(s, p);
  if (s->slot[i] == 0) {
    s->slot[i] = p;
    s->count++;
  }
}

/* Backward-shift deletion: every address stays reachable from its home
 * slot without tombstones. */
static void
set_del(addr_set *s, uintptr_t p)
{
  size_t i, j, home;
  if (s->cap == 0 || p == 0)
    return;                     /* (0 would match an empty slot) */
  i = set_find(s, p);
  if (s->slot[i] != p)
    return;
  s->count--;
  for (j = (i + 1) & (s->cap - 1); s->slot[j] != 0; j = (j + 1) & (s->cap - 1)) {
    home = set_home(s, s->slot[j]);
    /* the entry at j may move to i when its home is not within (i, j] */
    if (((j - home) & (s->cap - 1)) >= ((j - i) & (s->cap - 1))) {
      s->slot[i] = s->slot[j];
      i = j;
    }
  }
  s->slot[i] = 0;
}

/* ---- the hooks ----------------------------------------------------- */

static void *
heap_alloc(scr_py_record *t, int d, size_t n, int zero)
{
  void *p;
  rec_lock(t);
  p = zero ? scr_heap_calloc(t->heap, n, 1) : scr_heap_malloc(t->heap, n);
  if (p != NULL)
    note_alloc(t, d, usable_of(t->heap, n, p));
  rec_unlock(t);
  return p;
}

/* Give r's heap back to the OS (record lock held when locked). */
static void
heap_destroy(scr_py_record *r)
{
  scr_heap_destroy(r->heap);
  r->heap = NULL;
  if (any_locked)
    __atomic_sub_fetch(&total_used, r->used, __ATOMIC_RELAXED);
  else
    total_used -= r->used;
  r->used = 0;
  free(r->mine.slot);
  memset(&r->mine, 0, sizeof r->mine);
}

/* Free p, a block of r whose usable size is u. */
static void
heap_free(scr_py_record *r, int d, void *p, size_t u)
{
  rec_lock(r);
#if SCR_DEBUG
  {
    int err = scr_heap_check(r->heap, p);
    if (err != SCR_OK) {
      char msg[160];
      snprintf(msg, sizeof msg, "scralloc serve_python: free of %p on a scralloc heap: %s", p,
               scr_strerror(err));
      Py_FatalError(msg);
    }
  }
#endif
  scr_heap_free(r->heap, p);
  note_free(r, d, u);
  if (r->kept && r->live == 0)
    heap_destroy(r);            /* the closed Allocator's last Python block */
  rec_unlock(r);
}

static void *
do_malloc(router *rt, size_t n)
{
  scr_py_record *t = rt->target;
  if (t == NULL)
    return rt->base.malloc(rt->base.ctx, n);
  return heap_alloc(t, rt->dom, n, 0);
}

static void *
do_calloc(router *rt, size_t nelem, size_t elsize)
{
  scr_py_record *t = rt->target;
  size_t n;
  if (t == NULL)
    return rt->base.calloc(rt->base.ctx, nelem, elsize);
  if (__builtin_mul_overflow(nelem, elsize, &n))
    return NULL;
  return heap_alloc(t, rt->dom, n, 1);
}

static void
do_free(router *rt, void *p)
{
  scr_py_record *r;
  size_t u;
  if (p == NULL)
    return;
  r = owner_of(p, &u);
  if (r == NULL)
    rt->base.free(rt->base.ctx, p);
  else
    heap_free(r, rt->dom, p, u);
}

static void *
do_realloc(router *rt, void *p, size_t n)
{
  scr_py_record *r, *t;
  size_t old;
  void *q;

  if (p == NULL)
    return do_malloc(rt, n);
  r = owner_of(p, &old);
  if (r == NULL)                /* the base's block: only the base knows its size */
    return rt->base.realloc(rt->base.ctx, p, n);
  if (n == 0)
    n = 1;                      /* PyMem_Realloc(p, 0) resizes, never frees */
  t = rt->target;
  if (r == t) {
    rec_lock(r);
    q = scr_heap_realloc(r->heap, p, n);
    if (q != NULL) {
      r->dom[rt->dom].calls++;
      r->dom[rt->dom].bytes -= (int64_t)old;
      used_sub(r, old);
      old = scr_heap_usable_size(r->heap, q);
      r->dom[rt->dom].bytes += (int64_t)old;
      used_add(r, old);
    }
    rec_unlock(r);
    return q;
  }
  /* The block's heap is no longer where new blocks go: move it. */
  q = do_malloc(rt, n);
  if (q == NULL)
    return NULL;
  memcpy(q, p, old < n ? old : n);
  heap_free(r, rt->dom, p, old);
  return q;
}

/* mem and obj: the GIL is held. */
static void *
gil_malloc(void *ctx, size_t n)
{
  return do_malloc(ctx, n);
}

static void *
gil_calloc(void *ctx, size_t nelem, size_t elsize)
{
  return do_calloc(ctx, nelem, elsize);
}

static void *
gil_realloc(void *ctx, void *p, size_t n)
{
  return do_realloc(ctx, p, n);
}

static void
gil_free(void *ctx, void *p)
{
  do_free(ctx, p);
}

/* raw: no GIL; raw_mutex guards the router and the routed list. */
static void *
raw_malloc(void *ctx, size_t n)
{
  void *p;
  pthread_mutex_lock(&raw_mutex);
  p = do_malloc(ctx, n);
  pthread_mutex_unlock(&raw_mutex);
  return p;
}

static void *
raw_calloc(void *ctx, size_t nelem, size_t elsize)
{
  void *p;
  pthread_mutex_lock(&raw_mutex);
  p = do_calloc(ctx, nelem, elsize);
  pthread_mutex_unlock(&raw_mutex);
  return p;
}

static void *
raw_realloc(void *ctx, void *p, size_t n)
{
  void *q;
  pthread_mutex_lock(&raw_mutex);
  q = do_realloc(ctx, p, n);
  pthread_mutex_unlock(&raw_mutex);
  return q;
}

static void
raw_free(void *ctx, void *p)
{
  pthread_mutex_lock(&raw_mutex);
  do_free(ctx, p);
  pthread_mutex_unlock(&raw_mutex);
}

/* ---- routers and the routed list (GIL and raw_mutex held) ---------- */

static void
router_install(int d)
{
  router *rt = &routers[d];
  if (rt->installed)
    return;
  rt->dom = d;
  PyMem_GetAllocator(domain_ids[d], &rt->base);
  rt->self.ctx = rt;
  if (d == D_RAW) {
    rt->self.malloc = raw_malloc;
    rt->self.calloc = raw_calloc;
    rt->self.realloc = raw_realloc;
    rt->self.free = raw_free;
  } else {
    rt->self.malloc = gil_malloc;
    rt->self.calloc = gil_calloc;
    rt->self.realloc = gil_realloc;
    rt->self.free = gil_free;
  }
  PyMem_SetAllocator(domain_ids[d], &rt->self);
  rt->installed = 1;
}

/* Take the routers out once nothing is routed, where they are still the
 * installed allocator (a hook installed over one, tracemalloc's say, keeps
 * it: it then forwards everything to its base). */
static void
routers_uninstall_if_idle(void)
{
  int d;
  if (routed_list != NULL)
    return;
  for (d = 0; d < D_COUNT; d++) {
    router *rt = &routers[d];
    PyMemAllocatorEx cur;
    if (!rt->installed || rt->target != NULL)
      continue;
    PyMem_GetAllocator(domain_ids[d], &cur);
    if (cur.ctx == rt->self.ctx && cur.malloc == rt->self.malloc && cur.free == rt->self.free) {
      PyMem_SetAllocator(domain_ids[d], &rt->base);
      rt->installed = 0;
    }
  }
}

static void
route(scr_py_record *r, PyObject *owner)
{
  if (r->routed)
    return;
  r->owner = Py_NewRef(owner);
  r->next = routed_list;
  routed_list = r;
  r->routed = 1;
}

/* Unroute r; returns its owner reference for the caller to drop once no
 * lock is held. */
static PyObject *
unroute(scr_py_record *r)
{
  scr_py_record **pp;
  PyObject *owner;
  for (pp = &routed_list; *pp != NULL; pp = &(*pp)->next)
    if (*pp == r) {
      *pp = r->next;
      break;
    }
  r->next = NULL;
  r->routed = 0;
  owner = r->owner;
  r->owner = NULL;
  return owner;
}

/* Unroute every record that no longer serves nor holds Python's blocks,
 * and take idle routers out.  GIL held, raw_mutex not. */
static void
prune(void)
{
  PyObject *drop[16];
  int n, again = 1;
  while (again) {
    scr_py_record *r, *next;
    n = 0;
    again = 0;
    pthread_mutex_lock(&raw_mutex);
    for (r = routed_list; r != NULL; r = next) {
      next = r->next;
      if (r->serving == 0 && r->live == 0) {
        if (n == (int)(sizeof drop / sizeof drop[0])) {
          again = 1;
          break;
        }
        drop[n++] = unroute(r);
      }
    }
    routers_uninstall_if_idle();
    pthread_mutex_unlock(&raw_mutex);
    while (n > 0)
      Py_XDECREF(drop[--n]);
  }
}

/* ---- the profile at the peak (watch_peak) -------------------------- */

static void
snap_free(peak_snap *p)
{
  size_t i;
  if (p == NULL)
    return;
  for (i = 0; i < p->n; i++) {
    free((void *)p->s[i].frames);
    free((void *)p->s[i].lang);
  }
  free(p->s);
  free(p->kind);
  free(p);
}

typedef struct {
  scr_py_record *r;
  peak_snap *p;
  int failed;
} snap_ctx;

static int
snap_visit(const scr_profile_sample *s, void *arg)
{
  snap_ctx *c = arg;
  peak_snap *p = c->p;
  scr_profile_sample *e;
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 64;
    scr_profile_sample *ns = realloc(p->s, cap * sizeof *ns);
    unsigned char *nk;
    if (ns == NULL)
      goto fail;
    p->s = ns;
    nk = realloc(p->kind, cap);
    if (nk == NULL)
      goto fail;
    p->kind = nk;
    p->cap = cap;
  }
  e = &p->s[p->n];
  *e = *s;
  e->frames = NULL;
  e->lang = NULL;
  if (s->depth > 0) {
    void **f = malloc(s->depth * sizeof *f);
    if (f == NULL)
      goto fail;
    memcpy(f, s->frames, s->depth * sizeof *f);
    e->frames = (const void *const *)f;
  }
  if (s->lang != NULL && (e->lang = strdup(s->lang)) == NULL) {
    free((void *)e->frames);
    goto fail;
  }
  p->kind[p->n++] = set_has(&c->r->mine, (uintptr_t)s->block) ? 1 : 2;
  return 0;
fail:
  c->failed = 1;
  return 1;
}

/* Called from used_add (the record's lock held when it is locked) at a
 * new high of watch_next or more: the live samples replace the last
 * snapshot, and the next is taken 1/8 higher, so the one kept is within
 * 1/8 of the peak and a growing heap takes few. */
static void
peak_snapshot(scr_py_record *r)
{
  snap_ctx c = {r, calloc(1, sizeof(peak_snap)), 0};
  r->watch_next = r->used + (r->used >> 3) + 1;
  if (c.p == NULL || r->heap == NULL)
    goto drop;
  c.p->used = r->used;
  scr_profile_samples(r->heap, snap_visit, &c);
  if (c.failed)
    goto drop;                  /* out of memory: keep the older one */
  snap_free(r->snap);
  r->snap = c.p;
  return;
drop:
  snap_free(c.p);
}

void
_scr_py_watch_peak(scr_py_record *r, uint64_t from)
{
  peak_snap *old;
  rec_lock(r);
  old = r->snap;
  r->snap = NULL;
  r->watch_from = from;
  r->watch_next = from ? (from > r->used ? from : r->used + 1) : 0;
  rec_unlock(r);
  snap_free(old);
}

long long
_scr_py_peak_samples(scr_py_record *r, scr_py_snap_visit *fn, void *arg, uint64_t *used)
{
  peak_snap *p;
  size_t i;
  long long n = 0;
  /* Taken out while fn runs: fn makes Python objects, which may come
   * from this heap and take its lock. */
  rec_lock(r);
  p = r->snap;
  r->snap = NULL;
  rec_unlock(r);
  *used = p != NULL ? p->used : 0;
  if (p == NULL)
    return 0;
  for (i = 0; i < p->n; i++, n++)
    if (fn(&p->s[i], p->kind[i], arg) != 0) {
      n = -1;
      break;
    }
  rec_lock(r);
  if (r->snap == NULL && r->watch_from != 0) {
    r->snap = p;                /* no newer one meanwhile */
    p = NULL;
  }
  rec_unlock(r);
  snap_free(p);
  return n;
}

scr_heap *
_scr_py_record_heap(scr_py_record *r)
{
  return r->heap;
}

/* ---- records and the Allocator's wrappers -------------------------- */

scr_py_record *
_scr_py_record_new(void)
{
  scr_py_record *r = calloc(1, sizeof *r);
  if (r == NULL)
    return NULL;
  if (pthread_mutex_init(&r->lock, NULL) != 0) {
    free(r);
    return NULL;
  }
  return r;
}

void
_scr_py_record_open(scr_py_record *r, scr_heap *h)
{
  r->heap = h;
}

void
_scr_py_record_free(scr_py_record *r)
{
  if (r == NULL)
    return;
  assert(!r->routed);
  if (r->heap != NULL && r->kept)
    heap_destroy(r);            /* cannot happen: a kept heap stays routed until destroyed */
  if (r->used != 0)
    __atomic_sub_fetch(&total_used, r->used, __ATOMIC_RELAXED);
  free(r->mine.slot);
  snap_free(r->snap);
  pthread_mutex_destroy(&r->lock);
  free(r);
}

int
_scr_py_close_check(scr_py_record *r)
{
  if (r->serving > 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "cannot close allocator: it is serving Python's allocations "
                    "(close it after its serve_python() block)");
    return -1;
  }
  if (r->live > 0)
    PyGC_Collect();             /* a full collection also empties the free lists */
  return 0;
}

long long
_scr_py_close(scr_py_record *r)
{
  PyObject *owner = NULL;
  long long live;

  assert(r->serving == 0 && r->heap != NULL && !r->kept);
  pthread_mutex_lock(&raw_mutex);
  rec_lock(r);
  live = (long long)r->live;
  if (live > 0) {
    r->kept = 1;                /* heap_free destroys it with the last block */
  } else {
    heap_destroy(r);
    if (r->routed) {
      owner = unroute(r);
      routers_uninstall_if_idle();
    }
  }
  rec_unlock(r);
  pthread_mutex_unlock(&raw_mutex);
  Py_XDECREF(owner);            /* the caller holds another reference */
  return live;
}

void
_scr_py_lock(scr_py_record *r)
{
  rec_lock(r);
}

void
_scr_py_unlock(scr_py_record *r)
{
  rec_unlock(r);
}

/* p, a block just made (or NULL), goes into r->mine (room reserved). */
static void *
tracked_alloc(scr_py_record *r, void *p)
{
  int saved = errno;
  if (p != NULL) {
    set_add(&r->mine, (uintptr_t)p);
    used_add(r, scr_heap_usable_size(r->heap, p));
  }
  rec_unlock(r);
  errno = saved;
  return p;
}

/* Lock r and make room in r->mine; 0, or -1 (unlocked, errno ENOMEM). */
static int
alloc_begin(scr_py_record *r)
{
  rec_lock(r);
  if (set_reserve(&r->mine) == 0)
    return 0;
  rec_unlock(r);
  errno = ENOMEM;
  return -1;
}

void *
_scr_py_malloc(scr_py_record *r, size_t n)
{
  if (alloc_begin(r) < 0)
    return NULL;
  return tracked_alloc(r, scr_heap_malloc(r->heap, n));
}

void *
_scr_py_calloc(scr_py_record *r, size_t count, size_t size)
{
  if (alloc_begin(r) < 0)
    return NULL;
  return tracked_alloc(r, scr_heap_calloc(r->heap, count, size));
}

void *
_scr_py_aligned_alloc(scr_py_record *r, size_t alignment, size_t n)
{
  if (alloc_begin(r) < 0)
    return NULL;
  return tracked_alloc(r, scr_heap_aligned_alloc(r->heap, alignment, n));
}

/* SCR_PY_EPYTHON when p is a live block Python made, else SCR_OK (lock
 * held). */
static int
python_block(scr_py_record *r, const void *p)
{
  if (p == NULL || set_has(&r->mine, (uintptr_t)p))
    return SCR_OK;
  return scr_heap_check(r->heap, p) == SCR_OK ? SCR_PY_EPYTHON : SCR_OK;
}

int
_scr_py_refuse_python(scr_py_record *r, const void *p)
{
  int err;
  rec_lock(r);
  err = python_block(r, p);
  rec_unlock(r);
  return err;
}

int
_scr_py_block_kind(scr_py_record *r, const void *p)
{
  int kind = 0;
  rec_lock(r);
  if (p != NULL && scr_heap_check(r->heap, p) == SCR_OK)
    kind = set_has(&r->mine, (uintptr_t)p) ? 1 : 2;
  rec_unlock(r);
  return kind;
}

int
_scr_py_realloc_checked(scr_py_record *r, void *p, size_t n, void **out)
{
  size_t old = 0;
  int err;
  if (alloc_begin(r) < 0)
    return SCR_ENOMEM;
  err = python_block(r, p);
  if (err != SCR_OK) {
    rec_unlock(r);
    return err;
  }
  if (p != NULL && scr_heap_usable_size_checked(r->heap, p, &old) != SCR_OK)
    old = 0;
  err = scr_heap_realloc_checked(r->heap, p, n, out);
  if (err == SCR_OK) {
    used_sub(r, old);
    set_del(&r->mine, (uintptr_t)p);
    if (*out != NULL) {
      set_add(&r->mine, (uintptr_t)*out);
      used_add(r, scr_heap_usable_size(r->heap, *out));
    }
  }
  rec_unlock(r);
  return err;
}

int
_scr_py_free_checked(scr_py_record *r, void *p)
{
  size_t old = 0;
  int err;
  rec_lock(r);
  err = python_block(r, p);
  if (err != SCR_OK) {
    rec_unlock(r);
    return err;
  }
  if (p != NULL && scr_heap_usable_size_checked(r->heap, p, &old) != SCR_OK)
    old = 0;
  err = scr_heap_free_checked(r->heap, p);
  if (err == SCR_OK) {
    used_sub(r, old);
    set_del(&r->mine, (uintptr_t)p);
  }
  rec_unlock(r);
  return err;
}

int
_scr_py_heap_stats(scr_py_record *r, struct scr_stats *out)
{
  int ok;
  rec_lock(r);
  ok = r->heap != NULL;
  if (ok)
    scr_heap_stats(r->heap, out);
  rec_unlock(r);
  return ok ? 0 : -1;
}

/* ---- stats, peaks -------------------------------------------------- */

int
_scr_py_stats_add(scr_py_record *r, PyObject *d)
{
  domain_figures f[D_COUNT];
  uint64_t peak;
  long long live;
  int serving, kept, i;
  PyObject *py, *v;

  rec_lock(r);
  memcpy(f, r->dom, sizeof f);
  peak = r->peak;
  live = (long long)r->live;
  serving = r->serving;
  kept = r->kept && r->heap != NULL;
  rec_unlock(r);
  v = PyLong_FromUnsignedLongLong((unsigned long long)peak);
  if (v == NULL || PyDict_SetItemString(d, "peak_heap_used", v) < 0) {
    Py_XDECREF(v);
    return -1;
  }
  Py_DECREF(v);
  py = Py_BuildValue("{sLsOsO}", "blocks", live, "serving", serving ? Py_True : Py_False,
                     "keeps_heap", kept ? Py_True : Py_False);
  if (py == NULL)
    return -1;
  for (i = 0; i < D_COUNT; i++) {
    v = Py_BuildValue("{sKsLsL}", "calls", (unsigned long long)f[i].calls, "blocks",
                      (long long)f[i].blocks, "bytes", (long long)f[i].bytes);
    if (v == NULL || PyDict_SetItemString(py, domain_names[i], v) < 0) {
      Py_XDECREF(v);
      Py_DECREF(py);
      return -1;
    }
    Py_DECREF(v);
  }
  i = PyDict_SetItemString(d, "python", py);
  Py_DECREF(py);
  return i;
}

PyObject *
_scr_py_reset_peak(PyObject *self, PyObject *unused)
{
  scr_py_record *r = _scr_py_record_of(self);
  rec_lock(r);
  r->peak = r->used;
  rec_unlock(r);
  Py_RETURN_NONE;
}

PyObject *
_scr_py_get_peak(PyObject *self, void *closure)
{
  scr_py_record *r = _scr_py_record_of(self);
  uint64_t v;
  rec_lock(r);
  v = r->peak;
  rec_unlock(r);
  return PyLong_FromUnsignedLongLong((unsigned long long)v);
}

PyObject *
_scr_py_get_python_blocks(PyObject *self, void *closure)
{
  scr_py_record *r = _scr_py_record_of(self);
  long long v;
  rec_lock(r);
  v = (long long)r->live;
  rec_unlock(r);
  return PyLong_FromLongLong(v);
}

/* ---- Serving: the context manager ---------------------------------- */

/* 1 when the Allocator is closed or closing (its with block ended while
 * views lived), by its own test; -1 with an exception. */
static int
allocator_closed(PyObject *alloc)
{
  PyObject *closed = PyObject_GetAttrString(alloc, "closed");
  int r = closed == NULL ? -1 : PyObject_IsTrue(closed);
  Py_XDECREF(closed);
  return r;
}

typedef struct ServingObject ServingObject;
struct ServingObject {
  PyObject_HEAD
  PyObject *alloc;              /* the Allocator (strong) */
  scr_py_record *rec;           /* its record */
  unsigned mask;                /* 1 << D_* for each domain served */
  int state;                    /* 0 made, 1 open, 2 done */
  ServingObject *below;         /* the next open block (the stack of open blocks) */
};

static ServingObject *serving_top;  /* innermost open block */
static int routing_paused;          /* > 0: new blocks go to the bases (a profile's records) */

/* routers[d].target = the innermost open block's record that serves d.
 * GIL and raw_mutex held. */
static void
retarget(void)
{
  int d;
  for (d = 0; d < D_COUNT; d++) {
    ServingObject *s;
    scr_py_record *t = NULL;
    for (s = serving_top; s != NULL; s = s->below)
      if (s->mask & (1u << d)) {
        t = s->rec;
        break;
      }
    routers[d].target = routing_paused ? NULL : t;
  }
}

void
_scr_py_pause_routing(int pause)
{
  pthread_mutex_lock(&raw_mutex);
  routing_paused += pause ? 1 : -1;
  retarget();
  pthread_mutex_unlock(&raw_mutex);
}

static void
serving_close(ServingObject *s)
{
  ServingObject **pp;
  if (s->state != 1)
    return;
  pthread_mutex_lock(&raw_mutex);
  for (pp = &serving_top; *pp != NULL; pp = &(*pp)->below)
    if (*pp == s) {
      *pp = s->below;
      break;
    }
  s->below = NULL;
  s->rec->serving--;
  retarget();
  pthread_mutex_unlock(&raw_mutex);
  s->state = 2;
  prune();
}

static PyObject *
Serving_enter(PyObject *op, PyObject *unused)
{
  ServingObject *s = (ServingObject *)op;
  scr_py_record *r = s->rec;
  int d;

  if (s->state != 0) {
    PyErr_SetString(PyExc_RuntimeError,
                    "a serve_python() context can be entered once; call serve_python() again");
    return NULL;
  }
  d = allocator_closed(s->alloc);
  if (d < 0)
    return NULL;
  if (d || r->heap == NULL || r->kept) {
    PyErr_SetString(PyExc_ValueError, "operation on a closed allocator");
    return NULL;
  }
  pthread_mutex_lock(&raw_mutex);
  if (s->mask & (1u << D_RAW) && !r->locked) {
    /* No raw hook can reach r yet (it is not a raw target); GIL hooks
     * cannot run now: from here on every heap call on r locks, and the
     * process-wide sums are atomic. */
    r->locked = 1;
    any_locked = 1;
  }
  route(r, s->alloc);
  r->serving++;
  s->below = serving_top;
  serving_top = s;
  for (d = 0; d < D_COUNT; d++)
    if (s->mask & (1u << d))
      router_install(d);
  retarget();
  pthread_mutex_unlock(&raw_mutex);
  s->state = 1;
  return Py_NewRef(op);
}

static PyObject *
Serving_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
  serving_close((ServingObject *)op);
  Py_RETURN_FALSE;
}

static void
Serving_dealloc(PyObject *op)
{
  ServingObject *s = (ServingObject *)op;
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  serving_close(s);
  Py_CLEAR(s->alloc);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static int
Serving_traverse(PyObject *op, visitproc visit, void *arg)
{
  ServingObject *s = (ServingObject *)op;
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(s->alloc);
  return 0;
}

static PyObject *
Serving_repr(PyObject *op)
{
  ServingObject *s = (ServingObject *)op;
  static const char *const states[] = {"not entered", "open", "closed"};
  return PyUnicode_FromFormat("<scralloc serve_python(%s%s%s) %s>",
                              s->mask & (1u << D_RAW) ? "raw " : "",
                              s->mask & (1u << D_MEM) ? "mem " : "",
                              s->mask & (1u << D_OBJ) ? "obj" : "", states[s->state]);
}

static PyObject *
Serving_get_domains(PyObject *op, void *closure)
{
  ServingObject *s = (ServingObject *)op;
  PyObject *t = PyTuple_New(0);
  int d;
  for (d = 0; d < D_COUNT && t != NULL; d++)
    if (s->mask & (1u << d)) {
      PyObject *name = PyUnicode_FromString(domain_names[d]);
      Py_ssize_t n = PyTuple_GET_SIZE(t);
      if (name == NULL || _PyTuple_Resize(&t, n + 1) < 0) {
        Py_XDECREF(name);
        Py_XDECREF(t);
        return NULL;
      }
      PyTuple_SET_ITEM(t, n, name);
    }
  return t;
}

static PyObject *
Serving_get_allocator(PyObject *op, void *closure)
{
  return Py_NewRef(((ServingObject *)op)->alloc);
}

static PyMethodDef Serving_methods[] = {
  {"__enter__", Serving_enter, METH_NOARGS, NULL},
  {"__exit__", (PyCFunction)(void (*)(void))Serving_exit, METH_FASTCALL, NULL},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef Serving_getset[] = {
  {"domains", Serving_get_domains, NULL, "the domains served, as a tuple of names", NULL},
  {"allocator", Serving_get_allocator, NULL, "the Allocator that serves them", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Serving_slots[] = {
  {Py_tp_dealloc, Serving_dealloc},
  {Py_tp_traverse, Serving_traverse},
  {Py_tp_repr, Serving_repr},
  {Py_tp_methods, Serving_methods},
  {Py_tp_getset, Serving_getset},
  {Py_tp_doc, (void *)"The context manager Allocator.serve_python() returns."},
  {0, NULL},
};

static PyType_Spec Serving_spec = {
  .name = "scralloc._scralloc.Serving",
  .basicsize = sizeof(ServingObject),
  .flags = SCR_PY_HELPER_TYPE_FLAGS,
  .slots = Serving_slots,
};

/* domains: an iterable of "raw", "mem", "obj" (at least one). */
static int
parse_domains(PyObject *arg, unsigned *mask)
{
  PyObject *it, *item;
  *mask = 0;
  if (PyUnicode_Check(arg)) {
    PyErr_SetString(PyExc_TypeError,
                    "serve_python(): domains must be a sequence of names, e.g. (\"mem\", \"obj\")");
    return -1;
  }
  it = PyObject_GetIter(arg);
  if (it == NULL)
    return -1;
  while ((item = PyIter_Next(it)) != NULL) {
    const char *name = PyUnicode_Check(item) ? PyUnicode_AsUTF8(item) : NULL;
    int d;
    for (d = 0; name != NULL && d < D_COUNT; d++)
      if (strcmp(name, domain_names[d]) == 0)
        break;
    if (name == NULL || d == D_COUNT) {
      if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError,
                     "serve_python(): unknown domain %R (expected \"raw\", \"mem\" or \"obj\")",
                     item);
      Py_DECREF(item);
      Py_DECREF(it);
      return -1;
    }
    *mask |= 1u << d;
    Py_DECREF(item);
  }
  Py_DECREF(it);
  if (PyErr_Occurred())
    return -1;
  if (*mask == 0) {
    PyErr_SetString(PyExc_ValueError, "serve_python(): no domain given");
    return -1;
  }
  return 0;
}

PyObject *
_scr_py_serve_python(PyObject *self, PyObject *args, PyObject *kwds)
{
  static char *kwlist[] = {"domains", NULL};
  PyObject *domains = NULL, *module, *type;
  scr_py_record *r = _scr_py_record_of(self);
  ServingObject *s;
  unsigned mask = (1u << D_MEM) | (1u << D_OBJ);

  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:serve_python", kwlist, &domains))
    return NULL;
#ifdef Py_GIL_DISABLED
  PyErr_SetString(PyExc_RuntimeError,
                  "serve_python() needs the GIL: this is a free-threaded build of Python, "
                  "where Python's allocator is called from threads at once");
  return NULL;
#endif
  if (domains != NULL && parse_domains(domains, &mask) < 0)
    return NULL;
  {
    int is_closed = allocator_closed(self);
    if (is_closed < 0)
      return NULL;
    if (is_closed || r->heap == NULL || r->kept) {
      PyErr_SetString(PyExc_ValueError, "operation on a closed allocator");
      return NULL;
    }
  }
  module = PyType_GetModule(Py_TYPE(self));
  if (module == NULL)
    return NULL;
  type = PyObject_GetAttrString(module, "Serving");
  if (type == NULL)
    return NULL;
  s = PyObject_GC_New(ServingObject, (PyTypeObject *)type);
  Py_DECREF(type);
  if (s == NULL)
    return NULL;
  s->alloc = Py_NewRef(self);
  s->rec = r;
  s->mask = mask;
  s->state = 0;
  s->below = NULL;
  PyObject_GC_Track((PyObject *)s);
  return (PyObject *)s;
}

/* ---- module functions ---------------------------------------------- */

static PyObject *
mod_heap_peaks(PyObject *module, PyObject *unused)
{
  prune();
  return Py_BuildValue("{sKsK}", "heap_used",
                       (unsigned long long)__atomic_load_n(&total_used, __ATOMIC_RELAXED),
                       "peak_heap_used",
                       (unsigned long long)__atomic_load_n(&total_peak, __ATOMIC_RELAXED));
}

static PyObject *
mod_reset_heap_peak(PyObject *module, PyObject *unused)
{
  __atomic_store_n(&total_peak, __atomic_load_n(&total_used, __ATOMIC_RELAXED),
                   __ATOMIC_RELAXED);
  Py_RETURN_NONE;
}

static PyObject *
mod_serving(PyObject *module, PyObject *unused)
{
  /* The routers and the routed records, for tests and the command line. */
  scr_py_record *r;
  PyObject *allocs = PyList_New(0), *installed;
  int d;
  prune();
  if (allocs == NULL)
    return NULL;
  for (r = routed_list; r != NULL; r = r->next)
    if (PyList_Append(allocs, r->owner) < 0) {
      Py_DECREF(allocs);
      return NULL;
    }
  installed = PyTuple_New(0);
  for (d = 0; d < D_COUNT && installed != NULL; d++)
    if (routers[d].installed) {
      PyObject *name = PyUnicode_FromString(domain_names[d]);
      Py_ssize_t n = PyTuple_GET_SIZE(installed);
      if (name == NULL || _PyTuple_Resize(&installed, n + 1) < 0) {
        Py_XDECREF(name);
        Py_XDECREF(installed);
        installed = NULL;
        break;
      }
      PyTuple_SET_ITEM(installed, n, name);
    }
  if (installed == NULL) {
    Py_DECREF(allocs);
    return NULL;
  }
  {
    ServingObject *s;
    Py_ssize_t open = 0;
    for (s = serving_top; s != NULL; s = s->below)
      open++;
    return Py_BuildValue("{sNsNsn}", "allocators", allocs, "routers", installed, "open", open);
  }
}

static PyMethodDef serve_functions[] = {
  {"_heap_peaks", mod_heap_peaks, METH_NOARGS,
   "The sum of heap_used over every Allocator and its peak since start or the last reset."},
  {"_reset_heap_peak", mod_reset_heap_peak, METH_NOARGS,
   "Start the peak of _heap_peaks() again from the current sum."},
  {"_serving", mod_serving, METH_NOARGS,
   "The Allocators routing Python's blocks, the domains whose routers are installed, and "
   "the number of open serve_python() blocks."},
  {NULL, NULL, 0, NULL},
};

/* fork: a raw hook of another thread may hold raw_mutex (and, inside
 * it, a record's lock: nothing else takes one without the GIL, which the
 * forking thread holds).  Taking raw_mutex around fork() leaves the child
 * both unlocked. */
static void
fork_prepare(void)
{
  pthread_mutex_lock(&raw_mutex);
}

static void
fork_done(void)
{
  pthread_mutex_unlock(&raw_mutex);
}

int
_scr_py_serve_exec(PyObject *m)
{
  static int atfork_done;
  if (!atfork_done) {
    if (pthread_atfork(fork_prepare, fork_done, fork_done) != 0) {
      PyErr_SetString(PyExc_OSError, "scralloc: pthread_atfork failed");
      return -1;
    }
    atfork_done = 1;
  }
  PyObject *type = PyType_FromModuleAndSpec(m, &Serving_spec, NULL);
  bucket_init();
  if (type == NULL)
    return -1;
  if (PyModule_AddObjectRef(m, "Serving", type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  Py_DECREF(type);
  return PyModule_AddFunctions(m, serve_functions);
}
