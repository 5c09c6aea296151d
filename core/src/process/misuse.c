/* Bad pointers given to the process allocator: free, realloc,
 * malloc_usable_size, free_sized and scr_free* of an address that is not a
 * live block.  The fast paths find a suspect by the freed-block key and
 * the slot test (core/src/misuse.c) and by the page's bump index; this
 * file says what the suspect is and what happens then
 * (SCRALLOC_ON_ERROR).
 *
 * Kinds: SCR_EFOREIGN (no arena owns the address: not in the segment
 * map, or a block of a scr_heap the program made), SCR_EINTERIOR (inside
 * a block, not its start), SCR_ENOTALLOC (a slot or page never handed
 * out, the page tail, a segment header), SCR_EDOUBLEFREE (a block already
 * free: a small one holds the key wherever it waits, a thread's cache,
 * the pool, a remote ring or stack, or its page; a large or huge one holds it on
 * its way home, from the claim of the thread that freed it
 * (_scr_proc_claim) to its owner's drain, and then is cached or its
 * pages went back).
 *
 * Layer: base: it reads the segment map, the core heap's descriptors and
 * the options; it owns nothing but the counters of misuse it bumps. */
#include "process.h"
#include <stdlib.h>
#include <unistd.h>

/* The verdict on p, whose segment map entry is e: SCR_OK for a live block
 * of an arena, else the kind: the core's classifier (classify.c) for the
 * arena that owns p's segment.  It reads the descriptors of the page that
 * holds p, which its arena's holder may be writing: only a racing misuse
 * sees them change. */
int _scr_proc_classify(const void *p, uintptr_t e) {
  scr_segment *seg = _scr_segmap_seg(e);
  if (seg == NULL) return SCR_EFOREIGN;
  scr_heap *h = seg->heap;
  scr_arena *o = _scr_heap_owner(h);
  if (o == NULL) return SCR_EFOREIGN; /* a block of a heap the program made */
  int r = _scr_classify(h, p);
  /* A small block freed before its page went back (free, not yet
   * decommitted) still holds the key; not in pages a discard made
   * inaccessible (discard=poison), which the core cannot know. */
  uintptr_t idx = ((uintptr_t)p >> SCR_PAGE_SHIFT) & (SCR_PAGES_PER_SEGMENT - 1);
  if (r == SCR_ENOTALLOC && seg->kind == SCR_SEG_NORMAL && idx != 0 && seg->pages[idx].kind == SCR_PAGE_FREE &&
      ((uintptr_t)p & (SCR_MIN_ALIGN - 1)) == 0 && !o->poisoned && _scr_block_word1(p) == _scr_misuse.key)
    r = SCR_EDOUBLEFREE;
  return r;
}

static void proc_misuse_count(int kind) {
  switch (kind) {
  case SCR_EDOUBLEFREE: SCR_PC_ADD(double_frees, 1); break;
  case SCR_EINTERIOR: SCR_PC_ADD(interior_frees, 1); break;
  case SCR_ENOTALLOC: SCR_PC_ADD(unallocated_frees, 1); break;
  default: SCR_PC_ADD(foreign_frees, 1); break;
  }
}

/* call (free, realloc, ...) was given p, a misuse of this kind: counted,
 * then as SCRALLOC_ON_ERROR says.  One line on stderr, written with
 * write(2) (no stdio, no malloc: the heap may be what is wrong), then
 * abort() (the default) or back to the caller, which ignores the call. */
void _scr_proc_misuse(const char *call, const void *p, int kind) {
  _scr_proc_init(); /* a free before any malloc: the options come from the environment first */
  proc_misuse_count(kind);
  uint64_t mode = _scr_proc.opt.on_error;
  if (mode == SCR_ON_ERROR_IGNORE && !_scr_proc.opt.verbose) return;
  char line[160];
  int n = snprintf(line, sizeof line, "scralloc: %s(%p): %s\n", call, p, _scr_misuse_what(kind, call));
  if (n > 0) {
    ssize_t w = write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
  if (mode == SCR_ON_ERROR_ABORT) abort();
}

/* p (not NULL) as free, realloc & co. check it on their slow sides: 0
 * when p is a live block of an arena, else the kind, already reported
 * (the caller ignores the call). */
int _scr_proc_check(const char *call, const void *p) {
  uintptr_t e = _scr_segmap_entry(p);
  scr_segment *seg = _scr_segmap_seg(e);
  if (SCR_LIKELY(seg != NULL && _scr_segmap_mark(e) != 0)) { /* marked: an arena's */
    uintptr_t idx = 0;
    unsigned tag = seg->kind == SCR_SEG_NORMAL ? _scr_block_tag(seg, p, &idx) : SCR_TAG_OTHER;
    if (SCR_LIKELY(!_scr_block_suspect(seg, idx, p, tag))) return SCR_OK;
  }
  int r = _scr_proc_classify(p, e);
  if (r != SCR_OK) _scr_proc_misuse(call, p, r);
  return r;
}
