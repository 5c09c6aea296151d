"""The pytest plugin (scralloc.pytest_plugin) on a small test directory,
run by a child pytest (`-p scralloc.pytest_plugin`, as from a checkout)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

import scralloc
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


def run_pytest(tmp_path, *args):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(TESTS))
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PYTEST_ADDOPTS", None)
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
    assert "(1 more; --scralloc-top N shows more)" in section


def test_option_and_bad_option(tmp_path):
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-option", "retain=0", "-k", "small")
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_pytest(tmp_path, "--scralloc", "--scralloc-option", "nosuch=1")
    assert r.returncode != 0 and "expected NAME=VALUE" in r.stderr


def test_parse_limit():
    assert parse_limit("24 MB") == 24 << 20 == parse_limit("24MiB") == parse_limit("24m")
    assert parse_limit(1000) == 1000 == parse_limit("1000") == parse_limit("1000 B")
    assert parse_limit("1.5 KB") == 1536
    for bad in ("lots", "12 parsecs", -1, ""):
        with pytest.raises(ValueError):
            parse_limit(bad)
