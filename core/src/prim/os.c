#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* mremap, MADV_* */
#endif
/* OS primitives: the only file of the core that calls mmap, munmap,
 * madvise and mremap.  Each call is counted for the heap that made it and
 * can be made to fail for tests (scr_debug_fail_os_call).
 *
 * Aligned mappings without thrash: we ask for `size` bytes at a hint that
 * is already aligned (one mmap); only if the kernel puts it elsewhere do we
 * over-allocate by `align` and trim, which costs up to two more munmaps.
 * The hint moves down with each mapping, so it usually lands. */
#include "internal.h"
#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

static _Atomic unsigned long fail_countdown; /* 0: off; 1: the next call fails */
static _Atomic unsigned long os_calls;       /* every OS call of the process */
static _Atomic uintptr_t next_hint;          /* where the next aligned mapping may go */

void scr_debug_fail_os_call(unsigned long n) { atomic_store(&fail_countdown, n); }
unsigned long scr_debug_os_calls(void) { return atomic_load(&os_calls); }

bool _scr_os_inject_failure(void) {
  atomic_fetch_add_explicit(&os_calls, 1, memory_order_relaxed);
  unsigned long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
  while (n != 0) {
    if (atomic_compare_exchange_weak(&fail_countdown, &n, n - 1)) return n == 1;
  }
  return false;
}

static _Atomic unsigned long clock_offset_ms; /* scr_debug_advance_clock */

void scr_debug_advance_clock(unsigned long ms) { atomic_fetch_add(&clock_offset_ms, ms); }

/* Milliseconds on a monotonic clock.  The coarse clock (a vDSO read, no
 * syscall, a few ms of resolution) is all the purge delay needs. */
uint64_t _scr_os_now_ms(void) {
  struct timespec ts;
#ifdef CLOCK_MONOTONIC_COARSE
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0)
#endif
    clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u +
         atomic_load_explicit(&clock_offset_ms, memory_order_relaxed);
}

/* 64 random bits for the freed-block key (misuse.c): the kernel's
 * getrandom (no file, no malloc: it runs inside the first malloc), else
 * the clock mixed with an address that ASLR moves. */
uint64_t _scr_os_random_u64(void) {
  uint64_t v = 0;
#ifdef SYS_getrandom
  if (syscall(SYS_getrandom, &v, sizeof v, 1 /* GRND_NONBLOCK */) == (long)sizeof v) return v;
#endif
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  v = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&v;
  v ^= v >> 33;
  v *= 0xff51afd7ed558ccdull;
  v ^= v >> 33;
  return v;
}

size_t _scr_os_page_size(void) {
  static _Atomic size_t ps; /* any thread may be first: the same value */
  size_t v = atomic_load_explicit(&ps, memory_order_relaxed);
  if (v == 0) {
    v = (size_t)sysconf(_SC_PAGESIZE);
    atomic_store_explicit(&ps, v, memory_order_relaxed);
  }
  return v;
}

static void *os_mmap(void *hint, size_t size, scr_os_counters *c) {
  if (c) c->mmap_calls++;
  if (_scr_os_inject_failure()) {
    if (c) c->failures++;
    errno = ENOMEM;
    return NULL;
  }
  void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    if (c) c->failures++;
    errno = ENOMEM;
    return NULL;
  }
  return p;
}

static int os_munmap(void *p, size_t size, scr_os_counters *c) {
  if (c) c->munmap_calls++;
  if (_scr_os_inject_failure() || munmap(p, size) != 0) {
    if (c) c->failures++;
    return -1;
  }
  return 0;
}

/* Hints go down from 32 TiB, far below the usual mmap area and above
 * AddressSanitizer's shadow (which ends near 16 TiB), so they land in
 * sanitized builds too. */
#define HINT_START ((uintptr_t)0x200000000000ull) /* 32 TiB */
#define HINT_LOW ((uintptr_t)0x110000000000ull)   /* 17 TiB */

