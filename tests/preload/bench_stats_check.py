"""The benchmark's statistics and its A/B tool.

    python3 tests/preload/bench_stats_check.py build/release/bench build/release/libscralloc.so

- proc_bench.median_interval: for every count of ratios from 6 to 200
  the interval [x_(k), x_(n+1-k)] covers the median with probability
  1 - 2 P(Binomial(n, 1/2) < k) >= 95%, and k is the largest that does
  (one order statistic further in would cover less); none below 6.
  Drawn from a skewed distribution with a known median (exponential,
  median ln 2), 3,000 samples of 31 ratios: the interval holds the
  median in 95-99% of them (the exact coverage for 31 is 97.1%).
- bench/paired_runs.py runs a program under two settings (glibc and
  scralloc preloaded) and prints their medians and paired ratios; a
  preload that does not exist stops it with a message instead of a
  measurement of glibc under scralloc's name.
"""
import math
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
from proc_bench import median_interval  # noqa: E402


def below(n, k):
    """P(Binomial(n, 1/2) < k)"""
    return sum(math.comb(n, j) for j in range(k)) / 2 ** n


def check_interval():
    for n in range(1, 6):
        assert median_interval(list(range(n))) is None, n
    for n in range(6, 201):
        xs = list(range(1, n + 1))
        lo, hi = median_interval(xs)
        k = lo
        assert hi == n + 1 - k, (n, lo, hi)
        assert 1 - 2 * below(n, k) >= 0.95, (n, k)
        assert 1 - 2 * below(n, k + 1) < 0.95, (n, k)
    rng = random.Random(17)
    true_median = math.log(2)
    held = 0
    trials = 3000
    for _ in range(trials):
        lo, hi = median_interval(sorted(rng.expovariate(1.0) for _ in range(31)))
        held += lo <= true_median <= hi
    share = held / trials
    assert 0.95 <= share <= 0.99, share
    print(f"ok median_interval: exact coverage >= 95% for 6-200 ratios; {share:.1%} of {trials} samples of 31 held the median")


def check_paired_runs(bindir, lib):
    tool = os.path.join(BENCH, "paired_runs.py")
    prog = sys.executable + " -c pass"
    p = subprocess.run([sys.executable, tool, "--rounds", "6", "--bin", bindir, prog, "glibc=-",
                        f"scralloc=PROC_LAUNCH_PRELOAD:{lib}"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("6 rounds of "), out
    assert "glibc: wall s " in out and "scralloc: wall s " in out, out
    assert "    wall s: " in out and "95% interval" in out, out
    p = subprocess.run([sys.executable, tool, "--rounds", "2", "--bin", bindir, prog,
                        "x=PROC_LAUNCH_PRELOAD:/nonexistent/libnone.so"], capture_output=True, text=True)
    assert p.returncode != 0 and "does not exist" in p.stderr, (p.returncode, p.stderr)
    print("ok paired_runs.py: two settings measured and compared; a missing preload refused")


def main():
    bindir, lib = sys.argv[1], os.path.abspath(sys.argv[2])
    check_interval()
    check_paired_runs(bindir, lib)


if __name__ == "__main__":
    main()
