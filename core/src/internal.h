/* Cross-file prototypes of the core, grouped by file.  Everything here has
 * hidden visibility; only scralloc.h is the API. */
#ifndef SCR_INTERNAL_H
#define SCR_INTERNAL_H

#include "types.h"
#include <stdio.h>

/* ---- assertions (SCR_DEBUG levels, see types.h) ---- */
SCR_INTERNAL void _scr_assert_fail(const char *expr, const char *file, int line);
#if SCR_DEBUG >= 1
#define scr_assert(x) ((x) ? (void)0 : _scr_assert_fail(#x, __FILE__, __LINE__))
#else
#define scr_assert(x) ((void)0)
#endif
#if SCR_DEBUG >= 2
#define scr_assert_internal(x) scr_assert(x)
#else
#define scr_assert_internal(x) ((void)0)
#endif

/* AddressSanitizer builds poison free small blocks, so a use after free
 * or a double use of a block is reported at the faulting access.  Code
 * that walks free lists reads block links through scr_block_next(). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SCR_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define SCR_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#define SCR_NO_ASAN __attribute__((no_sanitize_address))
#else
#define SCR_POISON(p, n) ((void)(p), (void)(n))
#define SCR_UNPOISON(p, n) ((void)(p), (void)(n))
#define SCR_NO_ASAN
#endif
SCR_NO_ASAN static inline scr_block *scr_block_next(const scr_block *b) { return b->next; }

/* stats.c: text output that appends to a buffer like snprintf, tracking
 * the length it would need (pos may pass len). */
