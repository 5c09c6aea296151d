"""Waves of threads that exit and come back, under the process allocator.

    LD_PRELOAD=build/release/libscralloc.so PYTHONMALLOC=malloc \\
        python3 thread_waves.py [--waves N] [--threads N] [--mib N] [--idle S] [--csv FILE]

Each wave starts THREADS threads that allocate MIB MiB each in small
objects, wait until every thread of the wave holds its share (so that each
allocates in an arena of its own), free them and exit: their arenas are
parked. The program then waits until the discard helper has taken every
arena the wave parked (at most ten decay delays) and starts the next
wave at once, as a program whose threads keep coming back does: each such
return faults in again pages a discard just gave back (refaults), and the
decay delay, which the discards wait too, doubles, up to its cap. After the last wave it
stays idle IDLE seconds. A scralloc.Sampler reads the process allocator's
figures all along; the rows go to FILE (CSV, default stdout), each marked
with the wave running (a wave's first and last rows are taken as it starts
and once its threads have parked their arenas). Set
SCRALLOC_DECAY_MS and SCRALLOC_DECAY_MAX_MS to scale; a
parked arena keeps its free pages for the discard only as far as
SCRALLOC_RETAIN_BYTES lets it (the notebook raises it).
"""
import argparse
import sys
import threading
import time

import scralloc
from scralloc.sampler import preloaded_process_stats


def process():
    """The process allocator's own figures (arenas, claims, parks, discards)."""
    return preloaded_process_stats()["process"]


def wait_until(done, seconds, step):
    """Call done() every step seconds until it is true, seconds at most."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(step)


def worker(mib, all_hold):
    block = 512
    keep = [bytearray(block) for _ in range((mib << 20) // (block + 64))]
    for b in keep[::97]:
        b[0] = 1
    all_hold.wait()
    del keep


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waves", type=int, default=6)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--mib", type=int, default=16)
    ap.add_argument("--idle", type=float, default=3.0)
    ap.add_argument("--interval", type=float, default=0.01)
    ap.add_argument("--csv")
    args = ap.parse_args()
    if preloaded_process_stats() is None:
        sys.exit("thread_waves.py: malloc is not scralloc's: run it with LD_PRELOAD=libscralloc.so")

    wave = 0
    sampler = scralloc.Sampler(None)            # the preloaded process allocator
    stop = threading.Event()

    def sample_loop():                          # rows marked with the wave running (0: none)
        while not stop.is_set():
            sampler.sample(wave=wave)
            stop.wait(args.interval)

    t = threading.Thread(target=sample_loop)
    t.start()
    for w in range(1, args.waves + 1):
        wave = w
        owned = sampler.sample(wave=w)["arenas_owned"]  # every wave has a row, however short it runs
        all_hold = threading.Barrier(args.threads)
        threads = [threading.Thread(target=worker, args=(args.mib, all_hold)) for _ in range(args.threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        # A thread parks its arena as it exits, after join() has returned.
        wait_until(lambda: process()["arenas_owned"] <= owned, 1, 0.001)
        sampler.sample(wave=w)                  # its last row: its threads have parked their arenas
        wave = 0
        # Wait until the helper has discarded the wave's arenas (one per
        # thread: they held their blocks at once), ten delays at most,
        # and take a row at once, before the next wave comes back.
        before = process()
        wait_until(lambda: process()["discards"] - before["discards"] >= args.threads,
                   10 * before["decay_delay_ms"] / 1000, 0.001)
        sampler.sample(wave=0)
    time.sleep(args.idle)
    stop.set()
    t.join()
    sampler.sample(wave=0)
    if args.csv:
        sampler.to_csv(args.csv)
    else:
        sampler.to_csv(sys.stdout)


if __name__ == "__main__":
    main()
