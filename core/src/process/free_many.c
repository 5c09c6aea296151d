/* Address-ordered teardown.  Freeing a large set of blocks in the order a
 * program happens to hold them leaves the LIFO free lists handing them out
 * again scattered over every page; freeing them in descending address
 * order makes the free lists hand them back ascending, the order the bump
 * pointers carve fresh memory in.  Sets of at least SCR_FREE_MANY_SORT
 * blocks are sorted (in place, heapsort: no allocation, O(n log n)).
 * Layer: entry (scr_free per block).  Owns nothing. */
#include "entry.h"

#define SCR_FREE_MANY_SORT 16384

static void proc_sift_down(void **v, size_t i, size_t n) {
  /* min-heap: the root is the smallest, so popping to the end leaves the
   * array in descending order. */
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && (uintptr_t)v[c + 1] < (uintptr_t)v[c]) c++;
    if ((uintptr_t)v[i] <= (uintptr_t)v[c]) return;
    void *t = v[i];
    v[i] = v[c];
    v[c] = t;
    i = c;
  }
}

static void proc_sort_descending(void **v, size_t n) {
  for (size_t i = n / 2; i-- > 0;) proc_sift_down(v, i, n);
  for (size_t end = n; end > 1; end--) {
    void *t = v[0];
    v[0] = v[end - 1];
    v[end - 1] = t;
    proc_sift_down(v, 0, end - 1);
  }
}

void scr_free_many(void **ptrs, size_t n) {
  if (ptrs == NULL) return;
  if (n >= SCR_FREE_MANY_SORT) proc_sort_descending(ptrs, n);
  for (size_t i = 0; i < n; i++) scr_free(ptrs[i]);
}
