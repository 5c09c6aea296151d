/* The malloc symbols of libscralloc.so (built with SCR_OVERRIDE=1), so
 * that LD_PRELOAD=libscralloc.so puts any dynamically linked program on
 * scralloc.  Nothing here calls the system allocator: memory scralloc does
 * not own (none should exist under LD_PRELOAD) is ignored by free.
 * Layer: entry (its top: other names of malloc.c's calls); owns nothing.  glibc's
 * statistics calls (mallinfo, malloc_stats, malloc_info) read the stats:
 * override_stats.c, with the observers. */
#include "entry.h"

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

/* Another name of target's code.  GCC (9 and later) warns when an alias
 * lacks the attributes a header gives its target (<malloc.h>'s memalign
 * & co.); copy gives them.  Other compilers neither warn nor know copy. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define SCR_ALIAS_OF(target) __attribute__((alias(#target), copy(target)))
#else
#define SCR_ALIAS_OF(target) __attribute__((alias(#target)))
#endif

/* The four most called are other names of the entry points' code, not
 * calls of it: a wrapper costs a jump a call (or, where the compiler
 * inlines the entry point, a second copy of its fast path to keep in the
 * instruction cache and aligned). */
SCR_EXPORT void *malloc(size_t n) SCR_ALIAS_OF(scr_malloc);
SCR_EXPORT void free(void *p) SCR_ALIAS_OF(scr_free);
SCR_EXPORT void *calloc(size_t count, size_t size) SCR_ALIAS_OF(scr_calloc);
SCR_EXPORT void *realloc(void *p, size_t n) SCR_ALIAS_OF(scr_realloc);

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

/* glibc's own names of the family (public symbols of libc.so.6, which a
 * program or library may call to reach "the real malloc"), and cfree,
 * which binaries built against glibc before 2.26 still call: the same
 * code, so that no block of scralloc's reaches glibc's free (which would
 * abort on it) and no block of glibc's is made where scralloc's was
 * meant. */
void *__libc_malloc(size_t n);
void __libc_free(void *p);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t n);
void cfree(void *p);
SCR_EXPORT void *__libc_malloc(size_t n) SCR_ALIAS_OF(scr_malloc);
SCR_EXPORT void __libc_free(void *p) SCR_ALIAS_OF(scr_free);
SCR_EXPORT void *__libc_calloc(size_t count, size_t size) SCR_ALIAS_OF(scr_calloc);
SCR_EXPORT void *__libc_realloc(void *p, size_t n) SCR_ALIAS_OF(scr_realloc);
SCR_EXPORT __typeof(memalign) __libc_memalign SCR_ALIAS_OF(memalign);
SCR_EXPORT __typeof(valloc) __libc_valloc SCR_ALIAS_OF(valloc);
SCR_EXPORT __typeof(pvalloc) __libc_pvalloc SCR_ALIAS_OF(pvalloc);
SCR_EXPORT void cfree(void *p) SCR_ALIAS_OF(scr_free);

SCR_EXPORT size_t malloc_usable_size(void *p) { return _scr_proc_usable_size_named(p, "malloc_usable_size"); }
SCR_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  return scr_trim() > 0;
}
/* The size is not checked (glibc does not either); the pointer is, under
 * the call's own name. */
SCR_EXPORT void free_sized(void *p, size_t n) {
  (void)n;
  if (p != NULL && _scr_proc_check("free_sized", p) != SCR_OK) return;
  _scr_proc_free(p);
}
SCR_EXPORT void free_aligned_sized(void *p, size_t alignment, size_t n) {
  (void)alignment;
  (void)n;
  if (p != NULL && _scr_proc_check("free_aligned_sized", p) != SCR_OK) return;
  _scr_proc_free(p);
}

#endif /* SCR_OVERRIDE */
