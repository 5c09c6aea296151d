/* The process allocator: scr_malloc and friends on top of the core heap.
 * Layer: base.  This header holds the types every layer shares (the
 * options, the arena, the process-wide state, the counters) and the
 * bottom layer's calls; each layer above has a header of its own that
 * includes the one below, so that a file sees only its layer and those
 * under it (tests/tools/process_layers.py checks the direction):
 *
 *   observers  stats.c override_stats.c                        observers.h
 *   entry      malloc.c free_many.c fork.c override.c               entry.h
 *   caches     remote.c pool.c tcache.c holder.c                   caches.h
 *   arenas     hooks.c huge_cache.c decay.c validate.c
 *              arena.c discard.c helper.c                           arenas.h
 *   base       os_linux.c options.c state.c misuse.c                process.h
 *              (and the core heap, core/src/)
 * (top first; within a layer a file uses only those to its left).
 * The words these files use (arena, owner, holder, claim, park, borrow,
 * drain, tick, pool, remote ring and stack, discard, decay, keep, over) are
 * defined, beside mimalloc's, tcmalloc's and jemalloc's, in
 * docs/process.md's glossary.
 *
 * Each thread claims an arena (one scr_heap, the ring and stack of blocks
 * other threads freed, and a state) on its first allocation and keeps it in
 * an initial-exec thread-local; a pthread key destructor parks it when the
 * thread exits, with its free lists and bump pointers intact, so blocks
 * outlive their thread.  The next thread that needs an arena claims a
 * parked one.  A helper thread returns the free pages of arenas that stay
 * parked past a delay (discard.c, helper.c).
 *
 * Who may touch what:
 *   arena->heap       only the thread that holds the arena: its owner while
 *                     OWNED, its borrower while BORROWED (the helper's
 *                     discard, a pusher's drain), whoever holds
 *                     _scr_proc.lock while PARKED.
 *   arena->ring, remote  any thread (lock-free push; the holder drains them).
 *   state, lists      under _scr_proc.lock.
 *   arena->snap       under arena->snap_lock.
 * Lock order: the profile's locks (core/src/profile.c) and
 * _scr_proc.lock before any snap_lock before the pool's class locks
 * (pool.c) before decay_lock before a heap's lock and the huge-block
 * cache's lock; helper_lock is a leaf (fork.c takes them all in that
 * order but the heaps' locks, which the child makes anew).
 */
#ifndef SCR_PROCESS_H
#define SCR_PROCESS_H

#include "heap_fast.h"
#include <pthread.h>
#include <stdatomic.h>

/* Hidden aliases of the heap entry points (all defined in the one
 * translation unit static.c makes), so that calls from the process layer
 * are direct rather than through the PLT that the exported names need in
 * the shared library. */
