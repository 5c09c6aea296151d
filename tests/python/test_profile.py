"""Sampled allocation sites from Python: Allocator.profile(), scralloc.profile(),
the Python frames of samples, top sites, folded stacks, watch_peak, and
`python -m scralloc run --profile` (docs/python.md, docs/profile.md)."""
import gzip
import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import scralloc
from scralloc import _scralloc
from scralloc.__main__ import find_library

PKG = os.path.dirname(os.path.dirname(os.path.abspath(scralloc.__file__)))
HERE = os.path.abspath(__file__)


def line_of(fn, text):
    """The line number of the first line of fn's source holding text."""
    import inspect

    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, ln in enumerate(lines) if text in ln)


# ---- the frames hook ------------------------------------------------------

def test_frames_hook_writes_innermost_first():
    def inner():
        return _scralloc._python_frames(4096)

    lines = inner().split("\n")
    fn, file, line = lines[0].split("\t")
    assert fn.endswith("inner") and file == HERE and int(line) == line_of(inner, "_python_frames")
    assert lines[1].split("\t")[0].endswith("test_frames_hook_writes_innermost_first")
    assert all(len(ln.split("\t")) == 3 for ln in lines)


def test_frames_hook_keeps_whole_lines_and_depth():
    def deep(n):
        return _scralloc._python_frames(4096) if n == 0 else deep(n - 1)

    text = deep(100)
    assert 30 < len(text.split("\n")) <= 64            # the depth cap, or the buffer's
    assert all(len(ln.split("\t")) == 3 and ln.split("\t")[2] == str(line_of(deep, "_python"))
               for ln in text.split("\n"))
    short = deep(3)
    for size in (0, 10, len(short.split("\n")[0]) + 1, 200):
        part = _scralloc._python_frames(size)
        assert len(part) <= size
        assert all(len(ln.split("\t")) == 3 for ln in part.split("\n") if ln)


def frames_below(fn):
    return fn()


def test_frames_root_cuts_the_runner_off():
    def leaf():
        return _scralloc._python_frames(4096)

    try:
        _scralloc._set_frames_root(frames_below.__code__, None)
        assert [ln.split("\t")[0] for ln in frames_below(leaf).split("\n")] == [
            "test_frames_root_cuts_the_runner_off.<locals>.leaf"]
        # the frames of trim_file just below the root go too (runpy's, for run)
        _scralloc._set_frames_root(frames_below.__code__, HERE)
        assert frames_below(leaf) == ""
        assert len(leaf().split("\n")) > 2            # not under the root: every frame
    finally:
        _scralloc._set_frames_root(None, None)
    assert "frames_below" in frames_below(leaf)


# ---- Allocator.profile() --------------------------------------------------

def make_blocks(a, n, size):
    return [a.malloc(size) for _ in range(n)]


def test_rate_1_samples_every_block_and_frees_drop_them():
    with scralloc.Allocator(profile_rate=1) as a:
        assert a.profile_rate == 1 and a.options["profile_rate"] == 1
        blocks = make_blocks(a, 40, 100)
        big = a.malloc(3 << 20)
        p = a.profile()
        assert len(p) == 41
        by_addr = {s.address: s for s in p}
        assert set(by_addr) == set(blocks) | {big}
        s = by_addr[blocks[0]]
        # rate 1: every block is sampled with probability 1 and stands for itself
        assert (s.size, s.rate, s.bytes, s.blocks) == (100, 1, 100.0, 1.0)
        assert s.kind == "allocator" and s.allocator is a
        assert s.python[-1] == scralloc.Frame(HERE, "make_blocks.<locals>.<listcomp>"
                                              if sys.version_info < (3, 12) else "make_blocks",
                                              line_of(make_blocks, "a.malloc"))
        assert s.where == s.python[-1]
        assert any(f.function.endswith("test_rate_1_samples_every_block_and_frees_drop_them")
                   for f in s.python)
        assert math.isclose(p.bytes, 40 * 100 + (3 << 20))
        assert sum(x.blocks for x in p) == 41
        # equal Python stacks (the native ones may differ: the interpreter
        # specializes the call after a few runs)
        assert len({by_addr[b].python for b in blocks}) == 1
        for b in blocks[:30]:
            a.free(b)
        a.free(big)
        p = a.profile()
        assert sorted(x.address for x in p) == sorted(blocks[30:])
        top = p.top(5)
        assert len(top) == 1 and top[0].samples == 10 and top[0].bytes == 1000.0
        for b in blocks[30:]:
            a.free(b)
        assert a.profile() == []