/* A place for a mapping of size bytes at `align`, taken below the last
 * one with a compare-and-swap, so that threads mapping at once get
 * places of their own.  (Two threads that read the same hint asked for
 * one place; the kernel put the loser's mapping up among the thread
 * stacks, and the hint followed it there, where a segment seldom lands
 * aligned: each then took an munmap and a mapping with room to align,
 * and every munmap of a threaded process is a TLB shootdown.)  A place
 * the kernel did not give stays skipped; the hints do not follow a
 * mapping the kernel put above the range. */
static uintptr_t hint_take(size_t size, size_t align) {
  uintptr_t old = atomic_load_explicit(&next_hint, memory_order_relaxed), hint;
  do {
    /* from the top when the range is used up (and at the first call) */
    bool used_up = old == 0 || old > HINT_START || old < size || (old >= HINT_LOW && old < HINT_LOW + size);
    hint = ((used_up ? HINT_START : old) - size) & ~(uintptr_t)(align - 1);
  } while (!atomic_compare_exchange_weak_explicit(&next_hint, &old, hint, memory_order_relaxed,
                                                  memory_order_relaxed));
  return hint;
}

/* A mapping the kernel put below the range: the address space is too
 * small for it (a 39- or 42-bit one); the next hints go down from there. */
static void hint_follow(const void *p) {
  if ((uintptr_t)p < HINT_LOW) atomic_store_explicit(&next_hint, (uintptr_t)p, memory_order_relaxed);
}

