/* Size classes: 16, 32, 48, 64, then four per doubling up to 16 KiB.
 * Every class is a multiple of 16 (SCR_MIN_ALIGN).  Rounding waste:
 * below 64 B it is under 16 B (the alignment quantum); from 64 B on, a
 * class is at most 1.25 times the one before it, so a request wastes
 * less than 20% of its block. */
#include "internal.h"

const uint32_t _scr_class_sizes[SCR_CLASS_COUNT] = {
    16,   32,   48,   64,                       /* quantum steps */
    80,   96,   112,  128,  160,  192,  224,  256, 320,  384,  448,  512,
    640,  768,  896,  1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
    5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384,
};

size_t scr_class_size(unsigned cls) {
  return cls < SCR_CLASS_COUNT ? _scr_class_sizes[cls] : 0;
}

int scr_size_class(size_t n) {
  if (n > SCR_SMALL_MAX) return -1;
  return (int)_scr_class_of(n);
}
