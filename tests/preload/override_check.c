/* The malloc family of libscralloc.so, checked from a program that links
 * nothing but libc and runs with LD_PRELOAD=libscralloc.so.  Prints
 * "N passed, N failed"; exits 0 when all hold. */
#define _GNU_SOURCE
#include "preload_check.h"
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


static int aligned(const void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

/* glibc's own names of the family, public symbols of libc.so.6 (not in
 * its headers) */
void *__libc_malloc(size_t n);
void __libc_free(void *p);
void *__libc_calloc(size_t count, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t alignment, size_t n);
void *__libc_valloc(size_t n);
void *__libc_pvalloc(size_t n);

/* Called through volatile pointers and sizes: the calls below are meant
 * to fail, which the compiler would otherwise warn about. */
static void *(*volatile ra)(void *, size_t, size_t) = reallocarray;
static void (*volatile fr)(void *) = free;
static volatile size_t huge = SIZE_MAX / 2;

int main(void) {
  /* scralloc is the allocator: its API is in the process, and malloc's
   * blocks are its blocks */
  size_t (*usable)(const void *) = (size_t (*)(const void *))dlsym(RTLD_DEFAULT, "scr_usable_size");
  CHECK(usable != NULL);
  void *p = malloc(100);
  CHECK(p != NULL && usable && usable(p) >= 100);
  CHECK(malloc_usable_size(p) >= 100);
  free(p);
  free(NULL);

  void *z = calloc(1000, 8);
  int zero = z != NULL;
  for (int i = 0; z && i < 8000; i++) zero &= ((unsigned char *)z)[i] == 0;
  CHECK(zero);
  free(z);
  errno = 0;
  CHECK(calloc(huge, 3) == NULL && errno == ENOMEM);

  char *r = malloc(10);
  memcpy(r, "abcdefghi", 10);
  r = realloc(r, 100000);
  CHECK(r != NULL && memcmp(r, "abcdefghi", 10) == 0);
  r = realloc(r, 5);
  CHECK(r != NULL && memcmp(r, "abcde", 5) == 0);
  CHECK(realloc(r, 0) == NULL); /* frees, as glibc */
  void *q = realloc(NULL, 64);
  CHECK(q != NULL);
  errno = 0;
  CHECK(ra(q, huge, 4) == NULL && errno == ENOMEM);
  q = ra(q, 10, 100);
  CHECK(q != NULL && malloc_usable_size(q) >= 1000);
  free(q);

  size_t aligns[] = {16, 64, 4096, 65536, (size_t)2 << 20};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    void *a = NULL;
    CHECK(posix_memalign(&a, aligns[i], 1000) == 0 && a && aligned(a, aligns[i]));
    memset(a, 1, 1000);
    free(a);
    a = aligned_alloc(aligns[i], 3 * aligns[i]);
    CHECK(a && aligned(a, aligns[i]));
    free(a);
    a = memalign(aligns[i], 10);
    CHECK(a && aligned(a, aligns[i]));
    free(a);
  }
  void *bad = (void *)1;
  CHECK(posix_memalign(&bad, 24, 10) == EINVAL && bad == (void *)1);
  CHECK(posix_memalign(&bad, 4, 10) == EINVAL);
  void *m = memalign(48, 10); /* not a power of two: rounded up */
  CHECK(m && aligned(m, 64));
  free(m);
  /* as glibc's memalign: 0, or an alignment below 16 that is no power of
   * two, gives a block (docs/misuse.md); beyond 2^62, EINVAL */
  size_t odd[] = {0, 3};
  for (size_t i = 0; i < 2; i++) {
    m = memalign(odd[i], 10);
    CHECK(m && aligned(m, 16) && malloc_usable_size(m) >= 10);
    free(m);
  }
  errno = 0;
  CHECK(memalign(SIZE_MAX, 10) == NULL && errno == EINVAL);
  long ps = sysconf(_SC_PAGESIZE);
  void *v = valloc(10);
  CHECK(v && aligned(v, (size_t)ps));
  free(v);
  v = pvalloc(10);
  CHECK(v && aligned(v, (size_t)ps) && malloc_usable_size(v) >= (size_t)ps);
  free(v);

  /* many sizes, then trim */
  void *many[2000];
  for (int i = 0; i < 2000; i++) many[i] = malloc((size_t)(i * 37 % 70000) + 1);
  for (int i = 0; i < 2000; i++) free(many[i]);
  (void)malloc_trim(0);
  /* not scralloc's: with SCRALLOC_ON_ERROR=ignore, counted and ignored, no
   * crash (the default, abort, is tests/preload/misuse_check.py's) */
  int (*option_set)(const char *, const char *) =
      (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "scr_process_option_set");
  CHECK(option_set != NULL && option_set("on_error", "ignore") == 0);
  int local = 0;
  fr(&local);
  CHECK(malloc_usable_size(&local) == 0);
  if (option_set) option_set("on_error", "abort");

  /* glibc's own names are scralloc's code: their blocks are scralloc's,
   * and a block they free is the next malloc's of its class (the thread's
   * cache hands back the block freed last).  cfree (glibc before 2.26)
   * too, found by name: new programs cannot link to it. */
  void *g = __libc_malloc(200);
  CHECK(g != NULL && usable && usable(g) >= 200);
  __libc_free(g);
  void *g2 = malloc(200);
  CHECK(g2 == g);
  free(g2);
  char *gc = __libc_calloc(50, 4);
  int gzero = gc != NULL && usable && usable(gc) >= 200;
  for (int i = 0; gc && i < 200; i++) gzero &= gc[i] == 0;
  CHECK(gzero);
  memcpy(gc, "xyz", 4);
  gc = __libc_realloc(gc, 50000);
  CHECK(gc != NULL && usable && usable(gc) >= 50000 && memcmp(gc, "xyz", 4) == 0);
  free(gc);
  void *ga = __libc_memalign(4096, 100);
  CHECK(ga && aligned(ga, 4096) && usable && usable(ga) >= 100);
  free(ga);
  ga = __libc_valloc(100);
  CHECK(ga && aligned(ga, (size_t)ps) && usable && usable(ga) >= 100);
  free(ga);
  ga = __libc_pvalloc(100);
  CHECK(ga && aligned(ga, (size_t)ps) && usable && usable(ga) >= (size_t)ps);
  free(ga);
  void (*cf)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "cfree");
  CHECK(cf != NULL);
  void *c1 = malloc(300);
  if (cf) cf(c1);
  void *c2 = malloc(300);
  CHECK(c2 == c1);
  free(c2);

  /* glibc's statistics calls report scralloc's figures */
  struct mallinfo2 m0 = mallinfo2();
  char *big = malloc((size_t)1 << 20);
  memset(big, 7, (size_t)1 << 20);
  struct mallinfo2 m1 = mallinfo2();
  CHECK(m1.uordblks >= m0.uordblks + ((size_t)1 << 20));
  CHECK(m1.arena >= m1.uordblks && m1.fordblks == m1.arena - m1.uordblks);
  CHECK(m1.hblks >= 1 && m1.hblkhd >= ((size_t)1 << 20));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo mi = mallinfo();
