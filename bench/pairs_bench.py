#!/usr/bin/env python3
"""Micro-benchmark of the malloc/free fast paths (bench/proc_pairs.c) under
glibc, jemalloc, mimalloc, tcmalloc and scralloc (LD_PRELOAD), pinned to
one CPU when taskset is there, rounds interleaved, medians of
nanoseconds per malloc/free pair, one line per size mix: a Markdown
table on stdout (the README's copy; bench/update_readme.py).

    python3 bench/pairs_bench.py --lib build/release/libscralloc.so --bin build/release/bench
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

MIXES = ["64", "small", "medium", "page", "large", "stress", "runs"]
# what each mix of bench/proc_pairs.c draws, for the table
MIX_NAMES = {
    "64": "64 B",
    "small": "small (16-127 B)",
    "medium": "medium (128 B-4 KiB)",
    "page": "page (4-16 KiB)",
    "large": "large (16-64 KiB)",
    "stress": "stress (the threaded stress's sizes)",
    "runs": "runs (1,000 of 16-127 B, then their frees)",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="libscralloc.so")
    ap.add_argument("--bin", required=True, help="folder with proc_pairs")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("SCR_BENCH_RUNS", "7")))
    ap.add_argument("--steps", type=int, default=2000000)
    args = ap.parse_args()
    tmpdir = tempfile.mkdtemp(prefix="scr-pairs-")
    lib = os.path.join(tmpdir, "libscralloc.so")
    shutil.copy(args.lib, lib)
    allocs = [a for a in find_allocators(lib) if a[0] in ("glibc", "jemalloc", "mimalloc", "tcmalloc", "scralloc")]
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    exe = os.path.join(args.bin, "proc_pairs")
    res = {(m, a[0]): [] for m in MIXES for a in allocs}
    failures = 0
    for r in range(args.rounds):
        order = allocs[r % len(allocs):] + allocs[:r % len(allocs)]
        for mix in MIXES:
            for name, path in order:
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                if path:
                    env["LD_PRELOAD"] = path
                p = subprocess.run(pin + [exe, mix, str(args.steps)], env=env, capture_output=True, text=True)
                if p.returncode != 0:
                    failures += 1
                    print(f"# {mix} / {name}: exit {p.returncode} {p.stderr.strip()}", file=sys.stderr)
                    continue
                res[(mix, name)].append(float(p.stdout.split()[0]))
    names = [a[0] for a in allocs]
    print(f"\nmalloc/free pairs, one thread, 32 live blocks (runs: 1,000 at a time), {args.steps} steps, "
          f"median of {args.rounds} interleaved rounds (ns per pair)\n")
    print("| mix | " + " | ".join(names) + " | scralloc / best other |")
    print("|---|" + "---:|" * (len(names) + 1))
    for mix in MIXES:
        med = {n: statistics.median(res[(mix, n)]) for n in names if res[(mix, n)]}
        others = [v for k, v in med.items() if k != "scralloc"]
        ratio = f"{med['scralloc'] / min(others):.2f}x" if "scralloc" in med and others else "-"
        print(f"| {MIX_NAMES[mix]} | " + " | ".join(f"{med[n]:.1f}" if n in med else "failed" for n in names) + f" | {ratio} |")
    shutil.rmtree(tmpdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
