/* The pool: other arenas' blocks that overflowed a thread's cache, in
 * batches per size class, for any thread whose list of the class runs
 * empty and whose own page of the class has no free slot.  Why
 * (docs/process.md): with more threads than CPUs the owners sleep most
 * of the time, and blocks sent home wait while other threads carve fresh
 * memory.  The blocks stay live in their owners' heaps all along.
 *
 * A batch is made of the other arenas' blocks among the newer half of a
 * full list (the arena's own go back to its heap), linked through their
 * first words.  At most SCR_POOL_BATCHES batches per class: past that
 * the freeing thread's list grows instead (within cache_grow), else the
 * block goes home, as blocks of parked arenas do.  The pool is emptied at
 * every park and trim.  One mutex per class, taken once per batch and
 * never waited for on the malloc and free paths (a holder may be
 * preempted): a thread that finds it taken treats the pool as full (its
 * batch goes home) or empty (it carves).
 *
 * Layer: caches.  Owns _scr_pool (each class under its lock; the batch
 * count peeked without it). */
#include "caches.h"

scr_pool_line _scr_pool[SCR_CLASS_COUNT] = {[0 ... SCR_CLASS_COUNT - 1] = {{.lock = PTHREAD_MUTEX_INITIALIZER}}};

/* a's list of class c is full: its newer half leaves it (as tcmalloc's
 * thread cache hands its newest blocks on), of a grown list half its base
 * cap, so that any thread's list takes the batch; a's own blocks for its
 * heap, the others for the pool, in one walk.  false when nothing moved (a
 * list of one block, or a pool that holds enough of the class: the
 * caller's block then goes home, as those of the batch would have). */
bool _scr_pool_overflow(scr_arena *a, unsigned c) {
  scr_tcache_list *r = &a->tc[c];
  uint32_t moved = (r->max < r->base ? r->max : r->base) / 2;
  scr_pool_class *q = &_scr_pool[c].c;
  if (!_scr_proc.opt.pool || moved == 0 || atomic_load_explicit(&q->n, memory_order_relaxed) >= SCR_POOL_BATCHES) return false;
  /* The list runs from newer to older; what goes home goes oldest first,
   * so that the heap's free lists see the frees in their order. */
  void *p = r->head, *batch = NULL, *home = NULL;
  uint32_t k = 0;
  for (uint32_t i = 0; i < moved; i++) {
    scr_assert(p != NULL); /* the list is full: max blocks long */
    SCR_UNPOISON(p, sizeof(void *));
    void *next = *(void **)p;
    scr_heap *h = _scr_heap_of(p);
    if (h != a->heap && !_scr_arena_parked((scr_arena *)_scr_heap_owner(h))) {
      *(void **)p = batch; /* still poisoned but for this word */
      batch = p;
      k++;
    } else {
      *(void **)p = home;
      home = p;
    }
    p = next;
  }
  r->head = p;
  r->room += moved;
  _scr_remote_send_list_home(a, c, home);
  if (batch == NULL) return true;
  if (pthread_mutex_trylock(&q->lock) == 0) { /* busy: home, as if full */
    uint32_t n = atomic_load_explicit(&q->n, memory_order_relaxed);
    if (n < SCR_POOL_BATCHES) { /* else filled meanwhile */
      q->batch[n] = batch;
      q->count[n] = k;
      atomic_store_explicit(&q->n, n + 1, memory_order_relaxed);
      batch = NULL;
    }
    pthread_mutex_unlock(&q->lock);
  }
  if (batch == NULL) SCR_PC_ADD(pool_puts, 1);
  _scr_remote_send_list_home(a, c, batch);
  return true;
}

/* a's list of class c is empty and the pool has a batch of the class
 * (_scr_pool_refill): it becomes the list; one of its blocks, or NULL. */
void *_scr_pool_refill_slow(scr_arena *a, unsigned c) {
  scr_pool_class *q = &_scr_pool[c].c;
  if (pthread_mutex_trylock(&q->lock) != 0) return NULL; /* busy: the heap, as if empty */
  uint32_t n = atomic_load_explicit(&q->n, memory_order_relaxed);
  void *b = NULL;
  uint32_t k = 0;
  /* A batch longer than a's list (put by a thread that claimed its arena
   * before the cache options changed) stays for another. */
  if (n > 0 && q->count[n - 1] <= a->tc[c].max) {
    b = q->batch[n - 1];
    k = q->count[n - 1];
    atomic_store_explicit(&q->n, n - 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&q->lock);
  if (b == NULL) return NULL;
  SCR_PC_ADD(pool_takes, 1);
  scr_tcache_list *r = &a->tc[c];
  scr_assert(r->head == NULL && r->room == r->max && k <= r->max);
  SCR_UNPOISON(b, _scr_class_sizes[c]);
  r->head = *(void **)b;
  r->room -= k - 1;
  _scr_block_set_word1(b, 0); /* handed out: no longer free */
  return b;
}

/* Every pooled block goes home (park, trim); a may be NULL. */
void _scr_pool_flush(scr_arena *a) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    scr_pool_class *q = &_scr_pool[c].c;
    if (atomic_load_explicit(&q->n, memory_order_relaxed) == 0) continue;
    void *batch[SCR_POOL_BATCHES];
    pthread_mutex_lock(&q->lock);
    uint32_t n = atomic_load_explicit(&q->n, memory_order_relaxed);
    memcpy(batch, q->batch, n * sizeof batch[0]);
    atomic_store_explicit(&q->n, 0, memory_order_relaxed);
    pthread_mutex_unlock(&q->lock);
    for (uint32_t i = 0; i < n; i++) _scr_remote_send_list_home(a, c, batch[i]);
  }
}

/* The pooled blocks, added to `lent` (scr_stats takes them off the
 * arenas' live figures, as the blocks the threads keep). */
void _scr_pool_account(struct scr_stats *lent) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    scr_pool_class *q = &_scr_pool[c].c;
    if (atomic_load_explicit(&q->n, memory_order_relaxed) == 0) continue;
    pthread_mutex_lock(&q->lock);
    uint64_t blocks = 0;
    for (uint32_t i = 0; i < atomic_load_explicit(&q->n, memory_order_relaxed); i++) blocks += q->count[i];
    pthread_mutex_unlock(&q->lock);
    lent->allocs += blocks;
    lent->heap_used += blocks * _scr_class_sizes[c];
    lent->classes[c].live += blocks;
  }
}

#if SCR_DEBUG > 0
/* Checked builds: p sits in the pool (a double free). */
bool _scr_pool_holds(unsigned c, const void *p) {
  scr_pool_class *q = &_scr_pool[c].c;
  bool found = false;
  pthread_mutex_lock(&q->lock);
  for (uint32_t i = 0; i < atomic_load_explicit(&q->n, memory_order_relaxed) && !found; i++) {
    for (void *b = q->batch[i], *next; b && !found; b = next) {
      SCR_UNPOISON(b, sizeof(void *));
      next = *(void **)b;
      SCR_POISON(b, sizeof(void *));
      found = b == p;
    }
  }
  pthread_mutex_unlock(&q->lock);
  return found;
}
#endif

/* fork: the child finds every class's list consistent and unlocked. */
void _scr_pool_lock_all(void) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) pthread_mutex_lock(&_scr_pool[c].c.lock);
}
void _scr_pool_unlock_all(void) {
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) pthread_mutex_unlock(&_scr_pool[c].c.lock);
}