#pragma GCC diagnostic pop
  CHECK(mi.uordblks >= (1 << 20) && (size_t)mi.arena == m1.arena);
  free(big);
  /* malloc_stats prints scralloc's report on stderr */
  FILE *tmp = tmpfile();
  int saved = dup(STDERR_FILENO);
  CHECK(tmp != NULL && saved >= 0 && dup2(fileno(tmp), STDERR_FILENO) == STDERR_FILENO);
  malloc_stats();
  dup2(saved, STDERR_FILENO);
  close(saved);
  char report[4096] = {0};
  rewind(tmp);
  size_t got = fread(report, 1, sizeof report - 1, tmp);
  fclose(tmp);
  CHECK(got > 0 && strstr(report, "scralloc[") != NULL && strstr(report, "]: arena   total MiB") != NULL &&
        strstr(report, "]:     0 ") != NULL); /* a row per arena */
  /* malloc_info writes scralloc's figures as XML; options must be 0 */
  char *held = malloc(5000); /* a live block of class 5120 in arena 0 */
  memset(held, 1, 5000);
  tmp = tmpfile();
  CHECK(tmp != NULL && malloc_info(0, tmp) == 0);
  char xml[65536] = {0};
  rewind(tmp);
  got = fread(xml, 1, sizeof xml - 1, tmp);
  fclose(tmp);
  CHECK(got > 0 && strncmp(xml, "<malloc version=\"scralloc-1\">", 29) == 0);
  CHECK(strstr(xml, "<heap nr=\"0\">") != NULL && strstr(xml, "<class size=\"5120\" live=\"") != NULL);
  CHECK(strstr(xml, "<system type=\"current\" size=\"") != NULL && strstr(xml, "</malloc>\n") != NULL);
  free(held);
  errno = 0;
  CHECK(malloc_info(1, stdout) == -1 && errno == EINVAL);

  return preload_check_done();
}
