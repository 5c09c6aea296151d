/* Every internal struct and build switch of the core.
 *
 * Geometry: the heap maps segments of SCR_SEGMENT_SIZE (4 MiB) aligned to
 * their size.  Page 0 of a segment holds the segment header with the 64
 * page descriptors (out of line: a page can be decommitted and keep its
 * descriptor); pages 1..63 hold blocks.  A block above huge_threshold gets
 * a mapping of its own (a "huge segment"): the same header at the start,
 * the block after it.  Every mapping is registered in the process-wide
 * segment map (segmap.c), so any address finds its segment in O(1).
 */
#ifndef SCR_TYPES_H
#define SCR_TYPES_H

#include "scralloc.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* SCR_DEBUG: 0 release; 1 cheap asserts; 2 internal asserts; 3 validators
 * run at every state change. */
#ifndef SCR_DEBUG
#define SCR_DEBUG 0
#endif

#define SCR_INTERNAL __attribute__((visibility("hidden")))
#define SCR_LIKELY(x) __builtin_expect(!!(x), 1)
#define SCR_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define SCR_PAGE_SHIFT 16
#define SCR_SEGMENT_SHIFT 22
#define SCR_PAGES_PER_SEGMENT (SCR_SEGMENT_SIZE / SCR_PAGE_SIZE) /* 64 */
#define SCR_FIRST_PAGE 1                 /* page 0 is the segment header */
#define SCR_LINE 64                      /* a CPU cache line */
#define SCR_COLOUR_LINES 4               /* a coloured large block starts this many lines into its run (large.c) */
#define SCR_MAX_SLOTS (SCR_PAGE_SIZE / SCR_MIN_ALIGN) /* 4096 slots of 16 B */
/* Medium classes (SCR_MEDIUM_MIN up to SCR_SMALL_MAX, 20-64 KiB): a page of
 * theirs is a run of SCR_MEDIUM_SPAN pages starting on a multiple of
 * SCR_MEDIUM_SPAN pages in its segment, so the run of any of its pages is
 * found by masking the page index.  In a single page they would fit 1-3
 * blocks; as one-page large blocks they took a page for 16-64 KiB. */
#define SCR_MEDIUM_MIN ((size_t)20 * 1024)
#define SCR_MEDIUM_FIRST 44              /* class index of SCR_MEDIUM_MIN */
#define SCR_MEDIUM_SPAN 4
#define SCR_SEGMENT_MAGIC 0x5343524d53454730ull /* "SCRMSEG0" */
#define SCR_HUGE_OFFSET SCR_PAGE_SIZE   /* a huge block starts after its header page */

_Static_assert(((size_t)1 << SCR_PAGE_SHIFT) == SCR_PAGE_SIZE, "SCR_PAGE_SHIFT disagrees with scralloc.h");
_Static_assert(((size_t)1 << SCR_SEGMENT_SHIFT) == SCR_SEGMENT_SIZE, "SCR_SEGMENT_SHIFT disagrees with scralloc.h");
_Static_assert(SCR_PAGES_PER_SEGMENT == 64, "the segment's page masks are 64-bit");

typedef struct scr_block { struct scr_block *next; } scr_block;

typedef enum scr_page_kind {
  SCR_PAGE_FREE = 0,  /* belongs to no block (committed or not: the segment's masks say) */
  SCR_PAGE_SMALL,     /* slots of one size class */
  SCR_PAGE_LARGE,     /* first page of a large block spanning `span` pages */
  SCR_PAGE_TAIL,      /* a later page of a large block; `head` is its first */
  SCR_PAGE_RUN_TAIL,  /* a later page of a medium class's run; `head` is its first, `cls` its class */
} scr_page_kind;

/* A page descriptor.  For a SMALL page:
 *   used + length(free) == capacity <= reserved
 *   slot i is live  <=>  i < capacity and slot i is not on `free`
 * (the checked API walks `free` to tell a live block from a freed one,
 * which keeps the fast paths free of any per-slot bookkeeping)
 *   sampled != 0 => the page's slot_limit is 0 (heap_fast.h: _scr_page_slot_limit)
 * Empty pages (used == 0) sit at the tail of their class queue and are
 * the heap's retained pages.  For a LARGE page: used is 1 while the block
 * is live, 0 while it sits in the large cache. */
