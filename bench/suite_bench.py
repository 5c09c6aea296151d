#!/usr/bin/env python3
"""The breadth suite: programs of many shapes under glibc, jemalloc,
mimalloc, tcmalloc (where installed) and scralloc, each allocator
LD_PRELOADed, interleaved rounds, paired ratios.

    python3 bench/suite_bench.py --lib build/release/libscralloc.so --bin build/release/bench [--rounds 7]
    python3 bench/suite_bench.py --quick ...   # each program once, glibc and scralloc: exits 0?

The programs: the five workloads of bench/proc_bench.py, the breadth
programs bench/proc_*.c (producer/consumer, hand-offs between generations
of threads, phases of remote frees, thousands of short-lived threads,
random small blocks on one thread and on one thread per CPU, runs of
1,000 small blocks, an interpreter-like program, random sizes with realloc
through a queue), the glibc RFC's shape (proc_rfc_churn.c) and large-block
reuse at 1, 2 and 8 threads (proc_large_reuse.c), and two real programs
run unchanged: the sqlite3 CLI (bench/suite_sqlite.sql) and lua5.4
(bench/suite_lua.lua).

Each run goes through bench/proc_launch.c (wall, CPU, max RSS of the
program alone, from wait4).  A round runs every program under every
allocator, in an order that rotates from round to round; the ratios are
paired (scralloc's figure over another's in the same round, so that a slow
spell of the machine weighs on both) and shown as the median of the
rounds' ratios with a 95% interval of that median (from 6 rounds up).
"Fastest" is the other allocator with the lowest median time on the row.
Output: Markdown tables on stdout (ready to paste into a document as
they are), the same in --markdown, and every run in --json.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_bench import find_allocators, median_interval, profile_env, run_measured  # noqa: E402
from proc_bench import workloads as proc_bench_workloads  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Program:
    """One row: argv (full and quick sizes), extra environment, and which
    figure is its time ("wall", or a key the program prints, in ms)."""

    def __init__(self, name, argv, quick_argv=None, env=None, time_key="wall"):
        self.name, self.argv, self.quick_argv = name, argv, quick_argv or argv
        self.env, self.time_key = env or {}, time_key


def sqlite_script(tmpdir, rows):
    """bench/suite_sqlite.sql with its row count set to rows, in tmpdir."""
    with open(os.path.join(HERE, "suite_sqlite.sql")) as f:
        text = f.read()
    path = os.path.join(tmpdir, f"suite_sqlite_{rows}.sql")
    with open(path, "w") as f:
        f.write(text.replace("200000", str(rows)))
    return path


def programs(bindir, tmpdir):
    """[Program]; real programs that are not installed are left out, with a note."""
    b = lambda name: os.path.join(bindir, name)  # noqa: E731
    progs = [Program(name, argv, env=env) for name, argv, env in proc_bench_workloads(bindir, 1.0)]
    # the five above at tiny sizes for --quick
    for p, (_, qargv, _) in zip(progs, proc_bench_workloads(bindir, 0.02)):
        p.quick_argv = qargv
    progs += [
        Program("producer/consumer: 2 threads allocate batches of 64 small objects, 2 free them",
                [b("proc_prodcons"), "2", "2", "50000", "64"], [b("proc_prodcons"), "2", "2", "2000", "64"]),
        Program("threads that start, allocate, hand blocks to the next generation and end (4 x 500)",
                [b("proc_handoff"), "4", "500", "1000"], [b("proc_handoff"), "4", "50", "200"]),
        Program("mixed sizes in phases, half freed by another thread (4 threads)",
                [b("proc_phases"), "4", "300", "2000"], [b("proc_phases"), "4", "20", "500"]),
        Program("10,000 short-lived threads in turn, each swapping a small long-lived object",
                [b("proc_thread_swap"), "10000", "64"], [b("proc_thread_swap"), "1000", "64"]),
        Program("one thread, small blocks allocated and freed at random",
                [b("proc_random_small"), "1", "10000000"], [b("proc_random_small"), "1", "200000"]),
        Program("one thread per CPU, small blocks at random, sharing nothing",
                [b("proc_random_small"), "0", "5000000"], [b("proc_random_small"), "0", "200000"]),
        Program("runs of 1,000 blocks of 24-64 B allocated, then freed",
                [b("proc_runs"), "20000", "1000"], [b("proc_runs"), "500", "1000"]),
        Program("interpreter-like: short-lived small objects, a symbol table, a few long-lived trees",
                [b("proc_interp"), "200", "2000"], [b("proc_interp"), "20", "500"]),
        Program("8 threads, 1 B-64 KiB (some 1-8 MiB), realloc, blocks passed through a queue",
                [b("proc_mixed_queue"), "8", "150000"], [b("proc_mixed_queue"), "8", "20000"]),
        Program("glibc RFC shape: 16 threads, 16 MiB index each among 10 bursts of 64 MiB (threads' time)",
                [b("proc_rfc_churn"), "16", "16", "10", "64", "1000"], [b("proc_rfc_churn"), "4", "2", "2", "8", "0"],
                time_key="rfc_churn.work_ms"),
        Program("large blocks of 1-32 MiB replaced at random, 1 thread",
                [b("proc_large_reuse"), "1", "400"], [b("proc_large_reuse"), "1", "20", "4", "1", "4"]),
        Program("large blocks of 1-32 MiB replaced at random, 2 threads",
                [b("proc_large_reuse"), "2", "200"], [b("proc_large_reuse"), "2", "10", "4", "1", "4"]),
        Program("large blocks of 1-32 MiB replaced at random, 8 threads",
                [b("proc_large_reuse"), "8", "50"], [b("proc_large_reuse"), "8", "5", "4", "1", "4"]),
    ]
    # A working set freed and reused at once, at every block size (bench/proc_reuse.c)
    for lo, hi, what in ((1, 1 << 20, "1 B-1 MiB"), (64 << 10, 1 << 20, "64 KiB-1 MiB")):
        for threads, live, ops in ((1, 64, 1000000), (8, 64, 200000), (1, 512, 500000), (8, 512, 50000)):
            if lo > 1:
                ops //= 4
            progs.append(Program(f"working set reused at once: {live} blocks of {what} replaced at random, "
                                 f"{threads} thread{'s' if threads > 1 else ''}",
                                 [b("proc_reuse"), str(threads), str(live), str(lo), str(hi), str(ops)],
                                 [b("proc_reuse"), str(threads), str(live), str(lo), str(hi), "2000"]))
    progs.append(Program("frees 90% of 256 MiB of 64 B-512 KiB blocks, then sleeps 2 s (allocation and frees' time)",
                         [b("proc_idle"), "256", "10", "2000"], [b("proc_idle"), "8", "10", "250"],
                         time_key="idle.work_ms"))
    progs.append(Program("runs of 1,000 blocks of 64 KiB allocated, then freed",
                         [b("proc_reuse"), "runs", "500", "1000", "65536"],
                         [b("proc_reuse"), "runs", "5", "1000", "65536"]))
    sqlite, lua = shutil.which("sqlite3"), shutil.which("lua5.4")
    db = os.path.join(tmpdir, "suite.db")
    # through sh, so that each run starts from a new database file
    run_sql = 'rm -f "$0" && exec "$1" "$0" ".read $2"'
    if sqlite:
        progs.append(Program("sqlite3 CLI: insert 200k rows, two indexes, queries, VACUUM",
                             ["/bin/sh", "-c", run_sql, db, sqlite, sqlite_script(tmpdir, 200000)],
                             ["/bin/sh", "-c", run_sql, db, sqlite, sqlite_script(tmpdir, 2000)]))
    else:
        print("# sqlite3 not installed: its row is left out (.ci/install-deps installs it)", file=sys.stderr)
    if lua:
        progs.append(Program("lua5.4: records, sorting, strings and closures (bench/suite_lua.lua)",
                             [lua, os.path.join(HERE, "suite_lua.lua"), "8"],
                             [lua, os.path.join(HERE, "suite_lua.lua"), "1"]))
    else:
        print("# lua5.4 not installed: its row is left out (.ci/install-deps installs it)", file=sys.stderr)
    return progs


def run_time(m, key):
    """The run's time in seconds: its wall, or a figure it printed in ms."""
    if key == "wall":
        return m["wall"]
    return m[key] / 1000 if key in m else None


