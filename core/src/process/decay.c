/* The return policy: what free memory goes back to the OS, and when.
 *
 * Decay by age, backed off on refaults (docs/process.md, "How it
 * works", says it for users).  A freed page of any arena, and a freed huge
 * block in the process's cache, stays committed, reused first, until it
 * has gone unused for the decay delay; then it goes back, oldest first,
 * on one clock for the whole process, without a call from the program.
 *   - Pages: two generations per heap (segment.c); a pass every delay / 2
 *     gives back the older and ages the newer, run by the holder at a
 *     tick or by the helper, whichever comes first once it is due.
 *   - Huge blocks: each goes back once it has waited the delay; a request
 *     that grows what the process holds gives back as many bytes of the
 *     oldest (huge_cache.c).  Pages do not: giving them back as the heap
 *     grows faults them in again at every step of a program that reuses
 *     large blocks.
 *   - Refaults (memory taken again within twice the delay of its return)
 *     of at least an eighth of what went back double the delay, up to
 *     decay_max_ms; twice the delay without one halves it, down to
 *     decay_ms (by time, not passes).
 *   - Threads' caches: a list no malloc found empty for the delay goes
 *     home at its holder's tick (tcache.c), and its pages after them.
 *   - A parked arena keeps retain_bytes (arena.c), the rest after the
 *     delay (discard.c); retain_max caps what the held arenas keep.
 * Layer: arenas (the arenas' state is not changed here, only their heaps'
 * dirty pages, under each heap's lock).  Owns the delay and the
 * back-off's state (the helper alone runs _scr_decay_step) and each held
 * arena's share of retain_max (its holder). */
#include "arenas.h"

/* The retain_bytes of a held arena's heap: its share of retain_max, or
 * no cap.  (A parked arena's is the arenas' retain_bytes: arena.c.) */
static uint64_t decay_share(void) {
  scr_proc *P = &_scr_proc;
  uint64_t cap = P->opt.retain_max;
  if (cap == 0) return SIZE_MAX;
  unsigned owned = atomic_load_explicit(&P->owned_hint, memory_order_relaxed);
  uint64_t share = cap / (owned ? owned : 1);
  return share > P->heap_opt.retain_bytes ? share : P->heap_opt.retain_bytes;
}

void _scr_decay_keep_update(scr_arena *a) {
  uint64_t want = decay_share();
  if (want == a->keep) return;
  a->keep = want;
  _scr_heap_set_retain_bytes(a->heap, (size_t)want);
}

/* The back-off, after a pass at now_ns: refaulted, the bytes refaulted
 * since the last pass; returned, what went back in the last delay. */
static void decay_backoff(uint64_t now_ns, uint64_t refaulted, uint64_t returned) {
  scr_proc *P = &_scr_proc;
  uint64_t d = _scr_decay_delay_ms(), base = P->opt.decay_ms, max = P->opt.decay_max_ms;
  if (max < base) max = base;
  if (refaulted >= SCR_PAGE_SIZE && refaulted * 8 >= returned) {
    P->decay_moved_ns = now_ns;
    if (d < max) {
      d = d * 2 < max ? d * 2 : max;
      SCR_PC_ADD(decay_backoffs, 1);
    }
  } else if (refaulted == 0 && d > base && now_ns - P->decay_moved_ns >= 2 * d * 1000000u) {
    P->decay_moved_ns = now_ns;
    d = d / 2 > base ? d / 2 : base;
  }
  atomic_store_explicit(&P->decay_delay_ms, d, memory_order_relaxed);
}

bool _scr_decay_arena(scr_arena *a) {
  bool left = false;
  size_t n = _scr_heap_decay(a->heap, _scr_decay_delay_ms(), &left);
  if (n) SCR_PC_ADD(decay_bytes, n);
  return left;
}

uint64_t _scr_decay_step(uint64_t now_ns) {
  scr_proc *P = &_scr_proc;
  uint64_t huge_back = 0, huge_next = _scr_huge_cache_decay(now_ns, false, &huge_back);
  if (huge_back) SCR_PC_ADD(decay_bytes, huge_back);
  /* due, or none was due: the helper was woken (a heap's first dirty
   * page, a park, a cached huge block) */
  if (now_ns >= P->decay_next_ns || P->decay_next_ns == UINT64_MAX) {
    uint64_t refaults = _scr_huge_cache_refaults();
    bool left_any = false;
    for (scr_arena *a = atomic_load_explicit(&P->all, memory_order_acquire); a; a = a->next_all) {
      left_any |= _scr_decay_arena(a);
      refaults += _scr_heap_refault_bytes(a->heap);
    }
    SCR_PC_ADD(decay_passes, 1);
    /* what went back in the last delay: since the pass before the last */
    uint64_t returned = atomic_load_explicit(&_scr_pc.decay_bytes, memory_order_relaxed) +
                        atomic_load_explicit(&_scr_pc.discard_bytes, memory_order_relaxed);
    decay_backoff(now_ns, refaults - P->decay_refaults_seen, returned - P->decay_returned_last);
    P->decay_refaults_seen = refaults;
    P->decay_returned_last = P->decay_returned_now;
    P->decay_returned_now = returned;
    uint64_t half_ms = _scr_decay_delay_ms() / 2;
    P->decay_next_ns = left_any ? now_ns + (half_ms ? half_ms : 1) * 1000000u : UINT64_MAX;
  }
  return huge_next < P->decay_next_ns ? huge_next : P->decay_next_ns;
}
