"""A slice of CPython's own regression tests with the interpreter's
objects on a scralloc heap: `python -m scralloc run -m test ...`.

The release extension runs the whole slice (`make test-python-slice`,
about 10 s); the checked build (SCR_DEBUG=3, whose validators walk a page
at every call) runs a part of it that fits in a minute.  Needs CPython's
`test` package (Debian: libpython3.X-testsuite, installed by
.ci/install-deps)."""
import json
import os
import subprocess
import sys

import pytest

import scralloc

SLICE = ["test_dict", "test_list", "test_set", "test_unicode", "test_json", "test_gc",
         "test_weakref"]
DEBUG_SLICE = ["test_dict", "test_gc", "test_unicode"]
PKG = os.path.dirname(os.path.dirname(os.path.abspath(scralloc.__file__)))


def have_test_suite():
    try:
        import test.libregrtest  # noqa: F401
        import test.test_dict  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not have_test_suite(),
                    reason="CPython's test package is not installed (libpython3.X-testsuite)")
def test_regression_slice_under_serve_python(tmp_path):
    tests = DEBUG_SLICE if scralloc.DEBUG else SLICE
    report = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [sys.executable, "-m", "scralloc", "run", "--json", "-o", str(report), "-m", "test",
         "-q", *tests],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "Result: SUCCESS" in out, out[-4000:]
    s = json.loads(report.read_text())
    assert s["status"] == 0 and s["mode"] == "serve_python"
    # the tests' objects really were on the heap
    assert s["python"]["obj"]["calls"] > 1_000_000 and s["python"]["mem"]["calls"] > 10_000
    assert s["peak_heap_used"] > 10 << 20
    assert s["syscalls"]["mmap"] > 0