def paired(mine, theirs, fig):
    """scralloc's figure over another's, round by round: the ratios, sorted."""
    by_round = {m["round"]: fig(m) for m in theirs}
    return sorted(fig(m) / by_round[m["round"]] for m in mine
                  if fig(m) is not None and by_round.get(m["round"]))


def ratio_text(rs):
    """'median (95% interval)' of paired ratios; the median alone below 6."""
    if not rs:
        return "-"
    ci = median_interval(rs)
    med = statistics.median(rs)
    return f"{med:.2f} ({ci[0]:.2f}-{ci[1]:.2f})" if ci else f"{med:.2f}"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def quick(progs, launcher, allocs):
    """Each program once under glibc and scralloc; 1 if any fails."""
    failures = 0
    t0 = time.time()
    print("| program | " + " | ".join(f"{a} s" for a, _ in allocs) + " |")
    print("|---|" + "---:|" * len(allocs))
    for p in progs:
        cells = []
        for aname, lib in allocs:
            code, m = run_measured(launcher, p.quick_argv, p.env, lib)
            if code != 0:
                failures += 1
                cells.append(f"exit {code}")
                print(f"# FAILED: {p.name} under {aname}: exit {code} ({' '.join(p.quick_argv)})", file=sys.stderr)
            else:
                cells.append(f"{m['wall']:.3f}")
        print(f"| {p.name} | " + " | ".join(cells) + " |")
    print(f"# quick suite: {len(progs)} programs, {failures} failed runs, {time.time() - t0:.1f} s", file=sys.stderr)
    return 1 if failures else 0


