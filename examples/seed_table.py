"""The seed's table at the Python prompt: 200,000 malloc/free pairs of 64 B
and 4096 B with retain=0 and retain=1, without the purge delay (which would
keep the page in both), and the OS calls each one cost.

    python3 examples/seed_table.py [pairs]
"""
import sys
import time

import scralloc

pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000

print(f"scralloc {scralloc.__version__} (SCR_DEBUG={scralloc.DEBUG}), {pairs:,} pairs")
print(f"{'size':>6} {'retain':>6} {'mmap':>8} {'munmap':>8} {'madvise':>8} "
      f"{'end state':>24} {'time':>8}")
for size in (64, 4096):
    for retain in (0, 1):
        with scralloc.Allocator(retain=retain, purge_delay_ms=0) as a:
            t = time.perf_counter()
            for _ in range(pairs):
                a.free(a.malloc(size))
            t = time.perf_counter() - t
            s = a.stats()
            end = f"mmaps={a.mmaps} bytes={a.bytes}"
            print(f"{size:>6} {retain:>6} {s['mmap_calls']:>8,} {s['munmap_calls']:>8,} "
                  f"{s['madvise_calls']:>8,} {end:>24} {t:>7.2f}s")
