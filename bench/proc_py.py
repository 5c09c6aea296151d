"""Benchmark workload: python3 running an allocation-heavy script (dicts,
lists, strings, bytes of many sizes, a JSON round trip, worker threads).

    python3 bench/proc_py.py [threads=4] [rounds=6] [switch interval s]"""
import json
import sys
import threading


def work(seed, n):
    acc = 0
    for r in range(n):
        d = {f"key{seed}-{i}": [i, str(i) * (i % 13), (i, r)] for i in range(3000)}
        s = json.dumps(d)
        back = json.loads(s)
        blobs = [bytes(64 + (i * 37) % 9000) for i in range(400)]
        words = " ".join(k for k in back if k.endswith("7")).split()
        acc += len(s) + len(words) + sum(map(len, blobs))
    return acc


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
    if len(sys.argv) > 3:  # the interpreter's switch interval, s: 0.0002 makes every run peak with all threads mid-round
        sys.setswitchinterval(float(sys.argv[3]))
    out = [0] * threads
    ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, work(i, rounds))) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert all(out)


if __name__ == "__main__":
    main()
