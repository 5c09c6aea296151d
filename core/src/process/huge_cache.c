/* The process's cache of freed huge blocks (each a mapping of its own,
 * above huge_threshold).  A heap puts a huge segment whose block is
 * freed here (large.c, through the arena's hooks); a heap of any thread
 * that needs a huge block takes the best one and resizes it (its tail
 * unmapped, or grown with mremap), so its pages are reused resident
 * rather than unmapped and faulted in again (docs/process.md, "Why it is
 * built this way").  Bounds: the decay delay (decay.c, by the helper), a
 * request that grows what the process holds evicts as many bytes of the
 * oldest, SCR_HUGE_CACHE_MAX blocks, retain_max when set; scr_trim gives
 * back every one.
 *
 *   bytes == sum(e[i].seg->size), n <= SCR_HUGE_CACHE_MAX,
 *   e[] ordered by at_ns (oldest first)
 * A cached segment is on no heap's list; its seg->heap is the heap that
 * freed it and huge_live is 0, so a double free of its block is still
 * told as one (misuse.c).
 * Layer: arenas.  Owns hc (under hc.lock) and hc_bytes; the
 * heaps reach it through the arena's hooks (huge_put, huge_take). */
#include "arenas.h"

#define SCR_HUGE_CACHE_MAX 64

static struct {
  pthread_mutex_t lock;
  unsigned n;
  struct { scr_segment *seg; uint64_t at_ns; } e[SCR_HUGE_CACHE_MAX];
} hc = {PTHREAD_MUTEX_INITIALIZER, 0, {{0, 0}}};

static _Atomic uint64_t hc_bytes;   /* bytes cached (written under hc.lock) */
static uint64_t hc_back_ns;         /* when the decay last gave back blocks (under hc.lock) */
static _Atomic uint64_t hc_back_bytes; /* bytes then given back not yet counted as refaulted (written under hc.lock) */
static _Atomic uint64_t hc_refaults;/* bytes of requests missed within the delay of a return (cumulative) */
static scr_os_counters hc_os;       /* munmaps of cached blocks (under hc.lock) */

uint64_t _scr_huge_cache_bytes(void) { return atomic_load_explicit(&hc_bytes, memory_order_relaxed); }

static void hc_remove_at(unsigned i) {
  atomic_store_explicit(&hc_bytes, hc_bytes - hc.e[i].seg->size, memory_order_relaxed);
  memmove(&hc.e[i], &hc.e[i + 1], (hc.n - i - 1) * sizeof hc.e[0]);
  hc.n--;
}

/* Unmap the segments in out[0..n) (outside the lock). */
static uint64_t hc_unmap(scr_segment **out, unsigned n) {
  uint64_t bytes = 0;
  scr_os_counters c = {0};
  for (unsigned i = 0; i < n; i++) {
    bytes += out[i]->size;
    _scr_segment_unmap_detached(out[i], &c);
  }
  if (n) {
    pthread_mutex_lock(&hc.lock);
    hc_os.munmap_calls += c.munmap_calls;
    hc_os.failures += c.failures;
    pthread_mutex_unlock(&hc.lock);
  }
  return bytes;
}

/* The cached segment seg, taken out, gives back its tail from size on
 * (outside the lock) and goes back in at its place by age. */
static void hc_trim(scr_segment *seg, uint64_t size, uint64_t at_ns) {
  uint64_t old_size = seg->size;
  scr_os_counters c = {0};
  bool done = _scr_segment_shrink_detached(seg, size, &c);
  pthread_mutex_lock(&hc.lock);
  hc_os.munmap_calls += c.munmap_calls;
  hc_os.failures += c.failures;
  if (hc.n == SCR_HUGE_CACHE_MAX) {
    pthread_mutex_unlock(&hc.lock);
    SCR_PC_ADD(huge_cache_evicted, hc_unmap(&seg, 1) + (done ? old_size - size : 0));
    return;
  }
  unsigned i = 0;
  while (i < hc.n && hc.e[i].at_ns <= at_ns) i++;
  memmove(&hc.e[i + 1], &hc.e[i], (hc.n - i) * sizeof hc.e[0]);
  hc.e[i].seg = seg;
  hc.e[i].at_ns = at_ns;
  hc.n++;
  atomic_store_explicit(&hc_bytes, hc_bytes + seg->size, memory_order_relaxed);
  pthread_mutex_unlock(&hc.lock);
  if (done) SCR_PC_ADD(huge_cache_evicted, old_size - size);
}

