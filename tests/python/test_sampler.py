"""scralloc.Sampler: rows of memory figures, at calls or on a thread; CSV;
peaks; another process by pid; the process allocator under LD_PRELOAD."""
import csv
import io
import json
import os
import threading
import subprocess
import sys
import textwrap
import time

import pytest

import scralloc
from scralloc.sampler import pid_rss

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def test_rows_follow_an_allocator():
    with scralloc.Allocator(retain=0) as a:
        s = scralloc.Sampler(a)
        first = s.sample()
        ps = [a.malloc(4096) for _ in range(64)]
        grown = s.sample()
        for p in ps:
            a.free(p)
        a.trim()
        last = s.sample()
    assert s.rows == [first, grown, last]
    assert first["t"] == 0.0 and 0 <= grown["t"] <= last["t"]
    # the allocator's own figures, exact
    assert first["allocs"] == 0 and grown["allocs"] == 64 and last["allocs"] == 0
    assert grown["heap_used"] == 64 * 4096 and last["heap_used"] == 0
    assert grown["mmap_calls"] >= 1
    assert last["bytes"] == 0
    # one name per figure: the source's heap figures, not memory_usage()'s sums
    assert not {"heapUsed", "heapTotal", "external", "peakHeapUsed"} & set(grown)
    assert grown["rss"] > 0 and grown["peakRss"] >= grown["rss"]
    assert "classes" not in grown  # rows are flat: no per-class list
    assert s.peak_heap_used == 64 * 4096
    assert s.peak_rss == max(r["rss"] for r in s.rows)


def test_rows_stay_in_time_order_when_threads_sample_at_once():
    """A row that started first but finished last (its read of the figures
    was slow) goes before the other, as its time says: a program that marks
    rows and samples on a background thread too reads them in order."""
    with scralloc.Allocator() as a:
        s = scralloc.Sampler(a)
        first = s.sample()
        read, slow_started, release = s._stats, threading.Event(), threading.Event()

        def slow_once():
            if not slow_started.is_set():
                slow_started.set()
                release.wait(10)
            return read()

        s._stats = slow_once
        t = threading.Thread(target=s.sample, kwargs={"mark": "slow"})
        t.start()
        assert slow_started.wait(10)
        fast = s.sample(mark="fast")              # begins after the slow one, ends before it
        release.set()
        t.join()
    assert [r.get("mark") for r in s.rows] == [None, "slow", "fast"]
    assert s.rows[0] is first and s.rows[2] is fast
    assert [r["t"] for r in s.rows] == sorted(r["t"] for r in s.rows)


def test_peak_heap_used_without_source_is_memory_usage():
    s = scralloc.Sampler()
    with scralloc.Allocator() as a:
        p = a.malloc(1 << 20)
        s.sample()
        a.free(p)
        s.sample()
    assert "heap_used" not in s.rows[0] or scralloc.sampler._PRELOADED is not None
    assert s.peak_heap_used >= 1 << 20
    assert s.rows[-1]["heapUsed"] < s.peak_heap_used


def test_with_form_without_interval_takes_first_and_last():
    with scralloc.Allocator() as a:
        with scralloc.Sampler(a) as s:
            p = a.malloc(100)
        a.free(p)
    assert len(s.rows) == 2
    assert s.rows[0]["allocs"] == 0 and s.rows[1]["allocs"] == 1


def test_background_thread_samples_at_the_interval():
    with scralloc.Allocator() as a:
        with scralloc.Sampler(a, interval=0.01) as s:
            assert s.running
            live = []
            deadline = time.monotonic() + 0.3
            while time.monotonic() < deadline:
                live.append(a.malloc(1024))
                time.sleep(0.001)
            n_live = len(live)
        assert not s.running
        for p in live:
            a.free(p)
    # about 30 rows in 0.3 s; a loaded machine may take fewer
    assert len(s.rows) >= 5
    ts = [r["t"] for r in s.rows]
    assert ts == sorted(ts) and ts[-1] >= 0.25
    allocs = [r["allocs"] for r in s.rows]
    assert allocs == sorted(allocs), "live blocks only grew while sampled"
    assert allocs[-1] == n_live  # the last row is taken at stop()


