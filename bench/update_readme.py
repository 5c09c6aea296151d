#!/usr/bin/env python3
"""Refresh the benchmark tables in README.md (and docs/process.md) by running the benchmarks.

    python3 bench/update_readme.py [--rounds N] [--quick] [--only NAME ...] [--file README.md]
    make readme-tables [ROUNDS=N] [QUICK=1] [ONLY="process pairs"]

The marker convention.  A table in the README is the text between two
HTML comments on lines of their own:

    <!-- bench:NAME -->
    ...replaced on every refresh...
    <!-- /bench:NAME -->

NAME is a key of BENCHES below.  Each entry names the command that prints
the table: a benchmark script that writes Markdown (a caption line and a
table) to stdout and its progress to stderr.  The refresh runs the
command from the repository root and puts between the markers a line
saying the command and the machine (cores, CPU model, kernel), then the
command's stdout as it is.  Nothing else in the file changes; a marker
pair missing from the file is an error, so a table cannot silently stop
being refreshed.

To add a benchmark: give its script a mode that prints only its README
table to stdout (proc_bench.py has --readme), add an entry here with the
make targets that build what it runs, its command, and how --rounds and
--quick map onto its own arguments, and put the marker pair where the
table belongs in README.md.

The machine the figures come from is part of the table: figures from
different machines (or from a loaded machine) do not compare.
"""
import argparse
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LIB = "build/release/libscralloc.so"
BIN = "build/release/bench"

# NAME -> how to produce its table.
#   make:    targets built first (make -s, from the repository root)
#   argv:    function(rounds, quick) -> the command (a list), run from the root
#   rounds:  the default number of rounds when --rounds is not given
#   file:    the file whose markers it fills (README.md when not given)
# The mechanism table: each mechanism an option switches off, in turn,
# across the breadth suite (the parked drain and the huge cache have no
# option: docs/process.md measures them apart).
MECHANISMS = ["pool=0", "cache_max=0", "cache_grow=0", "cache_medium=0", "cache_medium_after=0", "discard=0",
              "decay_ms=0"]
BENCHES = {
    "seed": {
        "make": [f"{BIN}/bench_pairs"],
        "argv": lambda r, q: [f"{BIN}/bench_pairs", "20000" if q else "200000", str(r)],
        "rounds": 7,
    },
    "process": {
        "make": [LIB, f"{BIN}/proc_xthread", f"{BIN}/proc_churn", f"{BIN}/proc_launch"],
        "argv": lambda r, q: ["python3", "bench/proc_bench.py", "--lib", LIB, "--bin", BIN, "--runs", str(r),
                              "--readme"]
                             + (["--scale", "0.2"] if q else []),
        "rounds": 11,
    },
    "pairs": {
        "make": [LIB, f"{BIN}/proc_pairs"],
        "argv": lambda r, q: ["python3", "bench/pairs_bench.py", "--lib", LIB, "--bin", BIN, "--rounds", str(r)]
                             + (["--steps", "200000"] if q else []),
        "rounds": 7,
    },
    "suite": {
        "make": [LIB, "suite-bin", f"{BIN}/bench_pairs"],
        "argv": lambda r, q: ["python3", "bench/suite_bench.py", "--lib", LIB, "--bin", BIN, "--rounds", str(r)]
                             + (["--only", "runs", "--only", "RFC"] if q else []),
        "rounds": 3,
    },
    "mechanisms": {
        "make": [LIB, "suite-bin"],
        "argv": lambda r, q: ["python3", "bench/suite_bench.py", "--lib", LIB, "--bin", BIN, "--rounds", str(r),
                              "--no-peers", "--mechanisms"]
                             + [a for m in MECHANISMS for a in ("--profile", m)]
                             + (["--only", "runs"] if q else []),
        "rounds": 7,  # six or more: each row's interval, which the verdict reads (suite_bench.verdict)
        "file": "docs/process.md",
    },
    "replay": {
        "make": [LIB, f"{BIN}/malloc_replay", f"{BIN}/libmalloc_trace.so"],
        "argv": lambda r, q: ["python3", "bench/replay_bench.py", "--lib", LIB, "--bin", BIN, "--traces", str(r),
                              "--readme"],
        "rounds": 6,
    },
}


def machine():
    """'2 cores, Intel(R) Xeon(R) Processor, Linux 6.1.0'"""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {model}, {platform.system()} {platform.release()}"


def shown(argv):
    """the command as a user types it"""
    return " ".join(a if re.fullmatch(r"[\w./=:,+-]+", a) else repr(a) for a in argv)


def replace_block(text, name, body):
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    pat = re.compile(re.escape(start) + r"\n.*?" + re.escape(end), re.S)
    if not pat.search(text):
        raise SystemExit(f"update_readme: no {start} ... {end} pair in the file")
    return pat.sub(lambda _: f"{start}\n{body}\n{end}", text, count=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, help="rounds (traces for replay) of every benchmark run")
    ap.add_argument("--quick", action="store_true", help="less work per round (a check that the refresh works)")
    ap.add_argument("--only", nargs="+", choices=sorted(BENCHES), help="refresh these tables only")
    ap.add_argument("--file", help="the file for every table (else each its own: README.md, docs/process.md)")
    args = ap.parse_args()
    names = args.only or list(BENCHES)
    path_of = {n: args.file or os.path.join(ROOT, BENCHES[n].get("file", "README.md")) for n in names}
    for name in names:  # every marker pair must be there before anything runs
        replace_block(open(path_of[name], encoding="utf-8").read(), name, "")
    where = machine()
    for name in names:
        b = BENCHES[name]
        path = path_of[name]
        text = open(path, encoding="utf-8").read()
        rounds = args.rounds or b["rounds"]
        subprocess.run(["make", "-s"] + b["make"], cwd=ROOT, check=True)
        argv = b["argv"](rounds, args.quick)
        print(f"== {name}: {shown(argv)}", file=sys.stderr, flush=True)
        p = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise SystemExit(f"update_readme: {name}: exit {p.returncode}; its table is unchanged")
        body = f"`{shown(argv)}` on {where}:\n\n{p.stdout.strip()}"
        text = replace_block(text, name, body)
        with open(path, "w", encoding="utf-8") as f:  # each table as soon as it is measured
            f.write(text)
        print(f"== {name}: table written to {os.path.relpath(path, ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
