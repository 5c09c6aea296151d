/* The holder's side of its arena: what a thread does, around the arenas'
 * layer, to take an arena with a cache, give it up, keep it in shape.
 * Layer: caches (its top).  Each step here is the caches' part first and
 * the arena's after (or the reverse when an arena is taken), so that
 * arena.c never calls up into the cache:
 *   claim: the arena (arena.c), then its cache set (tcache.c) and the
 *          thread's exit hook;
 *   park:  the cache, the pool's batches and the batch of remote frees
 *          flushed, then the arena parked, then the helper woken;
 *   tick:  every SCR_ARENA_POLL_EVERY heap calls (caches.h says what),
 *          and when the sampler's countdown runs out (malloc.c).
 * Owns the thread-exit key (the destructor parks the thread's arena). */
#include "caches.h"

static pthread_key_t holder_key;
static pthread_once_t holder_key_once = PTHREAD_ONCE_INIT;
static bool holder_key_ok;

static void holder_thread_exit(void *arg) {
  scr_arena *a = arg;
  if (_scr_tl.arena == a) _scr_tl_set(NULL);
  _scr_holder_park(a);
}

/* pthread_key_create does not call malloc: this runs inside the thread's
 * first one. */
static void holder_key_create(void) {
  if (pthread_key_create(&holder_key, holder_thread_exit) == 0) holder_key_ok = true;
  else _scr_report(SCR_ENOMEM, "no pthread key: arenas of exiting threads will not be parked");
}

/* a is the caller's own from now on: parked when the thread exits. */
static void holder_set_exit_hook(scr_arena *a) {
  pthread_once(&holder_key_once, holder_key_create);
  if (holder_key_ok) pthread_setspecific(holder_key, a);
}

/* An arena of the caller's own, its cache set; NULL when none can be had. */
scr_arena *_scr_holder_claim(void) {
  bool alone;
  scr_arena *a = _scr_arena_claim(&alone);
  if (a == NULL) return NULL;
  _scr_tcache_init(a, alone);
  holder_set_exit_hook(a);
  return a;
}

/* The holder gives the arena up; the blocks its cache kept go home.  The
 * helper is woken unless it looks within the decay delay anyway (a wake
 * per exiting thread doubled the context switches of threads that come
 * and go). */
void _scr_holder_park(scr_arena *a) {
  _scr_tcache_flush(a);
  _scr_pool_flush(a);
  _scr_arena_park(a);
  if (!_scr_helper_looks_by(_scr_proc_now_ns() + _scr_decay_delay_ms() * 1000000u)) _scr_helper_post();
}

/* The arena's figures less the blocks the holder keeps in its cache. */
void _scr_holder_publish(scr_arena *a) {
  struct scr_stats st, lent;
  scr_heap_stats(a->heap, &st);
  _scr_tcache_account(a, &st, &lent);
  _scr_arena_publish_figures(a, &st, &lent);
}

size_t _scr_holder_trim(scr_arena *a) {
  _scr_tcache_flush(a);
  _scr_pool_flush(a);
  return _scr_arena_give_back(a, 0); /* the cache is empty: publishes */
}

void _scr_holder_tick_slow(scr_arena *a) {
  uint64_t epoch = atomic_load_explicit(&_scr_proc.trim_epoch, memory_order_relaxed);
  if (SCR_UNLIKELY(epoch != a->trim_seen)) { /* another thread called scr_trim */
    a->trim_seen = epoch;
    size_t n = _scr_holder_trim(a);
    SCR_PC_ADD(trim_answers, 1);
    SCR_PC_ADD(trim_answer_bytes, n);
  }
  _scr_remote_poll(a);
  _scr_tcache_gc(a);
  if (_scr_decay_tick()) _scr_helper_post();
  _scr_decay_keep_update(a);
  /* its heap's decay pass when due: one clock read per tick while it
   * keeps dirty pages */
  if (atomic_load_explicit(&a->heap->dirty_pages, memory_order_relaxed) != 0) _scr_decay_arena(a);
  if (a->ops - a->ops_published >= SCR_ARENA_PUBLISH_EVERY) _scr_holder_publish(a);
}
