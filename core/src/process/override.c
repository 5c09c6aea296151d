/* The malloc symbols of libscralloc.so (built with SCR_OVERRIDE=1), so
 * that LD_PRELOAD=libscralloc.so puts any dynamically linked program on
 * scralloc.  Nothing here calls the system allocator: memory scralloc does
 * not own (none should exist under LD_PRELOAD) is ignored by free. */
#include "process.h"

#if SCR_OVERRIDE
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* C23 / newer glibc; declared here for older headers. */
void free_sized(void *p, size_t n);
void free_aligned_sized(void *p, size_t alignment, size_t n);

#define SCR_EXPORT __attribute__((visibility("default")))

static inline int proc_is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }
static inline int proc_int(size_t v) { return v > INT_MAX ? INT_MAX : (int)v; }

/* The four most called are other names of the entry points' code, not
 * calls of it: a wrapper costs a jump a call (or, where the compiler
 * inlines the entry point, a second copy of its fast path to keep in the
 * instruction cache and aligned). */
SCR_EXPORT void *malloc(size_t n) __attribute__((alias("scr_malloc")));
SCR_EXPORT void free(void *p) __attribute__((alias("scr_free")));
SCR_EXPORT void *calloc(size_t count, size_t size) __attribute__((alias("scr_calloc")));
SCR_EXPORT void *realloc(void *p, size_t n) __attribute__((alias("scr_realloc")));

SCR_EXPORT void *reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return _scr_proc_realloc(p, n);
}

SCR_EXPORT int posix_memalign(void **out, size_t alignment, size_t n) {
  if (!proc_is_pow2(alignment) || alignment % sizeof(void *) != 0) return EINVAL;
  int saved = errno;
  void *p = _scr_proc_aligned_alloc(alignment, n);
  if (p == NULL) {
    int e = errno ? errno : ENOMEM;
    errno = saved;
    return e;
  }
  *out = p;
  return 0;
}

SCR_EXPORT void *aligned_alloc(size_t alignment, size_t n) {
  if (!proc_is_pow2(alignment)) {
    errno = EINVAL;
    return NULL;
  }
  return _scr_proc_aligned_alloc(alignment, n);
}

/* memalign rounds an alignment that is not a power of two up, as glibc's. */
SCR_EXPORT void *memalign(size_t alignment, size_t n) {
  if (alignment > ((size_t)1 << 62)) {
    errno = EINVAL;
    return NULL;
  }
  size_t a = SCR_MIN_ALIGN;
  while (a < alignment) a <<= 1;
  return _scr_proc_aligned_alloc(a, n);
}

static size_t proc_os_page(void) { return _scr_os_page_size(); }

SCR_EXPORT void *valloc(size_t n) { return _scr_proc_aligned_alloc(proc_os_page(), n); }

SCR_EXPORT void *pvalloc(size_t n) {
  size_t ps = proc_os_page();
  if (n > SIZE_MAX - ps) {
    errno = ENOMEM;
    return NULL;
  }
  return _scr_proc_aligned_alloc(ps, n ? (n + ps - 1) & ~(ps - 1) : ps);
}

SCR_EXPORT size_t malloc_usable_size(void *p) { return _scr_proc_usable_size(p); }
SCR_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  return scr_trim() > 0;
}
SCR_EXPORT void free_sized(void *p, size_t n) {
  (void)n;
  _scr_proc_free(p);
}
SCR_EXPORT void free_aligned_sized(void *p, size_t alignment, size_t n) {
  (void)alignment;
  (void)n;
  _scr_proc_free(p);
}

/* glibc's statistics calls report scralloc's figures (scr_stats), so
 * that a program printing them under LD_PRELOAD does not read glibc's
 * idle arenas.  mallinfo2's fields as glibc fills them, where scralloc
 * has a counterpart: arena, the bytes held for blocks (heap_total);
 * uordblks, the bytes of live blocks (heap_used); fordblks, the rest of
 * arena; hblks and hblkhd, the live blocks above the size classes and
 * their bytes (also in arena and uordblks).  The counts of free chunks
 * (ordblks, smblks), the fastbin figures and keepcost have none: 0. */
SCR_EXPORT struct mallinfo2 mallinfo2(void) {
  struct scr_stats st;
  scr_stats(&st);
  struct mallinfo2 m;
  memset(&m, 0, sizeof m);
  m.arena = st.heap_total;
  m.uordblks = st.heap_used;
  m.fordblks = st.heap_total > st.heap_used ? st.heap_total - st.heap_used : 0;
  m.hblks = st.large_allocs;
  m.hblkhd = st.large_bytes;
  return m;
}
/* The same in int fields (glibc's older call), clamped to INT_MAX. */
SCR_EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m;
  memset(&m, 0, sizeof m);
  m.arena = proc_int(m2.arena);
  m.uordblks = proc_int(m2.uordblks);
  m.fordblks = proc_int(m2.fordblks);
  m.hblks = proc_int(m2.hblks);
  m.hblkhd = proc_int(m2.hblkhd);
  return m;
}
/* scralloc's report on stderr, a line for each arena included (what
 * SCRALLOC_STATS=2 prints at exit). */
SCR_EXPORT void malloc_stats(void) {
  _scr_proc_init();
  _scr_proc_report(STDERR_FILENO, true);
}
#endif /* SCR_OVERRIDE */
