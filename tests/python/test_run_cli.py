"""python -m scralloc run: a program on a scralloc heap, its summary, its
exit status, the timeline, --preload."""
import csv
import json
import os
import subprocess
import sys

import pytest

import scralloc
from scralloc.__main__ import find_library

PKG = os.path.dirname(os.path.dirname(os.path.abspath(scralloc.__file__)))

PROGRAM = '''
import sys
table = {i: [str(i) * 5] for i in range(20_000)}
print("entries", len(table), sys.argv[1:])
if "--fail" in sys.argv:
    sys.exit(3)
if "--raise" in sys.argv:
    raise KeyError("boom")
'''


def run(tmp_path, *args, env_extra=None):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    args = [str(prog) if a == "PROG" else a for a in args]
    return subprocess.run([sys.executable, "-m", "scralloc", "run", *args], env=env,
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_summary_on_stderr(tmp_path):
    r = run(tmp_path, "--retain", "0", "PROG", "a", "-x")
    assert r.returncode == 0, r.stderr
    assert "entries 20000 ['a', '-x']" in r.stdout      # the program's own arguments
    err = r.stderr
    assert "scralloc run (serve_python):" in err and "options        retain=0" in err
    for line in ("peak heapUsed", "at exit", "peak RSS", "syscalls       mmap",
                 "Python's calls", "size classes at exit"):
        assert line in err, err


def test_json_report_and_exit_status(tmp_path):
    out = tmp_path / "s.json"
    r = run(tmp_path, "--json", "-o", str(out), "--retain-bytes", "1M", "PROG", "--fail")
    assert r.returncode == 3, r.stderr
    s = json.loads(out.read_text())
    assert s["status"] == 3 and s["mode"] == "serve_python"
    assert s["options"] == {"retain_bytes": 1 << 20}
    assert s["domains"] == ["mem", "obj"]
    assert s["peak_heap_used"] > 20_000 * 50 >= 0       # the table was on the heap
    assert s["python"]["obj"]["calls"] > 40_000
    assert s["syscalls"]["mmap"] >= 1 and set(s["syscalls"]) == {"mmap", "munmap", "madvise", "mremap"}
    assert any(c["block_size"] == 64 for c in s["classes"])


def test_uncaught_exception_and_module(tmp_path):
    r = run(tmp_path, "PROG", "--raise")
    assert r.returncode == 1 and "KeyError: 'boom'" in r.stderr and "peak heapUsed" in r.stderr
    r = run(tmp_path, "--json", "-m", "json.tool", "--help")
    assert r.returncode == 0 and "usage" in r.stdout
    assert json.loads(r.stderr.strip().splitlines()[-1])["program"][0] == "json.tool"


AS_MAIN = '''
import os, pickle, sys
import __main__

class Point:
    pass

# as `python prog.py` runs it: the module is __main__, in sys.modules, with
# its file; a class of it pickles by reference; its directory is importable
assert __name__ == "__main__" and __main__.Point is Point, (__name__, __main__)
assert os.path.basename(__file__) == "prog.py" and sys.argv[0].endswith("prog.py")
assert type(pickle.loads(pickle.dumps(Point()))) is Point
assert os.path.dirname(os.path.abspath(__file__)) in [os.path.abspath(p) for p in sys.path]
print("as main ok")
'''


@pytest.mark.parametrize("preload", [False, True])
def test_a_script_runs_as_python_runs_it(tmp_path, preload):
    """The runner compiles a script before the served region and runs the
    code itself (runpy.run_path compiled it inside, where the sampler saw
    the compiler); the program must not see the difference."""
    prog = tmp_path / "prog.py"
    prog.write_text(AS_MAIN)
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if preload and find_library() is None:
        pytest.skip("no libscralloc.so built")
    args = ["--preload"] if preload else []
    r = subprocess.run([sys.executable, "-m", "scralloc", "run", *args, str(prog)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and "as main ok" in r.stdout, r.stderr
    prog.write_text("x = (\n")                  # a syntax error: reported as python reports it
    r = subprocess.run([sys.executable, "-m", "scralloc", "run", *args, str(prog)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 1 and "SyntaxError" in r.stderr, r.stderr


def test_timeline(tmp_path):
    tl = tmp_path / "t.csv"
    r = run(tmp_path, "--timeline", str(tl), "--interval", "2", "--domains", "raw,mem,obj", "PROG")
    assert r.returncode == 0, r.stderr
    with tl.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 2 and "heap_used" in rows[0] and "rss" in rows[0]
    assert max(int(row["heap_used"]) for row in rows) > 0
    assert "[domains raw,mem,obj]" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--retain"], "--retain needs a value"),
    (["--nosuch", "1", "PROG"], "unknown option --nosuch"),
    (["--domains", "heap", "PROG"], "a list of raw, mem, obj"),
    (["--retain", "lots", "PROG"], "retain: cannot read 'lots' as a size"),
    (["--retain", "-1", "PROG"], "retain: '-1' is negative"),
    (["--retain", "2G", "PROG"], "retain: 2G is out of range 0..1048576"),
    (["--purge-delay-ms=1e9", "PROG"], "purge_delay_ms: cannot read"),
    (["--timeline", "no/such/dir/t.csv", "PROG"], "--timeline no/such/dir/t.csv: no such directory"),
    (["-o", ".", "PROG"], "-o .: is a directory"),
    ([], "no program given"),
])
def test_bad_usage(tmp_path, args, message):
    # one line, status 2, and the program never ran
    r = run(tmp_path, *args)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "entries" not in r.stdout, r.stderr


@pytest.mark.skipif(not os.path.exists("/proc/version"), reason="no /proc")
def test_output_that_cannot_be_written_at_the_end(tmp_path):
    # /proc/version may pass the check made before the run (root may write
    # anything) and refuses the write: one line, status 2, no traceback
    r = run(tmp_path, "-o", "/proc/version", "PROG")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m scralloc run: -o /proc/version: "), lines


def run_json(tmp_path, program, *args):
    """Run a program of its own text with --json -o; (its text summary's
    run, the JSON summary)."""
    prog = tmp_path / "own.py"
    prog.write_text(program)
    out = tmp_path / "s.json"
    r = run(tmp_path, *args, "--json", "-o", str(out), str(prog))
    assert r.returncode == 0, r.stderr
    return run(tmp_path, *args, str(prog)), json.loads(out.read_text())


def test_heap_total_parts_add_up(tmp_path):
    r, s = run_json(tmp_path, "d = {i: i for i in range(1_000_000)}\ndel d\n")
    parts = s["heap_parts"]
    assert list(parts) == [k for k, _ in scralloc.HEAP_PARTS]
    assert sum(parts.values()) == s["heap_total"] and parts["heap_used"] == s["heap_used"]
    # the dropped dict's table: a large block the heap keeps cached
    assert parts["cached_bytes"] > 8 << 20, parts
    text = r.stderr
    assert "cached large blocks" in text and "free in busy pages" in text, text
    line = text[text.index("  heapTotal "):].splitlines()
    assert all(len(ln) < 100 for ln in line[:2]), line


CHILD_PROGRAM = """
import subprocess, sys
subprocess.run([sys.executable, "-c",
                "b = bytearray(120 << 20); b[::4096] = b'x' * len(b[::4096])"], check=True)
"""


def test_peak_rss_names_the_children(tmp_path):
    r, s = run_json(tmp_path, CHILD_PROGRAM)
    assert s["peak_rss_children"] >= 120 << 20 > s["peak_rss"], s
    assert "its largest child process" in r.stderr, r.stderr
    r = run(tmp_path, "PROG")
    assert "no child process waited for" in r.stderr, r.stderr


@pytest.mark.skipif(find_library() is None,
                    reason="no libscralloc.so (make build/release/libscralloc.so)")
def test_preload(tmp_path):
    out = tmp_path / "s.json"
    r = run(tmp_path, "--preload", "--json", "-o", str(out), "--retain", "0", "PROG", "z",
            env_extra={"PYTHONMALLOC": "malloc"})
    assert r.returncode == 0, r.stderr
    assert "entries 20000 ['z']" in r.stdout
    s = json.loads(out.read_text())
    assert s["mode"] == "preload" and s["status"] == 0
    # PYTHONMALLOC=malloc: the objects were the process allocator's
    assert s["peak_heap_used"] > 20_000 * 50 and s["process"]["arenas"] >= 1
    assert s["syscalls"]["mmap"] >= 1


BIG_PROGRAM = "import time\nb = bytearray(200_000_000)\ntime.sleep(0.3)\ndel b\n"


@pytest.mark.skipif(find_library() is None,
                    reason="no libscralloc.so (make build/release/libscralloc.so)")
def test_preload_peak_sees_a_big_block(tmp_path):
    r, s = run_json(tmp_path, BIG_PROGRAM, "--preload", "--interval", "5")
    assert "peak heapUsed" in r.stderr
    assert s["peak_rss"] >= 190 << 20 and "peak_rss_children" in s
    # the sampler thread reads another thread's big blocks as they are now
    # (the process allocator's scr_stats), not as last published
    assert s["peak_heap_used"] >= 190 << 20


def test_preload_library_not_found(tmp_path):
    r = run(tmp_path, "--preload", "--library", str(tmp_path / "none.so"), "PROG")
    assert r.returncode == 2 and "none.so: no such file" in r.stderr