void *_scr_os_map_aligned(size_t size, size_t align, scr_os_counters *c) {
  void *p = os_mmap((void *)hint_take(size, align), size, c);
  if (p == NULL) return NULL;
  if (((uintptr_t)p & (align - 1)) == 0) {
    hint_follow(p);
    return p;
  }
  /* The kernel chose another place: map again with room to align, trim. */
  if (os_munmap(p, size, c) != 0) {
    _scr_report(SCR_ENOMEM, "munmap failed: %zu bytes at %p stay mapped", size, p);
    return NULL;
  }
  if (size + align < size) return NULL;
  uint8_t *raw = os_mmap(NULL, size + align, c);
  if (raw == NULL) return NULL;
  uint8_t *aligned = (uint8_t *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
  size_t head = (size_t)(aligned - raw), tail = align - head;
  /* A failed trim leaves a few extra mapped bytes that nobody uses: harmless. */
  if (head) (void)os_munmap(raw, head, c);
  if (tail) (void)os_munmap(aligned + size, tail, c);
  hint_follow(aligned);
  return aligned;
}

int _scr_os_unmap(void *p, size_t size, scr_os_counters *c) {
  if (os_munmap(p, size, c) != 0) return -1;
  /* Let the next mapping take this place again. */
  uintptr_t hint = atomic_load_explicit(&next_hint, memory_order_relaxed);
  if (hint == (uintptr_t)p)
    atomic_compare_exchange_strong(&next_hint, &hint, (uintptr_t)p + size);
  return 0;
}

/* The advice gives memory back (the rest, MADV_DONTDUMP and
 * MADV_NOHUGEPAGE, only mark a range). */
static bool os_advice_returns(int advice) {
#ifdef MADV_FREE
  if (advice == MADV_FREE) return true;
#endif
  return advice == MADV_DONTNEED;
}

int _scr_os_advise(void *p, size_t size, int advice, scr_os_counters *c) {
  if (c) c->madvise_calls++, c->madvise_hints += !os_advice_returns(advice);
  if (_scr_os_inject_failure() || madvise(p, size, advice) != 0) {
    if (c) c->failures++;
    return -1;
  }
  return 0;
}

/* Decommit: the memory stays mapped and reads as zero afterwards
 * (MADV_DONTNEED), or keeps its old bytes until the kernel needs the
 * memory (MADV_FREE: cheaper, but not zero). */
int _scr_os_decommit(void *p, size_t size, bool free_lazily, scr_os_counters *c) {
#ifdef MADV_FREE
  if (free_lazily) {
    if (_scr_os_advise(p, size, MADV_FREE, c) != 0) return -1;
    if (c) c->lazy_free_bytes += size;
    return 0;
  }
#endif
  (void)free_lazily;
  if (_scr_os_advise(p, size, MADV_DONTNEED, c) != 0) return -1;
  if (c) c->dontneed_bytes += size;
  return 0;
}

/* Decommit n ranges (MADV_DONTNEED) in one process_madvise call where the
 * kernel takes it for the calling process (Linux 6.13 on), one TLB flush
 * for them all, else one madvise per range.  Why: a purge pass gives back
 * a dozen or more scattered 64 KiB pages, and each madvise costs a TLB
 * shootdown when other threads run (measured on Linux 6.18, per resident
 * 64 KiB page: 11.7 us a call alone, 21.5 while another thread runs,
 * 7.4-7.7 either way in a batch of 64).  Returns how many ranges, from
 * the first, were decommitted; the others stay committed.  A kernel that
 * refuses the call is remembered and not asked again. */
#define SCR_PIDFD_SELF (-10000) /* PIDFD_SELF_THREAD: the caller's own mm */
static _Atomic int batch_refused; /* 1: the kernel refused (or a test said so) */

void scr_debug_batch_decommits(int on) { atomic_store(&batch_refused, !on); }
size_t _scr_os_decommit_ranges(struct iovec *r, size_t n, scr_os_counters *c) {
  size_t done = 0;
#if defined(SYS_process_madvise) && defined(MADV_DONTNEED)
  if (n > 1 && !atomic_load_explicit(&batch_refused, memory_order_relaxed)) {
    if (_scr_os_inject_failure()) {
      if (c) c->madvise_calls++, c->failures++;
      return 0;
    }
    long got = syscall(SYS_process_madvise, SCR_PIDFD_SELF, r, n, MADV_DONTNEED, 0u);
    if (got >= 0 || (errno != ENOSYS && errno != EINVAL && errno != EPERM && errno != EBADF)) {
      if (c) c->madvise_calls++;
      /* got < 0 or short: the ranges before the one that failed were done */
      size_t bytes = got > 0 ? (size_t)got : 0;
      while (done < n && bytes >= r[done].iov_len) bytes -= r[done++].iov_len;
      if (done < n && c) c->failures++;
      if (c)
        for (size_t i = 0; i < done; i++) c->dontneed_bytes += r[i].iov_len;
      if (done == n) return n;
    } else {
      atomic_store_explicit(&batch_refused, 1, memory_order_relaxed);
    }
  }
#endif
  /* One by one: the kernel refused the batch, or one range is left. */
  for (; done < n; done++) {
    if (_scr_os_advise(r[done].iov_base, r[done].iov_len, MADV_DONTNEED, c) != 0) break;
    if (c) c->dontneed_bytes += r[done].iov_len;
  }
  return done;
}

/* Move or grow a mapping without copying.  target NULL: grow in place
 * only.  Otherwise move to target (a mapping of new_size we own, which the
 * kernel replaces). */
void *_scr_os_remap(void *old, size_t old_size, size_t new_size, void *target, scr_os_counters *c) {
#ifdef MREMAP_MAYMOVE
  if (c) c->mremap_calls++;
  if (_scr_os_inject_failure()) {
    if (c) c->failures++;
    return NULL;
  }
  void *p = target ? mremap(old, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target)
                   : mremap(old, old_size, new_size, 0);
  if (p == MAP_FAILED) {
    if (c && target) c->failures++; /* growing in place may fail: not an error */
    return NULL;
  }
  return p;
#else
  (void)old; (void)old_size; (void)new_size; (void)target; (void)c;
  return NULL;
#endif
}