static void hc_put(scr_heap *h, scr_segment *seg, void *arg) {
  (void)h;
  scr_arena *a = arg;
  scr_segment *out[SCR_HUGE_CACHE_MAX + 1];
  unsigned nout = 0;
  uint64_t cap = _scr_proc.opt.retain_max ? _scr_proc.opt.retain_max : UINT64_MAX;
  pthread_mutex_lock(&hc.lock);
  bool was_empty = hc.n == 0;
  if (seg->size > cap) {
    out[nout++] = seg; /* larger than the whole cap */
  } else {
    while (hc.n > 0 && (hc.n == SCR_HUGE_CACHE_MAX || hc_bytes + seg->size > cap)) {
      out[nout++] = hc.e[0].seg;
      hc_remove_at(0);
    }
    hc.e[hc.n].seg = seg;
    hc.e[hc.n].at_ns = _scr_proc_now_ns();
    hc.n++;
    atomic_store_explicit(&hc_bytes, hc_bytes + seg->size, memory_order_relaxed);
  }
  pthread_mutex_unlock(&hc.lock);
  SCR_PC_ADD(huge_cache_puts, 1);
  if (nout) SCR_PC_ADD(huge_cache_evicted, hc_unmap(out, nout));
  if (was_empty && nout == 0) {
    /* the helper starts counting the decay: woken at the arena's next
     * tick, outside the heap call (it may have to be started) */
    atomic_store_explicit(&_scr_proc.decay_wake, 1, memory_order_relaxed);
    a->ops |= SCR_ARENA_POLL_EVERY - 1;
  }
}

/* A request of size bytes that the cache cannot serve, under hc.lock:
 * within twice the delay of a return (decay.c), as much of it as went
 * back is a refault. */
static void hc_miss(size_t size) {
  if (_scr_proc_now_ns() >= hc_back_ns + 2 * _scr_decay_delay_ms() * 1000000u) {
    hc_back_bytes = 0;
    return;
  }
  uint64_t r = size < hc_back_bytes ? size : hc_back_bytes;
  hc_back_bytes -= r;
  atomic_fetch_add_explicit(&hc_refaults, r, memory_order_relaxed);
}

uint64_t _scr_huge_cache_refaults(void) { return atomic_load_explicit(&hc_refaults, memory_order_relaxed); }

/* The smallest cached block at offset `offset` that holds `size` bytes of
 * mapping, else the largest smaller one (grown: only its new part
 * faults). */
