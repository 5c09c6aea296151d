/* A program of a user of the scr_* API, built against an installed
 * scralloc.  It prints which library its malloc comes from and whether
 * the process allocator handed out anything it did not ask for; exit 0
 * when the API works. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <scralloc.h>

int main(void) {
  scr_heap *h = scr_heap_new(NULL);
  if (h == NULL) {
    fprintf(stderr, "scr_heap_new failed\n");
    return 1;
  }
  char *b = scr_heap_malloc(h, 100);
  memset(b, 'x', 100);
  int ok = scr_heap_check(h, b) == SCR_OK;
  scr_heap_free(h, b);
  scr_heap_destroy(h);

  /* where the malloc this process calls is defined */
  void *p = malloc(100);
  Dl_info info;
  void *sym = dlsym(RTLD_DEFAULT, "malloc");
  const char *from = sym != NULL && dladdr(sym, &info) && info.dli_fname != NULL ? info.dli_fname : "?";
  const char *base = strrchr(from, '/') != NULL ? strrchr(from, '/') + 1 : from;
  /* what the process allocator owns: nothing, unless it serves malloc
   * (asked with on_error=ignore: by default a pointer that is not
   * scralloc's aborts the program, as glibc's checks do) */
  scr_process_option_set("on_error", "ignore");
  size_t owned = scr_usable_size(p);
  scr_process_option_set("on_error", "abort");
  struct scr_stats st;
  scr_stats(&st);
  printf("malloc from %s; scralloc owns malloc's block: %s; process allocator live blocks: %llu\n",
         strncmp(base, "libc.so", 7) == 0 ? "the C library" : base, owned ? "yes" : "no",
         (unsigned long long)st.allocs);
  free(p);

  void *q = scr_malloc(64);  /* the process allocator, called by name */
  ok = ok && q != NULL && scr_usable_size(q) >= 64;
  scr_free(q);
  printf("scr_* API: %s (scralloc %s)\n", ok ? "works" : "FAILED", SCR_VERSION);
  return ok ? 0 : 1;
}
