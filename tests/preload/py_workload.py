"""An allocation-heavy Python workload for LD_PRELOAD runs: containers,
strings, bytes of many sizes, objects freed on other threads, thread churn.
Checks its own results; exits 0 when they hold."""
import hashlib
import queue
import sys
import threading


def churn(seed, rounds):
    h = hashlib.sha256()
    for r in range(rounds):
        d = {f"k{seed}-{i}": [i] * (i % 17) for i in range(2000)}
        s = "".join(str(i) for i in range(500))
        b = [bytes((i * seed) % 251 for _ in range(i % 700)) for i in range(300)]
        big = bytearray(200_000 + r * 1000)
        big[-1] = r % 256
        h.update(s.encode())
        h.update(b"".join(b[:50]))
        assert len(d) == 2000 and big[-1] == r % 256
    return h.hexdigest()


def handoff(n):
    """Objects made on one thread, freed on another."""
    q = queue.Queue(maxsize=64)
    total = [0]

    def producer():
        for i in range(n):
            q.put([bytes(i % 4000), "x" * (i % 300), {i: i}])
        q.put(None)

    def consumer():
        while (item := q.get()) is not None:
            total[0] += len(item[0]) + len(item[1])

    ts = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return total[0]


def main():
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    expect = churn(3, 2)
    for wave in range(3 * scale):  # thread churn: arenas are parked and claimed
        out = [None] * 6
        ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, churn(3, 2))) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert all(o == expect for o in out), out
    want = sum(i % 4000 + i % 300 for i in range(5000 * scale))
    assert handoff(5000 * scale) == want
    print("py_workload ok")


if __name__ == "__main__":
    main()