def report(progs, allocs, results, rounds, machine=""):
    """The Markdown tables and summary lines, as one string; machine: a
    sentence on where they were measured."""
    out = []
    names = [a for a, _, _ in allocs]
    others = [a for a in names if not a.startswith("scralloc")]
    summary = {"time_vs_fastest": {}, "time_vs_glibc": {}, "rss_vs_glibc": {}, "cpu_vs_fastest": {}}
    rows_ratio, rows_med = [], []
    for p in progs:
        res = results[p.name]
        tf = lambda m, k=p.time_key: run_time(m, k)  # noqa: E731
        med = {}
        for a in names:
            ms = res[a]
            if ms:
                med[a] = {"time": statistics.median(tf(m) for m in ms),
                          "cpu": statistics.median(m["utime"] + m["stime"] for m in ms),
                          "rss": statistics.median(m["maxrss_mib"] for m in ms)}
        rows_med.append(f"| {p.name} | " + " | ".join(
            f"{med[a]['time']:.3f} / {med[a]['cpu']:.2f} / {med[a]['rss']:.1f}" if a in med else "failed"
            for a in names) + " |")
        peers = [a for a in others if a in med]
        if "scralloc" not in med or not peers:
            rows_ratio.append(f"| {p.name} | - | - | - | - | - |")
            continue
        fastest = min(peers, key=lambda a: med[a]["time"])
        r_fast = paired(res["scralloc"], res[fastest], tf)
        r_glibc = paired(res["scralloc"], res["glibc"], tf) if "glibc" in med else []
        r_cpu = paired(res["scralloc"], res[fastest], lambda m: m["utime"] + m["stime"] or None)
        r_rss = paired(res["scralloc"], res["glibc"], lambda m: m["maxrss_mib"]) if "glibc" in med else []
        if r_fast:
            summary["time_vs_fastest"][p.name] = (statistics.median(r_fast), fastest)
        if r_glibc:
            summary["time_vs_glibc"][p.name] = statistics.median(r_glibc)
        if r_rss:
            summary["rss_vs_glibc"][p.name] = statistics.median(r_rss)
        if r_cpu:
            summary["cpu_vs_fastest"][p.name] = statistics.median(r_cpu)
        rows_ratio.append(f"| {p.name} | {fastest} | {ratio_text(r_fast)} | {ratio_text(r_glibc)} | "
                          f"{ratio_text(r_cpu)} | {ratio_text(r_rss)} |")
    out.append(f"Breadth suite, {rounds} interleaved rounds; ratios are scralloc's figure over another's, "
               "the median of the rounds' paired ratios (95% interval of the median); below 1 is better "
               f"for scralloc.  Fastest: the other allocator with the lowest median time.{machine}\n")
    out.append("| program | fastest | time / fastest | time / glibc | CPU / fastest's | max RSS / glibc |")
    out.append("|---|---|---:|---:|---:|---:|")
    out += rows_ratio
    tv = summary["time_vs_fastest"]
    rv = summary["rss_vs_glibc"]
    gv = summary["time_vs_glibc"]
    if tv:
        worst = max(tv, key=lambda k: tv[k][0])
        out.append("")
        out.append(f"**Summary**: scralloc's time over the fastest allocator's: geometric mean "
                   f"{geomean([v[0] for v in tv.values()]):.2f} (target at most 1.00), worst "
                   f"{tv[worst][0]:.2f} ({worst}, against {tv[worst][1]}); rows above 1.20x the fastest "
                   f"(target none): {sum(v[0] > 1.20 for v in tv.values())} of {len(tv)}; rows above glibc's time: "
                   f"{sum(v > 1.0 for v in gv.values())} of {len(gv)}.")
    cv = summary["cpu_vs_fastest"]
    if cv:
        out.append(f"CPU time over the fastest's (less moved by a busy machine than the wall): geometric mean "
                   f"{geomean(list(cv.values())):.2f}, worst {max(cv.values()):.2f} ({max(cv, key=cv.get)}).")
    if rv:
        worst = max(rv, key=rv.get)
        out.append(f"Max RSS over glibc's: geometric mean {geomean(list(rv.values())):.2f} (target at most 1), "
                   f"worst {rv[worst]:.2f} ({worst}); rows above 1.5x: {sum(v > 1.5 for v in rv.values())}.")
    out.append("")
    out.append("Medians per allocator: time s / CPU s / max RSS MiB (time: the wall, or the threads' part "
               "where the row says so).\n")
    out.append("| program | " + " | ".join(names) + " |")
    out.append("|---|" + "---:|" * len(names))
    out += rows_med
    out.append("")
    variants = [a for a in names if a.startswith("scralloc ")]
    if variants:
        out += profiles_table(progs, names, results, variants)
    out += issue29_table(progs, names, results)
    return "\n".join(out) + "\n", summary


