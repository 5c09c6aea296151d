#!/usr/bin/env python3
"""Whole-program benchmark of the process allocator, the seed's way: wall
time, max RSS and minor faults of whole programs under glibc, jemalloc,
mimalloc, tcmalloc (Debian's libjemalloc2, libmimalloc2.0,
libtcmalloc-minimal4, through LD_PRELOAD) and scralloc (libscralloc.so),
interleaved runs, medians, ratios.

    python3 bench/proc_bench.py --lib build/release/libscralloc.so --bin build/release/bench

Workloads: the threaded stress (blocks handed between threads), a
many-threads allocation-heavy churn (after the glibc RFC reproducer; it
also reports its RSS after everything is freed), and python3 running an
allocation-heavy script (with pymalloc, and with PYTHONMALLOC=malloc so
every object comes from the allocator).  Results go to stdout as Markdown
tables (a table per workload, then a summary table; --readme prints the
summary alone, as bench/update_readme.py copies it into the README) and
to --json.
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

LIBDIR = "/usr/lib/x86_64-linux-gnu"
OTHERS = [
    ("jemalloc", ["libjemalloc.so.2"]),
    ("mimalloc", ["libmimalloc.so.2", "libmimalloc.so.2.0", "libmimalloc.so"]),
    ("tcmalloc", ["libtcmalloc_minimal.so.4", "libtcmalloc.so.4"]),
]


# scralloc with options of its own, as extra rows "scralloc NAME=VALUE":
# by default keeping more freed pages committed per arena (4 MiB instead
# of 512 KiB: fewer faults and madvise calls, at the price of RSS);
# --profile adds more (e.g. --profile cache_max=4096).
DEFAULT_PROFILES = ["retain_bytes=4M"]


def profile_env(profile):
    """'cache_max=4096,retain_bytes=1M' -> {'SCRALLOC_CACHE_MAX': '4096', ...}"""
    env = {}
    for item in profile.split(","):
        name, _, value = item.partition("=")
        env["SCRALLOC_" + name.strip().upper()] = value.strip()
    return env


def find_allocators(scralloc):
    """[(name, library or None)]: glibc, the peers installed, scralloc"""
    allocs = [("glibc", None)]
    for name, files in OTHERS:
        for f in files:
            p = os.path.join(LIBDIR, f)
            if os.path.exists(p):
                allocs.append((name, p))
                break
        else:
            print(f"# {name}: not installed, skipped", file=sys.stderr)
    allocs.append(("scralloc", os.path.abspath(scralloc)))
    return allocs


def workloads(bindir, scale):
    here = os.path.dirname(os.path.abspath(__file__))
    py = sys.executable
    s = scale
    return [
        ("threaded stress (8 threads)", [os.path.join(bindir, "proc_xthread"), "8", str(int(250000 * s))], {}),
        ("churn: 16 threads x 2 waves, 128 MiB live", [os.path.join(bindir, "proc_churn"), "16", "128", str(int(24 * s)), "2"], {}),
        ("python3 alloc-heavy script (pymalloc)", [py, os.path.join(here, "proc_py.py"), "4", str(max(1, int(3 * s)))], {}),
        ("python3 alloc-heavy script (PYTHONMALLOC=malloc)", [py, os.path.join(here, "proc_py.py"), "4", str(max(1, int(3 * s)))],
         {"PYTHONMALLOC": "malloc"}),
        # The same script with the interpreter switching threads every 0.2 ms
        # instead of 5: every run then peaks with all four threads mid-round,
        # so its max RSS compares the allocators at the same program state
        # (at 5 ms it moves by up to 11 MiB from run to run with how many
        # threads happen to be mid-round at once, under every allocator:
        # glibc's ranged 28.0-39.4 MiB over 30 runs).
        ("python3 alloc-heavy script, threads switching every 0.2 ms (pymalloc)",
         [py, os.path.join(here, "proc_py.py"), "4", str(max(1, int(3 * s))), "0.0002"], {}),
    ]


WALL_TARGET = "wall at or below every other's"
RSS_TARGET = "max RSS at or below glibc's"


def median_interval(rs):
    """A 95% confidence interval of the median of the ratios rs (sorted),
    without assuming their distribution: the order statistics k and
    n+1-k, k the largest with P(Binomial(n, 1/2) < k) <= 0.025.  None
    below 6 values (too few for one)."""
    n = len(rs)
    if n < 6:
        return None
    k, below = 0, 0.0
    while True:  # below = P(Binomial(n, 1/2) <= k); n >= 6 makes k >= 1
        below += math.comb(n, k) / 2 ** n
        if below > 0.025:
            break
        k += 1
    return rs[k - 1], rs[n - k]


def run_measured(launcher, argv, env_extra, preload):
    """Run argv through bench/proc_launch.c, which forks and times it and
    reports its wait4 figures: forked from this driver instead, the
    program's max RSS would count the driver's own resident pages (see
    proc_launch.c).  The exit code and the figures."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("PROC_LAUNCH_PRELOAD", None)
    env.update(env_extra)
    if preload:
        env["PROC_LAUNCH_PRELOAD"] = preload
    done = subprocess.run([launcher] + argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = done.stdout.decode(errors="replace")
    report, extra = None, {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "proc_launch":
            report = dict(p.split("=", 1) for p in parts[1:])
        if len(parts) == 2 and parts[0] == "rss_after_free_kib":
            extra["rss_after_free_mib"] = int(parts[1]) / 1024
        if len(parts) == 2 and parts[0] == "rss_after_wait_kib":
            extra["rss_after_wait_mib"] = int(parts[1]) / 1024
        if len(parts) > 1 and parts[0] != "proc_launch" and all("=" in p for p in parts[1:]):
            # a program's own figures, "NAME key=value ...": kept as "NAME.key"
            for p in parts[1:]:
                k, _, v = p.partition("=")
                try:
                    extra[f"{parts[0]}.{k}"] = float(v)
                except ValueError:
                    pass
    if done.returncode != 0 or report is None:
        return done.returncode or 1, {}
    code = os.waitstatus_to_exitcode(int(report["status"]))
    return code, {"wall": int(report["wall_ns"]) / 1e9, "maxrss_mib": int(report["maxrss_kib"]) / 1024,
                  "minflt": int(report["minflt"]), "utime": int(report["utime_us"]) / 1e6,
                  "stime": int(report["stime_us"]) / 1e6, **extra}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="libscralloc.so")
    ap.add_argument("--bin", required=True, help="folder with proc_xthread, proc_churn")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("SCR_BENCH_RUNS", "11")))
    ap.add_argument("--scale", type=float, default=float(os.environ.get("SCR_BENCH_SCALE", "1")))
    ap.add_argument("--json", default="build/bench/process.json")
    ap.add_argument("--profile", action="append", default=[],
                    help="another scralloc row with these options, NAME=VALUE[,NAME=VALUE] (repeatable)")
    ap.add_argument("--readme", action="store_true",
                    help="print only the summary table (the README's copy; bench/update_readme.py)")
    args = ap.parse_args()
    if args.readme:
        args.profile = None  # the summary has scralloc's default row only

    # A private copy of the library: a rebuild meanwhile must not change it.
    tmpdir = tempfile.mkdtemp(prefix="scr-bench-")
    lib = os.path.join(tmpdir, "libscralloc.so")
    shutil.copy(args.lib, lib)
    # [(row name, library or None, extra environment)]
    allocs = [(name, path, {}) for name, path in find_allocators(lib)]
    if args.profile is not None:
        allocs += [(f"scralloc {prof}", lib, profile_env(prof)) for prof in DEFAULT_PROFILES + args.profile]
    wls = workloads(args.bin, args.scale)
    launcher = os.path.join(args.bin, "proc_launch")
    results = {w[0]: {a[0]: [] for a in allocs} for w in wls}
    failures = 0
    t_start = time.time()
    for r in range(args.runs):
        # interleaved: every allocator once per round, in a rotating order
        order = allocs[r % len(allocs):] + allocs[:r % len(allocs)]
        for wname, argv, env in wls:
            for aname, lib, aenv in order:
                code, m = run_measured(launcher, argv, {**env, **aenv}, lib)
                if code != 0:
                    failures += 1
                    print(f"# {wname} / {aname}: exit {code}", file=sys.stderr)
                    continue
                m["round"] = r
                results[wname][aname].append(m)
        print(f"# round {r + 1}/{args.runs} done ({time.time() - t_start:.0f} s)", file=sys.stderr)

    # The churn once more per allocator, waiting 1.5 s after the frees
    # (past scralloc's 1 s decay delay): what each holds once a program
    # has freed everything and gone on (not part of the wall figures).
    after_wait = {}
    churn = [w for w in wls if w[0].startswith("churn")]
    for wname, argv, env in churn:
        for aname, lib, aenv in allocs:
            code, m = run_measured(launcher, argv, {**env, **aenv, "PROC_CHURN_WAIT_MS": "1500"}, lib)
            if code == 0 and "rss_after_wait_mib" in m:
                after_wait.setdefault(wname, {})[aname] = m["rss_after_wait_mib"]

    def paired(ms_a, ms_b, key):
        """scralloc's figure over another's, run by run within a round
        (the two ran back to back, so a slow spell of the machine weighs on
        both): the ratios, sorted."""
        by_round = {m["round"]: m[key] for m in ms_b if key in m}
        return sorted(m[key] / by_round[m["round"]] for m in ms_a
                      if key in m and by_round.get(m["round"]))

    def spread(rs):
        """'median [first quartile-third quartile]' of paired ratios"""
        if len(rs) < 2:
            return f"{rs[0]:.2f}" if rs else "-"
        q = statistics.quantiles(rs, n=4)
        return f"{statistics.median(rs):.2f} [{q[0]:.2f}-{q[2]:.2f}]"

    def verdict(rs, what):
        """'met' or 'missed' by the median of the paired ratios, and what
        the rounds can tell: a difference, or one within their noise."""
        m = statistics.median(rs)
        ci = median_interval(rs)
        word = "met" if m <= 1.0 else "missed"
        if ci is None:
            return f"{word}: {what}"
        lo, hi = ci
        tell = "below 1" if hi < 1.0 else "above 1" if lo > 1.0 else "spans 1: within the rounds' noise"
        return f"{word}: {what}; 95% interval of the median {lo:.2f}-{hi:.2f}, {tell}"

    def med(ms, key):
        vals = [m[key] for m in ms if key in m]
        return statistics.median(vals) if vals else None

    summary = {}
    paired_summary = {}  # workload -> the paired medians
    readme_rows = {}  # workload -> the summary table's cells
    out = open(os.devnull, "w") if args.readme else sys.stdout

    def say(*a):  # the detailed tables: stdout, or nowhere with --readme
        print(*a, file=out)

    def with_interval(rs):
        """'median (95% interval)' of paired ratios; the median alone below 6"""
        ci = median_interval(rs)
        m = f"{statistics.median(rs):.2f}"
        return f"{m} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else m

    say(f"\nWhole programs, {args.runs} interleaved runs each, medians; "
        f"ratios are scralloc's figure over the other's (below 1 is better for scralloc).\n")
    for wname, _, _ in wls:
        say(f"### {wname}\n")
        say("| allocator | wall s | user s | sys s | max RSS MiB | minor faults | RSS after free MiB |")
        say("|---|---:|---:|---:|---:|---:|---:|")
        row = {}
        for aname, _, _ in allocs:
            ms = results[wname][aname]
            if not ms:
                say(f"| {aname} | failed | | | | | |")
                continue
            row[aname] = {k: med(ms, k) for k in ("wall", "utime", "stime", "maxrss_mib", "minflt", "rss_after_free_mib")}
            f = row[aname]
            raf = f"{f['rss_after_free_mib']:.1f}" if f["rss_after_free_mib"] is not None else "-"
            say(f"| {aname} | {f['wall']:.3f} | {f['utime']:.3f} | {f['stime']:.3f} | {f['maxrss_mib']:.1f} | "
                f"{f['minflt']:.0f} | {raf} |")
        summary[wname] = row
        if "scralloc" in row:
            s = row["scralloc"]
            others = {k: v for k, v in row.items() if not k.startswith("scralloc")}
            if others:
                best = min(others, key=lambda k: others[k]["wall"])
                ratios = ", ".join(f"{k} {s['wall'] / v['wall']:.2f}" for k, v in others.items())
                say(f"\nscralloc wall ratio (of medians): {ratios}; best other: {best} "
                    f"({'met' if s['wall'] <= others[best]['wall'] else 'missed'}: wall at or below the best)")
                # The same comparison run by run: each round ran every
                # allocator back to back, so the median of the rounds'
                # ratios is not moved by which allocator a slow spell of
                # the machine happened to hit.
                mine = results[wname]["scralloc"]
                pr = {k: paired(mine, results[wname][k], "wall") for k in others}
                pr = {k: v for k, v in pr.items() if v}
                if pr:
                    worst = max(pr, key=lambda k: statistics.median(pr[k]))
                    say("scralloc wall ratio (paired, median [quartiles] of the rounds' ratios): "
                        + ", ".join(f"{k} {spread(v)}" for k, v in pr.items())
                        + f"; closest: {worst} ({verdict(pr[worst], WALL_TARGET)})")
                    readme = readme_rows.setdefault(wname, {"wall": f"{s['wall']:.3f}", "rss": f"{s['maxrss_mib']:.1f}"})
                    readme["closest"] = f"{worst} {with_interval(pr[worst])}"
                    paired_summary.setdefault(wname, {})["wall"] = {k: statistics.median(v) for k, v in pr.items()}
            if wname in after_wait:
                waited = ", ".join(f"{k} {v:.1f}" for k, v in after_wait[wname].items())
                say(f"RSS 1.5 s after everything was freed (one run each, MiB): {waited}")
            if "glibc" in row:
                g = row["glibc"]
                say(f"scralloc max RSS / glibc: {s['maxrss_mib'] / g['maxrss_mib']:.2f} "
                    f"({'met' if s['maxrss_mib'] <= g['maxrss_mib'] else 'missed'}: max RSS at or below glibc's); "
                    f"minor faults / glibc: {s['minflt'] / max(1, g['minflt']):.2f}")
                prss = paired(results[wname]["scralloc"], results[wname]["glibc"], "maxrss_mib")
                if prss:
                    pm = statistics.median(prss)
                    say(f"scralloc max RSS / glibc (paired): {spread(prss)} "
                        f"({verdict(prss, RSS_TARGET)})")
                    readme = readme_rows.setdefault(wname, {"wall": f"{s['wall']:.3f}", "rss": f"{s['maxrss_mib']:.1f}"})
                    readme["glibc_rss"] = f"{g['maxrss_mib']:.1f}"
                    readme["rss_ratio"] = with_interval(prss)
                    paired_summary.setdefault(wname, {})["maxrss_mib_glibc"] = pm
        say()
    # The summary: one row per workload (the README's copy).
    print(f"Whole programs, median of {args.runs} interleaved rounds. A ratio is scralloc's figure over "
          f"the other's within a round: the median over the rounds and, from 6 rounds on, its 95% "
          f"interval (below 1: scralloc lower). The closest other is the allocator whose wall ratio is highest.\n")
    print("| workload | scralloc wall s | wall ratio to the closest other | scralloc max RSS MiB "
          "| glibc max RSS MiB | max RSS ratio to glibc |")
    print("|---|---:|---|---:|---:|---|")
    for wname, _, _ in wls:
        c = readme_rows.get(wname, {})
        print(f"| {wname} | {c.get('wall', 'failed')} | {c.get('closest', '-')} | {c.get('rss', '-')} "
              f"| {c.get('glibc_rss', '-')} | {c.get('rss_ratio', '-')} |")
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"runs": args.runs, "scale": args.scale, "results": results, "medians": summary,
                   "paired_medians": paired_summary, "rss_after_wait_mib": after_wait}, f, indent=1)
    print(f"# raw runs and medians: {args.json}", file=sys.stderr)
    shutil.rmtree(tmpdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
