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
 * it on every one; more classes cost each thread a partly used page and
 * blocks in flight per class (docs/process.md, "Why it is built this
 * way"). */
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
 * up to 16 KiB by 16-byte step, one entry each (1 KiB of table; every
 * class up to 16 KiB is a multiple of 16), then one entry per 4 KiB up to
 * 64 KiB (every medium class is a multiple of 4 KiB).  Two tables, by 16
 * up to 1 KiB and by 128 up to 16 KiB, took a branch between them that
 * mispredicts where sizes straddle 1 KiB (docs/process.md).  The medium
 * classes by 16-byte step too (4 KiB of table, of which a program touches
 * the lines of the sizes it asks for): one index, no test on the size on
 * malloc's hit path.
 * BY16(prev, size, c): the requests in (prev, size] are of class c
 * (stored times 4: internal.h).
 * test_size_classes checks every n. */
#define BY16(prev, size, c) [(prev) / 16 + 1 ... (size) / 16] = (c) * 4
const uint8_t _scr_class_index[SCR_CLASS_INDEX_LEN] = {
    BY16(0, 16, 0), BY16(16, 32, 1), BY16(32, 48, 2), BY16(48, 64, 3),
    BY16(64, 80, 4), BY16(80, 96, 5), BY16(96, 112, 6), BY16(112, 128, 7),
    BY16(128, 160, 8), BY16(160, 192, 9), BY16(192, 224, 10),
    BY16(224, 256, 11), BY16(256, 320, 12), BY16(320, 384, 13),
    BY16(384, 448, 14), BY16(448, 512, 15), BY16(512, 640, 16),
    BY16(640, 768, 17), BY16(768, 896, 18), BY16(896, 1024, 19),
    BY16(1024, 1152, 20), BY16(1152, 1280, 21), BY16(1280, 1408, 22),
    BY16(1408, 1536, 23), BY16(1536, 1664, 24), BY16(1664, 1792, 25),
    BY16(1792, 1920, 26), BY16(1920, 2048, 27), BY16(2048, 2304, 28),
    BY16(2304, 2560, 29), BY16(2560, 2816, 30), BY16(2816, 3072, 31),
    BY16(3072, 3328, 32), BY16(3328, 3584, 33), BY16(3584, 3840, 34),
    BY16(3840, 4096, 35), BY16(4096, 5120, 36), BY16(5120, 6144, 37),
    BY16(6144, 7168, 38), BY16(7168, 8192, 39), BY16(8192, 10240, 40),
    BY16(10240, 12288, 41), BY16(12288, 14336, 42), BY16(14336, 16384, 43),
    BY16(16384, 20480, 44), BY16(20480, 24576, 45), BY16(24576, 28672, 46),
    BY16(28672, 32768, 47), BY16(32768, 40960, 48), BY16(40960, 49152, 49),
    BY16(49152, 57344, 50), BY16(57344, 65536, 51),
};
#undef BY16

size_t scr_class_size(unsigned cls) {
  return cls < SCR_CLASS_COUNT ? _scr_class_sizes[cls] : 0;
}

int scr_size_class(size_t n) {
  if (n > SCR_SMALL_MAX) return -1;
  return (int)_scr_class_of(n);
}