static scr_segment *hc_take(scr_heap *h, size_t size, size_t offset, void *arg) {
  (void)arg;
  if (_scr_huge_cache_bytes() == 0) {
    if (SCR_UNLIKELY(atomic_load_explicit(&hc_back_bytes, memory_order_relaxed) != 0)) {
      pthread_mutex_lock(&hc.lock);
      if (hc_back_bytes) hc_miss(size);
      pthread_mutex_unlock(&hc.lock);
    }
    return NULL;
  }
  int best = -1;
  pthread_mutex_lock(&hc.lock);
  for (unsigned i = 0; i < hc.n; i++) {
    const scr_segment *s = hc.e[i].seg;
    if (s->huge_offset != offset) continue;
    if (best < 0) {
      best = (int)i;
      continue;
    }
    size_t b = hc.e[best].seg->size;
    bool fits = s->size >= size, best_fits = b >= size;
    if (fits ? (!best_fits || s->size < b) : (!best_fits && s->size > b)) best = (int)i;
  }
  scr_segment *seg = NULL, *out[SCR_HUGE_CACHE_MAX];
  unsigned nout = 0;
  if (best >= 0) {
    seg = hc.e[best].seg;
    hc_remove_at((unsigned)best);
  } else if (hc_back_bytes) {
    hc_miss(size);
  }
  /* The process faults in new memory (a fresh mapping, or the block's
   * growth) while it caches blocks that did not fit: as many bytes of the
   * oldest go back, so that what it holds does not grow while it keeps
   * free memory (as Go's heap scavenges when it grows; decay.c says why
   * pages do not).  The last of them gives back only its tail where what
   * stays still holds a huge block. */
  uint64_t grow = seg == NULL ? size : seg->size < size ? size - seg->size : 0;
  scr_segment *trim = NULL;
  uint64_t trim_at_ns = 0, trim_size = 0;
  while (grow > 0 && hc.n > 0) {
    uint64_t b = hc.e[0].seg->size;
    if (b >= grow + hc.e[0].seg->huge_offset + h->opt.huge_threshold + _scr_os_page_size()) {
      trim = hc.e[0].seg;
      trim_at_ns = hc.e[0].at_ns;
      trim_size = b - ((grow + _scr_os_page_size() - 1) & ~(uint64_t)(_scr_os_page_size() - 1));
    } else {
      out[nout++] = hc.e[0].seg;
    }
    hc_remove_at(0);
    grow = grow > b ? grow - b : 0;
  }
  pthread_mutex_unlock(&hc.lock);
  if (seg) SCR_PC_ADD(huge_cache_hits, 1);
  if (nout) SCR_PC_ADD(huge_cache_evicted, hc_unmap(out, nout));
  if (trim) hc_trim(trim, trim_size, trim_at_ns);
  return seg;
}

void _scr_huge_cache_install(struct _scr_heap_hooks *hooks) {
  hooks->huge_put = hc_put;
  hooks->huge_take = hc_take;
}

/* Blocks cached since before now - the decay delay go back (all of them
 * when all); returns when the next one is due (UINT64_MAX: none). */
uint64_t _scr_huge_cache_decay(uint64_t now_ns, bool all, uint64_t *returned) {
  uint64_t delay = _scr_decay_delay_ms() * 1000000u, next = UINT64_MAX;
  scr_segment *out[SCR_HUGE_CACHE_MAX];
  unsigned nout = 0;
  pthread_mutex_lock(&hc.lock);
  while (hc.n > 0 && (all || hc.e[0].at_ns + delay <= now_ns)) {
    out[nout++] = hc.e[0].seg;
    hc_remove_at(0);
  }
  if (hc.n > 0) next = hc.e[0].at_ns + delay;
  if (nout && !all) {
    uint64_t b = 0;
    for (unsigned i = 0; i < nout; i++) b += out[i]->size;
    hc_back_ns = now_ns;
    hc_back_bytes = b;
  }
  pthread_mutex_unlock(&hc.lock);
  uint64_t bytes = hc_unmap(out, nout);
  if (returned) *returned = bytes;
  if (bytes && !all) SCR_PC_ADD(huge_cache_decayed, bytes);
  return next;
}

void _scr_huge_cache_counts(uint64_t *blocks, uint64_t *bytes, uint64_t *munmaps, uint64_t *failures) {
  pthread_mutex_lock(&hc.lock);
  *blocks = hc.n;
  *bytes = hc_bytes;
  *munmaps = hc_os.munmap_calls;
  *failures = hc_os.failures;
  pthread_mutex_unlock(&hc.lock);
}

void _scr_huge_cache_lock(void) { pthread_mutex_lock(&hc.lock); }
void _scr_huge_cache_unlock(void) { pthread_mutex_unlock(&hc.lock); }
