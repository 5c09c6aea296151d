/* Arenas: claimed by a thread on its first allocation, parked when it
 * exits, claimed again by the next thread that needs one.  Also the
 * process allocator's initialization and its fork handlers. */
#include "process.h"
#include <errno.h>
#include <string.h>

scr_proc _scr_proc = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .helper_lock = PTHREAD_MUTEX_INITIALIZER,
    .helper_cv = PTHREAD_COND_INITIALIZER,
};
scr_proc_counters _scr_pc;
__thread scr_arena *_scr_tl_arena __attribute__((tls_model("initial-exec")));

static pthread_mutex_t proc_init_lock = PTHREAD_MUTEX_INITIALIZER;

static void proc_thread_exit(void *arg);

/* Runs inside the first allocation of the process: nothing here may call
 * malloc (getenv, open/read, pthread_key_create do not). */
void _scr_proc_init_slow(void) {
  pthread_mutex_lock(&proc_init_lock);
  if (!atomic_load_explicit(&_scr_proc.inited, memory_order_relaxed)) {
    scr_proc *P = &_scr_proc;
    _scr_misuse_init();
    _scr_proc_options_init(&P->opt);
    _scr_proc_options_from_env(&P->opt);
    scr_options_init(&P->heap_opt);
    /* Arena defaults (the environment still wins).  Freed pages stay
     * committed for 20 ms and are taken first by any class or large block
     * (a free burst followed by an allocation burst costs no fault and no
     * madvise), within 512 KiB per arena together with the retained
     * pages (one per class at most): every byte kept is multiplied by the
     * number of threads (the churn benchmark with 17 arenas peaked 7 MiB
     * higher with 1 MiB, 14 MiB with 2 MiB and a 10 ms delay, and faulted
     * more with less).  Freed pages past that go back in batches of
     * 256 KiB (or at the next purge pass), reused first meanwhile: one
     * process_madvise instead of an madvise per page (python3 with
     * PYTHONMALLOC=malloc: 344 -> 70 calls; 30 paired rounds against
     * immediate decommits, the churn 20: 0.979 of the wall there, the
     * churn 0.959, the threaded stress 0.987, max RSS within 0.2%;
     * 512 KiB did as well
     * for speed but put the stress's max RSS up 1.7%).
     * The large cache then holds huge mappings only (4 MiB).  What a
     * parked arena keeps goes back through the discard. */
    P->heap_opt.retain = 1;
    P->heap_opt.retain_bytes = (size_t)512 << 10;
    P->heap_opt.purge_delay_ms = 20;
    P->heap_opt.decommit_batch = (size_t)256 << 10;
    P->heap_opt.large_cache = 8;
    P->heap_opt.large_cache_bytes = (size_t)4 << 20;
    scr_options_from_env(&P->heap_opt);
    _scr_proc_unknown_env_names();
    atomic_store(&_scr_verbose, P->opt.verbose != 0);
    P->thp_mode = _scr_proc_thp_mode();
    P->core_dumps = _scr_proc_core_dumps();
    P->populate_ok = P->opt.prefault ? _scr_proc_populate_probe() : 0;
    P->ncpus = _scr_proc_cpus();
    P->delay_ms = P->opt.discard_delay_ms;
    P->main_tid = _scr_proc_gettid();
    /* The first thread (the main thread, as a rule) holds an arena of its
     * own: it is the one that frees what finished threads left (the
     * churn's last phase, and its RSS once that is done, rely on it), and
     * a process's startup is busy anyway. */
    _scr_tl_share = SCR_SHARE_SOLO;
    if (pthread_key_create(&P->key, proc_thread_exit) != 0)
      _scr_report(SCR_ENOMEM, "no pthread key: arenas of exiting threads will not be parked");
    atomic_store_explicit(&P->inited, 1, memory_order_release);
  }
  pthread_mutex_unlock(&proc_init_lock);
}

/* A new arena, under the lock.  Descriptors are carved from mappings of
 * our own and never freed: an arena lives as long as the process. */
