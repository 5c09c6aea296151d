"""The pytest plugin (scralloc.pytest_plugin) on a small test directory,
run by a child pytest (`-p scralloc.pytest_plugin`, as from a checkout)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

import scralloc
from scralloc.__main__ import find_library
from scralloc.pytest_plugin import parse_limit

PKG = os.path.dirname(os.path.dirname(os.path.abspath(scralloc.__file__)))

TESTS = '''
import pytest

def test_small():
    assert sum(range(100)) == 4950

def test_big():
    d = {i: str(i) * 10 for i in range(50_000)}      # MiBs of dicts and str
    assert len(d) == 50_000

@pytest.mark.scralloc_limit("1 MB")
def test_over_its_limit():
    x = [str(i) for i in range(100_000)]              # several MiB
    assert len(x) == 100_000

@pytest.mark.scralloc_limit("64 MB")
def test_under_its_limit():
    x = [str(i) for i in range(1000)]
    assert len(x) == 1000
'''


def run_pytest(tmp_path, *args, tests=TESTS, env_extra=None):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(tests))
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "scralloc.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "-rA", str(tmp_path), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_off_unless_asked(tmp_path):
    r = run_pytest(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout and "scralloc" not in r.stdout.replace("scralloc_limit", "")


def test_report_and_limit(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-top", "3")
    out = r.stdout
    assert r.returncode == 1, out + r.stderr
    assert "1 failed, 3 passed" in out
    assert "FAILED test_sample.py::test_over_its_limit" in out
    assert "scralloc_limit: peak heapUsed" in out and "is over the limit of 1.00 MiB" in out
    section = out[out.index("scralloc: peak heapUsed per test"):]
    # the table's rows (a row starts with its peak; pytest's summary lines,
    # printed in full when CI is set, name the tests too)
    lines = [ln for ln in section.splitlines() if re.match(r"\s+[\d.]+ MiB .*test_sample\.py::", ln)]
    assert len(lines) == 3                      # --scralloc-top 3
    assert lines[0].endswith("test_sample.py::test_big")
    assert lines[1].endswith("test_over_its_limit  OVER LIMIT")
    peak_big = float(lines[0].split()[0])
    assert peak_big > 4                         # MiB: the dict really was on the heap
    for ln in lines:                            # heapTotal at the end = its five parts
        total, parts = ln.split("|")[1].split("=")
        assert abs(float(total) - sum(float(v) for v in parts.split("+"))) < 0.03, ln
    assert "heapTotal: the test's heap at the call's end, in MiB = in live blocks + " in section
    assert "(1 more; --scralloc-top N shows more)" in section


def test_option_and_bad_option(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-option", "retain=0", "-k", "small")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-option", "nosuch=1")
    assert r.returncode != 0 and "expected NAME=VALUE" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--scralloc-option", "retain=-1"], "--scralloc-option retain=-1: retain: '-1' is negative"),
    (["--scralloc-option", "retain=lots"], "--scralloc-option retain=lots: retain: cannot read"),
    (["--scralloc-option", "retain=2G"], "retain: 2G is out of range 0..1048576"),
    (["--scralloc-top", "-1"], "--scralloc-top -1: must be 0 or more"),
    (["--scralloc-top", "ten"], "--scralloc-top ten: not a number"),
    (["--scralloc-mode", "native"], "--scralloc-mode native: expected one of python, process"),
    (["--scralloc-interval", "0"], "--scralloc-interval 0: must be above 0"),
])
def test_bad_options_are_usage_errors(tmp_path, args, message):
    r = run_pytest(tmp_path, "--scralloc", *args)
    assert r.returncode == 4, r.stdout + r.stderr          # pytest's usage error
    assert "INTERNALERROR" not in r.stdout + r.stderr and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR: ") and message in lines[0], lines


BAD_LIMITS = """
import pytest

@pytest.mark.scralloc_limit("24 megabytes")
def test_unreadable_limit():
    pass

