"""heapTotal, heapUsed, RSS and OS calls over time, for one allocator
driven through four phases: grow, churn, free most, trim.

    python3 examples/memory_timeline.py [--retain N] [--csv out.csv] [--png out.png]

Writes a CSV (one row per sample) and, when matplotlib is installed, a PNG
with two panels: bytes (heapTotal, heapUsed, RSS, committed) and cumulative
syscalls (mmap, munmap, madvise).  Without matplotlib it prints the samples.
"""
import argparse
import csv
import random

import scralloc

FIELDS = ["step", "phase", "heapTotal", "heapUsed", "rss", "bytes",
          "mmap_calls", "munmap_calls", "madvise_calls"]


def sample(a, step, phase):
    m = scralloc.memory_usage()
    s = a.stats()
    return {"step": step, "phase": phase, "heapTotal": m["heapTotal"], "heapUsed": m["heapUsed"],
            "rss": m["rss"], "bytes": s["bytes"], "mmap_calls": s["mmap_calls"],
            "munmap_calls": s["munmap_calls"], "madvise_calls": s["madvise_calls"]}


def run(retain, seed=1):
    rng = random.Random(seed)
    rows, live, step = [], [], 0
    with scralloc.Allocator(retain=retain) as a:
        def touch(p):
            mv = a.view(p)
            mv[::4096] = b"\x01" * len(mv[::4096])  # fault the pages in: RSS moves
            mv.release()

        def tick(phase, every=200):
            nonlocal step
            step += 1
            if step % every == 0:
                rows.append(sample(a, step, phase))

        for _ in range(20_000):  # grow: mostly small, some large
            n = rng.choice((32, 64, 256, 1024, 4096, 16384)) if rng.random() < 0.995 else rng.randint(20_000, 1 << 20)
            p = a.malloc(n)
            touch(p)
            live.append(p)
            tick("grow")
        for _ in range(20_000):  # churn: free a random block, allocate another
            a.free(live.pop(rng.randrange(len(live))))
            p = a.malloc(rng.choice((48, 128, 512, 2048, 8192)))
            touch(p)
            live.append(p)
            tick("churn")
        rng.shuffle(live)
        while len(live) > 1000:  # free most
            a.free(live.pop())
            tick("free")
        given = a.trim()
        for _ in range(1000):
            tick("trimmed", every=100)
        for p in live:
            a.free(p)
        a.trim()
        rows.append(sample(a, step + 1, "end"))
    return rows, given


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--retain", type=int, default=1)
    ap.add_argument("--csv", default="memory_timeline.csv")
    ap.add_argument("--png", default="memory_timeline.png")
    args = ap.parse_args()
    rows, given = run(args.retain)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} samples -> {args.csv}; trim gave back {given:,} bytes")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        for r in rows[:: max(1, len(rows) // 20)]:
            print(" ".join(f"{k}={r[k]}" for k in FIELDS))
        print("(install matplotlib for the plot)")
        return
    steps = [r["step"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for key in ("heapTotal", "heapUsed", "bytes", "rss"):
        top.plot(steps, [r[key] / 2**20 for r in rows], label=key)
    top.set_ylabel("MiB")
    top.legend()
    for key in ("mmap_calls", "munmap_calls", "madvise_calls"):
        bottom.plot(steps, [r[key] for r in rows], label=key)
    bottom.set_ylabel("calls (cumulative)")
    bottom.set_xlabel("step")
    bottom.legend()
    fig.suptitle(f"scralloc Allocator(retain={args.retain})")
    fig.savefig(args.png, dpi=100)
    print(f"plot -> {args.png}")


if __name__ == "__main__":
    main()