typedef struct _scr_out { char *buf; size_t len, pos; } _scr_out;
SCR_INTERNAL void _scr_out_put(_scr_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* error.c */
SCR_INTERNAL extern _Atomic int _scr_verbose; /* reports without a handler go to stderr in release builds too */
SCR_INTERNAL void _scr_report(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A validator's verdict on what it found wrong: reported, and false. */
#define SCR_VALIDATE_FAIL(...) do { _scr_report(SCR_EINVAL, __VA_ARGS__); return false; } while (0)
/* A bad SCRALLOC_<NAME> value: to the handler, else on stderr in every
 * build, once per name.  lo <= hi: the value was out of that range (said
 * in the message); lo > hi: not a value at all. */
SCR_INTERNAL void _scr_report_env(const char *name, const char *value, uint64_t lo, uint64_t hi);
/* A SCRALLOC_<NAME> (name: len characters, not NUL-terminated) that names
 * no option: on stderr, once, with the closest option's name. */
SCR_INTERNAL void _scr_report_unknown_env(const char *name, size_t len, const char *closest);

/* prim/os.c: every OS call of the core.  Each counts into `c` (may be NULL)
 * and honours the failure injection. */
SCR_INTERNAL void *_scr_os_map_aligned(size_t size, size_t align, scr_os_counters *c);
SCR_INTERNAL int _scr_os_unmap(void *p, size_t size, scr_os_counters *c);
SCR_INTERNAL int _scr_os_decommit(void *p, size_t size, bool free_lazily, scr_os_counters *c);
SCR_INTERNAL int _scr_os_advise(void *p, size_t size, int advice, scr_os_counters *c);
struct iovec;
SCR_INTERNAL size_t _scr_os_decommit_ranges(struct iovec *r, size_t n, scr_os_counters *c);
SCR_INTERNAL void *_scr_os_remap(void *old, size_t old_size, size_t new_size, void *target, scr_os_counters *c);
SCR_INTERNAL bool _scr_os_inject_failure(void);
SCR_INTERNAL size_t _scr_os_page_size(void);
SCR_INTERNAL uint64_t _scr_os_now_ms(void);
SCR_INTERNAL uint64_t _scr_os_random_u64(void);

/* options.c: the one parser of SCR_OPTION_TABLE's names and values, for
 * the heap's setters and the process allocator's (process/options.c). */
enum {
#define SCR_OPT_ID_(scope, type, name, ...) SCR_OPT_##name,
  SCR_OPTION_TABLE(SCR_OPT_ID_)
#undef SCR_OPT_ID_
  SCR_OPT_COUNT
};
enum { SCR_OPT_BAD = 1, SCR_OPT_RANGE = 2 }; /* _scr_option_parse's failures */
SCR_INTERNAL void _scr_options_clamp(scr_options *opt);
/* The id of the option named name (any case) if its scope meets scope;
 * -1 otherwise (NULL name, no such option, another scope's). */
SCR_INTERNAL int _scr_option_find(const char *name, unsigned scope);
/* Text (any case) as option id's value: SCR_OK (*out set), SCR_OPT_BAD
 * (not a value; NULL text), SCR_OPT_RANGE (outside the option's range). */
SCR_INTERNAL int _scr_option_parse(int id, const char *text, uint64_t *out);
/* The value of SCRALLOC_<NAME> (name in any case; NULL when unset or
 * empty); env (at least 64 bytes) receives the variable's name. */
SCR_INTERNAL const char *_scr_env_option(const char *name, char *env, size_t len);
/* SCRALLOC_<NAME> of option id: true with its value; false when the
 * option's scope does not meet scope, when unset, or when bad (then
 * reported: _scr_report_env, once per variable). */
SCR_INTERNAL bool _scr_option_env(int id, unsigned scope, uint64_t *out);
/* Each SCRALLOC_<NAME> of the environment that names no option of any
 * scope (nor a tool's variable) gets a warning with the closest name
 * (_scr_report_unknown_env).  scr_options_from_env and the process
 * allocator's first call run it. */
SCR_INTERNAL void _scr_env_unknown_names(void);

/* size_class.c */
SCR_INTERNAL extern const uint32_t _scr_class_sizes[SCR_CLASS_COUNT];
/* The class of a request n <= SCR_SMALL_MAX (size_class.c: one table,
 * by 16-byte step), times 4: the low two bits of an entry are 0, so that
 * an index into an array of 8-byte (or 32-byte) items needs no shift, the
 * address's scale does it. */
#define SCR_CLASS_INDEX_LEN (SCR_SMALL_MAX / 16 + 1)
SCR_INTERNAL extern const uint8_t _scr_class_index[SCR_CLASS_INDEX_LEN];
static inline unsigned _scr_class_x4(size_t n) {
  unsigned x = _scr_class_index[(n + 15) >> 4];
  if (x & 3) __builtin_unreachable();
  return x;
}
static inline unsigned _scr_class_of(size_t n) { return _scr_class_x4(n) >> 2; }
/* What a realloc from a block of `usable` bytes to n allocates: n, but a
 * block that grows into the medium classes gets the largest one, so that
 * a buffer growing by steps (Python's lists and strings grow by 1/8)
 * moves once, not once per class, and then grows in place up to
 * SCR_SMALL_MAX (as the one-page large blocks these sizes were did). */
static inline size_t _scr_realloc_size(size_t usable, size_t n) {
  return n > usable && n >= SCR_MEDIUM_MIN && n <= SCR_SMALL_MAX ? SCR_SMALL_MAX : n;
}
/* The class that serves an aligned request of n bytes (align a power of
 * two above SCR_MIN_ALIGN): the first from n's (or align's) whose size
 * is a multiple of align, every slot of which is then aligned (a page
 * starts on a multiple of SCR_PAGE_SIZE, a medium run on one of
 * SCR_MEDIUM_SPAN pages, and align is at most SCR_SMALL_MAX);
 * SCR_CLASS_COUNT when no class can (a large block serves it).  It is the
 * class of n rounded up to a multiple of align: between two powers of two
 * the classes are every multiple of one step, so a multiple of a larger
 * align is a class, and below the step every class is a multiple
 * (test_size_classes checks it against that definition). */
static inline unsigned _scr_class_aligned(size_t align, size_t n) {
  size_t want = n < align ? align : n;
  if (want > SCR_SMALL_MAX) return SCR_CLASS_COUNT;
  want = (want + align - 1) & ~(align - 1);
  return want <= SCR_SMALL_MAX ? _scr_class_of(want) : SCR_CLASS_COUNT;
}
/* A realloc of a block of `usable` bytes to n (0 < n) keeps it in place:
 * it fits and is not more than twice what is needed (then a smaller block
 * gives the memory back), or it is a medium one asked for a medium size:
 * a buffer growing into the medium classes gets the largest
 * (_scr_realloc_size), and its next steps (a quarter or an eighth more
 * each) would otherwise move it back down and up again (docs/process.md,
 * "realloc").  The price: a medium request that shrinks such a block
 * keeps the largest medium class. */
static inline bool _scr_realloc_stays(size_t usable, size_t n) {
  bool medium = n >= SCR_MEDIUM_MIN && usable <= SCR_SMALL_MAX;
  return n <= usable && (usable <= 64 || n > usable / 2 || medium);
}
/* Pages in a page of class c: 1, or SCR_MEDIUM_SPAN for a medium class. */
static inline unsigned _scr_class_span(unsigned c) { return c >= SCR_MEDIUM_FIRST ? SCR_MEDIUM_SPAN : 1; }
/* The index of the first page of the page of class c that holds page idx
 * (runs start on a multiple of their span), and its descriptor. */
static inline uintptr_t _scr_class_first(uintptr_t idx, unsigned c) {
  return idx & ~(uintptr_t)(_scr_class_span(c) - 1);
}
static inline scr_page *_scr_class_page(scr_segment *seg, uintptr_t idx, unsigned c) {
  return &seg->pages[_scr_class_first(idx, c)];
}
/* The descriptor of the page (run) that starts run_off bytes into seg:
 * one shift, descriptors being a line each and pages SCR_PAGE_SIZE. */
static inline scr_page *_scr_run_page(scr_segment *seg, uintptr_t run_off) {
  return (scr_page *)((char *)seg->pages + (run_off >> (SCR_PAGE_SHIFT - 6)));
}

/* segmap.c: process-wide map from segment number to segment header.
 * Two levels over a 48-bit address space; lookups are inline here. */
#include <stdatomic.h>
#define SCR_SEGMAP_SEG_BITS (48 - SCR_SEGMENT_SHIFT) /* 26 */
#define SCR_SEGMAP_LEAF_BITS 13
#define SCR_SEGMAP_TOP_SLOTS (1u << (SCR_SEGMAP_SEG_BITS - SCR_SEGMAP_LEAF_BITS))
/* An entry is the segment's address (aligned to SCR_SEGMENT_SIZE) or'ed
 * with its heap's map_mark (scr_heap: the process allocator's arenas mark
 * theirs with their id + 1; 0 is unmarked), so that a free can tell its
 * own arena's blocks and other arenas' from a heap the program made
 * without reading the segment header and the heap (process.h:
 * _scr_tcache_may_keep). */
#define SCR_SEGMAP_MARK_MASK (SCR_SEGMENT_SIZE - 1)
struct _scr_segmap_leaf { _Atomic uintptr_t slot[1u << SCR_SEGMAP_LEAF_BITS]; };
SCR_INTERNAL extern _Atomic(struct _scr_segmap_leaf *) _scr_segmap_top[SCR_SEGMAP_TOP_SLOTS];
/* The entry of the segment that covers p, or 0. */
static inline uintptr_t _scr_segmap_entry(const void *p) {
  uintptr_t s = (uintptr_t)p >> SCR_SEGMENT_SHIFT;
  if (SCR_UNLIKELY(s >> SCR_SEGMAP_SEG_BITS)) return 0;
  struct _scr_segmap_leaf *l = atomic_load_explicit(&_scr_segmap_top[s >> SCR_SEGMAP_LEAF_BITS], memory_order_acquire);
  if (SCR_UNLIKELY(l == NULL)) return 0;
  return atomic_load_explicit(&l->slot[s & ((1u << SCR_SEGMAP_LEAF_BITS) - 1)], memory_order_acquire);
}
/* The mark map: one 16-bit word per SCR_SEGMENT_SIZE of the 47-bit user
 * address space (64 MiB of zero pages until written: a word is written
 * when a segment is registered), the map_mark of the heap whose segment
 * starts there, when the mark is below SCR_SEGMAP_NO_MARK, else 0.  A
 * match with the caller's arena's mark tells the free fast path, in one
 * load, that p's aligned 4 MiB is a segment header of its own heap, with
 * no walk of the two levels above (docs/process.md, "Why it is built this
 * way").  Every other answer goes to the segment map, which is exact. */
#define SCR_SEGMAP_FAST_BITS (47 - SCR_SEGMENT_SHIFT) /* 25 */
#define SCR_SEGMAP_NO_MARK 0xFFFFu /* a mark the map never holds */
SCR_INTERNAL extern uint16_t _scr_segmap_fast[(size_t)1 << SCR_SEGMAP_FAST_BITS];
/* The mark map's word for p (0 beyond the map). */
static inline unsigned _scr_segmap_fast_mark(const void *p) {
  uintptr_t s = (uintptr_t)p >> SCR_SEGMENT_SHIFT;
  if (SCR_UNLIKELY(s >= ((uintptr_t)1 << SCR_SEGMAP_FAST_BITS))) return 0;
  return __atomic_load_n(&_scr_segmap_fast[s], __ATOMIC_RELAXED);
}
/* The mark map's word for a heap's mark (SCR_SEGMAP_NO_MARK: none fits). */
static inline unsigned _scr_segmap_fast_of(uintptr_t mark) {
  return mark != 0 && mark < SCR_SEGMAP_NO_MARK ? (unsigned)mark : SCR_SEGMAP_NO_MARK;
}
static inline scr_segment *_scr_segmap_seg(uintptr_t e) { return (scr_segment *)(e & ~(uintptr_t)SCR_SEGMAP_MARK_MASK); }
static inline uintptr_t _scr_segmap_mark(uintptr_t e) { return e & SCR_SEGMAP_MARK_MASK; }
static inline scr_segment *_scr_segmap_get(const void *p) { return _scr_segmap_seg(_scr_segmap_entry(p)); }
SCR_INTERNAL int _scr_segmap_prepare(uintptr_t base, size_t size);
SCR_INTERNAL int _scr_segmap_set(uintptr_t base, size_t size, scr_segment *seg, uintptr_t mark);
SCR_INTERNAL void _scr_segmap_clear(uintptr_t base, size_t size);

/* segment.c */
SCR_INTERNAL scr_segment *_scr_segment_map(scr_heap *h, size_t size, size_t align, scr_segment_kind kind);
SCR_INTERNAL bool _scr_segment_unmap(scr_heap *h, scr_segment *seg);
/* fresh_first: pages never touched (or
 * decommitted) before pages still committed */
SCR_INTERNAL scr_page *_scr_segment_take_at(scr_heap *h, scr_segment *seg, unsigned first, unsigned n);
SCR_INTERNAL scr_page *_scr_segment_take_pages(scr_heap *h, unsigned npages, size_t align, bool fresh_first);
/* A huge segment leaves h (off its list and its figures; seg->heap stays
 * h, so that a double free of its block is still told as one) or joins
 * h (at size new_size: its tail unmapped, or grown with mremap, moved
 * without a copy where it must be; NULL when that failed and the segment
 * was unmapped). */
SCR_INTERNAL void _scr_segment_detach(scr_heap *h, scr_segment *seg);
SCR_INTERNAL scr_segment *_scr_segment_attach(scr_heap *h, scr_segment *seg, size_t new_size);
/* Unmap a detached huge segment (the process allocator's huge cache). */
SCR_INTERNAL void _scr_segment_unmap_detached(scr_segment *seg, scr_os_counters *c);
SCR_INTERNAL bool _scr_segment_shrink_detached(scr_segment *seg, size_t new_size, scr_os_counters *c);
SCR_INTERNAL void _scr_segment_release_pages(scr_heap *h, scr_segment *seg, unsigned first, unsigned npages);
/* Every committed free page back (trim); delay_ms: nonzero, marked as
 * the decay's at that delay (taken again within twice it, a refault);
 * 0: asked for, never a refault. */
SCR_INTERNAL void _scr_segment_trim(scr_heap *h, uint64_t delay_ms);
/* The decay's pass over h's dirty pages (types.h: who may touch what). */
SCR_INTERNAL size_t _scr_segment_decay(scr_heap *h, uint64_t delay_ms, bool *left);
SCR_INTERNAL void _scr_segment_purge_down(scr_heap *h, uint64_t keep_pages);
/* The purge pass if one is due, from a call that takes no page (a small
 * class's slow path): a heap that goes on reusing the pages it holds
 * still gives back what it freed, a purge delay later.  (jemalloc ticks
 * its decay on its slow paths for the same reason.)  Not for a heap whose
 * dirty pages another thread's clock gives back (an arena's). */
SCR_INTERNAL void _scr_segment_purge_due(scr_heap *h);
/* Whether h may commit `more` bytes under limit_bytes, after giving back
 * the pages it keeps for the purge if that is what it takes. */
SCR_INTERNAL bool _scr_segment_grow_ok(scr_heap *h, size_t more);
SCR_INTERNAL size_t _scr_segment_meta_bytes(const scr_heap *h);
/* Set bits of m.  Without the POPCNT instruction (-mpopcnt: x86-64-v2)
 * gcc makes __builtin_popcountll a call into libgcc's table loop; the
 * page bookkeeping counts masks at every run taken or given back. */
static inline unsigned _scr_popcount(uint64_t m) {
#if defined(__POPCNT__) || !(defined(__x86_64__) || defined(__i386__))
  return (unsigned)__builtin_popcountll(m);
#else
  m -= (m >> 1) & 0x5555555555555555ull;
  m = (m & 0x3333333333333333ull) + ((m >> 2) & 0x3333333333333333ull);
  m = (m + (m >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (unsigned)((m * 0x0101010101010101ull) >> 56);
#endif
}
/* Bits first .. first+n-1 of a segment's 64-bit page masks. */
static inline uint64_t _scr_run_mask(unsigned first, unsigned n) {
  return (n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << first;
}
static inline scr_segment *_scr_segment_of(const void *p) {
  return (scr_segment *)((uintptr_t)p & ~(uintptr_t)(SCR_SEGMENT_SIZE - 1));
}
static inline unsigned _scr_page_index(const scr_segment *seg, const scr_page *pg) {
  return (unsigned)(pg - seg->pages);
}
static inline uint8_t *_scr_page_start(const scr_segment *seg, const scr_page *pg) {
  return (uint8_t *)seg + ((size_t)_scr_page_index(seg, pg) << SCR_PAGE_SHIFT);
}
/* The bytes from a large block's first page to the block (its colour,
 * large.c); also for a FREE page whose freed_block is set. */
static inline size_t _scr_large_colour(const scr_page *pg) { return (size_t)pg->line_off * SCR_LINE; }
static inline scr_segment *_scr_page_segment(const scr_page *pg) {
  return _scr_segment_of(pg);
}

/* page.c */
SCR_INTERNAL void _scr_page_format(scr_page *pg, unsigned cls);
SCR_INTERNAL void _scr_page_uncarve(scr_page *pg); /* no slot carved (page.c) */
SCR_INTERNAL bool _scr_page_validate(const scr_page *pg);
SCR_INTERNAL bool _scr_page_slot_is_free(const scr_page *pg, const void *p);

/* heap.c / queue handling */
SCR_INTERNAL void *_scr_heap_alloc_small_slow(scr_heap *h, unsigned cls);
SCR_INTERNAL void _scr_heap_page_emptied(scr_heap *h, scr_page *pg);
SCR_INTERNAL void _scr_heap_page_requeue(scr_heap *h, scr_page *pg);
/* Class c's idle page (its queue's empty head, kept uncounted: heap_fast.h),
 * or NULL; and its live blocks (types.h: the bank and the head's). */
static inline scr_page *_scr_heap_idle_page(const scr_heap *h, unsigned c) {
  scr_page *pg = h->queue[c];
  return pg != NULL && pg->used == 0 && !pg->counted ? pg : NULL;
}
static inline uint64_t _scr_class_live(const scr_heap *h, unsigned c) {
  return h->class_bank[c] + (h->queue[c] ? h->queue[c]->used : 0);
}
SCR_INTERNAL void _scr_queue_push_front(scr_heap *h, scr_page *pg);
SCR_INTERNAL void _scr_queue_push_back(scr_heap *h, scr_page *pg);
SCR_INTERNAL void _scr_queue_remove(scr_heap *h, scr_page *pg);
SCR_INTERNAL bool _scr_heap_grow_ok(const scr_heap *h, size_t more);
SCR_INTERNAL void _scr_heap_validate_or_abort(const scr_heap *h);

/* large.c */
SCR_INTERNAL void *_scr_large_alloc(scr_heap *h, size_t n, size_t align, bool *zero);
SCR_INTERNAL void _scr_large_free(scr_heap *h, scr_segment *seg, void *p);
SCR_INTERNAL size_t _scr_large_usable(const scr_segment *seg, const void *p);
SCR_INTERNAL void *_scr_large_realloc_inplace(scr_heap *h, scr_segment *seg, void *p, size_t n);
SCR_INTERNAL void _scr_large_cache_flush(scr_heap *h);

/* interior.c: the whole OS pages inside free slots of pages that hold
 * live blocks go back (MADV_DONTNEED, or MADV_FREE below
 * madv_free_below); bytes given back, *lazy_bytes of them lazily. */
SCR_INTERNAL size_t _scr_heap_return_interior(scr_heap *h, size_t *lazy_bytes);

/* profile.c: sampled allocation sites */
#define SCR_PROF_IDLE ((int64_t)4 << 20) /* bytes between looks at the rate while sampling is off */
SCR_INTERNAL extern _Atomic size_t _scr_prof_live; /* live samples: 0, and a free has none to look up */
/* The countdown takes an allocation of n bytes; true when it ran out. */
static inline bool _scr_prof_due(scr_prof_countdown *c, size_t n) {
  return SCR_UNLIKELY((c->left -= (int64_t)n) < 0);
}
/* The countdown ran out: draws the next at rate `now` (0: off) and
 * returns the rate the allocation is sampled at (0: not sampled). */
SCR_INTERNAL uint64_t _scr_prof_next(scr_prof_countdown *c, uint64_t now);
/* Sample p, n bytes just allocated by heap key (NULL: the process
 * allocator), at rate; caller: the entry point's return address. */
SCR_INTERNAL void _scr_prof_take(const scr_heap *key, void *p, size_t n, uint64_t rate, const void *caller);
/* p, a live block, is being freed: its sample goes. */
SCR_INTERNAL void _scr_prof_freed(const void *p);
static inline void _scr_prof_free(const void *p) {
  if (SCR_UNLIKELY(atomic_load_explicit(&_scr_prof_live, memory_order_relaxed) != 0)) _scr_prof_freed(p);
}
SCR_INTERNAL void _scr_prof_drop_heap(const scr_heap *h); /* h is being destroyed */
/* heap.c: the countdown of h's sampler ran out at p (n bytes, NULL: a
 * failed allocation), an allocation of the entry point that caller returns into */
SCR_INTERNAL __attribute__((noinline)) void *_scr_heap_sampled(scr_heap *h, void *p, size_t n, const void *caller);
SCR_INTERNAL void _scr_prof_lock(void);   /* fork: every lock of the sampler */
SCR_INTERNAL void _scr_prof_unlock(void);

/* classify.c: what an address is for a heap */
SCR_INTERNAL int _scr_classify(const scr_heap *h, const void *p);
/* The block to hand out, b just taken from pg, a retained page (heap.c). */
SCR_INTERNAL void *_scr_page_first_take(scr_heap *h, scr_page *pg, void *b);
SCR_INTERNAL void _scr_gone_note(scr_heap *h, const void *start, uint32_t block, uint32_t count);

/* heap.c: a call on a NULL or destroyed heap, reported (SCR_EINVAL) */
SCR_INTERNAL void _scr_heap_bad(const char *call, const scr_heap *h);
/* heap.c: the entry points without the checks of the public ones (the
 * heap is live, p was classified or comes from the allocator's own
 * lists) */
SCR_INTERNAL bool _scr_heap_live(const scr_heap *h); /* not NULL, not destroyed */
SCR_INTERNAL void *_scr_heap_malloc(scr_heap *h, size_t n);
SCR_INTERNAL void _scr_heap_free_block(scr_heap *h, void *p);
SCR_INTERNAL void *_scr_heap_realloc(scr_heap *h, void *p, size_t n);
SCR_INTERNAL size_t _scr_heap_usable_size(const scr_heap *h, const void *p);

/* process allocator's hooks into the core */
SCR_INTERNAL scr_heap *_scr_heap_of(const void *p);
SCR_INTERNAL void _scr_heap_set_retain_bytes(scr_heap *h, size_t bytes);
/* Committed bytes (heap_total), current for any thread: bytes is atomic. */
static inline uint64_t _scr_heap_bytes(const scr_heap *h) { return h->bytes; }
/* The process allocator's decay (process/decay.c), by the holder or its
 * helper thread: when due, h's dirty pages freed before its last pass go
 * back (segment.c: _scr_segment_decay); a page taken again within twice
 * the delay of its return counts in refault_bytes. */
SCR_INTERNAL size_t _scr_heap_decay(scr_heap *h, uint64_t delay_ms, bool *left);
/* scr_heap_trim as the decay's, at its delay (the discard of a parked
 * arena): a page taken again within twice the delay is a refault. */
SCR_INTERNAL size_t _scr_heap_trim_decayed(scr_heap *h, uint64_t delay_ms);
/* Every small page's free list in address order, so that the blocks a
 * page hands out next ascend, as carving does (a parked arena's discard:
 * the next thread's).  By the heap's holder. */
SCR_INTERNAL void _scr_heap_relink_free(scr_heap *h);
SCR_INTERNAL uint64_t _scr_heap_refault_bytes(scr_heap *h);
/* Before its first segment: the process allocator's hooks (their arg is
 * the arena, the heap's owner, which _scr_heap_owner gives) and the mark
 * of its segments in the segment map.  The hooks stay where they are. */
SCR_INTERNAL void _scr_heap_set_owner(scr_heap *h, const struct _scr_heap_hooks *hooks, uintptr_t map_mark);
static inline void *_scr_heap_owner(const scr_heap *h) { return h->hooks->arg; }
/* stats.c: the committed bytes of every heap with an owner (the process
 * allocator's arenas) and of the huge segments detached from them (its
 * huge cache), and the most they were, kept where a heap's bytes change:
 * pages committed or given back, segments mapped or unmapped, never on
 * a block's malloc or free.
 *   _scr_owned_bytes == sum(h->bytes of owned heaps) + bytes of detached
 *   segments, _scr_owned_peak >= every value it took */
SCR_INTERNAL extern _Atomic uint64_t _scr_owned_bytes, _scr_owned_peak;
SCR_INTERNAL void _scr_owned_grow(uint64_t n);
static inline void _scr_owned_shrink(uint64_t n) { atomic_fetch_sub_explicit(&_scr_owned_bytes, n, memory_order_relaxed); }
/* h->bytes changes through these. */
static inline void _scr_heap_bytes_add(scr_heap *h, uint64_t n) {
  if (n == 0) return; /* bytes is atomic: no locked add for nothing */
  h->bytes += n;
  if (_scr_heap_owner(h)) _scr_owned_grow(n);
}
static inline void _scr_heap_bytes_sub(scr_heap *h, uint64_t n) {
  if (n == 0) return;
  h->bytes -= n;
  if (_scr_heap_owner(h)) _scr_owned_shrink(n);
}
/* h->large_bytes changes through these, by the heap's holder alone (one
 * writer), stored atomically so that another thread reads it current
 * with _scr_heap_large_bytes (the process allocator's scr_stats: a
 * thread's big blocks before its next snapshot).  A plain store: a
 * shared counter's locked add on every large malloc and free cost more
 * than the block's own work (docs/process.md). */
static inline void _scr_heap_large_add(scr_heap *h, uint64_t n) {
  __atomic_store_n(&h->large_bytes, h->large_bytes + n, __ATOMIC_RELAXED);
}
static inline void _scr_heap_large_sub(scr_heap *h, uint64_t n) {
  __atomic_store_n(&h->large_bytes, h->large_bytes - n, __ATOMIC_RELAXED);
}
static inline uint64_t _scr_heap_large_bytes(const scr_heap *h) {
  return __atomic_load_n(&h->large_bytes, __ATOMIC_RELAXED);
}

/* misuse.c: the freed-block key and the slot test (misuse.c says how).
 * Read-only once _scr_misuse_init has run (the first heap made). */
typedef struct _scr_slot_geom {
  uint64_t magic;                        /* floor(2^64 / size) + 1 */
  uint32_t mask;                         /* offset of an address in its page (run) */
  uint32_t step;                         /* size * magic mod 2^64: a slot's share of a page's slot_limit */
} _scr_slot_geom;
_Static_assert(sizeof(_scr_slot_geom) == 16, "_scr_slot_geom_x4 scales a tag times 4 by 4");
typedef struct _scr_misuse_globals {
  _Alignas(64) uint64_t key;             /* in the second word of every free small block */
  _scr_slot_geom geom[SCR_TAG_OTHER + 1];/* by page tag; OTHER's fails every address */
} _scr_misuse_globals;
SCR_INTERNAL extern _scr_misuse_globals _scr_misuse;
/* The slot geometry of a page whose page_tag4 is x4 (its tag times 4):
 * x4 * 4 is the entry's offset, no shift. */
static inline const _scr_slot_geom *_scr_slot_geom_x4(unsigned x4) {
  return (const _scr_slot_geom *)((const char *)_scr_misuse.geom + (size_t)x4 * 4);
}
SCR_INTERNAL void _scr_misuse_init(void);
/* The words for a misuse kind (SCR_EDOUBLEFREE, ...) given to call
 * ("free", "realloc", ...): a freed block is a "double free" to a free,
 * "freed already" to the others. */
SCR_INTERNAL const char *_scr_misuse_what(int kind, const char *call);
/* The second word of block p (ASan builds: a free block is poisoned).
 * Two threads that free one block at once both read it, and the process
 * allocator's claim exchanges it atomically (process.h): ThreadSanitizer
 * builds access it as a relaxed atomic everywhere, the others plainly (a
 * compare with the word in memory; an aligned 64-bit access is atomic on
 * the targets built for). */
#ifdef __SANITIZE_THREAD__
static inline uint64_t _scr_block_word1(const void *p) { return __atomic_load_n(&((const uint64_t *)p)[1], __ATOMIC_RELAXED); }
static inline void _scr_block_set_word1(void *p, uint64_t v) { __atomic_store_n(&((uint64_t *)p)[1], v, __ATOMIC_RELAXED); }
#else
SCR_NO_ASAN static inline uint64_t _scr_block_word1(const void *p) { return ((const uint64_t *)p)[1]; }
static inline void _scr_block_set_word1(void *p, uint64_t v) { ((uint64_t *)p)[1] = v; }
#endif
/* The bump index of small page pg, read by a thread that does not hold
 * its heap (the slot test of another arena's block): relaxed atomics on
 * both sides. */
static inline uint32_t _scr_page_capacity(const scr_page *pg) {
  return __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED);
}

/* profile_report.c: SCRALLOC_PROFILE=PATH's files, written at exit
 * (process/stats.c's destructor), and the top sites of the live samples
 * as report lines ("scralloc[pid]: ...") on fd, nothing without samples
 * (the exit report's). */
SCR_INTERNAL void _scr_profile_at_exit(void);
SCR_INTERNAL void _scr_profile_report_top(int fd, int pid, unsigned rows);

/* validation: expensive checks at state changes in SCR_DEBUG >= 3 builds */
#if SCR_DEBUG >= 3
#define scr_validate_page(pg) ((void)(_scr_page_validate(pg) || (_scr_assert_fail("page validator", __FILE__, __LINE__), 0)))
#define scr_validate_heap(h) _scr_heap_validate_or_abort(h)
#else
#define scr_validate_page(pg) ((void)0)
#define scr_validate_heap(h) ((void)0)
#endif

#endif /* SCR_INTERNAL_H */