#define SCR_HIDDEN_ALIAS(local, target) \
  extern __typeof(target) local __attribute__((alias(#target), visibility("hidden")))
SCR_HIDDEN_ALIAS(proc_heap_calloc, scr_heap_calloc);
SCR_HIDDEN_ALIAS(proc_heap_aligned_alloc, scr_heap_aligned_alloc);
/* An arena's heap is live, and the process layer checks the pointers it
 * is given itself (misuse.c): the heap's entry points without checks. */
#define proc_heap_malloc _scr_heap_malloc
#define proc_heap_realloc _scr_heap_realloc
#define proc_heap_free _scr_heap_free_block
#define proc_heap_usable_size _scr_heap_usable_size

/* ---- options: SCR_OPTION_TABLE's entries of scope process or both
 * (scralloc.h); X(type, name, default, min, max, description), each
 * stored as a uint64_t ---- */
#define SCR_PROC_OPTIONS(X) SCR_OPTION_TABLE_(SCR_PROC_OPTION_, X)
#define SCR_PROC_OPTION_(X, scope, ...) SCR_PROC_OPTION_##scope(X, __VA_ARGS__)
#define SCR_PROC_OPTION_HEAP(X, ...)
#define SCR_PROC_OPTION_BOTH(X, type, name, def, lo, hi, words, doc) X(type, name, def, lo, hi, doc)
#define SCR_PROC_OPTION_PROCESS(X, type, name, def, lo, hi, words, doc) X(type, name, def, lo, hi, doc)

/* on_error's values (the option's words: abort, warn, ignore) */
#define SCR_STATS_JSON 3 /* stats=json */
#define SCR_ON_ERROR_ABORT 0
#define SCR_ON_ERROR_WARN 1
#define SCR_ON_ERROR_IGNORE 2

/* Atomic: scr_process_option_set changes them under the process lock
 * while other threads read them without it (plain reads and writes of
 * them are atomic, seq_cst: a mov on x86 for a read; every read is on a
 * slow path). */
typedef struct scr_proc_options {
#define SCR_PROC_OPT_FIELD_(type, name, def, lo, hi, doc) _Atomic uint64_t name;
  SCR_PROC_OPTIONS(SCR_PROC_OPT_FIELD_)
#undef SCR_PROC_OPT_FIELD_
} scr_proc_options;

typedef enum scr_arena_state {
  SCR_ARENA_OWNED = 1,      /* a thread holds it */
  SCR_ARENA_PARKED = 2,     /* on the parked list, waiting for a thread */
  SCR_ARENA_BORROWED = 3,   /* off the parked list while a borrower works on its heap (arena.c) */
} scr_arena_state;

#define SCR_REMOTE_RING 128 /* slots of an arena's ring of remote frees (a power of 2) */

/* An arena.
 *   ring:   blocks freed one at a time by threads that do not hold the
 *           arena: a pusher takes slot ring_tail (a CAS, below ring_limit)
 *           and stores the block there; the holder takes slots from
 *           ring_head on, up to the first empty one, setting each to NULL
 *           (eight blocks a line, no pointer followed through them).
 *           ring_head <= ring_tail <= ring_limit == ring_head as of the
 *           last drain + SCR_REMOTE_RING: no pusher writes a slot not yet
 *           taken; slot i is NULL for i < ring_head, i >= ring_tail, and
 *           until its pusher stores it.
 *   remote: blocks that go home in lists (a cache's, the pool's), and
 *           single ones when the ring is full, linked through their first
 *           word; pushed with CAS, taken all at once.
 *   ring_tail + remote_pushed - remote_drained == blocks waiting in both
 *   (when quiescent) */
/* Other arenas' blocks of one size class that the holder freed, kept for
 * its own mallocs of the class (linked through the first word; live in
 * their heaps all along). */
typedef struct scr_tcache_list {
  void *head;
  uint32_t room;                    /* blocks the list may still take: max less its length */
  uint32_t max;                     /* the list's cap (tcache.c: bytes and blocks per class) */
  /* the class's slot test (core/src/misuse.c: _scr_misuse.geom[class]), on
   * the line the free fast path reads anyway */
  uint64_t magic;
  uint32_t mask;
  uint32_t base;                    /* the cap before growth, as the claim, the last flush or a list's
                                       opening set it: max >= base while max != 0, and max - base
                                       blocks of cache_grown (tcache.c); the pool's batch size */
} scr_tcache_list;
_Static_assert(sizeof(scr_tcache_list) == 32, "two lists a line, none across two");

/* Three groups of fields, a cache line (or more) each, by who writes
 * them: other threads (remote, drain_req); nobody but at park and claim
 * (from hooks on), which every thread that frees a block of the arena
 * reads (its heap's hooks point there); and the holder (from id on). */
typedef struct scr_arena {
  _Atomic(void *) remote;           /* lock-free stack of remote frees */
  _Atomic int drain_req;            /* a pusher is draining this parked arena */
  _Atomic uint64_t remote_pushed;   /* blocks pushed on remote, counted by the pushers on the line their
                                       CAS just took (no shared counter) */
  _Atomic uint64_t ring_tail;       /* ring slots taken by pushers (cumulative) */
  _Atomic uint64_t ring_limit;      /* pushers take slots below it */
  _Alignas(64) struct _scr_heap_hooks hooks; /* the heap's hooks, arg = this arena */
  _Atomic int parked;               /* 1 while PARKED (_scr_arena_parked) */
  scr_heap *heap;                   /* this arena's heap */
  uintptr_t own_mark;               /* its segments' mark in the segment map (UINTPTR_MAX: none) */
  _Alignas(64) unsigned id;         /* index in creation order */
  unsigned state;                   /* scr_arena_state, under _scr_proc.lock */
  unsigned discarded;               /* pages returned since it was parked */
  uint64_t parked_ns;               /* when it was parked (monotonic) */
  uint64_t ops;                     /* holder's heap calls (ticks) */
  uint64_t ops_published;           /* ops at the last snapshot */
  _Atomic uint64_t remote_drained;  /* blocks taken from the ring and remote (holder; read by scr_stats) */
  uint64_t ring_head;               /* next slot of the ring to take (holder) */
  uint64_t keep;                    /* the heap's retain_bytes as last set (decay.c, arena.c) (holder) */
  uint64_t trim_seen;               /* trim_epoch as of its holder's last trim (holder) */
  unsigned poisoned;                /* discard made its free pages PROT_NONE */
  pthread_mutex_t snap_lock;        /* guards snap */
  struct scr_stats snap;            /* heap stats as of the last publish, less the blocks the
                                       holder keeps for reuse (tcache.c) */
  struct scr_stats snap_lent;       /* other arenas' blocks the holder kept, at that publish */
  _Atomic uint64_t used_published;  /* snap's heap_used (a parked heap's live bytes: arena.c) */
  uint64_t cache_grown;             /* bytes its lists' caps grew past their base (tcache.c) (holder) */
  uint64_t cache_emptied;           /* bit c: a malloc found list c empty since cache_gc_ms (tcache.c) (holder) */
  uint64_t cache_gc_ms;             /* when its lists were last looked at for blocks left unused, by
                                       this holder or the last (0: never) (holder) */
  scr_prof_countdown prof;          /* the sampler's countdown of scr_malloc & co. (holder; profile.c) */
  /* The thread cache: freed blocks per class (holder), from a line boundary
   * (no list straddles two lines: the fast paths touch one line a call).
   * One list more, for tag SCR_TAG_OTHER, always empty and full (room 0):
   * free looks a block's list up by its page's tag, untested, and a block
   * of no size class finds no room there. */
  _Alignas(64) scr_tcache_list tc[SCR_CLASS_COUNT + 1];
  /* a medium list closed until the cache_medium_after-th malloc of its class
   * (tcache.c): its cap once open (0: open, or never), the mallocs so far */
  uint8_t medium_cap[SCR_CLASS_COUNT - SCR_MEDIUM_FIRST];
  uint16_t medium_mallocs[SCR_CLASS_COUNT - SCR_MEDIUM_FIRST];
  struct scr_arena *next_all;       /* next on _scr_proc.all (set before publishing) */
  struct scr_arena *next_parked;    /* parked list (under lock) */
  _Alignas(64) _Atomic(void *) ring[SCR_REMOTE_RING]; /* remote frees one at a time (pushers, holder) */
} scr_arena;

/* tests/c/test_process_remote.c reads the remote stack at the arena's
 * start, and the batch length, without this header. */
_Static_assert(offsetof(scr_arena, remote) == 0, "the remote stack opens the arena");
_Static_assert(offsetof(scr_arena, own_mark) < 128, "what frees read is on one line");

/* Process-wide state. */
typedef struct scr_proc {
  pthread_mutex_t lock;             /* arena lists and states */
  _Atomic int inited;               /* 0 no, 1 yes */
  scr_proc_options opt;             /* process options */
  scr_options heap_opt;             /* options of every arena's heap */
  _Atomic(scr_arena *) all;         /* every arena, newest first (pushed under lock, read lock-free) */
  scr_arena *parked;                /* parked arenas, most recently parked first */
  unsigned narenas, nowned, nparked;/* counts (under lock) */
  /* A line written only at claims and parks: frees of other threads'
   * blocks read owned_hint (_scr_proc_alone). */
  _Alignas(64) _Atomic unsigned owned_hint; /* nowned, for readers without the lock */
  _Atomic uint64_t trim_epoch;      /* scr_trim calls so far: holders whose trim_seen differs trim at their next tick */
  /* The decay (decay.c): the delay now (0 until the first pass: decay_ms),
   * and a flag a heap's first dirty page (hooks.c) and the huge cache's
   * first block (huge_cache.c) set, for the holder's tick to wake the
   * helper; the rest is the helper's alone. */
  _Atomic uint64_t decay_delay_ms;
  _Atomic int decay_wake;
  _Atomic uint64_t helper_wake_ns;  /* when the helper looks next: 0 while it runs (or before it
                                       starts), UINT64_MAX while it waits for a post (helper.c) */
  uint64_t decay_next_ns;           /* the next pass (UINT64_MAX: none due until woken) */
  uint64_t decay_refaults_seen;     /* refaulted bytes as of the last pass */
  uint64_t decay_returned_now;      /* decay_bytes as of the last pass */
  uint64_t decay_returned_last;     /* and as of the pass before */
  uint64_t decay_moved_ns;          /* the last refault the back-off saw, or the last halving */
  uint8_t *pool;                    /* arena descriptors are carved here */
  size_t pool_left;                 /* bytes left in pool */
  int thp_mode;                     /* 0 never/absent, 1 madvise, 2 always (always: segments get MADV_NOHUGEPAGE, hooks.c) */
  int core_dumps;                   /* the kernel would write a core */
  /* discard helper */
  pthread_mutex_t helper_lock;      /* leaf lock for the helper's sleep */
  pthread_mutex_t decay_lock;       /* held by the helper through a decay step, the one time another
                                       thread writes an arena's heap (fork.c) */
  pthread_cond_t helper_cv;         /* wakes the helper */
  int helper_state;                 /* 0 none, 1 starting or running, 2 never (forked child) */
  int helper_kick;                  /* work was posted (under helper_lock) */
  scr_os_counters os;               /* the process layer's own syscalls (under lock or helper) */
} scr_proc;

SCR_INTERNAL extern scr_proc _scr_proc;
/* The calling thread's arena (NULL: none yet, or parked at its exit)
 * and that arena's word in the mark map (internal.h; SCR_SEGMAP_NO_MARK
 * with none), side by side: the free fast path compares p's word with
 * `fast` before it reads the arena, one thread-local address for all.
 * Set by _scr_tl_set only. */
typedef struct scr_tl {
  scr_arena *arena;
  unsigned fast;
  /* SCR_SMALL_MAX + 1 with an arena, else 0: malloc's one test, n below
   * it, says both that n is small and that there is an arena */
  size_t small_end;
} scr_tl;
SCR_INTERNAL extern __thread scr_tl _scr_tl __attribute__((tls_model("initial-exec")));
static inline void _scr_tl_set(scr_arena *a) {
  _scr_tl.arena = a;
  _scr_tl.fast = a != NULL ? _scr_segmap_fast_of(a->own_mark) : SCR_SEGMAP_NO_MARK; /* (UINTPTR_MAX: none fits) */
  _scr_tl.small_end = a != NULL ? SCR_SMALL_MAX + 1 : 0;
}

/* Cumulative counters, updated with relaxed atomics: each the field of
 * scr_process_stats of its name (scralloc.h says what it counts; stats.c
 * copies them), and the remote frees of threads that hold no arena. */
#define SCR_PROC_COUNTERS(X)                                                             \
  X(claims) X(parks) X(foreign_frees) X(double_frees) X(interior_frees)                  \
  X(unallocated_frees) X(realloc_moves) X(discards) X(discard_bytes)                     \
  X(dontdump_segments) X(parked_drains) X(pool_puts) X(pool_takes) X(cache_grows)        \
  X(cache_gc_blocks)                                                                     \
  X(trim_answers) X(trim_answer_bytes) X(interior_bytes) X(interior_lazy_bytes)          \
  X(huge_cache_puts) X(huge_cache_hits) X(huge_cache_evicted) X(huge_cache_decayed)      \
  X(decay_bytes) X(decay_passes) X(decay_backoffs) X(forks)

typedef struct scr_proc_counters {
#define SCR_PROC_CTR_FIELD_(name) _Atomic uint64_t name;
  SCR_PROC_COUNTERS(SCR_PROC_CTR_FIELD_)
#undef SCR_PROC_CTR_FIELD_
} scr_proc_counters;

SCR_INTERNAL extern scr_proc_counters _scr_pc;
#define SCR_PC_ADD(name, n) atomic_fetch_add_explicit(&_scr_pc.name, (uint64_t)(n), memory_order_relaxed)

/* options.c */
SCR_INTERNAL void _scr_proc_options_init(scr_proc_options *o);
SCR_INTERNAL void _scr_proc_options_from_env(scr_proc_options *o);
/* The option's id (internal.h: SCR_OPT_<name>), or -1 when nothing was
 * set (no process option of that name, a bad value, out of range). */
SCR_INTERNAL int _scr_proc_option_set(scr_proc_options *o, const char *name, const char *value);
SCR_INTERNAL uint64_t _scr_proc_option_get(const scr_proc_options *o, const char *name);

/* os_linux.c: the OS calls of the process layer */
SCR_INTERNAL int _scr_proc_thp_mode(void);
SCR_INTERNAL int _scr_proc_core_dumps(void);
SCR_INTERNAL uint64_t _scr_proc_now_ns(void);
SCR_INTERNAL void *_scr_proc_map(size_t size);
/* The start of a small file (/proc, /sys) in buf, NUL-terminated: its
 * length, or -1 when it cannot be read. */
SCR_INTERNAL ssize_t _scr_proc_read_file(const char *path, char *buf, size_t len);
SCR_INTERNAL int _scr_proc_protect(void *p, size_t size, int accessible);

/* state.c: the process-wide state and the thread's arena (storage), and
 * the initialization */
SCR_INTERNAL void _scr_proc_init_slow(void);
/* No thread but the caller holds an arena; mine: the caller's (or NULL). */
static inline int _scr_proc_alone(const scr_arena *mine) {
  return atomic_load_explicit(&_scr_proc.owned_hint, memory_order_relaxed) <= (mine != NULL ? 1u : 0u);
}
static inline void _scr_proc_init(void) {
  if (SCR_UNLIKELY(!atomic_load_explicit(&_scr_proc.inited, memory_order_acquire))) _scr_proc_init_slow();
}
/* The tag of the page that holds p, a block in seg, times 4 (types.h:
 * page_tag4, as it is stored: an index the free fast path scales in the
 * address), and the page's index: the tag, not the descriptor, because
 * the owner writes the descriptor on every call and the tag line only
 * when the page changes kind.  Segments are aligned to their size, so the
 * index is p's page within its aligned SCR_SEGMENT_SIZE: for a NORMAL
 * segment that is p's page in seg; a HUGE segment's tags are all OTHER,
 * whichever SCR_SEGMENT_SIZE of it p lies in. */
static inline unsigned _scr_block_tag_x4(const scr_segment *seg, const void *p, uintptr_t *idx) {
  *idx = ((uintptr_t)p >> SCR_PAGE_SHIFT) & (SCR_PAGES_PER_SEGMENT - 1);
  return seg->page_tag4[*idx];
}
static inline unsigned _scr_block_tag(const scr_segment *seg, const void *p, uintptr_t *idx) {
  return _scr_block_tag_x4(seg, p, idx) / 4;
}
/* misuse.c: bad pointers given to free, realloc & co. */
SCR_INTERNAL int _scr_proc_classify(const void *p, uintptr_t e);
SCR_INTERNAL void _scr_proc_misuse(const char *call, const void *p, int kind) __attribute__((cold, noinline));
SCR_INTERNAL int _scr_proc_check(const char *call, const void *p);
/* p, in seg on page idx, is not plainly a live block of an arena: not
 * one of the slots its page carved (the slot test, core/src/misuse.c,
 * against the page's slot_limit, which its holder writes: a relaxed load
 * that needs the page's index only), or it holds the freed-block key.
 * Always true for tag OTHER (large blocks, huge ones, free pages), whose
 * slot_limit and magic are 0.  magic, mask: the slot geometry of p's tag
 * (_scr_misuse.geom, or its copy on the tag's cache list, a line the hit
 * path reads anyway); key: _scr_misuse.key as the caller read it (read
 * again after the block's first word is written, an instruction more:
 * the compiler cannot tell that the two do not alias). */
static inline bool _scr_proc_block_suspect(const scr_segment *seg, const void *p, uintptr_t idx, uint64_t magic,
                                           uint32_t mask, uint64_t key) {
  uint64_t off = (uintptr_t)p & mask;
  return _scr_slot_beyond(seg, idx, off * magic) || _scr_block_word1(p) == key;
}
/* Marks p, a block the caller frees, free (the key in its second word,
 * core/src/misuse.c): true when this call did, false when it was free
 * already.  One atomic exchange: of two frees of one block, racing or not,
 * exactly one gets true.  Every free takes it before the block leaves the
 * freeing thread (a cache list, the pool, a remote stack, the heap), but
 * the holder's own small blocks on its fast paths (scr_free's list push,
 * proc_free_refused), which store the key plainly: an exchange there
 * costs every malloc/free pair (docs/misuse.md).  So a free by the owner
 * racing another thread's free of the same block can let both through. */
SCR_NO_ASAN static inline bool _scr_proc_claim(void *p) {
  uint64_t key = _scr_misuse.key;
  return __atomic_exchange_n(&((uint64_t *)p)[1], key, __ATOMIC_RELAXED) != key;
}

#endif /* SCR_PROCESS_H */