def test_profile_rate_settable_and_off_by_default():
    with scralloc.Allocator() as a:
        assert a.profile_rate == 0
        a.malloc(1 << 20)
        assert a.profile() == []
        a.profile_rate = 1
        assert a.profile_rate == 1 and a.options["profile_rate"] == 1
        p1 = a.malloc(64)
        assert [s.address for s in a.profile()] == [p1]
        a.profile_rate = 0
        a.malloc(64)
        assert len(a.profile()) == 1
        with pytest.raises(ValueError):
            a.profile_rate = -1
        with pytest.raises(AttributeError):
            del a.profile_rate


def test_realloc_moves_the_sample():
    with scralloc.Allocator(profile_rate=1) as a:
        p = a.malloc(100)
        q = a.realloc(p, 100_000)
        prof = a.profile()
        assert [s.address for s in prof] == [q] and prof[0].size == 100_000


def test_native_frames_symbolized_and_optional():
    with scralloc.Allocator(profile_rate=1) as a:
        a.malloc(64)
        s = a.profile()[0]
        assert s.native and all(isinstance(n, str) and n for n in s.native)
        assert a.profile(native=False)[0].native == ()
        assert s.stack(native=True)[:len(s.python)] == [str(f) for f in s.python]


def test_process_wide_profile_sees_every_heap():
    with scralloc.Allocator(profile_rate=1) as a, scralloc.Allocator(profile_rate=1) as b:
        pa, pb = a.malloc(1000), b.malloc(2000)
        mine = [s for s in scralloc.profile() if s.address in (pa, pb)]
        assert sorted((s.size, s.allocator is a, s.allocator is b) for s in mine) == [
            (1000, True, False), (2000, False, True)]


def test_closed_allocator_has_no_samples_left():
    a = scralloc.Allocator(profile_rate=1)
    p = a.malloc(100)
    assert any(s.address == p for s in scralloc.profile())
    a.close()
    assert not any(s.allocator is a for s in scralloc.profile())
    with pytest.raises(ValueError):
        a.profile()


# ---- serve_python: Python's own blocks carry Python frames ---------------

def make_bytearrays(n):
    return [bytearray(1000) for _ in range(n)]


def test_serve_python_samples_carry_python_frames():
    with scralloc.Allocator(profile_rate=4096) as a:
        with a.serve_python():
            keep = make_bytearrays(5000)
        p = a.profile(native=False)
        assert p and all(s.kind == "python" for s in p)
        top = p.top(1, by="function")[0]
        assert top.where.file == HERE and "make_bytearrays" in top.where.function
        line = p.top(1)[0]
        assert line.where.line == line_of(make_bytearrays, "bytearray(1000)")
        # 5000 * (1000 bytes + the bytearray object) and the list
        assert 0.8 * 5000 * 1000 < line.bytes < 1.25 * 5000 * 1100
        del keep
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scralloc.ScrallocWarning)
            a.close()


# ---- the dict target (issue 40) -------------------------------------------

DICT_SCRIPT = '''
def build(n):
    return {i: None for i in range(n)}
'''


def dict_run(tmp_path, rate):
    """build(1e6) on a serving heap sampled at rate: (the top site by
    line, the bytes build left live on the heap)."""
    path = tmp_path / "dict_target.py"
    path.write_text(DICT_SCRIPT)
    ns = {}
    exec(compile(DICT_SCRIPT, str(path), "exec"), ns)
    a = scralloc.Allocator(profile_rate=rate)
    before = a.heap_used
    with a.serve_python():
        d = ns["build"](1_000_000)
    # what build left live: the dict, its table and its 1e6 key ints,
    # each block counted at its usable size (the samples count requested
    # sizes: the table's and the ints' are their classes' already)
    real = a.heap_used - before
    top = a.profile(native=False).top(3)
    del d
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scralloc.ScrallocWarning)
        a.close()
    return top, real, str(path)


