/* The arenas' layer of the process allocator.
 * Layer: arenas.  An arena is one scr_heap with its state (owned, parked,
 * borrowed); this layer claims, parks, borrows and publishes arenas, runs
 * the heap's hooks, the huge-block cache, the return policy (the decay),
 * the discard, and the helper thread that runs the decay and the discard.
 * It knows nothing of the thread's cache, the pool or the entry points
 * (caches.h, entry.h): where an arena changes hands with a cache, the
 * caches' layer flushes or sets the cache and then calls down here
 * (holder.c).  Files, bottom up: hooks.c huge_cache.c decay.c
 * validate.c arena.c discard.c helper.c.  Words: docs/process.md's
 * glossary. */
#ifndef SCR_PROCESS_ARENAS_H
#define SCR_PROCESS_ARENAS_H

#include "process.h"

/* hooks.c: what the arena does when its heap maps a segment or gets its
 * first dirty page */
SCR_INTERNAL extern const struct _scr_heap_hooks _scr_arena_hooks;
#define SCR_ARENA_POLL_EVERY 32 /* heap calls between the holder's ticks (a power of 2; caches.h) */
/* The decay delay now (decay.c backs it off), in ms. */
static inline uint64_t _scr_decay_delay_ms(void) {
  uint64_t d = atomic_load_explicit(&_scr_proc.decay_delay_ms, memory_order_relaxed);
  return d ? d : _scr_proc.opt.decay_ms;
}
/* A holder's tick: true when a heap got its first dirty page or the huge
 * cache its first block since the helper last looked (the caller wakes
 * the helper). */
static inline bool _scr_decay_tick(void) {
  return SCR_UNLIKELY(atomic_load_explicit(&_scr_proc.decay_wake, memory_order_relaxed)) &&
         atomic_exchange_explicit(&_scr_proc.decay_wake, 0, memory_order_relaxed);
}

/* huge_cache.c: the process's freed huge blocks, for any thread */
SCR_INTERNAL void _scr_huge_cache_install(struct _scr_heap_hooks *hooks);
SCR_INTERNAL uint64_t _scr_huge_cache_bytes(void);
SCR_INTERNAL uint64_t _scr_huge_cache_decay(uint64_t now_ns, bool all, uint64_t *returned);
SCR_INTERNAL uint64_t _scr_huge_cache_refaults(void); /* bytes of requests missed soon after a return */

/* decay.c: the return policy */
/* The helper's pass when it is due (every arena's heap and the huge
 * cache); returns when the next is due (UINT64_MAX: when woken). */
SCR_INTERNAL uint64_t _scr_decay_step(uint64_t now_ns);
/* a's heap's pass when it is due (its holder's tick, the helper); true
 * while dirty pages remain */
SCR_INTERNAL bool _scr_decay_arena(scr_arena *a);
SCR_INTERNAL void _scr_decay_keep_update(scr_arena *a); /* a held arena's share of retain_max (claim, ticks) */
SCR_INTERNAL void _scr_huge_cache_counts(uint64_t *blocks, uint64_t *bytes, uint64_t *munmaps, uint64_t *failures);
SCR_INTERNAL void _scr_huge_cache_lock(void);   /* fork: held across it */
SCR_INTERNAL void _scr_huge_cache_unlock(void);

/* validate.c */
SCR_INTERNAL bool _scr_proc_validate_locked(void);
#if SCR_DEBUG >= 3
#define scr_validate_proc() ((void)(_scr_proc_validate_locked() || (_scr_assert_fail("process validator", __FILE__, __LINE__), 0)))
#else
#define scr_validate_proc() ((void)0)
#endif

/* arena.c */
/* A thread takes an arena (a parked one, or a new one) as its own
 * (_scr_tl.arena).  *alone: no other thread held an arena.  NULL (errno
 * ENOMEM) when none can be had.  The caller sets its cache (holder.c). */
