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

/* Bytes held for blocks that no live block uses (heap_total less
 * heap_used; the two are summed at different moments, hence the floor). */
static uint64_t proc_held_free(const struct scr_stats *st) {
  return st->heap_total > st->heap_used ? st->heap_total - st->heap_used : 0;
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
  m.fordblks = proc_held_free(&st);
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

/* One <heap> or the process's totals of malloc_info: scr_stats figures
 * under glibc's element names where the meaning is the same (system
 * current: bytes held for blocks; aspace total: address space mapped;
 * total mmap: blocks above the size classes), scralloc's own otherwise. */
static void proc_info_totals(FILE *fp, const struct scr_stats *st) {
  fprintf(fp, "<total type=\"used\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)st->allocs,
          (unsigned long long)st->heap_used);
  fprintf(fp, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n", (unsigned long long)st->large_allocs,
          (unsigned long long)st->large_bytes);
  fprintf(fp, "<total type=\"rest\" size=\"%llu\"/>\n", (unsigned long long)proc_held_free(st));
  fprintf(fp, "<total type=\"retained\" count=\"%llu\" size=\"%llu\"/>\n",
          (unsigned long long)st->retained_pages, (unsigned long long)st->retained_bytes);
  fprintf(fp, "<total type=\"dirty\" size=\"%llu\"/>\n", (unsigned long long)st->dirty_bytes);
  fprintf(fp, "<system type=\"current\" size=\"%llu\"/>\n", (unsigned long long)st->heap_total);
  fprintf(fp, "<aspace type=\"total\" size=\"%llu\"/>\n", (unsigned long long)st->reserved_bytes);
}

/* glibc's XML report, with scralloc's figures (version "scralloc-1"): a
 * <heap> per arena, its size classes that hold pages (live blocks,
 * pages, empty pages kept), then the process's totals.  As glibc's:
 * options must be 0 (else EINVAL), and -1 on an error. */
SCR_EXPORT int malloc_info(int options, FILE *fp) {
  if (options != 0 || fp == NULL) {
    errno = EINVAL;
    return -1;
  }
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  fputs("<malloc version=\"scralloc-1\">\n", fp);
  for (unsigned i = 0; i < ps.arenas; i++) {
    struct scr_stats st;
    if (scr_arena_stats(i, &st) != SCR_OK) continue;
    fprintf(fp, "<heap nr=\"%u\">\n<classes>\n", i);
    for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
      const scr_class_stats *k = &st.classes[c];
      if (k->pages == 0) continue;
      fprintf(fp, "<class size=\"%llu\" live=\"%llu\" pages=\"%llu\" retained=\"%llu\"/>\n",
              (unsigned long long)k->block_size, (unsigned long long)k->live, (unsigned long long)k->pages,
              (unsigned long long)k->retained);
    }
    fputs("</classes>\n", fp);
    proc_info_totals(fp, &st);
    fputs("</heap>\n", fp);
  }
  struct scr_stats all;
  scr_stats(&all);
  proc_info_totals(fp, &all);
  fputs("</malloc>\n", fp);
  return ferror(fp) ? -1 : 0;
}
#endif /* SCR_OVERRIDE */