@pytest.mark.parametrize("rate", [64 << 10, scralloc.PROFILE_DEFAULT_RATE])
def test_dict_of_a_million_is_the_top_site(tmp_path, rate):
    top, real, path = dict_run(tmp_path, rate)
    where = top[0].where
    assert (where.file, where.line) == (path, 3) and "build" in where.function
    # Sampling error: the table is one 40 MiB block (weight exact); the
    # 1e6 32-byte ints give a standard error of sqrt(rate * 32e6) bytes:
    # 2% of the whole at 64 KiB, 5.5% at 512 KiB (docs/python.md).
    tolerance = 0.10 if rate <= 64 << 10 else 0.25
    assert abs(top[0].bytes / real - 1) < tolerance, (top[0].bytes, real)
    assert sum(t.bytes for t in top[1:]) < 0.01 * real


# ---- watch_peak -----------------------------------------------------------

def churn():
    x = [bytes(1000) for _ in range(4000)]
    return len(x)


def test_watch_peak_keeps_the_samples_of_the_high_point():
    with scralloc.Allocator(profile_rate=8192) as a:
        a.watch_peak(1 << 20)
        with a.serve_python():
            churn()
        assert not [s for s in a.profile() if s.size >= 1000]       # gone at the end
        p = a.profile(native=False, peak=True)
        assert p.heap_used is not None and p.heap_used >= 4000 * 1000
        assert a.peak_heap_used >= p.heap_used > a.peak_heap_used * 8 / 9 - 8192
        top = p.top(1)[0]
        assert top.where.line == line_of(churn, "bytes(1000)")
        assert 0.7 * 4000 * 1000 < top.bytes < 1.4 * 4000 * 1040
        assert len(a.profile(peak=True)) == len(p)                    # kept while watching
        a.watch_peak(None)
        assert a.profile(peak=True) == []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scralloc.ScrallocWarning)
            a.close()


# ---- top sites and folded stacks -------------------------------------------

def fake(site, size, frames, native=()):
    return scralloc.Sample(0, size, 1, float(size), 1.0, 0.0, site, None, "python",
                           tuple(scralloc.Frame(*f) for f in frames), tuple(native))


def test_top_sites_and_folded_lines(tmp_path):
    samples = [
        fake(1, 100, [("m.py", "<module>", 1), ("m.py", "f", 5)], ["malloc_a"]),
        fake(2, 300, [("m.py", "<module>", 2), ("m.py", "f", 5)], ["malloc_b"]),
        fake(3, 50, [("m.py", "<module>", 3), ("m.py", "g", 9)]),
        fake(4, 70, [], ["main", "c_alloc"]),
    ]
    top = scralloc.top_sites(samples)
    assert [(str(t.where), t.bytes, t.samples) for t in top] == [
        ("f (m.py:5)", 400.0, 2), ("c_alloc", 70.0, 1), ("g (m.py:9)", 50.0, 1)]
    assert [t.where for t in scralloc.top_sites(samples, 2, by="site")] == [2, 1]
    assert scralloc.top_sites(samples, by="file")[0].where == scralloc.Frame("m.py", "", 0)
    with pytest.raises(ValueError):
        scralloc.top_sites(samples, by="nope")
    out = tmp_path / "f.folded"
    scralloc.write_folded(samples, str(out))
    assert out.read_text().splitlines() == [
        "<module> (m.py:1);f (m.py:5) 100",
        "<module> (m.py:2);f (m.py:5) 300",
        "<module> (m.py:3);g (m.py:9) 50",
        "main;c_alloc 70",
    ]
    scralloc.write_folded(samples[:1], str(out), native=True)
    assert out.read_text() == "<module> (m.py:1);f (m.py:5);malloc_a 100\n"
    text = scralloc.format_top(top, total=520)
    assert "f (m.py:5)" in text.splitlines()[1] and "76.9" in text


