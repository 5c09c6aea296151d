/* The thread cache (tcache) of freed blocks: a block of a size class
 * that the holder of an arena frees, of its own arena or of another, is
 * kept on a per-class list for the holder's next malloc of the class, up
 * to cache_bytes and SCR_TCACHE_CLASS_MAX blocks per class (cache_medium
 * blocks of a medium class; none of a class above cache_max).
 *
 * Why: the most recently freed block of a class is the one whose cache
 * line this thread touched last, and another arena's block kept here
 * takes no trip home.  It stays live in its owner's heap the whole time
 * (holder.c's figures leave it out of what is used) and goes back when
 * this thread frees past the caps, exits or calls scr_trim (the flush),
 * or leaves its list unused for a decay delay (_scr_tcache_gc).
 * A parked arena's blocks are kept only while another thread holds an
 * arena too (else they go home, so that its pages can go back).  The
 * figures behind the caps: docs/process.md, "Why it is built this way".
 *
 * Layer: caches.  Owns each arena's lists (tc, medium_cap,
 * medium_mallocs, cache_grown): its holder alone touches them. */
#include "caches.h"
#include <string.h>

#define SCR_TCACHE_CLASS_MAX 64
#define SCR_TCACHE_RUN_MAX 1024 /* blocks a list of a class below SCR_RUN_CLASS_END may grow to */
#define SCR_RUN_CLASS_END 35    /* (_scr_tcache_init asserts its size) */
_Static_assert(SCR_RUN_CLASS_END < SCR_CLASS_COUNT, "the first class whose list grows to SCR_TCACHE_CLASS_MAX");
_Static_assert(SCR_CLASS_COUNT <= 64, "cache_emptied has a bit per class");
/* cache_medium (2 blocks a medium class) and cache_medium_after (16: an
 * arena claimed while no other is held opens them at its 16th malloc of
 * the class; a program's start uses many once): docs/process.md. */

/* List c's cap as the options set it (its base, where a grown cap returns). */
static uint32_t tcache_base_max(unsigned c) {
  const scr_proc_options *o = &_scr_proc.opt;
  uint64_t size = _scr_class_sizes[c], max = (o->cache_bytes + size - 1) / size;
  if (max > SCR_TCACHE_CLASS_MAX) max = SCR_TCACHE_CLASS_MAX;
  if (c >= SCR_MEDIUM_FIRST) max = o->cache_medium;
  if (size > o->cache_max) max = 0;
  return (uint32_t)max;
}

/* When a thread has taken the arena (its lists are empty then): the caps
 * as the options say now.  alone: no other arena is held; its medium
 * lists stay closed until their class's cache_medium_after-th malloc. */
void _scr_tcache_init(scr_arena *a, bool alone) {
  const scr_proc_options *o = &_scr_proc.opt;
  scr_assert(_scr_class_sizes[SCR_RUN_CLASS_END] == 4096);
  a->cache_grown = 0;
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    uint32_t max = tcache_base_max(c);
    a->tc[c].base = max;
    scr_assert(a->tc[c].head == NULL);
    if (c >= SCR_MEDIUM_FIRST) {
      unsigned m = c - SCR_MEDIUM_FIRST;
      a->medium_mallocs[m] = 0;
      a->medium_cap[m] = alone && o->cache_medium_after > 0 ? (uint8_t)max : 0;
      if (a->medium_cap[m] != 0) max = 0; /* closed for now */
    }
    a->tc[c].max = (uint32_t)max;
    a->tc[c].room = (uint32_t)max;
    a->tc[c].magic = _scr_misuse.geom[c].magic;
    a->tc[c].mask = _scr_misuse.geom[c].mask;
  }
  /* (the list of tag SCR_TAG_OTHER is set once, when the arena is made:
   * arena.c) */
}

/* The holder mallocs a block of medium class c whose list is closed (the
 * slow path): the list opens at the cache_medium_after-th. */
void _scr_tcache_medium_malloc(scr_arena *a, unsigned c) {
  unsigned m = c - SCR_MEDIUM_FIRST;
  if (++a->medium_mallocs[m] < _scr_proc.opt.cache_medium_after) return;
  scr_assert(a->tc[c].head == NULL && a->tc[c].max == 0);
  a->tc[c].max = a->tc[c].room = a->tc[c].base = a->medium_cap[m];
  a->medium_cap[m] = 0;
}

/* List c's blocks go back; it keeps up to max blocks from now on, at
 * most its base as the options say now (a grown cap starts again). */
static void tcache_empty_list(scr_arena *a, unsigned c, uint32_t max) {
  void *p = a->tc[c].head;
  uint32_t base = tcache_base_max(c);
  if (a->tc[c].max > a->tc[c].base) a->cache_grown -= (uint64_t)(a->tc[c].max - a->tc[c].base) * _scr_class_sizes[c];
  if (max > base) max = base;
  a->tc[c].base = max;
  a->tc[c].head = NULL;
  a->tc[c].max = a->tc[c].room = max;
  _scr_remote_send_list_home(a, c, p);
}