typedef struct scr_page {
  scr_block *free;             /* free slots (LIFO) */
  uint8_t *start;              /* first byte of the page */
  uint32_t used;               /* live blocks */
  uint32_t capacity;           /* slots carved so far (bump index) */
  uint32_t reserved;           /* slots that fit in the page */
  uint32_t block_size;         /* bytes per slot (SMALL) */
  uint32_t sampled;            /* SMALL: live sampled blocks (profile.c); while nonzero the page's
                                  slot_limit is 0, so that their frees take the slow side, which
                                  finds their samples.  Atomic: any thread that frees one writes it */
  uint8_t counted;             /* SMALL: empty and counted in empty_count (retained).  An
                                  empty page of a queue that is not counted is its idle head
                                  (the class's current page: heap_fast.h) */
  uint8_t line_off;            /* LARGE, and FREE with freed_block: the block starts this many
                                  SCR_LINEs into its first page, 0 or SCR_COLOUR_LINES (large.c) */
  uint8_t pad_[2];
  uint8_t kind;                /* scr_page_kind */
  uint8_t cls;                 /* size class (SMALL, RUN_TAIL) */
  uint8_t zero;                /* bytes not yet carved read as zero */
  uint8_t in_queue;            /* linked in its class queue */
  uint8_t cached;              /* LARGE: sits in the large cache */
  uint8_t head;                /* TAIL, RUN_TAIL: index of the first page of the block or run */
  uint8_t span;                /* LARGE: pages in the block; SMALL: pages in the run (1 or SCR_MEDIUM_SPAN) */
  uint8_t freed_block;         /* FREE: a large block started here and was freed (classify: a second free is a double free) */
  struct scr_page *next, *prev;/* class queue */
} scr_page;
_Static_assert(sizeof(scr_page) == 64, "a descriptor is a line: its index is a shift");

typedef enum scr_segment_kind { SCR_SEG_NORMAL = 0, SCR_SEG_HUGE = 1 } scr_segment_kind;

/* A segment header, at the start of every mapping.
 *   NORMAL: pages[0] is the header itself; free_mask has bit i set for
 *           every page i >= 1 of kind FREE; used_pages = 63 - popcount(free_mask);
 *           avail_run = the longest run of set bits in free_mask, starting
 *           at bit avail_at, and the segment is on the heap's list
 *           avail[avail_run] while it is not 0
 *   HUGE:   block at base + huge_offset, huge_size usable bytes; huge_live
 *           is 1 while the block is live, 0 while cached. */
