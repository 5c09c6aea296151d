"""Allocator.serve_python(): Python's own objects on a scralloc heap.

Each test leaves nothing routed: blocks Python made on a heap are dropped
and the heap closed, so the routers come out again (checked by the
autouse fixture)."""
import gc
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import warnings
import weakref

import pytest

import scralloc
from scralloc import _scralloc

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
pytestmark = pytest.mark.skipif(FREE_THREADED, reason="serve_python needs the GIL")


@pytest.fixture(autouse=True)
def _nothing_left_routed():
    yield
    assert _scralloc._serving()["open"] == 0


def routed_allocators():
    gc.collect()
    return _scralloc._serving()["allocators"]


@pytest.fixture
def new():
    """Makes allocators and closes them after the test, once its frame
    (which may hold a frame object or an exception made in a block) is
    gone."""
    made = []

    def make_one(**options):
        made.append(scralloc.Allocator(**options))
        return made[-1]

    yield make_one
    gc.collect()
    left = sum(a.python_blocks for a in made)
    # what Python keeps made inside a block (a cache that grew) keeps a
    # closed allocator's heap until it is freed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scralloc.ScrallocWarning)
        for a in made:
            a.close()
    assert left <= 64


def make(n, tag="x"):
    """Objects of every common kind: dicts, lists, str, tuples, floats."""
    return {i: [f"{tag}{i}" * 3, (i, float(i)), {"k": i}] for i in range(n)}


def strs(n, tag):
    """Fresh str objects: str has no free list, so where one lives says
    which allocator served the call (lists, dicts, tuples and floats come
    from CPython's free lists first)."""
    return [f"{tag}-{i}" for i in range(n)]


def drop_and_close(a, limit=16):
    """Collect once the caller dropped its objects: only a few blocks may
    stay (a frame object or a cache entry made inside; the fixture closes
    the allocator after the test)."""
    gc.collect()
    assert a.python_blocks <= limit, a.stats()["python"]


def test_inside_goes_to_the_heap_and_is_freed_after(new):
    a = new()
    with a.serve_python() as s:
        assert s.domains == ("mem", "obj") and s.allocator is a
        d = make(3000)
    st = a.stats()
    assert st["python"]["blocks"] > 3000 * 5
    assert st["python"]["obj"]["blocks"] > 0 and st["python"]["obj"]["bytes"] > 0
    assert st["python"]["obj"]["calls"] >= st["python"]["obj"]["blocks"]
    assert st["python"]["raw"] == {"calls": 0, "blocks": 0, "bytes": 0}
    assert a.python_blocks == st["python"]["blocks"] <= st["allocs"]
    # made inside, freed after the block: into the heap
    assert d[2999][0] == "x2999" * 3 and d[5][1] == (5, 5.0)
    del d
    gc.collect()
    assert a.python_blocks < 50, a.stats()["python"]
    a.close()


def test_objects_made_before_are_freed_by_their_allocator(new):
    a = new()
    before = make(2000, "b")
    ids = [id(v) for v in before.values()]
    with a.serve_python():
        assert all(not a.owns(i) for i in ids)
        before.clear()                    # frees pymalloc blocks inside the block
        before = None
        inside = make(100, "i")
    assert a.python_blocks > 0
    after = make(2000, "a")               # after the block: pymalloc again
    assert not any(a.owns(id(v[0])) for v in after.values())
    assert all(a.owns(id(v[0])) for v in inside.values())
    del inside
    del after
    drop_and_close(a)


def test_peak_and_reset_peak_follow_heap_used(new):
    a = new()
    with a.serve_python():
        big = [str(i) for i in range(20000)]
    used = a.heap_used
    del big
    gc.collect()
    assert a.peak_heap_used >= used > a.heap_used
    a.reset_peak()
    # the mirror the peak comes from is exact: it equals the core's figure
    assert a.peak_heap_used == a.heap_used == a.stats()["heap_used"]
    p = a.malloc(100_000)                 # the Allocator's own calls count too
    assert a.peak_heap_used == a.heap_used
    a.free(p)
    assert a.stats()["peak_heap_used"] == a.peak_heap_used > a.heap_used
    m = scralloc.memory_usage()
    assert m["peakHeapUsed"] >= m["heapUsed"] and m["peakRss"] >= m["rss"] > 0
    a.close()


def test_close_with_live_blocks_keeps_the_heap_for_them(new):
    a = new()

    def inside():
        # (a frame object made inside a block lives until its function
        # returns: the exception's traceback makes one)
        with a.serve_python():
            try:
                a.close()
            except RuntimeError as e:
                msg = str(e)
            return msg, make(500)

    msg, keep = inside()
    assert "serving Python" in msg
    assert a.python_blocks > 500
    p = a.malloc(100)                     # the Allocator's own block goes with the heap
    with pytest.warns(scralloc.ScrallocWarning, match=r"closed while \d+ block\(s\) of Python's") as w:
        a.close()                         # (after a full collection)
    assert a.closed and keep[499][0] == "x499" * 3   # nothing was unmapped
    n = a.python_blocks
    assert f"closed while {n} block(s)" in str(w[0].message) and n > 500
    st = a.stats()                        # what keeps the heap
    assert st["python"]["blocks"] == n and st["python"]["keeps_heap"] and st["allocs"] == n + 1
    assert scralloc.memory_usage()["heapTotal"] >= st["heap_total"] > 0
    for call in (lambda: a.malloc(1), lambda: a.free(p), lambda: a.serve_python(), a.trim):
        with pytest.raises(ValueError, match="closed allocator"):
            call()
    a.close()                             # closing again does nothing
    del keep, msg
    gc.collect()                          # (what the interpreter cached inside stays)
    assert a.python_blocks < 16, a.stats()["python"]


