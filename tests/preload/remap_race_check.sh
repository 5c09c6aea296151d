#!/bin/sh
# A huge block that realloc moves (mremap to a fresh place) frees its old
# range for any thread's next mmap: its segment-map entries must be gone
# before the move, not after, or a block another thread has just mapped
# there reads as "not allocated by scralloc" and its free aborts.  strace
# slows each system call enough to open that window: proc_mixed_queue (8
# threads, 1-8 MiB blocks grown by realloc among small ones) aborted in
# about one run in seven under strace before the fix.
#   remap_race_check.sh LIBSCRALLOC BENCH_DIR [RUNS]
set -eu
lib=$1 bin=$2 runs=${3:-20}
if ! strace -f -o /dev/null true 2>/dev/null; then
  echo "remap_race_check: strace cannot run here" >&2
  [ -z "${CI:-}" ] || exit 1
  exit 0
fi
i=0
while [ "$i" -lt "$runs" ]; do
  if ! LD_PRELOAD=$lib strace -f -o /dev/null "$bin/proc_mixed_queue" 8 150000 >/dev/null; then
    echo "remap_race_check: run $i of proc_mixed_queue under strace failed" >&2
    exit 1
  fi
  i=$((i + 1))
done
echo "remap_race_check: $runs runs under strace, no block lost from the segment map"
