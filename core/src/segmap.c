/* The segment map: process-wide, from segment number (address >> 22) to
 * the header of the mapping that covers it.  Two levels over a 48-bit
 * address space: 8192 top entries, each a lazily mapped leaf of 8192
 * slots (64 KiB).  Lookups are lock-free and never touch memory that
 * might be unmapped, so any address can be asked about.  Beside it, the
 * mark map (internal.h), kept with it here: where a segment starts, its
 * heap's mark, for the free fast path. */
#include "internal.h"

#define SEG_BITS SCR_SEGMAP_SEG_BITS
#define LEAF_BITS SCR_SEGMAP_LEAF_BITS
#define LEAF_SLOTS (1u << LEAF_BITS)
#define top _scr_segmap_top
typedef struct _scr_segmap_leaf leaf;

_Atomic(struct _scr_segmap_leaf *) _scr_segmap_top[SCR_SEGMAP_TOP_SLOTS];
uint16_t _scr_segmap_fast[(size_t)1 << SCR_SEGMAP_FAST_BITS];

/* The mark map's word for segment number s of the mapping seg marked
 * mark: the mark where seg starts, 0 in the rest of a longer mapping
 * (its 4 MiB there hold no header). */
static void fast_set(uintptr_t s, const scr_segment *seg, uintptr_t mark) {
  if (s >> SCR_SEGMAP_FAST_BITS) return;
  unsigned f = _scr_segmap_fast_of(mark);
  uint16_t v = (s << SCR_SEGMENT_SHIFT) == (uintptr_t)seg && f != SCR_SEGMAP_NO_MARK ? (uint16_t)f : 0;
  __atomic_store_n(&_scr_segmap_fast[s], v, __ATOMIC_RELEASE);
}

static leaf *leaf_for(uintptr_t segno, bool create) {
  _Atomic(leaf *) *t = &top[segno >> LEAF_BITS];
  leaf *l = atomic_load_explicit(t, memory_order_acquire);
  if (l || !create) return l;
  leaf *fresh = _scr_os_map_aligned(sizeof(leaf), _scr_os_page_size(), NULL);
  if (fresh == NULL) return NULL;
  leaf *expected = NULL;
  if (!atomic_compare_exchange_strong(t, &expected, fresh)) {
    _scr_os_unmap(fresh, sizeof(leaf), NULL); /* another thread won */
    return expected;
  }
  return fresh;
}

/* Map the leaves that [base, base + size) needs; 0 or -1. */
int _scr_segmap_prepare(uintptr_t base, size_t size) {
  uintptr_t first = base >> SCR_SEGMENT_SHIFT;
  uintptr_t last = (base + size - 1) >> SCR_SEGMENT_SHIFT;
  if (last >> SEG_BITS) return -1;
  for (uintptr_t s = first; s <= last; s++) {
    if (leaf_for(s, true) == NULL) return -1;
  }
  return 0;
}

/* Register [base, base + size) as covered by seg, marked with mark (below
 * SCR_SEGMENT_SIZE).  0, or -1 when a leaf could not be mapped (nothing
 * is registered then). */
int _scr_segmap_set(uintptr_t base, size_t size, scr_segment *seg, uintptr_t mark) {
  scr_assert(((uintptr_t)seg & SCR_SEGMAP_MARK_MASK) == 0 && mark <= SCR_SEGMAP_MARK_MASK);
  if (_scr_segmap_prepare(base, size) != 0) return -1;
  uintptr_t first = base >> SCR_SEGMENT_SHIFT;
  uintptr_t last = (base + size - 1) >> SCR_SEGMENT_SHIFT;
  for (uintptr_t s = first; s <= last; s++) {
    atomic_store_explicit(&leaf_for(s, false)->slot[s & (LEAF_SLOTS - 1)], (uintptr_t)seg | mark, memory_order_release);
    fast_set(s, seg, mark);
  }
  return 0;
}

void _scr_segmap_clear(uintptr_t base, size_t size) {
  uintptr_t first = base >> SCR_SEGMENT_SHIFT;
  uintptr_t last = (base + size - 1) >> SCR_SEGMENT_SHIFT;
  for (uintptr_t s = first; s <= last; s++) {
    leaf *l = leaf_for(s, false);
    if (l) atomic_store_explicit(&l->slot[s & (LEAF_SLOTS - 1)], 0, memory_order_release);
    fast_set(s, NULL, 0);
  }
}

#undef top /* (the unity build: no later file meets it) */
