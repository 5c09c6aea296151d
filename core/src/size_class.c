/* Size classes: 16, 32, 48, 64, then four per doubling up to 1 KiB,
 * eight per doubling from 1 to 4 KiB, four again up to 64 KiB.  Every
 * class is a multiple of 16 (SCR_MIN_ALIGN).  Rounding waste: below 64 B
 * it is under 16 B (the alignment quantum); from 64 B on, a class is at
 * most 1.25 times the one before it (1.125 in 1-4 KiB), so a request
 * wastes less than 20% of its block (11% in 1-4 KiB).  The medium classes
 * (20-64 KiB, from SCR_MEDIUM_FIRST) live in runs of SCR_MEDIUM_SPAN
 * pages (types.h).
 *
 * Why eight per doubling in 1-4 KiB: blocks of those sizes are where
 * rounding costs most bytes, and a program that holds many of them pays
 * it on every one.  The churn benchmark (live sets of 64 B-4 KiB blocks)
 * with its threads held once their live sets are allocated
 * (`proc_churn 16 128 24 2 hold`, the same in every run): 216.1 -> 209.0
 * MiB (glibc 206.1); max RSS over 11 interleaved runs 193.9 -> 186.9 MiB.
 * Sixteen per doubling in 2-4 KiB (60 classes) took that to 205.1 and
 * 176.2, but raised the threaded stress's max RSS 11.1 -> 11.9 MiB
 * (glibc 11.7): with 8 threads each holding a partly used page and
 * blocks in flight for every class, each class more costs each thread
 * memory; eight per doubling left the stress at 11.1. */
#include "internal.h"

const uint32_t _scr_class_sizes[SCR_CLASS_COUNT] = {
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
    640, 768, 896, 1024, 1152, 1280, 1408, 1536, 1664, 1792, 1920, 2048, 2304,
    2560, 2816, 3072, 3328, 3584, 3840, 4096, 5120, 6144, 7168, 8192, 10240,
    12288, 14336, 16384, 20480, 24576, 28672, 32768, 40960, 49152, 57344,
    65536,
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
    13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15, 16, 16, 16, 16, 16, 16, 16,
    16, 17, 17, 17, 17, 17, 17, 17, 17, 18, 18, 18, 18, 18, 18, 18, 18, 19,
    19, 19, 19, 19, 19, 19, 19,
};
const uint8_t _scr_class_by_128[129] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 21, 22, 23, 24, 25, 26, 27, 28, 28, 29, 29,
    30, 30, 31, 31, 32, 32, 33, 33, 34, 34, 35, 35, 36, 36, 36, 36, 36, 36,
    36, 36, 37, 37, 37, 37, 37, 37, 37, 37, 38, 38, 38, 38, 38, 38, 38, 38,
    39, 39, 39, 39, 39, 39, 39, 39, 40, 40, 40, 40, 40, 40, 40, 40, 40, 40,
    40, 40, 40, 40, 40, 40, 41, 41, 41, 41, 41, 41, 41, 41, 41, 41, 41, 41,
    41, 41, 41, 41, 42, 42, 42, 42, 42, 42, 42, 42, 42, 42, 42, 42, 42, 42,
    42, 42, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43, 43,
};
const uint8_t _scr_class_by_4096[17] = {
    0, 0, 0, 0, 0, 44, 45, 46, 47, 48, 48, 49, 49, 50, 50, 51, 51,
};

size_t scr_class_size(unsigned cls) {
  return cls < SCR_CLASS_COUNT ? _scr_class_sizes[cls] : 0;
}

int scr_size_class(size_t n) {
  if (n > SCR_SMALL_MAX) return -1;
  return (int)_scr_class_of(n);
}
