"""The issue's Python target, measured: build a 10**6-entry dict in one
function on a serve_python() heap sampled at RATE, RUNS times, and print
the top site and the error of its estimate against what build() left on
the heap (heap_used after minus before).

    python3 tests/python/profile_dict_target.py [RATE [RUNS]]   (default 524288 40)

docs/python.md ("Allocation sites") quotes its output."""
import statistics
import sys
import warnings

import scralloc

SRC = "def build(n):\n    return {i: None for i in range(n)}\n"


def main():
    rate = int(sys.argv[1]) if len(sys.argv) > 1 else scralloc.PROFILE_DEFAULT_RATE
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    ns = {}
    exec(compile(SRC, "dict_target.py", "exec"), ns)
    errs, tops, real = [], set(), 0
    for _ in range(runs):
        a = scralloc.Allocator(profile_rate=rate)
        before = a.heap_used
        with a.serve_python():
            d = ns["build"](1_000_000)
        real = a.heap_used - before
        top = a.profile(native=False).top(1)[0]
        tops.add(f"{top.where.file}:{top.where.line}")
        errs.append(top.bytes / real - 1)
        del d
        with warnings.catch_warnings():     # the interpreter's free lists keep a few blocks
            warnings.simplefilter("ignore", scralloc.ScrallocWarning)
            a.close()
    errs.sort()
    print(f"rate {rate}: {runs} runs, top site {sorted(tops)}, build() left {real / 2**20:.2f} MiB; "
          f"error min {100 * errs[0]:+.1f}% median {100 * statistics.median(errs):+.1f}% "
          f"max {100 * errs[-1]:+.1f}%, sd {100 * statistics.pstdev(errs):.1f}%, "
          f"within 10%: {sum(abs(e) < 0.10 for e in errs)}/{runs}")


if __name__ == "__main__":
    main()