# ---- python -m scralloc run --profile ---------------------------------------

CLI_SCRIPT = '''
import sys

def build(n):
    return {i: None for i in range(n)}

table = build(int(sys.argv[1]))
'''


def run_cli(tmp_path, *args):
    prog = tmp_path / "prog.py"
    prog.write_text(CLI_SCRIPT)
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = [str(prog) if a == "PROG" else a for a in args]
    return subprocess.run([sys.executable, "-m", "scralloc", "run", *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_run_profile_writes_the_files_and_names_the_site(tmp_path):
    out, summary = tmp_path / "prof", tmp_path / "s.json"
    r = run_cli(tmp_path, "--profile", str(out), "--json", "-o", str(summary), "PROG", "300000")
    assert r.returncode == 0, r.stderr
    s = json.loads(summary.read_text())
    prof = s["profile"]
    assert prof["rate"] == scralloc.PROFILE_DEFAULT_RATE and prof["file"] == str(out)
    inner = "build.<locals>.<dictcomp>" if sys.version_info < (3, 12) else "build"
    assert prof["top"][0]["where"] == f"{inner} ({tmp_path / 'prog.py'}:5)"
    # the table (12 MiB at 300,000 entries) is sampled for certain
    assert prof["top"][0]["bytes"] > 10 << 20
    assert "top sites (innermost Python line)" in r.stderr and "prog.py:5)" in r.stderr
    for suffix in ("", ".pb.gz", ".blame"):
        assert (tmp_path / ("prof" + suffix)).exists()
    lines = out.read_text().splitlines()
    assert lines and all(ln.rsplit(" ", 1)[1].isdigit() for ln in lines)
    assert any("prog.py:5)" in ln for ln in lines)
    # the runner's frames (run_program, runpy) are left out: stacks start at the program's
    assert all(ln.startswith("<module> (prog.py:7)") for ln in lines), lines
    with gzip.open(str(out) + ".pb.gz") as f:
        assert f.read()
    reader = os.path.join(os.path.dirname(HERE), "..", "tools", "pprof_read.py")
    if os.path.exists(reader):                  # the tests' pure-Python pprof reader
        import importlib.util

        spec = importlib.util.spec_from_file_location("pprof_read", reader)
        pprof_read = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pprof_read)
        pb = pprof_read.read(str(out) + ".pb.gz")
        types = [t for t, _ in pb["sample_type"]]
        space = types.index("inuse_space")
        best = max(pb["samples"], key=lambda x: x["values"][space])
        name, file, line = pprof_read.stack(pb, best)[0]
        assert (os.path.basename(file), line) == ("prog.py", 5) and "build" in name
        outer = pprof_read.stack(pb, best)[-1]
        assert outer[0] == "<module>" and os.path.basename(outer[1]) == "prog.py"


def test_run_profile_native_and_rate(tmp_path):
    out = tmp_path / "prof"
    r = run_cli(tmp_path, "--profile", str(out), "--native", "--profile-rate", "64K",
                "--json", "-o", str(tmp_path / "s.json"), "PROG", "1000")
    assert r.returncode == 0, r.stderr
    s = json.loads((tmp_path / "s.json").read_text())
    assert s["profile"]["rate"] == 64 << 10 and s["options"]["profile_rate"] == 64 << 10


def test_run_profile_usage_errors(tmp_path):
    r = run_cli(tmp_path, "--native", "PROG", "10")
    assert r.returncode == 2 and "--native needs --profile FILE" in r.stderr
    r = run_cli(tmp_path, "--profile", str(tmp_path / "no" / "f"), "PROG", "10")
    assert r.returncode == 2 and "no such directory" in r.stderr


PRELOAD_SCRIPT = '''
def make():
    return [bytearray(2000) for _ in range(20000)]


keep = make()
'''


@pytest.mark.skipif(find_library() is None,
                    reason="no libscralloc.so (make build/release/libscralloc.so)")
def test_run_preload_profile_has_python_frames(tmp_path):
    prog = tmp_path / "pre.py"
    prog.write_text(PRELOAD_SCRIPT)
    out = tmp_path / "prof"
    r = run_cli(tmp_path, "--preload", "--profile", str(out), "--profile-rate", "64K",
                "--json", "-o", str(tmp_path / "s.json"), str(prog))
    assert r.returncode == 0, r.stderr
    for suffix in ("", ".pb.gz", ".blame"):
        assert (tmp_path / ("prof" + suffix)).exists()
    s = json.loads((tmp_path / "s.json").read_text())
    top = s["profile"]["top"][0]
    # the bytearrays' 2001-byte buffers are malloc's (above pymalloc's 512):
    # 40 MB at the list comprehension's line, in the library's samples
    assert "pre.py:3" in top["where"] and "make" in top["where"], s["profile"]
    assert 0.8 * 20000 * 2001 < top["bytes"] < 1.25 * 20000 * 2100


def test_profile_inside_serve_python_stays_off_the_heap():
    with scralloc.Allocator(profile_rate=1) as a:
        with a.serve_python():
            keep = make_bytearrays(10)
            n = a.python_blocks
            p = a.profile()
            p2 = scralloc.profile()
            assert a.python_blocks == n            # no record was made on the heap
            # rate 1: every block of the heap (the hook's frame objects are not on it)
            assert len(p) == n and all(s.kind == "python" for s in p)
            assert sorted(s.address for s in p2 if s.allocator is a) == sorted(s.address for s in p)
            # routing is back after the call
            more = make_bytearrays(1)
            assert a.python_blocks > n
        del keep, more, p, p2
        import gc
        gc.collect()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scralloc.ScrallocWarning)
            a.close()


