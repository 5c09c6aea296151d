#include <scralloc.h>
#include <stdio.h>

int main(void) {
  scr_heap *h = scr_heap_new(NULL);           /* an allocator object, default options */
  char *p = scr_heap_malloc(h, 100);
  snprintf(p, 100, "hello from a scralloc heap");
  puts(p);                                    /* --> hello from a scralloc heap */
  scr_heap_free(h, p);
  scr_heap_destroy(h);                        /* gives every byte back to the OS */
  return 0;
}