typedef struct scr_segment {
  uint64_t magic;               /* SCR_SEGMENT_MAGIC while mapped */
  scr_heap *heap;               /* owner */
  struct scr_segment *next, *prev; /* heap's segment list */
  struct scr_segment *avail_next, *avail_prev; /* NORMAL with a FREE page: heap's avail[avail_run] */
  uint32_t avail_run;           /* NORMAL: its longest run of FREE pages (0: on no avail list) */
  uint32_t avail_at;            /* NORMAL: the first page of that run (one of them on a tie) */
  size_t size;                  /* bytes mapped */
  uint32_t kind;                /* scr_segment_kind */
  uint32_t used_pages;          /* NORMAL: pages not FREE */
  uint64_t free_mask;           /* NORMAL: FREE pages */
  uint64_t committed_free_mask; /* NORMAL: FREE pages still committed (dirty, or a decommit failed) */
  uint64_t lazy_free_mask;      /* NORMAL: FREE pages given back with MADV_FREE (not zero) */
  uint64_t dirty_new, dirty_old;/* NORMAL: FREE pages kept committed for purge_delay_ms: freed
                                   since the last purge pass, and before it (the next pass
                                   decommits those); disjoint, both within committed_free_mask */
  uint64_t dirty_over;          /* NORMAL: FREE pages past retain_bytes waiting for a batched
                                   decommit (decommit_batch); disjoint from dirty_new and
                                   dirty_old, within committed_free_mask */
  uint64_t decayed_mask;        /* NORMAL: FREE pages the decay gave back (_scr_heap_decay) and
                                   not taken since: taking one within the decay window again
                                   is a refault; disjoint from committed_free_mask */
  uint64_t decayed_ms;          /* NORMAL: when the decay last gave back pages of it (monotonic ms) */
  size_t huge_offset;           /* HUGE: block offset from base */
  size_t huge_size;             /* HUGE: usable bytes of the block */
  uint32_t huge_live;           /* HUGE: 1 live, 0 cached */
  uint32_t huge_zero;           /* HUGE: block reads as zero */
  /* What each page holds, for readers on other threads (the process
   * allocator's recycling of blocks it frees for another arena): a line
   * of its own that changes only when a page changes kind, so that those
   * readers never share a line with the descriptors the owner writes on
   * every malloc and free.  page_tag4[i] == scr_page_tag_of(&pages[i]) *
   * 4: times 4, so that an index by tag into an array of 8- or 32-byte
   * items is scaled in the address, no shift (scr_seg_tag reads it). */
  _Alignas(64) uint8_t page_tag4[SCR_PAGES_PER_SEGMENT];
  /* For each page of a size class (every page of a medium run): its
   * capacity times the class's slot step (misuse.c), so that
   *   off * magic < slot_limit[i]  <=>  off is a slot the page carved,
   * the free fast path's test, whose load needs only the page's index (not
   * its tag); 0 for every other page, and for a page with live sampled
   * blocks (the test then fails for every address: its frees take the
   * slow side, which finds the samples: profile.c).  Written when the page
   * carves a slot or its samples change, read by any thread: relaxed
   * atomics.  Lines
   * of their own.  64 bits (the value fits 19), so that the test compares
   * a 64-bit product with it in memory, one instruction (process.h). */
  _Alignas(64) uint64_t slot_limit[SCR_PAGES_PER_SEGMENT];
  scr_page pages[SCR_PAGES_PER_SEGMENT]; /* NORMAL: descriptors */
} scr_segment;

/* Page tags: the size class of a SMALL page or a RUN_TAIL page,
 * SCR_TAG_OTHER for anything else (FREE, a LARGE block's pages, the
 * header page, a HUGE segment).  OTHER is the class count, the one past
 * the last class, so that an array indexed by tag needs a single entry
 * more than one by class (the process allocator's free fast path indexes
 * its lists by tag without testing it: process.h). */
#define SCR_TAG_OTHER SCR_CLASS_COUNT
_Static_assert(SCR_TAG_OTHER * 4 <= 0xFF, "a tag times 4 is one byte");
static inline uint8_t scr_page_tag_of(const scr_page *pg) {
  if (pg->kind == SCR_PAGE_SMALL || pg->kind == SCR_PAGE_RUN_TAIL) return pg->cls;
  return SCR_TAG_OTHER;
}
/* The tag of page i of seg, and its setter. */
static inline unsigned scr_seg_tag(const scr_segment *seg, uintptr_t i) {
  unsigned x4 = seg->page_tag4[i];
  if (x4 & 3) __builtin_unreachable();
  return x4 >> 2;
}
static inline void scr_seg_set_tag(scr_segment *seg, uintptr_t i, unsigned tag) {
  seg->page_tag4[i] = (uint8_t)(tag * 4);
}

_Static_assert(sizeof(scr_segment) <= SCR_PAGE_SIZE, "segment header must fit page 0");

/* Syscall counters (prim/) of one heap (or of the decay's calls on it). */
typedef struct scr_os_counters {
  uint64_t mmap_calls, munmap_calls, madvise_calls, mremap_calls, failures;
  uint64_t madvise_hints; /* of madvise_calls, advice that gives no memory back */
  /* bytes given back by advice (decommits that succeeded) */
  uint64_t dontneed_bytes, lazy_free_bytes;
} scr_os_counters;

/* A freed large block kept for reuse. */
/* A sampler's countdown (profile.c), one per heap and one per arena of
 * the process allocator: each allocation takes its bytes off `left`, and
 * the one that takes it below zero is sampled (when `rate` is not 0) or
 * only draws the next countdown (rate 0: sampling was off when it was
 * drawn, and `left` was SCR_PROF_IDLE).  Written by the heap's holder
 * alone. */
typedef struct scr_prof_countdown {
  int64_t left;  /* bytes still to allocate before the next sample */
  uint64_t rate; /* the rate `left` was drawn at (0: off) */
  uint64_t rng;  /* xorshift state (0: not seeded yet) */
} scr_prof_countdown;