CLOSE_AFTER_SERVE = r"""
import gc, sys, warnings
import scralloc
warnings.simplefilter("error")
a = scralloc.Allocator()
with a.serve_python():
    d = {i: str(i) * 3 for i in range(50_000)}
    keep = [str(i) for i in range(1000)]        # outlives close(): the heap waits for it
del d
gc.collect()
a.trim()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    a.close()
assert a.closed and len(w) == 1 and issubclass(w[0].category, scralloc.ScrallocWarning), w
kept = a.stats()["python"]["blocks"]
assert kept >= 1000 and str(kept) in str(w[0].message), (kept, w[0].message)
total = scralloc.memory_usage()["heapTotal"]
assert total >= a.stats()["heap_total"] > 0
if sys.argv[1] == "free":
    del keep
    gc.collect()
    assert a.python_blocks == 0 and scralloc.memory_usage()["heapTotal"] < total
    try:
        a.stats()                             # the heap is gone: nothing to report
    except ValueError as e:
        assert "closed allocator" in str(e)
    else:
        raise AssertionError("stats() of a closed allocator whose heap went")
print("ok", kept)
"""


@pytest.mark.parametrize("end", ["free", "exit"])
def test_close_after_serve_python_succeeds(end):
    # The case in a fresh interpreter: close() after the block,
    # with blocks that outlive it; the heap goes with the last (or at exit).
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(scralloc.__file__)))
    r = subprocess.run([sys.executable, "-c", CLOSE_AFTER_SERVE, end], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout + r.stderr


PYTHON_BLOCKS = r"""
import scralloc
a = scralloc.Allocator()
p = a.malloc(64)
with a.serve_python():
    obj = bytes(1000)
assert a.owns(id(obj)) and a.block_kind(id(obj)) == "python"
assert a.block_kind(p) == "allocator" and a.block_kind(p + 16) is None
for name, args in (("free", ()), ("realloc", (10,)), ("view", ()), ("usable_size", ())):
    try:
        getattr(a, name)(id(obj), *args)
    except scralloc.InvalidPointerError as e:
        assert e.reason == "python" and e.address == id(obj), e
        assert "Python's objects" in str(e), e
    else:
        raise AssertionError(name + " accepted a block of Python's objects")
assert obj == bytes(1000)
a.validate()
p = a.realloc(p, 100_000)                 # the Allocator's own blocks as before
assert a.block_kind(p) == "allocator" and a.usable_size(p) >= 100_000
a.free(p)
assert a.block_kind(p) is None
del obj
print("ok")
"""


def test_python_blocks_are_refused_by_the_allocators_methods():
    # realloc of such a block used to kill the interpreter: a subprocess.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(scralloc.__file__)))
    r = subprocess.run([sys.executable, "-c", PYTHON_BLOCKS], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout + r.stderr)


def test_exception_inside_leaves_the_block(new):
    a = new()
    with pytest.raises(ZeroDivisionError):
        with a.serve_python():
            tmp = make(100)
            1 / 0
    after = strs(1000, "after")
    assert not any(a.owns(id(s)) for s in after)
    del tmp
    del after
    drop_and_close(a)


def test_nesting_innermost_wins_and_unwinds(new):
    a, b = new(), new()
    with a.serve_python():
        xa = strs(100, "xa")
        with b.serve_python():
            xb = strs(100, "xb")
            with a.serve_python():
                xa2 = strs(100, "xa2")
            xb2 = strs(100, "xb2")
        xa3 = strs(100, "xa3")
    out = strs(100, "out")
    for lst, owner in ((xa, a), (xb, b), (xa2, a), (xb2, b), (xa3, a)):
        assert all(owner.owns(id(s)) for s in lst)
    del lst
    assert not any(a.owns(id(s)) or b.owns(id(s)) for s in out)
    del xa, xb, xa2, xb2, xa3
    drop_and_close(b)
    del out
    drop_and_close(a)


def test_realloc_across_allocators_keeps_the_contents(new):
    a, b = new(), new()
    grown_before = bytearray(b"p" * 100)
    with a.serve_python():
        ba = bytearray(b"a" * 1000)           # made in a
        grown_before.extend(b"q" * 100_000)   # a pymalloc block resized by its own allocator
        lst = list(range(10))
    with b.serve_python():
        ba.extend(b"b" * 200_000)             # moves from a to b, copying
        lst.extend(range(10, 5000))
    ba.extend(b"c" * 300_000)                 # moves from b to the base
    lst.extend(range(5000, 100_000))
    assert ba == b"a" * 1000 + b"b" * 200_000 + b"c" * 300_000
    assert lst == list(range(100_000))
    assert grown_before == b"p" * 100 + b"q" * 100_000
    del ba, lst
    drop_and_close(b)
    drop_and_close(a)


def test_gc_collect_inside_and_after(new):
    a = new()

    class Node:
        def __init__(self):
            self.peer = self

    with a.serve_python():
        cycles = [Node() for _ in range(2000)]
        assert gc.collect() >= 0
        cycles = None
        assert gc.collect() >= 2000
        kept = [Node() for _ in range(2000)]
    kept = None
    assert gc.collect() >= 2000
    drop_and_close(a)


def test_threads_started_inside(new):
    a = new()
    results = []

    def work(k):
        results.append(sum(len(str(i) * 2) for i in range(20000 + k)))

    with a.serve_python():
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(results) == 4
    threads = t = results = None
    drop_and_close(a)


def test_raw_domain_with_threads_that_outlive_the_block(new):
    a = new()
    stop = threading.Event()
    out = []

    def work():
        while not stop.is_set():
            out.append(len([str(i) for i in range(200)]))

    with a.serve_python(domains=("raw", "mem", "obj")) as s:
        assert s.domains == ("raw", "mem", "obj")
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for _ in range(50):
            a.stats()                     # the allocator's lock keeps this safe
    for _ in range(50):
        a.stats()
    stop.set()
    for t in threads:
        t.join()
    st = a.stats()["python"]
    assert st["raw"]["calls"] > 0         # thread states, their startup blocks
    assert out
    threads = t = out = None
    drop_and_close(a)


def test_bad_domains(new):
    a = new()
    with pytest.raises(ValueError, match="unknown domain"):
        a.serve_python(domains=("mem", "heap"))
    with pytest.raises(TypeError, match="sequence of names"):
        a.serve_python(domains="mem")
    with pytest.raises(ValueError, match="no domain"):
        a.serve_python(domains=())
    s = a.serve_python()
    with s:
        pass
    with pytest.raises(RuntimeError, match="entered once"):
        s.__enter__()
    a.close()
    with pytest.raises(ValueError, match="closed allocator"):
        a.serve_python()


DROPPED = r"""
import gc, sys, weakref, warnings
import scralloc
from scralloc import _scralloc
warnings.simplefilter("ignore", ResourceWarning)    # dropped unclosed on purpose
a = scralloc.Allocator()
with a.serve_python():
    keep = {i: [f"x{i}" * 3, (i, float(i)), {"k": i}] for i in range(200)}
w = weakref.ref(a)
del a                                  # the router keeps it while keep lives
gc.collect()
alive = w()
assert alive is not None and any(x is alive for x in _scralloc._serving()["allocators"])
alive = None
assert keep[199][0] == "x199" * 3
del keep
gc.collect()                           # a full collection empties CPython's free lists
_scralloc._serving()                   # a safe point drops unused records
assert w() is None, w()
print("ok")
"""


def test_an_allocator_dropped_while_python_holds_its_blocks_stays_alive():
    # In a fresh interpreter: in this one, a warning or a cache made by
    # another test's leftovers inside the block would keep a block alive.
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(scralloc.__file__)))
    r = subprocess.run([sys.executable, "-c", DROPPED], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_fork_inside_with_raw_threads(new):
    a = new()
    stop = threading.Event()

    def churn():
        while not stop.is_set():
            threading.Thread(target=lambda: None).start()   # raw calls without the GIL

    with a.serve_python(domains=("raw", "mem", "obj")):
        churners = [threading.Thread(target=churn) for _ in range(3)]
        for t in churners:
            t.start()
        pids = []
        for _ in range(60):
            pid = os.fork()
            if pid == 0:                   # the child: the heap and the routers work
                code = 0 if len(strs(1000, "child")) == 1000 else 1
                threading.Thread(target=lambda: None).start()
                os._exit(code)
            pids.append(pid)
        stop.set()
        for t in churners:
            t.join()
    deadline = time.monotonic() + 30       # a child stuck on a lock fails, not hangs
    stuck = []
    for pid in pids:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        if not done:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            stuck.append(pid)
        else:
            assert os.waitstatus_to_exitcode(status) == 0
    assert not stuck, f"{len(stuck)} forked children hung (a lock held across fork)"
    t = churners = pids = pid = status = stuck = done = None
    drop_and_close(a, limit=64)


def test_a_block_made_before_close_cannot_be_entered_after():
    # closing: the with block ended while a view lived; the heap goes with
    # the view, so no serve_python() block may open on it meanwhile
    with scralloc.Allocator() as a:
        mv = a.view(a.malloc(64))
        s = a.serve_python()
    assert a.closed
    with pytest.raises(ValueError, match="closed allocator"):
        s.__enter__()
    mv.release()
    b = scralloc.Allocator()
    s = b.serve_python()
    b.close()
    with pytest.raises(ValueError, match="closed allocator"):
        s.__enter__()
