/* Misuse detection: what a free of a bad pointer is, found cheaply on the
 * fast paths and exactly on the slow ones.
 *
 * Two tests on every free of a block of a size class, both on the block's
 * first line, which the free writes anyway:
 *  - the freed-block key: every free of a small block writes a per-process
 *    random word (_scr_misuse.key) into the block's second word (its first
 *    is the free list link), and every malloc that hands a block out
 *    clears it.  A block that holds the key is free: a second free of it
 *    sees the key.  (glibc's tcache does the same with its per-thread
 *    key.)  Wrong only when the program wrote into the block after
 *    freeing it (a use after free, which erases the key), or when a live
 *    block holds the 64-bit random key by chance.
 *  - the slot test: an address on a page of class c must be a slot start
 *    below the page's last whole slot.  One multiply and one compare by
 *    the class's constants (the divisibility test of Lemire, Kaser and
 *    Kurz, "Faster remainder by direct computation", 2019), no division.
 * Either failing sends the call to the slow side, which classifies the
 * address exactly (classify.c for a heap) and reports it.
 *
 * The constants are filled once, by the first heap made (and the process
 * allocator's start), before any block exists. */
#include "internal.h"
#include <stdatomic.h>
#include <string.h>

_scr_misuse_globals _scr_misuse;
static _Atomic int misuse_state; /* 0 not yet, 1 being filled, 2 ready */

/* The slot test's constants of class c (all arithmetic mod 2^64, off
 * the offset of an address in its page, below 2^18):
 *   magic = floor(2^64 / size) + 1, so size * magic = 2^64 + step with
 *   0 < step <= size.  For off = q * size, off * magic = q * step; for any
 *   other off it is at least floor(2^64 / size) >= 2^46 (for a size that
 *   is not a power of two, Lemire et al.'s theorem; for a power of two,
 *   (off mod size) * 2^64 / size + off).
 * So  off * magic < n * step  <=>  off is one of the first n slots'
 * starts, for any n <= 4096 (n * step < 2^28): n = the page's capacity
 * gives the page's slot_limit (types.h: in the segment header; heap_fast.h keeps it, and
 * profile.c has it 0 while the page holds live sampled blocks). */
static _scr_slot_geom slot_geom(unsigned c) {
  uint64_t size = _scr_class_sizes[c];
  uint64_t span = (uint64_t)_scr_class_span(c) * SCR_PAGE_SIZE;
  uint64_t magic = UINT64_MAX / size + 1 + ((size & (size - 1)) == 0); /* floor(2^64 / size) + 1 */
  uint64_t step = size * magic;
  _scr_slot_geom g = {.magic = magic,
                      .mask = (uint32_t)(span - 1),
                      .step = (uint32_t)step};
  return g;
}

void _scr_misuse_init(void) {
  int s = atomic_load_explicit(&misuse_state, memory_order_acquire);
  if (SCR_LIKELY(s == 2)) return;
  int expected = 0;
  if (atomic_compare_exchange_strong(&misuse_state, &expected, 1)) {
    for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) _scr_misuse.geom[c] = slot_geom(c);
    /* always suspect: a page of no size class has slot_limit 0
     * (types.h) */
    _scr_misuse.geom[SCR_TAG_OTHER] = (_scr_slot_geom){.magic = 0, .mask = 0, .step = 0};
    uint64_t key = _scr_os_random_u64();
    _scr_misuse.key = key ? key : 0x5c7a110cfeedbeefull;
    atomic_store_explicit(&misuse_state, 2, memory_order_release);
    return;
  }
  while (atomic_load_explicit(&misuse_state, memory_order_acquire) != 2) {
  }
}

const char *_scr_misuse_what(int kind, const char *call) {
  switch (kind) {
  case SCR_EDOUBLEFREE: return strstr(call, "free") ? "double free" : "freed already";
  case SCR_EINTERIOR: return "not the start of a block";
  case SCR_ENOTALLOC: return "never allocated";
  case SCR_EFOREIGN: return "not allocated by scralloc";
  default: return scr_strerror(kind);
  }
}