@pytest.mark.scralloc_limit("1 MB", "2 MB")
def test_two_limits():
    pass
"""


def test_a_malformed_limit_fails_its_test_in_one_line(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", tests=BAD_LIMITS)
    out = r.stdout
    assert r.returncode == 1 and "2 failed" in out, out + r.stderr
    assert "scralloc_limit: cannot read '24 megabytes' as a size" in out
    assert "scralloc_limit takes one size" in out
    assert "pytest_plugin.py" not in out and "Traceback" not in out, out


NATIVE = """
import ctypes, time
import pytest

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
KEPT = []

def native(n):
    p = libc.malloc(n)
    ctypes.memset(p, 1, n)
    return p

@pytest.mark.scralloc_limit("10 MiB")
def test_native_kept():
    KEPT.append(native(50 << 20))       # still live at the call's end

@pytest.mark.scralloc_limit("10 MiB")
def test_native_freed():
    p = native(50 << 20)
    time.sleep(0.2)                     # a hundred sampling intervals
    libc.free(p)

def test_zz_release():
    libc.free(KEPT.pop())
"""


def test_python_mode_does_not_see_native_memory(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", tests=NATIVE)
    assert r.returncode == 0 and "3 passed" in r.stdout, r.stdout + r.stderr


def test_process_mode_needs_the_preloaded_library(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-mode=process", tests=NATIVE)
    assert r.returncode == 4 and "LD_PRELOAD=" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.skipif(find_library() is None,
                    reason="no libscralloc.so (make build/release/libscralloc.so)")
def test_process_mode_sees_ctypes_malloc(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-mode=process", "--scralloc-interval=1",
                   tests=NATIVE, env_extra={"LD_PRELOAD": find_library()})
    out = r.stdout
    assert "every malloc, the process allocator" in out, out + r.stderr
    assert "FAILED test_sample.py::test_native_kept" in out, out + r.stderr
    assert "peak heapUsed of the process allocator above the call's start" in out
    section = out[out.index("scralloc: peak heapUsed per test"):]
    kept = [ln for ln in section.splitlines() if ln.endswith("test_native_kept  OVER LIMIT")]
    assert len(kept) == 1 and float(kept[0].split()[0]) >= 50, section
    # freed before the call's end: only the sampler thread sees it, and it
    # reads the test thread's big blocks as they are now
    assert "FAILED test_sample.py::test_native_freed" in out, out


def test_parse_limit():
    assert parse_limit("24 MB") == 24 << 20 == parse_limit("24MiB") == parse_limit("24m")
    assert parse_limit(1000) == 1000 == parse_limit("1000") == parse_limit("1000 B")
    assert parse_limit("1.5 KB") == 1536
    for bad in ("lots", "12 parsecs", -1, ""):
        with pytest.raises(ValueError):
            parse_limit(bad)


def test_over_the_limit_names_its_top_sites(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "-k", "limit")
    out = r.stdout
    assert r.returncode == 1 and "1 failed, 1 passed" in out, out + r.stderr
    line = next(i for i, ln in enumerate(textwrap.dedent(TESTS).splitlines(), 1)
                if "str(i) for i in range(100_000)" in ln)
    fail = out[out.index("scralloc_limit: peak heapUsed"):]
    assert "top allocation sites at heapUsed" in fail and "near the peak" in fail
    # the limit is 1 MiB: samples every 16 KiB on average
    assert "samples every 16384 bytes" in fail
    rows = fail.splitlines()[2:4]
    assert rows[0].split()[0] == "MiB", fail
    top = rows[1]
    assert f"test_sample.py:{line})" in top and "test_over_its_limit" in top, fail
    assert float(top.split()[0]) > 1.0                  # MiB, estimated


def test_profile_rate_option(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-profile-rate", "0", "-k", "over")
    assert r.returncode == 1 and "top allocation sites" not in r.stdout, r.stdout
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-profile-rate", "lots")
    assert r.returncode == 4 and "--scralloc-profile-rate lots" in r.stderr
