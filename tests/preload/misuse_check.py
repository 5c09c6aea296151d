#!/usr/bin/env python3
"""Death tests of the drop-in malloc (tests/preload/misuse_check.c), each
case in a child under LD_PRELOAD=libscralloc.so:
  - SCRALLOC_ON_ERROR unset (abort, the default): the child dies of
    SIGABRT and the last line of its stderr is exactly the line it
    announced ("expect: ..." on stdout);
  - SCRALLOC_ON_ERROR=warn: the child prints that line, goes on, finds no
    two live blocks overlapping among 20,000 it allocates next, passes the
    process validator and exits 0;
  - SCRALLOC_ON_ERROR=ignore with SCRALLOC_STATS=1: it exits 0, prints
    nothing but the exit report, whose line of bad pointers counts one
    (one per race: race-*), and no figure of which is near 2^64 (a
    counter below zero);
  - a double free with SCRALLOC_STATS=1 (ignore) ends (no hang at exit).

    python3 tests/preload/misuse_check.py build/release/tests/misuse_check build/release/libscralloc.so [CASE...]
"""
import os
import re
import signal
import subprocess
import sys

CASES = ["interior-small", "interior-small-8", "interior-large", "double-small", "double-medium",
         "double-large", "double-huge", "double-thread", "double-other-arena", "double-remote-batch", "stack", "never-allocated",
         "realloc-freed", "usable-size-freed", "one"]
# across threads (misuse_check.c: xthread-CALL-WHO-SIZE, race-SIZE)
CASES += [f"xthread-{call}-{who}-{size}" for call in ("free", "realloc") for who in ("second", "third", "owner")
          for size in ("16", "1k", "200k", "3m", "64m")]
CASES += ["race-16", "race-1k", "race-16-home", "race-1k-home", "race-200k-home", "race-3m-home"]
KIND = {"double": "double", "xthread": "double", "race": "double", "interior": "interior", "never": "never allocated", "stack": "foreign", "one": "foreign",
        "realloc": "double", "usable": "double"}