static scr_arena *proc_arena_new(void) {
  scr_proc *P = &_scr_proc;
  size_t sz = (sizeof(scr_arena) + 63) & ~(size_t)63;
  if (P->pool_left < sz) {
    size_t chunk = (size_t)256 << 10;
    uint8_t *m = _scr_proc_map(chunk);
    if (m == NULL) return NULL;
    P->pool = m;
    P->pool_left = chunk;
  }
  scr_heap *h = scr_heap_new(&P->heap_opt);
  if (h == NULL) return NULL;
  scr_arena *a = (scr_arena *)P->pool;
  P->pool += sz;
  P->pool_left -= sz;
  a->heap = h;
  a->id = P->narenas++;
  pthread_mutex_init(&a->snap_lock, NULL);
  a->hooks = _scr_arena_hooks;
  _scr_huge_cache_install(&a->hooks);
  a->hooks.arg = a;
  /* Its segments' mark in the segment map: id + 1 while that fits (0,
   * unmarked, is every other heap's), else none, and own_mark then
   * matches no entry (past 4 Mi arenas: their blocks skip the threads'
   * caches and go to their heaps, malloc.c's slow side). */
  uintptr_t mark = (uintptr_t)a->id + 1 <= SCR_SEGMAP_MARK_MASK ? (uintptr_t)a->id + 1 : 0;
  a->own_mark = mark != 0 ? mark : UINTPTR_MAX;
  _scr_heap_set_owner(h, a, mark);
  _scr_heap_set_hooks(h, &a->hooks);
  scr_heap_stats(h, &a->snap);
  a->next_all = atomic_load_explicit(&P->all, memory_order_relaxed);
  atomic_store_explicit(&P->all, a, memory_order_release);
  return a;
}

/* The parked arena with the most committed bytes not in live blocks
 * (free slots, retained and dirty pages), which the new holder fills
 * before it faults anything new; the most recently parked among equals;
 * NULL when none has min_room.  Taken off the parked list; parked_room
 * becomes the most room among the others.  Under the lock (which lets us
 * read parked heaps). */
static scr_arena *proc_take_parked(uint64_t min_room) {
  scr_proc *P = &_scr_proc;
  scr_arena *best = NULL, *best_prev = NULL, *prev = NULL;
  uint64_t best_free = 0, second = 0;
  for (scr_arena *a = P->parked; a; prev = a, a = a->next_parked) {
    uint64_t f = _scr_heap_unused_bytes(a->heap);
    if (best == NULL || f > best_free) {
      if (best) second = best_free;
      best = a, best_prev = prev, best_free = f;
    } else if (f > second) second = f;
  }
  if (best == NULL || best_free < min_room) {
    atomic_store_explicit(&P->parked_room, best_free, memory_order_relaxed);
    return NULL;
  }
  atomic_store_explicit(&P->parked_room, second, memory_order_relaxed);
  if (best_prev) best_prev->next_parked = best->next_parked; else P->parked = best->next_parked;
  best->next_parked = NULL;
  return best;
}

void _scr_arena_room_locked(scr_arena *a) {
  uint64_t f = _scr_heap_unused_bytes(a->heap);
  if (f > atomic_load_explicit(&_scr_proc.parked_room, memory_order_relaxed))
    atomic_store_explicit(&_scr_proc.parked_room, f, memory_order_relaxed);
}

/* The budget of free pages kept committed (retained and dirty) and of
 * cached large blocks: one for the process, shared by the threads holding
 * arenas, never below the arenas' retain_bytes.  It is retain_budget plus
 * retain_ratio percent of the bytes the arenas' live blocks' pages take
 * (busy_bytes) beyond retain_ratio_above (64 MiB: a smaller program
 * keeps what it kept before, python3 with PYTHONMALLOC=malloc peaked 10%
 * higher without it), as Go's scavenger works to a goal proportional to the
 * heap: a program that frees and allocates bursts as large as what it
 * keeps live reuses the freed pages without an madvise and a fault per
 * page (the RFC-shaped churn, 16 threads of 64 MiB bursts: 40,000
 * madvise calls and 4x glibc's time with a fixed 4 MiB budget; 1.16 M
 * faults with retain_ratio 100, 0.59 M with 200, as many as with no
 * bound at all), while a
 * small program keeps little, and the budget does not grow with the
 * number of threads.  arena_keep holds the fixed part's share; the holder
 * adds the proportional part at its ticks (proc_keep_update).  Under the
 * lock when the owned count changes. */
static void proc_keep_share_locked(void) {
  scr_proc *P = &_scr_proc;
  uint64_t share = P->opt.retain_budget / (P->nowned ? P->nowned : 1);
  if (share < P->heap_opt.retain_bytes) share = P->heap_opt.retain_bytes;
  atomic_store_explicit(&P->arena_keep, share, memory_order_relaxed);
}

/* The bytes a's live blocks' pages take as a's holder last published
 * them, summed over every arena in _scr_proc.busy_bytes: the holder adds
 * the change when it is 1 MiB or more (at ticks and snapshots), so the
 * sum is off by less than 1 MiB per arena. */