def profiles_table(progs, names, results, variants):
    """scralloc with options of its own (--profile), row by row against the
    default build and against the fastest peer: the mechanism table.  A
    setting that switches a mechanism off shows what the mechanism pays:
    "off / default" above 1 on the geometric mean means the mechanism wins
    there; the row where switching it off gains most is where it loses.
    The verdict applies the rule of keeping a mechanism: it wins on the
    geometric mean and loses no more than 5% on any row (time), with max
    RSS beside it for the mechanisms that are about memory.  A row's loss
    counts where the rounds show it: the 95% interval of its paired
    ratios lies below 0.95 (six rounds or more give one); a median below
    0.95 whose interval reaches 0.95 is the rounds' noise, and with fewer
    rounds the verdict says it cannot tell."""
    out = ["scralloc with options (--profile): paired medians over every row; \"off / default\" is the "
           "setting's time (or max RSS) over scralloc's with its defaults in the same round: above 1, the "
           "mechanism the setting switches off pays there.\n",
           "| setting | time / fastest, geomean | time off / default, geomean | mechanism helps most "
           "(off / default) | mechanism costs most (off / default) | max RSS off / default, geomean "
           "| worst max RSS off / default | keep? |",
           "|---|---:|---:|---|---|---:|---|---|"]
    peers = [a for a in names if not a.startswith("scralloc")]
    for v in variants:
        fast, dflt, rss, dflt_iv = {}, {}, {}, {}
        for p in progs:
            res = results[p.name]
            tf = lambda m, k=p.time_key: run_time(m, k)  # noqa: E731
            meds = {a: statistics.median(tf(m) for m in res[a]) for a in peers if res[a]}
            if not res[v]:
                continue
            if meds:  # none with --no-peers
                fastest = min(meds, key=meds.get)
                r = paired(res[v], res[fastest], tf)
                if r:
                    fast[p.name] = statistics.median(r)
            r = paired(res[v], res["scralloc"], tf) if res.get("scralloc") else []
            if r:
                dflt[p.name] = statistics.median(r)
                dflt_iv[p.name] = median_interval(r)
            r = paired(res[v], res["scralloc"], lambda m: m["maxrss_mib"]) if res.get("scralloc") else []
            if r:
                rss[p.name] = statistics.median(r)
        hi = max(dflt, key=dflt.get) if dflt else None
        lo = min(dflt, key=dflt.get) if dflt else None
        wr = max(rss, key=rss.get) if rss else None
        g = geomean(list(dflt.values())) if dflt else float("nan")
        keep = verdict(g, dflt, dflt_iv)
        gf = f"{geomean(list(fast.values())):.2f}" if fast else "-"
        out.append(f"| {v} | {gf} | {g:.3f} | "
                   f"{f'{dflt[hi]:.2f} ({hi})' if hi else '-'} | {f'{dflt[lo]:.2f} ({lo})' if lo else '-'} | "
                   f"{geomean(list(rss.values())):.3f} | {f'{rss[wr]:.2f} ({wr})' if wr else '-'} | {keep} |")
    out.append("")
    return out


