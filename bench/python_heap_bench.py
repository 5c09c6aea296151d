"""Python's own objects on scralloc (Allocator.serve_python) against
pymalloc and PYTHONMALLOC=malloc: time and peak memory of a dict, list and
str heavy workload.

    python bench/python_heap_bench.py [--rounds N] [--scale S]

Each run is a fresh child interpreter that times the workload alone (not
the interpreter's start; wall time, and the process's CPU time, which a
loaded machine disturbs less) and reports its peak RSS (VmHWM) and, under
serve_python, the heap's peak heapUsed.  The modes run interleaved, in a
rotated order each round, and the table gives medians over the rounds.
Modes:

  pymalloc          the interpreter as it is
  malloc            PYTHONMALLOC=malloc (glibc's malloc for every domain)
  serve_python      the workload inside Allocator().serve_python()
                    (mem and obj domains, default options: freed pages
                    wait a second before they go back, reused first)
  serve_python, purge_delay_ms=0
                    the same with each freed page past the one a size
                    class keeps (retain=1) going back at once: what the
                    purge delay saves this workload, whose rounds free
                    and allocate again tens of MiB
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MODES = [
    ("pymalloc", {}, None),
    ("malloc", {"PYTHONMALLOC": "malloc"}, None),
    ("serve_python", {}, {}),
    ("serve_python, purge_delay_ms=0", {}, {"purge_delay_ms": 0}),
]


def workload(scale):
    """Records as dicts of str and lists, an index, a join and split, a
    grouping, a sort; each round's data dropped before the next."""
    n = int(40_000 * scale)
    total = 0
    for r in range(6):
        records = [{"id": i, "name": f"user{i:07d}", "tags": [f"t{i % 7}", f"g{(i + r) % 13}"],
                    "score": i * 0.5} for i in range(n)]
        index = {rec["name"]: rec for rec in records}
        words = " ".join(rec["name"] for rec in records).split()
        groups = {}
        for rec in records:
            groups.setdefault(rec["tags"][1], []).append(rec["id"])
        pairs = sorted(((rec["score"], rec["name"]) for rec in records), reverse=True)
        text = repr(records[: n // 8])
        total += len(index) + len(words) + sum(map(len, groups.values())) + len(pairs) + len(text)
        del records, index, words, groups, pairs, text
    return total


def peak_rss():
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def child(options_json, scale):
    options = json.loads(options_json)
    if options is None:
        t0, c0 = time.perf_counter(), time.process_time()
        workload(scale)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak_heap = None
    else:
        import scralloc

        a = scralloc.Allocator(**options)
        with a.serve_python():
            t0, c0 = time.perf_counter(), time.process_time()
            workload(scale)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        peak_heap = a.peak_heap_used
    print(json.dumps({"wall": wall, "cpu": cpu, "peak_rss": peak_rss(), "peak_heap_used": peak_heap}))


def run(mode, env_extra, options, scale):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(options), "--scale",
                          str(scale)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "7")))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.scale)
        return
    import scralloc

    if scralloc.DEBUG:
        print(f"note: {scralloc.__file__} is a checked build (SCR_DEBUG={scralloc.DEBUG}); "
              "its validators make serve_python slow: `make python-release` first", file=sys.stderr)
    results = {m[0]: [] for m in MODES}
    for r in range(args.rounds):
        order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
        for name, env_extra, options in order:
            results[name].append(run(name, env_extra, options, args.scale))
    base = statistics.median(x["wall"] for x in results["pymalloc"])
    base_cpu = statistics.median(x["cpu"] for x in results["pymalloc"])
    print(f"\nPython {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
          f"{platform.platform()}; {args.rounds} interleaved rounds, scale {args.scale}; "
          f"medians (`python bench/python_heap_bench.py --rounds {args.rounds}`)\n")
    print("| Python's allocator | time (s) | vs pymalloc | CPU time (s) | vs pymalloc "
          "| peak RSS (MiB) | peak heapUsed (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _, _ in MODES:
        rows = results[name]
        wall = statistics.median(x["wall"] for x in rows)
        cpu = statistics.median(x["cpu"] for x in rows)
        rss = statistics.median(x["peak_rss"] for x in rows) / 2**20
        heaps = [x["peak_heap_used"] for x in rows if x["peak_heap_used"] is not None]
        heap = f"{statistics.median(heaps) / 2**20:.1f}" if heaps else "-"
        print(f"| {name} | {wall:.3f} | {100 * (wall / base - 1):+.1f}% | {cpu:.3f} | "
              f"{100 * (cpu / base_cpu - 1):+.1f}% | {rss:.1f} | {heap} |")


if __name__ == "__main__":
    main()