def test_samples_of_another_thread_carry_its_frames():
    import threading

    out = []
    with scralloc.Allocator(profile_rate=4096) as a:
        with a.serve_python():
            t = threading.Thread(target=lambda: out.append(make_bytearrays(2000)))
            t.start()
            t.join()
        p = a.profile(native=False)
        top = p.top(1)[0]
        assert top.where.line == line_of(make_bytearrays, "bytearray(1000)")
        biggest = max(p, key=lambda s: s.bytes)
        assert any(f.function == "Thread.run" for f in biggest.python)   # the thread's own stack
        out.clear()
        import gc
        gc.collect()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scralloc.ScrallocWarning)
            a.close()


def test_write_profile_formats_and_errors(tmp_path):
    with scralloc.Allocator(profile_rate=1) as a:
        keep = make_blocks(a, 5, 4000)
        for fmt in ("folded", "pprof", "blame", "top"):
            a.write_profile(tmp_path / fmt, fmt)
            # (the blame has a line per stack that pins bytes: here maybe none)
            assert (tmp_path / fmt).stat().st_size > 0 or fmt == "blame", fmt
        folded = (tmp_path / "folded").read_text().splitlines()
        assert sum(int(ln.rsplit(" ", 1)[1]) for ln in folded) == 5 * 4000
        assert any("make_blocks" in ln for ln in folded)
        a.write_profile(tmp_path / "native", native=True)
        assert len((tmp_path / "native").read_text()) > len((tmp_path / "folded").read_text())
        scralloc.write_profile(tmp_path / "all", "folded")
        assert "make_blocks" in (tmp_path / "all").read_text()
        with pytest.raises(ValueError):
            a.write_profile(tmp_path / "x", "svg")
        with pytest.raises(OSError):
            a.write_profile(tmp_path / "no" / "such" / "file")
        for p in keep:
            a.free(p)


@pytest.mark.parametrize("domains", [("mem", "obj"), ("raw", "mem", "obj")])
def test_frames_with_every_domain_and_no_frame_objects_on_the_heap(domains):
    with scralloc.Allocator(profile_rate=512) as a:
        with a.serve_python(domains=domains):       # raw: the heap takes a lock
            keep = make_bytearrays(3000)
        p = a.profile(native=False)
        assert p and all(s.python for s in p if s.kind == "python")
        assert p.top(1)[0].where.line == line_of(make_bytearrays, "bytearray(1000)")
        del keep
        import gc
        gc.collect()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", scralloc.ScrallocWarning)
            a.close()