def test_start_stop_errors_and_restart():
    with pytest.raises(ValueError, match="interval"):
        scralloc.Sampler().start()
    with pytest.raises(ValueError, match="interval"):
        scralloc.Sampler(interval=0)
    with pytest.raises(ValueError, match="interval"):
        scralloc.Sampler(interval=-1)
    s = scralloc.Sampler(interval=0.005).start()
    with pytest.raises(RuntimeError, match="already running"):
        s.start()
    s.stop()
    n = len(s.rows)
    s.stop()  # stopping a stopped sampler takes one more row, nothing else
    assert len(s.rows) == n + 1
    s.start().stop()
    assert len(s.rows) >= n + 3


def test_bad_sources():
    with pytest.raises(TypeError, match="Allocator, 'process' or None"):
        scralloc.Sampler(42)
    with pytest.raises(TypeError):
        scralloc.Sampler("heap")
    with pytest.raises(ValueError, match="source must be None"):
        scralloc.Sampler(scralloc.Allocator(), pid=os.getpid())
    with pytest.raises(ValueError, match="positive"):
        scralloc.Sampler(pid=0)


def test_closed_allocator_keeps_sampling_the_rest():
    a = scralloc.Allocator()
    s = scralloc.Sampler(a)
    s.sample()
    a.close()
    row = s.sample()
    assert "allocs" not in row and row["rss"] > 0


def test_to_csv_path_and_file(tmp_path):
    with scralloc.Allocator() as a:
        s = scralloc.Sampler(a)
        s.sample()
        p = a.malloc(64)
        s.sample()
        a.free(p)
    path = tmp_path / "rows.csv"
    s.to_csv(str(path))
    buf = io.StringIO()
    s.to_csv(buf)
    assert path.read_text() == buf.getvalue()
    back = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert len(back) == 2
    assert list(back[0]) == s.fields() and s.fields()[:2] == ["t", "rss"]
    assert [int(r["allocs"]) for r in back] == [0, 1]
    # and back: the same rows, numbers as numbers
    s.rows[1]["phase"] = "grown"
    s.rows[0]["phase"] = None
    buf = io.StringIO()
    s.to_csv(buf)
    again = scralloc.Sampler.read_csv(io.StringIO(buf.getvalue()))
    assert again.rows == s.rows
    assert scralloc.Sampler.read_csv(str(path)).rows[1]["allocs"] == 1


def test_pid_sampling_follows_a_child():
    # The child holds 64 MiB, says so, waits; frees it, says so, waits; exits.
    code = ("import sys; b = bytearray(64 << 20); print('big', flush=True); sys.stdin.readline(); "
            "del b; print('small', flush=True); sys.stdin.readline()")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "big"
        s = scralloc.Sampler(pid=child.pid)
        row = s.sample()
        assert set(row) == {"t", "rss", "rss_hwm"}
        assert row["rss"] >= 64 << 20 and row["rss_hwm"] >= row["rss"]
        assert row["rss"] == pytest.approx(pid_rss(child.pid), rel=0.1)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "small"
        s.rows.clear()  # the peak must come from the kernel's count, not from a sample
        row = s.sample()
        assert row["rss"] < 48 << 20 and row["rss_hwm"] >= 64 << 20
        assert s.peak_rss == row["rss_hwm"]
    finally:
        child.communicate("\n", timeout=30)
    assert s.sample()["rss"] is None  # reaped: nothing left to read


def test_plot_draws_the_fields():
    if not os.environ.get("CI"):  # CI installs matplotlib: there, missing is a failure
        pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with scralloc.Allocator() as a:
        s = scralloc.Sampler(a)
        s.sample()
        p = a.malloc(1 << 20)
        s.sample()
        a.free(p)
        s.sample()
    ax = s.plot(("heap_used", "heap_total"))
    lines = ax.get_lines()
    assert [ln.get_label() for ln in lines] == ["heap_used", "heap_total"]
    assert list(lines[0].get_ydata()) == [0, 1.0, 0]  # MiB
    assert lines[0].get_linestyle() != lines[1].get_linestyle()  # overlapping lines stay visible
    assert ax.get_ylabel() == "MiB"
    assert s.plot(("rss", "peak_heap_used", "bytes", "peakRss")).get_ylabel() == "MiB"
    assert [ln.get_label() for ln in s.plot().get_lines()] == ["rss", "heap_total", "heap_used"]
    ax2 = s.plot("allocs")
    assert ax2.get_ylabel() == "count" and list(ax2.get_lines()[0].get_ydata()) == [0, 1, 0]
    with pytest.raises(KeyError, match="no such field"):
        s.plot("nope")
    s.rows.clear()
    for i in range(3):
        s.sample(round=i * 10, phase="x")
    assert [r["round"] for r in s.rows] == [0, 10, 20] and s.rows[0]["phase"] == "x"
    ax3 = s.plot("rss", x="round")
    assert list(ax3.get_lines()[0].get_xdata()) == [0, 10, 20] and ax3.get_xlabel() == "round"
    with pytest.raises(KeyError, match="no such field"):
        s.plot("rss", x="nope")
    plt.close("all")


