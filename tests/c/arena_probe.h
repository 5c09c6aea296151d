/* Helpers for the process tests that look at one arena's published
 * figures (scr_arena_stats). */
#ifndef SCR_ARENA_PROBE_H
#define SCR_ARENA_PROBE_H
#include "scralloc.h"
#include <stdint.h>

/* The index of the size class whose blocks are block_size bytes, or
 * SCR_CLASS_COUNT. */
static unsigned class_of_size(size_t block_size) {
  struct scr_stats st;
  scr_stats(&st);
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++)
    if (st.classes[c].block_size == block_size) return c;
  return SCR_CLASS_COUNT;
}

/* The first arena (in creation order) with a live block of block_size
 * bytes, or UINT32_MAX: the caller's own, when the caller holds the only
 * such block (scr_arena_stats publishes the caller's arena first). */
static unsigned arena_with_live(size_t block_size) {
  unsigned c = class_of_size(block_size);
  struct scr_process_stats ps;
  scr_process_stats(&ps);
  for (unsigned i = 0; i < ps.arenas; i++) {
    struct scr_stats st;
    if (scr_arena_stats(i, &st) == SCR_OK && st.classes[c].live > 0) return i;
  }
  return UINT32_MAX;
}
#endif