SCR_INTERNAL scr_arena *_scr_arena_claim(bool *alone);
/* The holder gives a up, its cache and batches already flushed (the
 * caller then wakes the helper, whose decay and discard take what a
 * parked arena gives back: helper.c). */
SCR_INTERNAL void _scr_arena_park(scr_arena *a);
/* A fresh snapshot of a's figures for the stats: st, a's heap stats less
 * the blocks its holder keeps aside, and lent, the other arenas' blocks
 * it keeps (holder.c computes them for a held arena).
 * _scr_arena_publish: the same for an arena whose cache is empty
 * (parked, borrowed, or flushed). */
SCR_INTERNAL void _scr_arena_publish_figures(scr_arena *a, const struct scr_stats *st, const struct scr_stats *lent);
SCR_INTERNAL void _scr_arena_publish(scr_arena *a);
SCR_INTERNAL void _scr_arena_borrow_locked(scr_arena *a, scr_arena *prev);
SCR_INTERNAL void _scr_arena_unborrow(scr_arena *a, scr_arena *prev);
SCR_INTERNAL void _scr_arena_poison(scr_arena *a);   /* discard=poison: its free pages PROT_NONE */
SCR_INTERNAL void _scr_arena_unpoison(scr_arena *a); /* whoever takes a poisoned arena, first */
/* Everything the held arena a (its cache empty) can give back goes back:
 * the frees waiting for it, its free pages (decay_ms: counted as the
 * decay's at that delay, refaults included; 0: asked for), the free runs
 * inside used pages; its free lists relinked in address order, its
 * figures published.  Returns the bytes. */
SCR_INTERNAL size_t _scr_arena_give_back(scr_arena *a, uint64_t decay_ms);
/* 1 while a is PARKED (pushers then drain it now and then; frees of its
 * blocks do not keep them): set and cleared under _scr_proc.lock, read
 * without it. */
static inline int _scr_arena_parked(const scr_arena *a) {
  return atomic_load_explicit(&a->parked, memory_order_relaxed);
}
static inline void _scr_arena_set_parked(scr_arena *a, int parked) {
  atomic_store_explicit(&a->parked, parked, memory_order_relaxed);
}
/* The arena's remote ring and stack (remote.c pushes on them): whoever
 * holds the arena frees what waits there into its heap. */
SCR_INTERNAL void _scr_remote_drain(scr_arena *a);
SCR_INTERNAL void _scr_remote_after_fork_child(scr_arena *a);
static inline bool _scr_remote_waiting(const scr_arena *a) {
  return atomic_load_explicit(&a->ring[a->ring_head & (SCR_REMOTE_RING - 1)], memory_order_relaxed) != NULL ||
         atomic_load_explicit(&a->remote, memory_order_relaxed) != NULL;
}
static inline void _scr_remote_poll(scr_arena *a) {
  if (SCR_UNLIKELY(_scr_remote_waiting(a))) _scr_remote_drain(a);
}

/* discard.c */
/* return a held arena's free memory; decay_ms: as the decay's at that
 * delay (refaults counted), 0 for scr_trim */
SCR_INTERNAL size_t _scr_discard_arena(scr_arena *a, uint64_t decay_ms);
/* The helper's look at the parked arenas: discards the oldest one that is
 * due (true), or lowers *wait_until to when one will be. */
SCR_INTERNAL bool _scr_discard_step(uint64_t now, uint64_t *wait_until);

/* helper.c: the helper thread (the decay, the discard) */
SCR_INTERNAL void _scr_helper_post(void); /* wake it, starting it the first time; never under a lock */
/* The helper looks by due_ns without a post: it waits for a time no
 * later (not for a post, and not running, when it may have looked). */
static inline bool _scr_helper_looks_by(uint64_t due_ns) {
  uint64_t at = atomic_load_explicit(&_scr_proc.helper_wake_ns, memory_order_relaxed);
  return at != 0 && at != UINT64_MAX && at <= due_ns;
}
SCR_INTERNAL void _scr_helper_after_fork_child(void);

#endif /* SCR_PROCESS_ARENAS_H */