def verdict(g, dflt, dflt_iv):
    """Keep a mechanism?  g: the geometric mean of off / default; dflt and
    dflt_iv: each row's median off / default and its 95% interval (None
    below six rounds)."""
    if not dflt:
        return "-"
    if g <= 1:
        return "no: loses on the geomean"
    clear = [n for n, iv in dflt_iv.items() if iv and iv[1] < 0.95]
    if clear:
        n = min(clear, key=dflt.get)
        return f"no: costs {1 / dflt[n] - 1:.0%} on {n} ({dflt_iv[n][0]:.2f}-{dflt_iv[n][1]:.2f})"
    lo = min(dflt, key=dflt.get)
    if dflt[lo] >= 0.95:
        return "yes"
    if dflt_iv.get(lo) is None:
        return f"cannot tell: {1 / dflt[lo] - 1:.0%} on {lo} in too few rounds for an interval"
    return f"yes: its {1 / dflt[lo] - 1:.0%} on {lo} is within the rounds' noise"


def issue29_table(progs, names, results):
    """The return-policy figures the targets name, per allocator (medians)."""
    out = []
    rfc = next((p for p in progs if p.time_key == "rfc_churn.work_ms"), None)
    if rfc:
        res = results[rfc.name]

        def med(a, key):
            vals = [m[key] for m in res[a] if key in m]
            return statistics.median(vals) if vals else None
        live = next((med(a, "rfc_churn.live_kib") for a in names if med(a, "rfc_churn.live_kib")), None)
        out.append(f"The RFC-shaped churn ({' '.join(os.path.basename(x) for x in rfc.argv)}): "
                   f"RSS in MiB, medians; the program holds {live / 1024:.0f} MiB after the bursts.\n"
                   if live else "The RFC-shaped churn:\n")
        out.append("| figure | target | " + " | ".join(names) + " |")
        out.append("|---|---|" + "---:|" * len(names))
        figs = [("RSS after the bursts, no trim", "rfc_churn.rss_after_bursts_kib", "<= 1.15 x live"),
                ("RSS after malloc_trim(0)", "rfc_churn.rss_after_trim_kib", "<= live + 5%"),
                ("RSS right after the index is freed", "rfc_churn.rss_after_index_free_kib", "<= glibc's"),
                ("RSS 1 s after the index is freed", "rfc_churn.rss_after_wait_kib", "<= 32 MiB"),
                ("malloc_trim(0) ms", "rfc_churn.trim_ms", "-")]
        for label, key, target in figs:
            scale = 1 if key.endswith("_ms") else 1 / 1024
            cells = [f"{med(a, key) * scale:.1f}" if res[a] and med(a, key) is not None else "-" for a in names]
            out.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
        cells = [f"{statistics.median(m['rfc_churn.work_ms'] for m in res[a]) / 1000:.3f}" if res[a] else "-"
                 for a in names]
        out.append("| threads' run time s | <= 1.1 x fastest | " + " | ".join(cells) + " |")
        out.append("")
    reuse = [p for p in progs if p.argv[0].endswith("proc_reuse")]
    if reuse:
        out.append("Working sets reused at once (bench/proc_reuse.c): memory faulted in per second of the run "
                   "(minor faults x 4 KiB, MiB/s, medians), and what scralloc gave back to the OS per second "
                   "before its threads exited (from its statistics; the others publish none).\n")
        out.append("| program | " + " | ".join(f"{a} faulted" for a in names) + " | scralloc given back |")
        out.append("|---|" + "---:|" * (len(names) + 1))
        for p in reuse:
            res = results[p.name]

            def med(a, key):
                vals = [m[key] for m in res[a] if key in m]
                return statistics.median(vals) if vals else None
            cells = [f"{med(a, 'reuse.faulted_mib_s'):.0f}" if res[a] and med(a, "reuse.faulted_mib_s") is not None
                     else "-" for a in names]
            back = med("scralloc", "reuse.given_back_mib_s") if res.get("scralloc") else None
            out.append(f"| {p.name} | " + " | ".join(cells) + f" | {'-' if back is None else f'{back:.1f}'} |")
        out.append("")
    idle = next((p for p in progs if p.argv[0].endswith("proc_idle")), None)
    if idle and any(results[idle.name].values()):
        res = results[idle.name]
        wait = idle.argv[-1]

        def med_of(a, key):
            vals = [m[key] for m in res[a] if key in m]
            return statistics.median(vals) / 1024 if vals else None
        out.append(f"A program that frees most of its memory and sleeps ({' '.join(os.path.basename(x) for x in idle.argv)}): "
                   "RSS in MiB, medians, beside the bytes it keeps live.\n")
        out.append("| figure | " + " | ".join(names) + " |")
        out.append("|---|" + "---:|" * len(names))
        for label, key in (("live blocks", "idle.live_kib"), ("RSS right after the frees", "idle.rss_freed_kib"),
                           ("RSS 1 s later", "idle.rss_1000ms_kib"), (f"RSS {int(wait) / 1000:g} s later", f"idle.rss_{wait}ms_kib")):
            out.append(f"| {label} | " + " | ".join(
                f"{med_of(a, key):.1f}" if res[a] and med_of(a, key) is not None else "-" for a in names) + " |")
        out.append("")
    large = [p for p in progs if p.argv[0].endswith("proc_large_reuse")]
    if large:
        out.append("Large-block reuse: scralloc over glibc, paired medians (95% interval).\n")
        out.append("| threads | time / glibc | max RSS / glibc | glibc s, MiB | scralloc s, MiB |")
        out.append("|---:|---:|---:|---:|---:|")
        for p in large:
            res = results[p.name]
            if not res.get("scralloc") or not res.get("glibc"):
                continue
            t = paired(res["scralloc"], res["glibc"], lambda m: m["wall"])
            r = paired(res["scralloc"], res["glibc"], lambda m: m["maxrss_mib"])
            g = (statistics.median(m["wall"] for m in res["glibc"]),
                 statistics.median(m["maxrss_mib"] for m in res["glibc"]))
            s = (statistics.median(m["wall"] for m in res["scralloc"]),
                 statistics.median(m["maxrss_mib"] for m in res["scralloc"]))
            out.append(f"| {p.argv[1]} | {ratio_text(t)} | {ratio_text(r)} | {g[0]:.2f}, {g[1]:.0f} | "
                       f"{s[0]:.2f}, {s[1]:.0f} |")
        out.append("")
    return out


