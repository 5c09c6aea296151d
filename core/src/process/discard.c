/* Delayed discard of parked arenas, by a helper thread.
 *
 * An arena parked at thread exit keeps its free pages so that the next
 * thread can use them without faults.  Once it has stayed parked for the
 * discard delay, the helper claims it, frees what other threads pushed on
 * it, trims its heap (every page holding only free blocks goes back with
 * MADV_DONTNEED, the large cache is flushed, wholly empty segments are
 * unmapped) and parks it again at the cold end of the parked list.  One
 * arena at a time; a program that exits within the delay returns nothing.
 *
 * Back-off: the delay starts at discard_delay_ms and doubles, up to
 * discard_delay_max_ms, each time a thread claims an arena within ten
 * delays of a discard (threads coming back would fault the pages in
 * again).  SCRALLOC_DISCARD=0 keeps everything; SCRALLOC_DISCARD=poison
 * also makes the returned pages inaccessible (PROT_NONE) until the arena
 * is claimed again, so tests can see a use after discard fault.
 *
 * The helper also runs prefault requests (prefault.c).  It blocks every
 * signal and never allocates. */
#include "process.h"
#include <signal.h>
#include <time.h>

#define SCR_HELPER_RELOOK_MS 10 /* while an arena is borrowed; borrows last microseconds */

/* Under _scr_proc.lock, from claim. */
void _scr_discard_on_claim(uint64_t now) {
  scr_proc *P = &_scr_proc;
  if (!P->backoff_armed) return;
  P->backoff_armed = 0;
  if (now - P->last_discard_ns < 10 * P->delay_ms * 1000000u) {
    uint64_t d = P->delay_ms * 2;
    if (d > P->opt.discard_delay_max_ms) d = P->opt.discard_delay_max_ms;
    if (d > P->delay_ms) {
      P->delay_ms = d;
      SCR_PC_ADD(delay_doublings, 1);
    }
  }
}

/* Poison mode: every FREE page of every segment becomes PROT_NONE. */
static void proc_poison_pages(scr_arena *a, int accessible) {
  for (scr_segment *seg = a->heap->segments; seg; seg = seg->next) {
    if (seg->kind != SCR_SEG_NORMAL) continue;
    uint64_t m = seg->free_mask;
    while (m) {
      unsigned i = (unsigned)__builtin_ctzll(m);
      unsigned j = i;
      while (j < SCR_PAGES_PER_SEGMENT && ((m >> j) & 1)) j++;
      (void)_scr_proc_protect((uint8_t *)seg + ((size_t)i << SCR_PAGE_SHIFT), (size_t)(j - i) << SCR_PAGE_SHIFT,
                              accessible);
      m &= j >= 64 ? 0 : ~(((uint64_t)1 << j) - 1);
    }
  }
}

void _scr_discard_unpoison(scr_arena *a) {
  proc_poison_pages(a, 1);
  a->poisoned = 0;
}

/* A free list sorted by address, ascending: merge sort, no allocation
 * (depth log2 of a page's slots).  Free blocks are poisoned in ASan
 * builds, hence no_sanitize_address. */
SCR_NO_ASAN static scr_block *proc_sort_blocks(scr_block *list) {
  if (list == NULL || list->next == NULL) return list;
  scr_block *slow = list, *fast = list->next;
  while (fast && fast->next) {
    slow = slow->next;
    fast = fast->next->next;
  }
  scr_block *right = slow->next;
  slow->next = NULL;
  scr_block *l = proc_sort_blocks(list), *r = proc_sort_blocks(right);
  scr_block head, *t = &head;
  while (l && r) {
    if ((uintptr_t)l < (uintptr_t)r) t->next = l, l = l->next;
    else t->next = r, r = r->next;
    t = t->next;
  }
  t->next = l ? l : r;
  return head.next;
}

/* After a discard, the free blocks left in partly used pages are relinked
 * in address order, so the next owner hands them out ascending, as the
 * bump pointers do. */
static void proc_relink_in_address_order(scr_arena *a) {
  for (scr_segment *seg = a->heap->segments; seg; seg = seg->next) {
    if (seg->kind != SCR_SEG_NORMAL) continue;
    for (unsigned i = SCR_FIRST_PAGE; i < SCR_PAGES_PER_SEGMENT; i++) {
      scr_page *pg = &seg->pages[i];
      if (pg->kind == SCR_PAGE_SMALL && pg->free) pg->free = proc_sort_blocks(pg->free);
    }
  }
}

/* The caller holds the arena (DISCARDING, or PARKED under the lock). */
size_t _scr_discard_arena(scr_arena *a) {
  _scr_remote_drain(a);
  size_t n = scr_heap_trim(a->heap);
  n += _scr_arena_return_interior(a);
  if (a->held) { /* nothing is kept now: the caps come back with nothing to give */
    a->held = 0;
    _scr_heap_set_caps(a->heap, _scr_proc.heap_opt.retain, (size_t)a->keep);
  }
  proc_relink_in_address_order(a);
  _scr_arena_publish(a);
  SCR_PC_ADD(discards, 1);
  SCR_PC_ADD(discard_bytes, n);
  return n;
}