def run(exe, lib, case, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRALLOC_")}
    env.update(extra)
    env["LD_PRELOAD"] = lib
    try:
        p = subprocess.run([exe, case], env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as t:  # a hang is a failure, said as such
        p = subprocess.CompletedProcess(t.cmd, "timeout", t.stdout or "", "hung for 120 s")
        if isinstance(p.stdout, bytes):
            p.stdout = p.stdout.decode(errors="replace")
    return p, re.findall(r"^expect: (.*)$", p.stdout, re.M)


def environment_checks(exe, lib):
    """The environment: each warning once, out-of-range values refused with
    the range, unknown names with the closest option, SCRALLOC_STATS=json,
    an unusable SCRALLOC_STATS_FD."""
    fail = 0

    def check(name, ok, p):
        nonlocal fail
        if ok and p.returncode == 0:
            print(f"ok {name}")
        else:
            print(f"FAIL {name}: status {p.returncode}, stderr {p.stderr[-800:]!r}")
            fail = 1

    p, _ = run(exe, lib, "clean", {"SCRALLOC_DISCARD": "18446744073709551615", "SCRALLOC_RETAIN_BYTES": "lots"})
    err = p.stderr.splitlines()
    check("out-of-range-refused", err.count("scralloc: ignoring SCRALLOC_DISCARD=18446744073709551615 "
                                            "(out of range: valid values are 0 to 2)") == 1 and
          err.count("scralloc: ignoring SCRALLOC_RETAIN_BYTES=lots (not a valid value)") == 1 and len(err) == 2, p)
    p, _ = run(exe, lib, "clean", {"SCRALLOC_RETAN": "1", "SCRALLOC_ON_EROR": "warn"})
    err = p.stderr.splitlines()
    check("unknown-name", sorted(err) == sorted([
        "scralloc: ignoring SCRALLOC_RETAN (no such option; the closest is SCRALLOC_RETAIN)",
        "scralloc: ignoring SCRALLOC_ON_EROR (no such option; the closest is SCRALLOC_ON_ERROR)"]), p)
    # options of mechanisms taken out (issue #30; LEND, lending) are unknown names now
    removed = ["HOLD", "HUGEPAGE_AFTER", "SWITCH_BYTES", "PREFAULT", "PREFAULT_AFTER", "PREFAULT_STEP",
               "PREFAULT_BUDGET", "SHARE", "SHARE_HOT", "SHARE_CONTENDED", "LEND"]
    p, _ = run(exe, lib, "clean", {f"SCRALLOC_{n}": "1" for n in removed})
    err = p.stderr.splitlines()
    check("removed-names-unknown", len(err) == len(removed) and all(
        any(l.startswith(f"scralloc: ignoring SCRALLOC_{n} (no such option; ") for l in err) for n in removed), p)
    # a warning per variable: RETAIN and DECOMMIT_BATCH shared a bit of the hash the filter kept
    p, _ = run(exe, lib, "clean", {"SCRALLOC_RETAIN": "lots", "SCRALLOC_DECOMMIT_BATCH": "4T"})
    err = p.stderr.splitlines()
    check("one-warning-each", sorted(err) == ["scralloc: ignoring SCRALLOC_DECOMMIT_BATCH=4T (not a valid value)",
                                              "scralloc: ignoring SCRALLOC_RETAIN=lots (not a valid value)"], p)
    long_name = "SCRALLOC_" + "X" * 70
    p, _ = run(exe, lib, "clean", {"SCRALLOC_retain": "0", long_name: "1"})
    err = p.stderr.splitlines()
    check("wrong-case-and-long-names", len(err) == 2 and
          "scralloc: ignoring SCRALLOC_retain (no such option; the closest is SCRALLOC_RETAIN)" in err and
          any(l.startswith(f"scralloc: ignoring {long_name} (no such option; ") for l in err), p)
    p, _ = run(exe, lib, "double-small", {"SCRALLOC_STATS": "json", "SCRALLOC_ON_ERROR": "ignore"})
    import json
    try:
        obj = json.loads(p.stderr.strip().splitlines()[-1])
        ok = obj["process"]["double_frees"] == 1 and obj["heap"]["allocs"] >= 0 and \
            obj["process"]["thp_mode"] in ("never", "madvise", "always")
    except (ValueError, KeyError, IndexError):
        ok = False
    check("stats-json", ok, p)
    # the exit report: the peak of 200 MB held then freed, lines under 100 characters
    p, _ = run(exe, lib, "big", {"SCRALLOC_STATS": "2"})
    err = p.stderr.splitlines()
    peak = re.search(r"^scralloc\[\d+\]:   committed +[\d.]+ +([\d.]+) ", p.stderr, re.M)
    rss = re.search(r"^scralloc\[\d+\]:   resident \(RSS\) +[\d.]+ +([\d.]+) ", p.stderr, re.M)
    advice = re.search(r"madvise: (\d+) gave memory back, (\d+) only marked memory", p.stderr)
    check("report-peak-and-width", bool(err) and all(l.startswith("scralloc[") and len(l) < 100 for l in err) and
          peak is not None and float(peak.group(1)) >= 200 and rss is not None and advice is not None and
          any(re.match(r"scralloc\[\d+\]: +0 +[\d.]+ ", l) for l in err), p)
    p, _ = run(exe, lib, "clean", {"SCRALLOC_STATS": "1", "SCRALLOC_STATS_FD": "99"})
    err = p.stderr.splitlines()
    check("stats-fd-fallback", bool(err) and err[0] == "scralloc: SCRALLOC_STATS_FD=99 is not a descriptor open for "
          "writing: the report goes to stderr" and any(re.match(r"scralloc\[\d+\]: \d+ arenas", l) for l in err), p)
    return fail


def main():
    exe, lib = sys.argv[1], os.path.abspath(sys.argv[2])
    fail = 0
    for case in sys.argv[3:] or CASES:
        # one line expected per misuse (race-*: one per race), the first ends the program
        p, wants = run(exe, lib, case, {})
        want = wants[0] if wants else None
        lines = p.stderr.strip().splitlines()
        if p.returncode != -signal.SIGABRT or want is None or not lines or lines[-1] != want:
            print(f"FAIL abort {case}: status {p.returncode}, want {want!r}, stderr {p.stderr!r}")
            fail = 1
        else:
            print(f"ok abort {case}: {want}")
        p, wants = run(exe, lib, case, {"SCRALLOC_ON_ERROR": "warn"})
        if p.returncode != 0 or "ok" not in p.stdout.split() or not wants or p.stderr.strip().splitlines() != wants:
            print(f"FAIL warn {case}: status {p.returncode}, want {wants[:3]!r}, stdout {p.stdout[-600:]!r}, "
                  f"stderr {p.stderr[-600:]!r}")
            fail = 1
        else:
            print(f"ok warn {case}")
        p, wants = run(exe, lib, case, {"SCRALLOC_ON_ERROR": "ignore", "SCRALLOC_STATS": "1"})
        kind = KIND[case.split("-")[0]]
        bad = re.search(r"bad pointers: (\d+) double frees, (\d+) interior, (\d+) never allocated, (\d+) foreign",
                        p.stderr)
        counts = dict(zip(["double", "interior", "never allocated", "foreign"], map(int, bad.groups()))) if bad else {}
        stray = [l for l in p.stderr.splitlines() if not l.startswith("scralloc[")]
        # a counter that went below zero prints as a figure near 2^64
        underflow = [n for n in re.findall(r"\d+", p.stderr) if int(n) >= 1 << 63]
        if (p.returncode != 0 or counts.get(kind) != len(wants) or sum(counts.values()) != len(wants) or stray or
                underflow):
            print(f"FAIL ignore {case}: status {p.returncode}, counts {counts}, stderr {p.stderr[-600:]!r}")
            fail = 1
        else:
            print(f"ok ignore {case}")
    # SCRALLOC_VERBOSE=1 says an ignored misuse too, in a release build
    p, wants = run(exe, lib, "double-small", {"SCRALLOC_ON_ERROR": "ignore", "SCRALLOC_VERBOSE": "1"})
    if p.returncode != 0 or not wants or wants[0] not in p.stderr.splitlines():
        print(f"FAIL verbose: status {p.returncode}, stderr {p.stderr!r}")
        fail = 1
    else:
        print("ok verbose")
    fail |= environment_checks(exe, lib)
    print("misuse_check:", "FAILED" if fail else "all passed")
    return fail


if __name__ == "__main__":
    sys.exit(main())