typedef struct scr_cached {
  void *block;                  /* start of the block */
  size_t size;                  /* usable bytes */
} scr_cached;

#define SCR_LARGE_CACHE_MAX 1024

/* A run of blocks given back: a small page's slots when the page went
 * back to its segment, or one large block.  Every block of it is free, so
 * a checked call on one that the segment map no longer shows as a live
 * block is a double free, not a foreign pointer.
 *   it covers start + k * block for 0 <= k < count */
typedef struct scr_gone {
  uintptr_t start;              /* first block */
  uint32_t block;               /* bytes per block (1 for a large block) */
  uint32_t count;               /* blocks handed out (0: an unused entry) */
} scr_gone;

#define SCR_GONE_MAX 16         /* runs remembered per heap, newest replacing oldest */

struct _scr_heap_hooks {
  void (*segment_mapped)(scr_heap *h, void *base, size_t size, void *arg);
  /* Freed huge blocks shared by every heap with these hooks (the process
   * allocator's huge cache): put takes a huge segment the heap has just
   * detached (large.c), whose block is free; take gives one back for a
   * block of at least `size` bytes of mapping at offset `offset` (any
   * size: the heap resizes it), or NULL. */
  void (*huge_put)(scr_heap *h, scr_segment *seg, void *arg);
  scr_segment *(*huge_take)(scr_heap *h, size_t size, size_t offset, void *arg);
  /* The heap's dirty pages are given back by another thread's clock
   * (_scr_heap_decay) rather than by its own purge pass: called, under
   * the heap's lock, when the heap's first dirty page since the last
   * decay appears (the process allocator wakes its helper thread). */
  void (*pages_dirty)(scr_heap *h, void *arg);
  void *arg;
};

/* The heap.
 *   queue[c]: pages of class c with a free slot or empty; its head may be
 *             an idle page (empty, not counted); after it non-empty pages
 *             first, the empty_count[c] empty (retained) pages last.
 *   live blocks of class c == class_bank[c] + queue[c]->used (queue[c]
 *             not NULL), so that a malloc, always from the head, and a
 *             free into it count nothing (queue.c moves the counts)
 *   retained_pages == sum(empty_count[c] * span of class c)  (in pages)
 *   retained_pages + dirty_pages <= keep_pages; idle pages only while
 *   keep_current, and keep_pages + SCR_MEDIUM_FIRST (one page a small
 *   class) is then retain_bytes in pages
 *   over_pages * SCR_PAGE_SIZE < opt.decommit_batch (or over_pages == 0)
 *   bytes == SCR_PAGE_SIZE * (committed pages, any kind) + sum(huge sizes)
 *   mmaps == number of segments on `segments`
 * Who may touch what: a heap is its holder's (one thread at a time), but
 * `lock` lets one other thread, the process allocator's decay
 * (_scr_heap_decay), give back its dirty pages meanwhile.  So the segment
 * masks that say which free pages are committed (committed_free_mask,
 * lazy_free_mask, dirty_*, decayed_*), dirty_pages, over_pages, decommits,
 * purge_passes, refault_bytes and decay_os change under `lock` only (the
 * holder takes it in segment.c's entry points, stats and validators);
 * `bytes` is atomic, since the holder also changes it outside the lock
 * (huge blocks), and so is dirty_pages, which it reads outside.  free_mask, the page descriptors and the segment list
 * are the holder's alone: the decay reads the list under the lock (the
 * holder changes it under the lock too) and never maps or unmaps. */
/* "HEAP": a heap not yet destroyed.  32 bits, so that the entry points
 * test it with one compare (a 64-bit constant needs a register load). */
#define SCR_HEAP_MAGIC 0x50414548u
/* last_free_seg when it holds none: not a segment's address (those are
 * multiples of SCR_SEGMENT_SIZE), so that no address's segment, NULL
 * included, equals it and the free fast path needs no NULL test. */
