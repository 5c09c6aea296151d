/* Size classes: 16, 32, 48, 64, then four per doubling up to 64 KiB.
 * Every class is a multiple of 16 (SCR_MIN_ALIGN).  Rounding waste:
 * below 64 B it is under 16 B (the alignment quantum); from 64 B on, a
 * class is at most 1.25 times the one before it, so a request wastes
 * less than 20% of its block.  The medium classes (20-64 KiB, from
 * SCR_MEDIUM_FIRST) live in runs of SCR_MEDIUM_SPAN pages (types.h). */
#include "internal.h"

const uint32_t _scr_class_sizes[SCR_CLASS_COUNT] = {
    16,   32,   48,   64,                       /* quantum steps */
    80,   96,   112,  128,  160,  192,  224,  256, 320,  384,  448,  512,
    640,  768,  896,  1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096,
    5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384,
    20480, 24576, 28672, 32768, 40960, 49152, 57344, 65536, /* medium */
};
_Static_assert(SCR_MEDIUM_MIN == 20480, "SCR_MEDIUM_FIRST is the class of 20 KiB");

/* The class of every request, by table (internal.h: _scr_class_of): a
 * lookup, where computing it took a branch on n <= 64 that mispredicts
 * on every other call of a program whose sizes straddle 64 B.  Requests
 * up to 1 KiB by 16-byte step, up to 16 KiB by 128-byte step (every class
 * in 1-16 KiB is a multiple of 128), larger ones by 4 KiB step (every
 * medium class is a multiple of 4 KiB); test_size_classes checks every n. */
const uint8_t _scr_class_by_16[65] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 12, 12, 13,
    13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16, 16,
    17, 17, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 18, 18, 18, 19, 19, 19,
    19, 19, 19, 19, 19,
};
const uint8_t _scr_class_by_128[129] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 20, 21, 21, 22, 22, 23, 23, 24, 24, 24, 24,
    25, 25, 25, 25, 26, 26, 26, 26, 27, 27, 27, 27, 28, 28, 28, 28, 28, 28, 28,
    28, 29, 29, 29, 29, 29, 29, 29, 29, 30, 30, 30, 30, 30, 30, 30, 30, 31, 31,
    31, 31, 31, 31, 31, 31, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32,
    32, 32, 32, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33, 33,
    34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 34, 35, 35, 35,
    35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35, 35,
};
const uint8_t _scr_class_by_4096[17] = {
    0, 0, 0, 0, 0, 36, 37, 38, 39, 40, 40, 41, 41, 42, 42, 43, 43,
};

size_t scr_class_size(unsigned cls) {
  return cls < SCR_CLASS_COUNT ? _scr_class_sizes[cls] : 0;
}

int scr_size_class(size_t n) {
  if (n > SCR_SMALL_MAX) return -1;
  return (int)_scr_class_of(n);
}
