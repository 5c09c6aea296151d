"""bench/suite_bench.py's report, on runs made up here with known ratios.

    python3 tests/preload/suite_report_check.py

Three rows, seven rounds, glibc, tcmalloc and scralloc: on row A scralloc
takes twice tcmalloc's time (the fastest), on row B half of it, on row C
(timed by a figure the program prints, in ms) 1.5 times glibc's (the
fastest there); max RSS 1.2, 0.8 and 1.0 times glibc's.  The summary must
give the geometric mean of 2, 0.5 and 1.5 over the fastest, row A as the
worst, 1 row above 1.25x and the RSS figures; the paired ratio of a round
must pair runs of the same round (a slow round for everyone leaves it
unchanged).  Also: a scralloc --profile column is summarised against the
default, and a program that exits non-zero makes --quick exit 1.
"""
import contextlib
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
import suite_bench  # noqa: E402
from suite_bench import Program, report  # noqa: E402


def run(wall, rss, rnd, **extra):
    return {"wall": wall, "utime": wall / 2, "stime": 0.0, "maxrss_mib": rss, "round": rnd, **extra}


def check_report():
    progs = [Program("A", ["/bin/a"]), Program("B", ["/bin/b"]),
             Program("C", ["/bin/c"], time_key="c.ms")]
    allocs = [("glibc", None, {}), ("tcmalloc", "/x", {}), ("scralloc", "/y", {}), ("scralloc opt=1", "/y", {}),
              ("scralloc opt=2", "/y", {}), ("scralloc opt=3", "/y", {})]
    res = {p.name: {a: [] for a, _, _ in allocs} for p in progs}
    for r in range(7):
        slow = 1 + r  # every round slower than the last, for every allocator alike
        res["A"]["glibc"].append(run(3.0 * slow, 100, r))
        res["A"]["tcmalloc"].append(run(1.0 * slow, 90, r))
        res["A"]["scralloc"].append(run(2.0 * slow, 120, r))
        res["A"]["scralloc opt=1"].append(run(1.0 * slow, 100, r))
        res["B"]["glibc"].append(run(3.0 * slow, 100, r))
        res["B"]["tcmalloc"].append(run(1.0 * slow, 90, r))
        res["B"]["scralloc"].append(run(0.5 * slow, 80, r))
        res["B"]["scralloc opt=1"].append(run(1.0 * slow, 100, r))
        # row C: the wall says nothing, the program's own figure is the time
        res["C"]["glibc"].append(run(9.0, 50, r, **{"c.ms": 1000.0 * slow}))
        res["C"]["tcmalloc"].append(run(1.0, 50, r, **{"c.ms": 2000.0 * slow}))
        res["C"]["scralloc"].append(run(1.0, 50, r, **{"c.ms": 1500.0 * slow}))
        res["C"]["scralloc opt=1"].append(run(1.0, 50, r, **{"c.ms": 1500.0 * slow}))
        # opt=2 pays 1.5x on A and costs 10% on B in every round (a clear loss); opt=3 pays the
        # same on A, and B moves 0.8x-1.2x of the default from round to round (noise)
        for v, b in (("scralloc opt=2", 0.9), ("scralloc opt=3", 0.8 if r % 2 == 0 else 1.2)):
            res["A"][v].append(run(3.0 * slow, 120, r))
            res["B"][v].append(run(0.5 * b * slow, 80, r))
            res["C"][v].append(run(1.0, 50, r, **{"c.ms": 1500.0 * slow}))
    text, summary = report(progs, allocs, res, 7)
    tv = summary["time_vs_fastest"]
    assert tv["A"] == (2.0, "tcmalloc"), tv
    assert tv["B"] == (0.5, "tcmalloc"), tv
    assert tv["C"] == (1.5, "glibc"), tv
    gm = math.exp((math.log(2.0) + math.log(0.5) + math.log(1.5)) / 3)
    assert f"geometric mean {gm:.2f} (target at most 1.00), worst 2.00 (A, against tcmalloc)" in text, text
    assert "rows above 1.20x the fastest (target none): 2 of 3" in text, text
    assert summary["rss_vs_glibc"] == {"A": 1.2, "B": 0.8, "C": 1.0}, summary["rss_vs_glibc"]
    # row A: every round gives exactly 2, so the interval of the median is 2-2
    assert "| A | tcmalloc | 2.00 (2.00-2.00) |" in text, text
    # the profile column: 1, 1 and 1.5 times the fastest; 0.5, 2 and 1 times the default (geomean 1:
    # the mechanism it switches off does not win); max RSS 100/120, 100/80 and 50/50 of the default
    assert ("| scralloc opt=1 | 1.14 | 1.000 | 2.00 (B) | 0.50 (A) | 1.014 | 1.25 (B) | "
            "no: loses on the geomean |") in text, text
    assert "| scralloc opt=2 |" in text and "no: costs 11% on B (0.90-0.90) |" in text, text
    assert "yes: its 25% on B is within the rounds' noise |" in text, text
    # below six rounds there is no interval: the verdict cannot tell a loss from noise
    assert suite_bench.verdict(1.1, {"B": 0.8}, {"B": None}).startswith("cannot tell: 25% on B"), text


def check_quick_fails():
    """--quick exits 1 when a program fails: a launcher that reports exit 1."""
    d = tempfile.mkdtemp()
    launcher = os.path.join(d, "proc_launch")
    with open(launcher, "w") as f:
        f.write("#!/bin/sh\necho proc_launch wall_ns=1 maxrss_kib=1 minflt=1 utime_us=1 stime_us=1 status=256\n")
    os.chmod(launcher, 0o755)
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        code = suite_bench.quick([Program("fails", ["/bin/false"])], launcher, [("glibc", None)])
    assert code == 1, code
    out = subprocess.run([launcher], stdout=subprocess.PIPE).stdout
    assert b"status=256" in out


if __name__ == "__main__":
    check_report()
    check_quick_fails()
    print("suite_report_check: ok")
