/* Statistics: one struct filled from the heap's counters (fields listed
 * once in SCR_STATS_FIELDS), and its JSON form. */
#include "internal.h"
#include <string.h>

static void heap_class_live(const scr_heap *h, uint64_t live[SCR_CLASS_COUNT]) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) live[c] = _scr_class_live(h, c);
}

static uint64_t heap_used_bytes(const scr_heap *h, const uint64_t live[SCR_CLASS_COUNT]) {
  uint64_t used = h->large_bytes;
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) used += live[c] * _scr_class_sizes[c];
  return used;
}

/* Bytes in live blocks (usable sizes): heap_used. */

_Atomic uint64_t _scr_owned_bytes, _scr_owned_peak;

void _scr_owned_grow(uint64_t n) {
  uint64_t now = atomic_fetch_add_explicit(&_scr_owned_bytes, n, memory_order_relaxed) + n;
  uint64_t peak = atomic_load_explicit(&_scr_owned_peak, memory_order_relaxed);
  while (now > peak && !atomic_compare_exchange_weak_explicit(&_scr_owned_peak, &peak, now, memory_order_relaxed,
                                                              memory_order_relaxed)) {
  }
}

void scr_heap_stats(const scr_heap *h, struct scr_stats *st) {
  if (st == NULL) return;
  memset(st, 0, sizeof *st);
  if (!_scr_heap_live(h)) {
    _scr_heap_bad("scr_heap_stats", h);
    return;
  }
  pthread_mutex_t *lock = (pthread_mutex_t *)&h->lock; /* the decay's fields (types.h) */
  pthread_mutex_lock(lock);
  uint64_t small_live = 0, live[SCR_CLASS_COUNT], idle = 0;
  heap_class_live(h, live);
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    scr_class_stats *cs = &st->classes[c];
    cs->block_size = _scr_class_sizes[c];
    cs->live = live[c];
    cs->pages = h->class_pages[c];
    unsigned c_idle = _scr_heap_idle_page(h, c) != NULL; /* kept too, uncounted (heap_fast.h) */
    cs->retained = h->empty_count[c] + c_idle;
    idle += c_idle;
    small_live += cs->live;
  }
  st->allocs = small_live + h->large_live;
  st->mmaps = h->mmaps;
  st->bytes = h->bytes;
  st->mmap_calls = h->os.mmap_calls;
  st->munmap_calls = h->os.munmap_calls;
  st->madvise_calls = h->os.madvise_calls + h->decay_os.madvise_calls;
  st->mremap_calls = h->os.mremap_calls;
  st->os_failures = h->os.failures + h->decay_os.failures;
  st->heap_total = h->bytes;
  st->heap_used = heap_used_bytes(h, live);
  st->retained_pages = h->retained_pages + idle;
  st->retained_bytes = st->retained_pages * SCR_PAGE_SIZE;
  st->cached_blocks = h->cache_count;
  st->cached_bytes = h->cache_bytes;
  st->dirty_bytes = (h->dirty_pages + h->over_pages) * SCR_PAGE_SIZE;
  st->large_allocs = h->large_live;
  st->large_bytes = h->large_bytes;
  st->reserved_bytes = h->reserved;
  st->meta_bytes = _scr_segment_meta_bytes(h);
  st->decommits = h->decommits;
  st->page_acquires = h->page_acquires;
  st->page_releases = h->page_releases;
  st->dontneed_bytes = h->os.dontneed_bytes + h->decay_os.dontneed_bytes;
  st->lazy_free_bytes = h->os.lazy_free_bytes + h->decay_os.lazy_free_bytes;
  st->purge_passes = h->purge_passes;
  st->refault_bytes = h->refault_bytes;
  st->madvise_hints = h->os.madvise_hints + h->decay_os.madvise_hints;
  pthread_mutex_unlock(lock);
}

#include <stdarg.h>

void _scr_out_put(_scr_out *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = o->pos < o->len ? o->len - o->pos : 0;
  int n = vsnprintf(room ? o->buf + o->pos : NULL, room, fmt, ap);
  va_end(ap);
  if (n > 0) o->pos += (size_t)n;
}

size_t scr_stats_json(const struct scr_stats *st, char *buf, size_t len) {
  if (buf == NULL) len = 0; /* the length it needs */
  _scr_out o = {buf, len, 0};
  if (len) buf[0] = '\0';
  if (st == NULL) return 0;
  _scr_out_put(&o, "{");
#define X(name, doc) _scr_out_put(&o, "\"%s\":%llu,", #name, (unsigned long long)st->name);
  SCR_STATS_FIELDS(X)
#undef X
  _scr_out_put(&o, "\"classes\":[");
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    const scr_class_stats *cs = &st->classes[c];
    _scr_out_put(&o, "%s{", c ? "," : "");
    const char *sep = "";
#define X(name, doc) _scr_out_put(&o, "%s\"%s\":%llu", sep, #name, (unsigned long long)cs->name), sep = ",";
    SCR_CLASS_STATS_FIELDS(X)
#undef X
    _scr_out_put(&o, "}");
  }
  _scr_out_put(&o, "]}");
  return o.pos;
}

size_t scr_heap_stats_json(const scr_heap *h, char *buf, size_t len) {
  if (buf == NULL) len = 0;
  if (!_scr_heap_live(h)) {
    if (len) buf[0] = '\0';
    return 0;
  }
  struct scr_stats st;
  scr_heap_stats(h, &st);
  return scr_stats_json(&st, buf, len);
}
