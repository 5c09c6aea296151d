#!/usr/bin/env python3
"""The python3 workload's malloc calls, replayed under each allocator on the
same interleavings of its threads (bench/malloc_trace.c records a run,
bench/malloc_replay.c plays it back): max RSS of the allocator's memory
for the program's blocks, per trace and as medians.

    python3 bench/replay_bench.py --lib build/release/libscralloc.so --bin build/release/bench

A real threaded run's max RSS moves with the interleaving of its threads
(proc_bench.py's python3 rows spread over 4-8 MiB from run to run); a
replay holds the interleaving fixed, so two allocators differ only by
what they do with the same calls.  Each trace is a fresh run of the
workload under glibc with the tracer preloaded (so the traces differ in
interleaving); every allocator replays every trace.  The replay writes
whole malloc'd blocks and a calloc'd block's first 64 bytes (see
malloc_replay.c): it models the program's touches, it does not record
them, so its figures are for comparing allocators, not for predicting
the real program's RSS.  Output: a Markdown table on stdout (--readme
leaves out the per-trace rows, as bench/update_readme.py copies it).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_bench import find_allocators  # noqa: E402  (the same peers, found the same way)


def parse(line):
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="libscralloc.so")
    ap.add_argument("--bin", required=True, help="folder with malloc_replay and libmalloc_trace.so")
    ap.add_argument("--traces", type=int, default=int(os.environ.get("SCR_REPLAY_TRACES", "6")))
    ap.add_argument("--threads", type=int, default=4, help="the workload's threads")
    ap.add_argument("--readme", action="store_true",
                    help="leave out the per-trace rows (the README's copy; bench/update_readme.py)")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    tmpdir = tempfile.mkdtemp(prefix="scr-replay-")
    lib = os.path.join(tmpdir, "libscralloc.so")
    shutil.copy(args.lib, lib)
    allocs = [a for a in find_allocators(lib) if a[0] in ("glibc", "jemalloc", "mimalloc", "tcmalloc", "scralloc")]
    tracer = os.path.join(args.bin, "libmalloc_trace.so")
    replay = os.path.join(args.bin, "malloc_replay")
    workload = [sys.executable, os.path.join(here, "proc_py.py"), str(args.threads), "3"]
    res = {a[0]: [] for a in allocs}
    failures = 0
    for t in range(args.traces):
        trace = os.path.join(tmpdir, f"py{t}.trace")
        env = dict(os.environ, LD_PRELOAD=tracer, SCR_TRACE_OUT=trace)
        subprocess.run(workload, env=env, check=True)
        order = allocs[t % len(allocs):] + allocs[:t % len(allocs)]
        for name, path in order:
            env = dict(os.environ)
            env.pop("LD_PRELOAD", None)
            if path:
                env["LD_PRELOAD"] = path
            p = subprocess.run([replay, trace], env=env, capture_output=True, text=True)
            if p.returncode != 0:
                failures += 1
                print(f"# trace {t} / {name}: exit {p.returncode} {p.stderr.strip()}", file=sys.stderr)
                continue
            res[name].append(parse(p.stdout))
        os.unlink(trace)
    shutil.rmtree(tmpdir, ignore_errors=True)
    names = [a[0] for a in allocs]
    print(f"\npython3 proc_py.py {args.threads} 3, malloc calls replayed: {args.traces} traces "
          f"(each a run under glibc), every allocator on each\n")
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for t in range(0 if args.readme else args.traces):
        row = [f"{res[n][t]['rss_kib'] / 1024:.1f}" if t < len(res[n]) else "-" for n in names]
        print(f"| trace {t} (peak live {res['glibc'][t]['peak_live_kib'] / 1024:.1f} MiB) | " + " | ".join(row) + " |")
    med = {n: statistics.median(r["rss_kib"] for r in res[n]) / 1024 for n in names if res[n]}
    flt = {n: statistics.median(r["minflt"] for r in res[n]) for n in names if res[n]}
    peak = statistics.median(r["peak_live_kib"] for r in res["glibc"]) / 1024 if res["glibc"] else 0
    print(f"| median max RSS (MiB; the program's peak of live blocks: {peak:.1f}) | " + " | ".join(f"{med[n]:.1f}" for n in names) + " |")
    print("| median minor faults | " + " | ".join(f"{flt[n]:.0f}" for n in names) + " |")
    if "scralloc" in med and "glibc" in med:
        ratios = [s["rss_kib"] / g["rss_kib"] for s, g in zip(res["scralloc"], res["glibc"])]
        print(f"\nscralloc / glibc per trace: median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