/* Oldest parked arena not yet discarded, under the lock. */
static scr_arena *proc_oldest_undiscarded(scr_arena **prev_out) {
  scr_arena *best = NULL, *best_prev = NULL, *prev = NULL;
  for (scr_arena *a = _scr_proc.parked; a; prev = a, a = a->next_parked) {
    if (!a->discarded) {
      best = a;
      best_prev = prev;
    }
  }
  *prev_out = best_prev;
  return best;
}

static void proc_timed_wait(pthread_cond_t *cv, pthread_mutex_t *m, uint64_t until_ns) {
  struct timespec ts;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 30))
  ts.tv_sec = (time_t)(until_ns / 1000000000u);
  ts.tv_nsec = (long)(until_ns % 1000000000u);
  pthread_cond_clockwait(cv, m, CLOCK_MONOTONIC, &ts);
#else
  uint64_t now = _scr_proc_now_ns();
  uint64_t left = until_ns > now ? until_ns - now : 0;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + left;
  ts.tv_sec = (time_t)(t / 1000000000u);
  ts.tv_nsec = (long)(t % 1000000000u);
  pthread_cond_timedwait(cv, m, &ts);
#endif
}

static void *proc_helper_main(void *arg) {
  scr_proc *P = &_scr_proc;
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&P->helper_lock);
    P->helper_kick = 0;
    pthread_mutex_unlock(&P->helper_lock);

    (void)_scr_prefault_run();

    uint64_t now = _scr_proc_now_ns();
    /* freed huge blocks unused for huge_decay_ms (huge_cache.c) */
    uint64_t wait_until = _scr_huge_cache_decay(now, false, NULL);
    scr_arena *a = NULL, *prev = NULL;
    pthread_mutex_lock(&P->lock);
    if (P->opt.discard) {
      a = proc_oldest_undiscarded(&prev);
      if (a) {
        uint64_t due = a->parked_ns + P->delay_ms * 1000000u;
        if (now >= due) {
          _scr_arena_borrow_locked(a, prev); /* parked again below, at the cold end */
        } else {
          if (due < wait_until) wait_until = due;
          a = NULL;
        }
      }
      /* An arena borrowed by a freeing or lending thread is off the parked
       * list, due or not, and its return wakes nobody (a wake per drain
       * would cost the freeing thread a syscall): look again soon. */
      unsigned borrowed = P->narenas - P->nowned - P->nparked;
      uint64_t relook = now + SCR_HELPER_RELOOK_MS * 1000000u;
      if (a == NULL && borrowed > 0 && wait_until > relook) wait_until = relook;
    }
    int poison = P->opt.discard == 2;
    pthread_mutex_unlock(&P->lock);

    if (a) {
      _scr_discard_arena(a);
      if (poison) {
        proc_poison_pages(a, 0);
        a->poisoned = 1;
      }
      pthread_mutex_lock(&P->lock);
      a->state = SCR_ARENA_PARKED;
      _scr_arena_set_parked(a, 1);
      a->discarded = 1;
      /* Cold end of the parked list: claims prefer arenas still warm. */
      scr_arena **tail = &P->parked;
      while (*tail) tail = &(*tail)->next_parked;
      *tail = a;
      P->nparked++;
      P->last_discard_ns = _scr_proc_now_ns();
      P->backoff_armed = 1;
      pthread_mutex_unlock(&P->lock);
      continue; /* one at a time, then look again */
    }

    pthread_mutex_lock(&P->helper_lock);
    if (!P->helper_kick) {
      if (wait_until == UINT64_MAX) pthread_cond_wait(&P->helper_cv, &P->helper_lock);
      else proc_timed_wait(&P->helper_cv, &P->helper_lock, wait_until);
    }
    pthread_mutex_unlock(&P->helper_lock);
  }
  return NULL;
}

/* Wake the helper, starting it the first time.  Never called inside a heap
 * call or with a lock held: pthread_create allocates. */
void _scr_helper_post(void) {
  scr_proc *P = &_scr_proc;
  pthread_mutex_lock(&P->helper_lock);
  if (P->helper_state == 2) { /* a forked child: no helper thread */
    pthread_mutex_unlock(&P->helper_lock);
    return;
  }
  if (P->helper_state != 0) {
    P->helper_kick = 1;
    pthread_cond_signal(&P->helper_cv);
    pthread_mutex_unlock(&P->helper_lock);
    return;
  }
  P->helper_state = 1;
  pthread_mutex_unlock(&P->helper_lock);

  pthread_attr_t attr;
  pthread_t t;
  sigset_t all, old;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, (size_t)256 << 10);
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&t, &attr, proc_helper_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    pthread_mutex_lock(&P->helper_lock);
    P->helper_state = 0;
    pthread_mutex_unlock(&P->helper_lock);
  }
}

void _scr_discard_parked(void) { _scr_helper_post(); }

void _scr_helper_after_fork_child(void) {
  scr_proc *P = &_scr_proc;
  pthread_cond_init(&P->helper_cv, NULL);
  /* Starting threads in the child of a multi-threaded fork is unsafe, so
   * the child runs without a helper: parked arenas keep their pages and
   * nothing is faulted ahead (exec starts afresh). */
  P->helper_state = 2;
  P->helper_kick = 0;
}