def scr_heap_pairs(bindir):
    """The scr_heap API's 64 B malloc/free pair (what the bindings and
    scralua use) beside the peers' malloc/free, from bench/bench_pairs.c
    (one process, interleaved rounds): Markdown lines, or [] when the
    program is not built."""
    prog = os.path.join(bindir, "bench_pairs")
    if not os.path.exists(prog):
        return []
    done = subprocess.run([prog, "200000", "7"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    ns = {}
    for line in done.stdout.decode(errors="replace").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 6 and cells[0] == "64 B" and not cells[1].startswith("scralloc retain=0"):
            try:
                ns[cells[1].split(" (")[0]] = float(cells[5])
            except ValueError:
                pass
    mine = ns.pop("scralloc retain=1", None)
    if done.returncode != 0 or mine is None or not ns:
        return [f"(bench_pairs exited {done.returncode} without its 64 B rows)", ""]
    best = min(ns, key=ns.get)
    out = ["Beside the suite: the scr_heap API's malloc/free pair of 64 B against each allocator's "
           "malloc/free (bench/bench_pairs.c 200000 7, medians of interleaved rounds in one process).\n",
           "| allocator | ns/pair | scr_heap over it |", "|---|---:|---:|",
           f"| scr_heap (retain=1) | {mine:.1f} | - |"]
    out += [f"| {a} | {v:.1f} | {mine / v:.2f} |" for a, v in ns.items()]
    out += ["", f"scr_heap pair over the best peer's ({best}): {mine / ns[best]:.2f}.", ""]
    return out


def report_from_json(args):
    """The tables of an earlier run, from its --json file (the report's
    layout may have changed since; the runs have not)."""
    with open(args.from_json) as f:
        saved = json.load(f)
    by_name = {p.name: p for p in programs(args.bin, tempfile.gettempdir())}
    progs = [by_name[n] for n in saved["programs"] if n in by_name]
    names = list(next(iter(saved["results"].values())))
    allocs = [(a, None, {}) for a in names]
    text, _ = report(progs, allocs, saved["results"], saved["rounds"], "")
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", help="libscralloc.so (required but with --from-json)")
    ap.add_argument("--bin", default="build/release/bench", help="folder with proc_launch and the proc_* programs")
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("SCR_BENCH_RUNS", "7")))
    ap.add_argument("--quick", action="store_true", default=os.environ.get("SCR_BENCH_QUICK") == "1",
                    help="each program once at tiny sizes under glibc and scralloc: does it exit 0?")
    ap.add_argument("--only", action="append", default=[],
                    help="run only the programs whose name contains this text (repeatable)")
    ap.add_argument("--profile", action="append", default=[],
                    help="another scralloc column with these options, NAME=VALUE[,NAME=VALUE] "
                         "(SCRALLOC_NAME=VALUE in its environment; repeatable): a mechanism switched off")
    ap.add_argument("--extra-lib", action="append", default=[],
                    help="another scralloc column from another build, NAME=PATH (repeatable): "
                         "'scralloc NAME' in the tables, against this build as a --profile column is")
    ap.add_argument("--no-peers", action="store_true",
                    help="run scralloc and its --profile columns only (the mechanism table, in less time)")
    ap.add_argument("--mechanisms", action="store_true",
                    help="print the mechanism table of the --profile columns only (docs/process.md's copy)")
    ap.add_argument("--json", default="build/bench/suite.json")
    ap.add_argument("--markdown", default="", help="also write the tables to this file")
    ap.add_argument("--from-json", default="",
                    help="print the report of the runs in this file (an earlier --json) instead of running")
    args = ap.parse_args()
    if args.from_json:
        return report_from_json(args)
    if not args.lib:
        ap.error("--lib is required")
    launcher = os.path.join(args.bin, "proc_launch")
    for path in (launcher, args.lib):
        if not os.path.exists(path):
            sys.exit(f"suite_bench: {path} is missing (make bench-process builds it)")

    tmpdir = tempfile.mkdtemp(prefix="scr-suite-")
    try:
        # A private copy of the library: a rebuild meanwhile must not change it.
        lib = os.path.join(tmpdir, "libscralloc.so")
        shutil.copy(args.lib, lib)
        progs = [p for p in programs(args.bin, tmpdir) if not args.only or any(o in p.name for o in args.only)]
        missing = sorted({p.argv[0] for p in progs if not os.path.exists(p.argv[0])})
        if missing:
            sys.exit(f"suite_bench: missing {', '.join(missing)} (make suite-bin builds them)")
        if args.quick:
            return quick(progs, launcher, [("glibc", None), ("scralloc", lib)])
        # [(column name, library or None, extra environment)]
        allocs = [(a, path, {}) for a, path in find_allocators(lib) if not args.no_peers or a == "scralloc"]
        allocs += [(f"scralloc {prof}", lib, profile_env(prof)) for prof in args.profile]
        for extra in args.extra_lib:
            name, _, path = extra.partition("=")
            copy = os.path.join(tmpdir, f"libscralloc-{len(allocs)}.so")
            shutil.copy(path, copy)
            allocs.append((f"scralloc {name}", copy, {}))
        results = {p.name: {a: [] for a, _, _ in allocs} for p in progs}
        failures = 0
        t0 = time.time()
        load0 = os.getloadavg()[1]
        for r in range(args.rounds):
            order = allocs[r % len(allocs):] + allocs[:r % len(allocs)]
            for p in progs:
                for aname, alib, aenv in order:
                    code, m = run_measured(launcher, p.argv, {**p.env, **aenv}, alib)
                    if code != 0 or run_time(m, p.time_key) is None:
                        failures += 1
                        print(f"# {p.name} / {aname}: exit {code}", file=sys.stderr)
                        continue
                    m["round"] = r
                    results[p.name][aname].append(m)
            print(f"# round {r + 1}/{args.rounds} done ({time.time() - t0:.0f} s)", file=sys.stderr)
        # how busy the machine was: the intervals widen with it
        machine = (f"  Measured on {os.cpu_count()} CPUs, {time.time() - t0:.0f} s; 5-minute load average "
                   f"{load0:.1f} at the start, {os.getloadavg()[1]:.1f} at the end.")
        text, summary = report(progs, allocs, results, args.rounds, machine)
        if args.mechanisms:
            names = [a for a, _, _ in allocs]
            variants = [a for a in names if a.startswith("scralloc ")]
            text = (f"{len(progs)} programs of the breadth suite, {args.rounds} interleaved rounds.{machine}\n\n"
                    + "\n".join(profiles_table(progs, names, results, variants)) + "\n")
        elif not args.only:
            text += "\n".join(scr_heap_pairs(args.bin))
        print(text)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write(text)
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "programs": [p.name for p in progs], "results": results,
                       "summary": summary}, f, indent=1)
        print(f"# every run: {args.json}", file=sys.stderr)
        return 1 if failures else 0
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
