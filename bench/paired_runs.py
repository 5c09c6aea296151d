"""Paired rounds of one program under several settings: the A/B tool.

    python3 bench/paired_runs.py [--rounds N] [--bin build/release/bench] \
        'COMMAND ARGS' NAME=VAR:VALUE,VAR:VALUE NAME2=... [NAME3=-]

Each NAME=... is a setting: environment variables for the program
(PROC_LAUNCH_PRELOAD:LIB preloads LIB, as bench/proc_launch.c says; `-`
for none).  Every round runs the program once per setting, in a shuffled
order, through bench/proc_launch.c (so that wall, max RSS, faults and CPU
time are the program's own).  It prints each setting's medians and, for
every setting after the first, the median and quartiles of the rounds'
ratios to the first and a 95% interval of that median: a slow spell of
the machine weighs on both runs of a round, so the paired ratios show
differences that the spread of single runs hides.  Example, the threaded
stress with a larger decommit batch against the defaults and tcmalloc:

    python3 bench/paired_runs.py --rounds 300 'build/release/bench/proc_xthread 8 250000' \\
        scr=PROC_LAUNCH_PRELOAD:build/release/libscralloc.so \\
        b1m=PROC_LAUNCH_PRELOAD:build/release/libscralloc.so,SCRALLOC_DECOMMIT_BATCH:1M \\
        tc=PROC_LAUNCH_PRELOAD:/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4
"""
import argparse
import os
import random
import shlex
import statistics
import sys

from proc_bench import median_interval, run_measured

KEYS = (("wall", "wall s"), ("cpu", "cpu s"), ("maxrss", "max RSS MiB"), ("minflt", "faults"))


def parse_setting(arg):
    """'name=VAR:VALUE,VAR:VALUE' -> (name, {VAR: VALUE}); 'name=-' -> (name, {})"""
    name, sep, spec = arg.partition("=")
    if not sep or not name:
        sys.exit(f"paired_runs: a setting is NAME=VAR:VALUE[,VAR:VALUE] or NAME=-, not {arg!r}")
    env = {}
    if spec not in ("", "-"):
        for item in spec.split(","):
            var, sep, value = item.partition(":")
            if not sep:
                sys.exit(f"paired_runs: {item!r} in {arg!r} is not VAR:VALUE")
            env[var] = value
    return name, env


def run_once(launcher, argv, env_extra):
    """One run's figures; exits on a failed run (a setting that breaks the
    program is not a measurement)."""
    pre = env_extra.get("PROC_LAUNCH_PRELOAD")
    if pre and not os.path.exists(pre):
        sys.exit(f"paired_runs: {pre} does not exist (the program would run on glibc's malloc)")
    code, m = run_measured(launcher, argv, env_extra, None)
    if code != 0:
        sys.exit(f"paired_runs: {shlex.join(argv)} exited {code} under {env_extra}")
    return {"wall": m["wall"], "cpu": m["utime"] + m["stime"], "maxrss": m["maxrss_mib"], "minflt": m["minflt"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--bin", default="build/release/bench", help="folder with proc_launch")
    ap.add_argument("command")
    ap.add_argument("settings", nargs="+")
    args = ap.parse_args()
    launcher = os.path.join(args.bin, "proc_launch")
    if not os.path.exists(launcher):
        sys.exit(f"paired_runs: {launcher} is missing (make {launcher})")
    argv = shlex.split(args.command)
    settings = [parse_setting(s) for s in args.settings]
    runs = {name: [] for name, _ in settings}
    for _ in range(args.rounds):
        order = list(settings)
        random.shuffle(order)
        for name, env in order:
            runs[name].append(run_once(launcher, argv, env))
    base = settings[0][0]
    print(f"{args.rounds} rounds of {args.command}; ratios: each round's figure over {base}'s")
    for name, _ in settings:
        med = "  ".join(f"{label} {statistics.median(r[k] for r in runs[name]):.4g}" for k, label in KEYS)
        print(f"{name}: {med}")
        if name == base:
            continue
        for k, label in KEYS:
            rs = sorted(a[k] / b[k] for a, b in zip(runs[name], runs[base]) if b[k])
            if not rs:
                continue
            q = statistics.quantiles(rs, n=4) if len(rs) > 1 else [rs[0]] * 3
            ci = median_interval(rs)
            ci_s = f", 95% interval {ci[0]:.3f}-{ci[1]:.3f}" if ci else ""
            print(f"    {label}: {statistics.median(rs):.3f} [{q[0]:.3f}-{q[2]:.3f}]{ci_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