/* a's holder frees a block of class c into its full list: the cap grows
 * by one block, up to SCR_TCACHE_RUN_MAX blocks below SCR_RUN_CLASS_END
 * and SCR_TCACHE_CLASS_MAX above, while the arena's grown bytes stay
 * within cache_grow (false: they would not).  Why: frees in runs longer
 * than a list (containers dropped; phases of frees before phases of
 * mallocs) took the heap's path, or the pool's and the owners', for the
 * rest, at a higher cost (docs/process.md).  A list grows as far as its
 * runs need, within a bound per thread, as tcmalloc bounds each thread's
 * cache; the caps go back to their bases at park, trim and gc. */
bool _scr_tcache_grow(scr_arena *a, unsigned c) {
  scr_tcache_list *r = &a->tc[c];
  uint64_t size = _scr_class_sizes[c], budget = _scr_proc.opt.cache_grow;
  uint32_t cap = c < SCR_RUN_CLASS_END ? SCR_TCACHE_RUN_MAX : SCR_TCACHE_CLASS_MAX;
  if (r->max == 0 || r->max >= cap || a->cache_grown + size > budget) return false;
  r->max++;
  r->room++;
  a->cache_grown += size;
  SCR_PC_ADD(cache_grows, 1);
  return true;
}

#if SCR_DEBUG > 0
/* Checked builds: what the heap's free would have refused (an interior
 * pointer, a block already kept) is reported and dropped. */
bool _scr_tcache_refused(const scr_tcache_list *r, const scr_segment *seg, uintptr_t idx, unsigned c, void *p) {
  uintptr_t first = _scr_class_first(idx, c);
  if (((uintptr_t)p - ((uintptr_t)seg + (first << SCR_PAGE_SHIFT))) % _scr_class_sizes[c] != 0) {
    _scr_report(SCR_EINTERIOR, "free(%p): interior of a block (ignored)", p);
    return true;
  }
  bool kept = false;
  for (void *q = r->head, *next; q && !kept; q = next) {
    SCR_UNPOISON(q, sizeof(void *));
    next = *(void **)q;
    SCR_POISON(q, sizeof(void *));
    kept = q == p;
  }
  if (kept || _scr_pool_holds(c, p)) {
    _scr_report(SCR_EDOUBLEFREE, "free(%p): double free (the block was already freed) (ignored)", p);
    return true;
  }
  return false;
}
#endif

/* At the holder's tick, once a decay delay has passed: a list no malloc
 * found empty in that time (bit c of cache_emptied) held blocks its thread
 * did not need; they go home and its cap back to its base (a grown cap
 * too where the list is empty: it holds cache_grow), as jemalloc's tcache
 * GC flushes what stays below a bin's low-water mark. */
void _scr_tcache_gc(scr_arena *a) {
  uint64_t now = _scr_os_now_ms(); /* the coarse clock: every tick reads it */
  if (now - a->cache_gc_ms < _scr_decay_delay_ms()) return;
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++)
    if ((a->tc[c].room < a->tc[c].max || a->tc[c].max > a->tc[c].base) && !(a->cache_emptied >> c & 1)) {
      SCR_PC_ADD(cache_gc_blocks, a->tc[c].max - a->tc[c].room);
      tcache_empty_list(a, c, a->tc[c].base);
    }
  a->cache_emptied = 0;
  a->cache_gc_ms = now;
}

/* Every kept block goes back (at park and trim). */
void _scr_tcache_flush(scr_arena *a) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) tcache_empty_list(a, c, a->tc[c].max);
  scr_assert(a->cache_grown == 0); /* every grown block counted, from the base it grew from */
}

/* Adds sign (1 or -1) times one block of list c to t's block counts. */
static void proc_count_block(struct scr_stats *t, unsigned c, int64_t sign) {
  uint64_t one = (uint64_t)sign;
  t->allocs += one;
  t->heap_used += (uint64_t)sign * _scr_class_sizes[c];
  t->classes[c].live += one;
}

/* Take the kept blocks out of the arena's figures: its own come off `st`
 * (the heap counts them as live), other arenas' are added up in `lent`,
 * which scr_stats() takes off the process-wide sum. */
void _scr_tcache_account(const scr_arena *a, struct scr_stats *st, struct scr_stats *lent) {
  memset(lent, 0, sizeof *lent);
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    /* at most the list's length: a list a use after free corrupted (a
     * cycle) does not hang the report */
    uint32_t left = a->tc[c].max - a->tc[c].room;
    for (void *p = a->tc[c].head, *next; p && left > 0; p = next, left--) {
      SCR_UNPOISON(p, sizeof(void *));
      next = *(void **)p;
      SCR_POISON(p, sizeof(void *));
      if (_scr_heap_of(p) == a->heap) proc_count_block(st, c, -1);
      else proc_count_block(lent, c, 1);
    }
  }
}