#define SCR_NO_SEGMENT ((scr_segment *)(uintptr_t)SCR_PAGE_SIZE)
struct scr_heap {
  uint32_t magic;                        /* SCR_HEAP_MAGIC while the heap lives, 0 once destroyed */
  scr_page *queue[SCR_CLASS_COUNT];      /* head of each class queue */
  scr_page *queue_tail[SCR_CLASS_COUNT]; /* tail of each class queue */
  uint32_t empty_count[SCR_CLASS_COUNT]; /* retained pages per class */
  uint32_t idle_retain[SCR_CLASS_COUNT]; /* opt.retain for a small class while keep_current, else 0 (heap_fast.h) */
  uint64_t class_pages[SCR_CLASS_COUNT]; /* pages per class */
  uint64_t class_bank[SCR_CLASS_COUNT];  /* live blocks of class c outside the head of queue c */
  uint32_t fresh_taken[SCR_CLASS_COUNT]; /* pages class c took fresh first (heap.c: SCR_FRESH_PAGES) */
  scr_options opt;                       /* options, clamped */
  scr_segment *segments;                 /* every mapping of this heap */
  /* NORMAL segments with a free page, by their longest run of free pages
   * (bit r of avail_runs: avail[r] is not empty), as mimalloc's span
   * queues and tcmalloc's page heap keep free spans by length: a take
   * reads only the headers of segments with a run long enough. */
  scr_segment *avail[SCR_PAGES_PER_SEGMENT];
  uint64_t avail_runs;
  scr_segment *last_free_seg;            /* NORMAL segment of the last free, else SCR_NO_SEGMENT (never NULL) */
  pthread_mutex_t lock;                  /* see "who may touch what" above */
  uint64_t mmaps;                        /* live mappings */
  _Atomic uint64_t bytes;                /* committed bytes */
  uint64_t reserved;                     /* mapped bytes */
  uint64_t retained_pages;               /* empty small pages kept (idle ones not counted) */
  uint64_t keep_pages;                   /* retained and dirty pages kept at most (heap.c: heap_set_keep) */
  uint8_t keep_current;                  /* a class's current page stays when it empties, idle */
  _Atomic uint64_t dirty_pages;          /* sum of popcount(dirty_new | dirty_old); atomic: the holder reads
                                            it without the lock when a page empties (heap_fast.h) */
  uint64_t over_pages;                   /* sum of popcount(dirty_over) */
  uint64_t purge_at_ms;                  /* next purge pass (monotonic ms) */
  uint64_t large_live, large_bytes;      /* live large blocks, their usable bytes (a run's less its colour) */
  uint64_t decommits, page_acquires, page_releases;
  uint64_t purge_passes;                 /* timed purge passes (not trims), the decay's included */
  uint64_t refault_bytes;                /* bytes the decay gave back that were taken again within
                                            the decay window (cumulative) */
  uint64_t refault_window_ms;            /* that window (the decay sets it at each pass) */
  uint64_t unmapped_decayed;             /* bytes of segments a decay's trim unmapped, not yet taken
                                            again: fresh pages taken within the window are refaults */
  uint64_t unmapped_decayed_ms;          /* when (segment.c: _scr_segment_trim) */
  uint64_t interior_bytes;               /* bytes given back inside pages in use (interior.c), cumulative */
  uint64_t interior_lazy_bytes;          /* of those, with MADV_FREE */
  scr_os_counters os;                    /* syscalls of this heap's holder */
  scr_os_counters decay_os;              /* syscalls the decay made on it (under lock) */
  uint32_t cache_count;                  /* entries in cache */
  size_t cache_bytes;                    /* bytes in cache */
  scr_cached cache[SCR_LARGE_CACHE_MAX]; /* freed large blocks, oldest first */
  scr_gone gone[SCR_GONE_MAX];           /* runs given back, for checked calls (classify.c) */
  uint32_t gone_next;                    /* next entry of gone to replace */
  /* The process allocator's state, behind one pointer: its arena's hooks,
   * whose arg is the arena (the heap's owner); for a heap of the scr_heap
   * API, hooks that are all NULL.  Never NULL.  On a line that changes only
   * when the heap is set up, which every thread that frees a block of the
   * heap reads. */
  _Alignas(64) const struct _scr_heap_hooks *hooks;
  uintptr_t map_mark;                    /* its segments' mark in the segment map (0: none) */
  struct scr_heap *meta_next;            /* descriptor pool free list */
  scr_prof_countdown prof;               /* sampling of scr_heap_* calls (profile.c) */
};

#endif /* SCR_TYPES_H */