void _scr_arena_busy_publish(scr_arena *a, bool exact) {
  uint64_t busy = _scr_heap_busy_bytes(a->heap);
  uint64_t d = busy > a->busy_published ? busy - a->busy_published : a->busy_published - busy;
  if (d == 0 || (!exact && d < ((uint64_t)1 << 20))) return;
  atomic_fetch_add_explicit(&_scr_proc.busy_bytes, busy - a->busy_published, memory_order_relaxed); /* modulo 2^64 */
  a->busy_published = busy;
}

static uint64_t proc_budget_ratio_part(void) {
  uint64_t busy = atomic_load_explicit(&_scr_proc.busy_bytes, memory_order_relaxed);
  uint64_t above = _scr_proc.opt.retain_ratio_above;
  if (busy >> 62) busy = 0; /* a transient negative sum while arenas publish */
  return busy > above ? (busy - above) / 100 * _scr_proc.opt.retain_ratio : 0;
}

uint64_t _scr_proc_budget(void) { return _scr_proc.opt.retain_budget + proc_budget_ratio_part(); }

/* The huge-block cache's part of it: the fixed part and a quarter of the
 * proportional one.  Resized cached blocks keep their tails (segment.c),
 * so more cached bytes mean fewer faults but a higher peak: the issue's
 * large-block program at one thread (proc_large_reuse 1 400, one run
 * each, glibc 1.49 s and 613 MB max RSS): a quarter 1.55 s and 537 MB, a
 * half 1.49 s and 625 MB, all of it 1.98 s and 744 MB (the peak's
 * growth cost more than the faults it saved), an eighth 1.95 s. */
uint64_t _scr_proc_budget_huge(void) { return _scr_proc.opt.retain_budget + proc_budget_ratio_part() / 4; }

/* The arena's share of the budget now: the fixed part's share plus the
 * proportional part, less the huge blocks the process caches
 * (huge_cache.c), over the threads holding arenas. */
static uint64_t proc_keep_want(void) {
  scr_proc *P = &_scr_proc;
  uint64_t want = atomic_load_explicit(&P->arena_keep, memory_order_relaxed);
  uint64_t ratio = proc_budget_ratio_part(), cached = _scr_huge_cache_bytes();
  unsigned owned = atomic_load_explicit(&P->owned_hint, memory_order_relaxed);
  ratio = ratio > cached ? ratio - cached : 0;
  return want + ratio / (owned ? owned : 1);
}

/* The holder moves its heap to the current share (at claim, and at ticks);
 * a share a quarter or more below the last gives back what the heap keeps
 * above it (a smaller change waits, so that a budget moving with the
 * heap does not purge at every tick).  Cached large blocks count in the
 * same share. */
static void proc_keep_update(scr_arena *a) {
  uint64_t want = proc_keep_want();
  if (want == 0 || want == a->keep) return;
  if (want < a->keep && want > a->keep - a->keep / 4) return;
  a->keep = want;
  _scr_heap_set_retain_bytes(a->heap, (size_t)want);
}

/* Under the lock: a, off the parked list or new, is held from now on. */
static void proc_own_locked(scr_arena *a, bool was_parked) {
  scr_proc *P = &_scr_proc;
  if (was_parked) {
    P->nparked--;
    _scr_arena_set_parked(a, 0);
    atomic_store_explicit(&a->drain_req, 0, memory_order_relaxed);
  }
  a->state = SCR_ARENA_OWNED;
  _scr_recycle_init(a, P->nowned == 0);
  P->nowned++;
  atomic_store_explicit(&P->owned_hint, P->nowned, memory_order_relaxed);
  proc_keep_share_locked();
  scr_validate_proc();
}

/* The calling thread's side of taking a (after proc_own_locked); the
 * shared arena (share.c) is nobody's own: no thread-local, no exit hook. */
static void proc_adopt(scr_arena *a, unsigned poisoned, bool shared) {
  scr_proc *P = &_scr_proc;
  a->shared = shared;
  a->worker = shared || _scr_proc_gettid() != P->main_tid;
  a->discarded = 0;
  a->carved_mark = a->carved;
  a->trim_seen = atomic_load_explicit(&P->trim_epoch, memory_order_relaxed);
  if (poisoned) _scr_discard_unpoison(a);
  if (a->held) { /* the caps again: what they do not allow goes back now */
    a->held = 0;
    _scr_heap_set_caps(a->heap, P->heap_opt.retain, (size_t)a->keep);
  }
  if (!shared) {
    _scr_tl_arena = a;
    pthread_setspecific(P->key, a);
  }
  SCR_PC_ADD(claims, 1);
  _scr_remote_poll(a);
  proc_keep_update(a);
}