PRELOAD_SCRIPT = textwrap.dedent("""
    import json, threading, time, scralloc
    def work():
        keep = [bytes(100) for _ in range(200000)]  # > 65,536 calls: the arena publishes its figures
        time.sleep(0.05)                            # held for a few samples, however fast the build
        del keep
    with scralloc.Sampler(interval=0.01) as s:     # source None: the preloaded allocator
        for _ in range(3):
            t = threading.Thread(target=work); t.start(); t.join()
    # a thread parks its arena in its TLS destructor, which may run after
    # Python's join() returned: wait for the third park (bounded)
    deadline = time.monotonic() + 10
    while True:
        p = scralloc.Sampler("process").sample()
        if p["parks"] >= s.rows[0]["parks"] + 3 or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    print(json.dumps({"rows": len(s.rows), "first": s.rows[0], "last": s.rows[-1], "p": p,
                      "peak_heap_used": s.peak_heap_used}))
""")


def test_process_allocator_under_ld_preload():
    lib = os.path.abspath(os.path.join(ROOT, "build", "release", "libscralloc.so"))
    if not os.path.exists(lib):
        subprocess.run(["make", "-C", ROOT, "build/release/libscralloc.so"], check=True,
                       capture_output=True)
    env = dict(os.environ, LD_PRELOAD=lib, PYTHONMALLOC="malloc")
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(scralloc.__file__))
    out = subprocess.run([sys.executable, "-c", PRELOAD_SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    first, last = d["first"], d["last"]
    # the figures are the preloaded library's, not the extension's unused copy
    assert first["arenas"] >= 1 and first["heap_total"] > 0
    assert last["claims"] > first["claims"]      # the threads came and claimed arenas
    assert d["p"]["parks"] >= first["parks"] + 3  # and parked them when they exited
    assert d["p"]["heap_used"] > 0 and "decay_delay_ms" in d["p"]
    # Other threads' arenas publish their figures every 65,536 calls: the
    # sampler sees a worker's blocks at one of those, not necessarily all.
    assert d["peak_heap_used"] >= 5 << 20 and d["peak_heap_used"] > last["heap_used"] + (4 << 20)


def test_process_source_without_preload():
    if scralloc.sampler._PRELOADED is not None:
        pytest.skip("this test process runs under LD_PRELOAD")
    if not scralloc.HAVE_PROCESS:
        with pytest.raises(ValueError, match="no process allocator"):
            scralloc.Sampler("process")
        return
    row = scralloc.Sampler("process").sample()
    assert "arenas" in row and "heap_total" in row
    # source None, no preload: memory_usage() only
    assert set(scralloc.Sampler().sample()) == {"t", *scralloc.memory_usage()}



def test_start_takes_the_first_row_at_once():
    with scralloc.Allocator() as a:
        s = scralloc.Sampler(a, interval=0.05)
        s.start()
        first = list(s.rows)               # before the caller runs on
        p = a.malloc(1 << 20)
        time.sleep(0.12)
        s.stop()
        a.free(p)
    assert len(first) == 1 and first[0]["t"] == 0.0 and first[0]["heap_used"] == 0
    assert s.rows[0] is first[0] and s.rows[1]["heap_used"] >= 1 << 20
    assert 0.04 <= s.rows[1]["t"] < 0.5   # the thread's first row comes an interval later


def test_rows_without_a_source_keep_memory_usage_names():
    s = scralloc.Sampler()
    row = s.sample()
    if scralloc.sampler._PRELOADED is None:
        assert "heapUsed" in row and "heap_used" not in row
    else:
        assert "heap_used" in row and "heapUsed" not in row


@pytest.mark.parametrize("text, line", [
    ("a,b\n1,2\n", 1),                     # no t column
    ("", 1),                                 # empty
    ("t,rss\n0.0,10\n0.1,20,30\n", 3),     # a line with a field too many
    ("t,rss\n0.0,10\nlater,20\n", 3),       # t not a number
])
def test_read_csv_of_something_else_names_the_line(text, line):
    with pytest.raises(ValueError, match=rf"line {line}:"):
        scralloc.Sampler.read_csv(io.StringIO(text))
