/* Breadth suite: runs of small blocks, as containers are built and
 * dropped.  One thread allocates a run of blocks of 24-64 B, then frees
 * them all in the order they came, over and over.
 *
 *     proc_runs [runs] [blocks per run] */
#include "suite_prog.h"

int main(int argc, char **argv) {
  prog_usage = "[runs] [blocks per run]";
  long runs = arg_num(argc, argv, 1, 20000, 1, 1000000000, "runs");
  long len = arg_num(argc, argv, 2, 1000, 1, 100000000, "blocks per run");
  unsigned char **run = must(malloc((size_t)len * sizeof *run));
  uint64_t s = 1;
  unsigned long bad = 0;
  for (long r = 0; r < runs; r++) {
    for (long k = 0; k < len; k++) {
      size_t sz = rnd_in(&s, 24, 65);
      run[k] = must(malloc(sz));
      stamp(run[k], sz);
    }
    for (long k = 0; k < len; k++) {
      size_t sz = stamped_size(run[k]);
      bad += sz < 24 || sz > 64 || !stamp_ok(run[k], sz);
      free(run[k]);
    }
  }
  free(run);
  printf("runs blocks=%ld bad=%lu\n", runs * len, bad);
  return bad != 0;
}