static scr_arena *proc_claim(bool shared) {
  _scr_proc_init();
  scr_proc *P = &_scr_proc;
  uint64_t now = _scr_proc_now_ns();
  pthread_mutex_lock(&P->lock);
  scr_arena *a = proc_take_parked(0);
  bool was_parked = a != NULL;
  if (a == NULL) a = proc_arena_new();
  if (a == NULL) {
    pthread_mutex_unlock(&P->lock);
    errno = ENOMEM;
    return NULL;
  }
  proc_own_locked(a, was_parked);
  _scr_discard_on_claim(now);
  unsigned poisoned = a->poisoned;
  pthread_mutex_unlock(&P->lock);
  proc_adopt(a, poisoned, shared);
  return a;
}

scr_arena *_scr_arena_claim(void) {
  _scr_tl_share = SCR_SHARE_SOLO;
  return proc_claim(false);
}

/* The shared arena, for share.c (under its mutex): claimed as a thread
 * claims one, without becoming the caller's own. */
scr_arena *_scr_arena_claim_shared(void) { return proc_claim(true); }

/* The holder's heap is carving fresh memory while a parked arena has room
 * (switch_bytes or more not in live blocks): the holder parks its arena
 * and takes that one.  Why: a thread that exits leaves half-used pages
 * that only the next thread to start would fill; a program whose threads
 * finish at different times would otherwise grow while the finished
 * threads' room waits (the churn benchmark's peak).  The blocks left in
 * the old arena stay valid; the holder's frees of them become remote
 * frees, which pushers drain.  Called from the tick, outside heap calls. */
static void proc_switch(scr_arena *a) {
  scr_proc *P = &_scr_proc;
  /* Worth it only for twice the room the holder has (free slots of other
   * classes): else two threads would trade arenas back and forth. */
  uint64_t own = _scr_heap_unused_bytes(a->heap), want = P->opt.switch_bytes;
  if (want < 2 * own) want = 2 * own;
  a->carved_mark = a->carved; /* found none: look again after SCR_SWITCH_AFTER */
  pthread_mutex_lock(&P->lock);
  scr_arena *b = proc_take_parked(want);
  if (b) proc_own_locked(b, true);
  unsigned poisoned = b ? b->poisoned : 0;
  pthread_mutex_unlock(&P->lock);
  if (b == NULL) return;
  _scr_arena_park(a);
  proc_adopt(b, poisoned, false);
  SCR_PC_ADD(switches, 1);
}

/* Borrowing: a thread that does not hold parked arena a works on its heap
 * (remote.c: a pusher frees what waits on its stack; lend.c: a growing
 * thread takes free slots; discard.c: the helper returns its pages) with a
 * off the parked list, so that no claim, switch or other borrower takes it
 * meanwhile.  Under the lock; prev is a's
 * predecessor on the list (NULL at its head).  The borrower unpoisons a
 * discarded arena's pages (after the lock) before it touches them. */
void _scr_arena_borrow_locked(scr_arena *a, scr_arena *prev) {
  scr_proc *P = &_scr_proc;
  if (prev) prev->next_parked = a->next_parked; else P->parked = a->next_parked;
  a->next_parked = NULL;
  a->state = SCR_ARENA_DISCARDING;
  _scr_arena_set_parked(a, 0);
  P->nparked--;
}

/* The borrower parks a again where it was, if prev is still parked (so
 * that claims keep their order), else first; takes the lock. */
void _scr_arena_unborrow(scr_arena *a, scr_arena *prev) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_lock(&P->lock);
  a->state = SCR_ARENA_PARKED;
  _scr_arena_set_parked(a, 1);
  if (prev && prev->state == SCR_ARENA_PARKED) {
    a->next_parked = prev->next_parked;
    prev->next_parked = a;
  } else {
    a->next_parked = P->parked;
    P->parked = a;
  }
  P->nparked++;
  _scr_arena_room_locked(a);
  atomic_store_explicit(&a->drain_req, 0, memory_order_relaxed);
  scr_validate_proc();
  pthread_mutex_unlock(&P->lock);
}

/* The holder gives the arena up: free lists and bump pointers stay, so
 * its blocks stay valid; the helper returns its free pages later. */
