#!/usr/bin/env python3
"""Micro-benchmark of the malloc/free fast paths (bench/proc_pairs.c) under
glibc, jemalloc, mimalloc, tcmalloc and scralloc (LD_PRELOAD), pinned to
one CPU when taskset is there, rounds interleaved, medians of
nanoseconds per malloc/free pair, one line per size mix: a Markdown
table on stdout (the README's copy; bench/update_readme.py).

    python3 bench/pairs_bench.py --lib build/release/libscralloc.so --bin build/release/bench

With --compare NAME=LIB (twice or more) it compares builds of scralloc
instead: each round runs every mix under each LIB in a shuffled order,
pinned, timed by the thread's CPU time (PROC_PAIRS_CLOCK=cpu), and prints
each build's median and, for every build after the first, the median and
quartiles of the rounds' ratios to the first (the A/B of a fast-path
change; --lib is then not needed):

    python3 bench/pairs_bench.py --bin build/release/bench --rounds 31 \
        --compare base=/tmp/base.so --compare new=build/release/libscralloc.so
"""
import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_bench import find_allocators  # noqa: E402  (the same peers, found the same way)

MIXES = ["64", "small", "medium", "page", "large", "stress", "runs", "aligned", "realloc"]
# what each mix of bench/proc_pairs.c draws, for the table
MIX_NAMES = {
    "64": "64 B",
    "small": "small (16-127 B)",
    "medium": "medium (128 B-4 KiB)",
    "page": "page (4-16 KiB)",
    "large": "large (16-64 KiB)",
    "stress": "stress (the threaded stress's sizes)",
    "runs": "runs (1,000 of 16-127 B, then their frees)",
    "aligned": "aligned (16-127 B, aligned_alloc(64, n))",
    "realloc": "realloc (a live block of 16-127 B to another such size)",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", help="libscralloc.so")
    ap.add_argument("--compare", action="append", default=[], metavar="NAME=LIB",
                    help="compare builds of scralloc (twice or more)")
    ap.add_argument("--bin", required=True, help="folder with proc_pairs")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("SCR_BENCH_RUNS", "7")))
    ap.add_argument("--steps", type=int, default=2000000)
    args = ap.parse_args()
    if args.compare:
        return compare(args)
    if not args.lib:
        ap.error("--lib is needed (or --compare NAME=LIB twice or more)")
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


def compare(args):
    builds = []
    for spec in args.compare:
        name, sep, path = spec.partition("=")
        if not sep or not name or not os.path.isfile(path):
            sys.exit(f"pairs_bench: --compare takes NAME=LIB, LIB a file, not {spec!r}")
        builds.append((name, os.path.abspath(path)))
    if len(builds) < 2:
        sys.exit("pairs_bench: --compare twice or more")
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    exe = os.path.join(args.bin, "proc_pairs")
    res = {(m, n): [] for m in MIXES for n, _ in builds}
    rng = random.Random(1)
    for _ in range(args.rounds):
        for mix in MIXES:
            order = builds[:]
            rng.shuffle(order)
            for name, path in order:
                env = dict(os.environ, LD_PRELOAD=path, PROC_PAIRS_CLOCK="cpu")
                p = subprocess.run(pin + [exe, mix, str(args.steps)], env=env, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(f"pairs_bench: {mix} / {name}: exit {p.returncode} {p.stderr.strip()}")
                res[(mix, name)].append(float(p.stdout.split()[0]))
    first = builds[0][0]
    print(f"\nmalloc/free pairs, {args.steps} steps, ns of CPU time per pair, median of {args.rounds} paired rounds; "
          f"ratios to {first}: median [quartiles] of the rounds' ratios\n")
    print("| mix | " + " | ".join(n for n, _ in builds) + " | " + " | ".join(f"{n} / {first}" for n, _ in builds[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(builds) - 1))
    for mix in MIXES:
        cells = [f"{statistics.median(res[(mix, n)]):.2f}" for n, _ in builds]
        for n, _ in builds[1:]:
            rs = sorted(a / b for a, b in zip(res[(mix, n)], res[(mix, first)]))
            k = len(rs)
            cells.append(f"{statistics.median(rs):.3f} [{rs[k // 4]:.3f}-{rs[(3 * k) // 4]:.3f}]")
        print(f"| {mix} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