void _scr_arena_park(scr_arena *a) {
  scr_proc *P = &_scr_proc;
  _scr_recycle_flush(a);
  _scr_pool_flush(a);
  _scr_remote_flush(a);
  _scr_prefault_release_ahead(a);
  _scr_remote_poll(a);
  /* Free pages and cached blocks kept above retain_bytes were the
   * thread's working set, beyond what the budget's fixed part gives an
   * arena with nobody on it: they go back now (the RFC-shaped churn held
   * 64 MiB a thread after its threads exited). */
  if (a->keep > P->heap_opt.retain_bytes) {
    a->keep = P->heap_opt.retain_bytes;
    _scr_heap_set_retain_bytes(a->heap, (size_t)a->keep);
  }
  _scr_arena_publish(a);
  pthread_mutex_lock(&P->lock);
  a->state = SCR_ARENA_PARKED;
  a->parked_ns = _scr_proc_now_ns();
  a->next_parked = P->parked;
  P->parked = a;
  _scr_arena_set_parked(a, 1);
  _scr_arena_room_locked(a);
  P->nowned--;
  atomic_store_explicit(&P->owned_hint, P->nowned, memory_order_relaxed);
  proc_keep_share_locked();
  P->nparked++;
  scr_validate_proc();
  int discard = P->opt.discard != 0;
  pthread_mutex_unlock(&P->lock);
  SCR_PC_ADD(parks, 1);
  if (discard) _scr_discard_parked();
}

static void proc_thread_exit(void *arg) {
  scr_arena *a = arg;
  if (_scr_tl_arena == a) _scr_tl_arena = NULL;
  _scr_arena_park(a);
}

void _scr_arena_publish(scr_arena *a) {
  struct scr_stats st, lent;
  _scr_arena_busy_publish(a, true);
  scr_heap_stats(a->heap, &st);
  _scr_recycle_account(a, &st, &lent);
  pthread_mutex_lock(&a->snap_lock);
  a->snap = st;
  a->snap_lent = lent;
  a->snap_drained = a->remote_drained;
  a->snap_sent = a->remote_sent;
  pthread_mutex_unlock(&a->snap_lock);
  a->ops_published = a->ops;
}

void _scr_arena_tick_slow(scr_arena *a) {
  _scr_remote_flush(a);
  uint64_t epoch = atomic_load_explicit(&_scr_proc.trim_epoch, memory_order_relaxed);
  if (SCR_UNLIKELY(epoch != a->trim_seen)) { /* another thread called scr_trim */
    a->trim_seen = epoch;
    size_t n = _scr_arena_trim(a);
    SCR_PC_ADD(trim_answers, 1);
    SCR_PC_ADD(trim_answer_bytes, n);
  }
  _scr_remote_poll(a);
  _scr_huge_cache_tick();
  _scr_arena_busy_publish(a, false);
  proc_keep_update(a);
  if (a->pf_pending) {
    a->pf_pending = 0;
    _scr_prefault_post(a);
  }
  if (a->ops - a->ops_published >= SCR_ARENA_PUBLISH_EVERY) _scr_arena_publish(a);
  if (a->shared) { /* no thread of its own: its members are found out by share.c */
    a->switch_pending = 0;
    return;
  }
  if (a->switch_pending) { /* last: the caller holds another arena after it */
    a->switch_pending = 0;
    proc_switch(a);
  }
}

/* ---- fork ----
 * The child has one thread.  The parent's lock and every snapshot lock
 * are held across fork so the child finds them consistent; arenas other
 * threads held stay theirs in the child (their heaps may be mid-call),
 * which only leaks them there.  The child's helper thread is gone. */
static void proc_fork_prepare(void) {
  scr_proc *P = &_scr_proc;
  _scr_share_lock();
  pthread_mutex_lock(&P->lock);
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) pthread_mutex_lock(&a->snap_lock);
  _scr_pool_lock_all();
  _scr_huge_cache_lock();
  pthread_mutex_lock(&P->helper_lock);
}

static void proc_fork_parent(void) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_unlock(&P->helper_lock);
  _scr_huge_cache_unlock();
  _scr_pool_unlock_all();
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) pthread_mutex_unlock(&a->snap_lock);
  pthread_mutex_unlock(&P->lock);
  _scr_share_unlock();
}

static void proc_fork_child(void) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_unlock(&P->helper_lock);
  _scr_huge_cache_unlock();
  _scr_pool_unlock_all();
  _scr_helper_after_fork_child();
  _scr_prefault_after_fork_child();
  for (scr_arena *a = atomic_load(&P->all); a; a = a->next_all) pthread_mutex_unlock(&a->snap_lock);
  SCR_PC_ADD(forks, 1);
  pthread_mutex_unlock(&P->lock);
  _scr_share_unlock();
}

/* pthread_atfork may allocate, so it runs here and not in the first
 * malloc. */
__attribute__((constructor)) static void scr_proc_constructor(void) {
  pthread_atfork(proc_fork_prepare, proc_fork_parent, proc_fork_child);
}
