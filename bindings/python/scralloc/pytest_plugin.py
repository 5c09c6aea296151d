"""A pytest plugin: each test's Python objects on a fresh scralloc heap.

Off unless asked::

    pytest --scralloc                       # (installed: the pytest11 entry point)
    pytest -p scralloc.pytest_plugin --scralloc   # from a checkout

With ``--scralloc`` each test's call runs inside
``Allocator(**options).serve_python()`` on an allocator of its own; at the
end pytest prints the tests with the largest peak heapUsed and their
syscalls.  ``@pytest.mark.scralloc_limit("24 MB")`` fails a test whose
peak heapUsed goes over the limit (units: B, KB, MB, GB, or KiB, MiB, GiB,
all powers of 1024; a plain int is bytes).  ``--scralloc-top N`` sets the
length of the report (default 10), ``--scralloc-option NAME=VALUE`` a core
option of the allocators (``retain=0``; repeatable).

Only the test's call is measured (not its fixtures' setup and teardown).
Objects a test leaves behind (a module-level cache that grew, an object
on a free list) keep their allocator routed; it is closed once they are
gone, checked after each test.
"""
import gc
import re

import pytest

import scralloc

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1024, "KIB": 1024, "M": 1024**2, "MB": 1024**2,
          "MIB": 1024**2, "G": 1024**3, "GB": 1024**3, "GIB": 1024**3}


def parse_limit(value):
    """'24 MB' -> 25165824; an int is bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"scralloc_limit: {value} is negative")
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", str(value))
    if not m or m.group(2).upper() not in _UNITS:
        raise ValueError(f"scralloc_limit: cannot read {value!r} as a size (e.g. '24 MB')")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def _mib(v):
    return f"{v / (1024 * 1024):.2f} MiB"


def pytest_addoption(parser):
    group = parser.getgroup("scralloc", "scralloc: each test's Python objects on a scralloc heap")
    group.addoption("--scralloc", action="store_true", default=False,
                    help="run each test with serve_python() on a fresh scralloc allocator")
    group.addoption("--scralloc-top", type=int, default=10, metavar="N",
                    help="tests listed in the scralloc report (default 10)")
    group.addoption("--scralloc-option", action="append", default=[], metavar="NAME=VALUE",
                    help="a core option of the allocators, e.g. retain=0 (repeatable)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "scralloc_limit(size): with --scralloc, fail the test if its peak heapUsed goes over "
        "size ('24 MB'; units are powers of 1024)")
    if config.getoption("scralloc"):
        config.pluginmanager.register(ScrallocPlugin(config), "scralloc-serve")


class ScrallocPlugin:
    def __init__(self, config):
        self.top = config.getoption("scralloc_top")
        self.options = {}
        for item in config.getoption("scralloc_option"):
            name, eq, value = item.partition("=")
            if not eq or name not in scralloc.OPTIONS:
                raise pytest.UsageError(f"--scralloc-option {item!r}: expected NAME=VALUE with "
                                        f"NAME one of {', '.join(scralloc.OPTIONS)}")
            self.options[name] = parse_limit(value)
        self.results = []       # (nodeid, figures)
        self.pending = []       # allocators still holding blocks a test left behind

    def _close_finished(self):
        still = []
        for a in self.pending:
            if a.python_blocks == 0:
                a.close()
            else:
                still.append(a)
        self.pending = still

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        marker = item.get_closest_marker("scralloc_limit")
        limit = None
        if marker is not None:
            if len(marker.args) != 1 or marker.kwargs:
                raise pytest.UsageError(f"{item.nodeid}: scralloc_limit takes one size, e.g. "
                                        f"scralloc_limit('24 MB')")
            limit = parse_limit(marker.args[0])
        a = scralloc.Allocator(**self.options)
        try:
            with a.serve_python():
                result = yield
        finally:
            st = a.stats()
            figures = {
                "peak_heap_used": st["peak_heap_used"],
                "heap_total": st["heap_total"],
                "mmap": st["mmap_calls"], "munmap": st["munmap_calls"],
                "madvise": st["madvise_calls"], "mremap": st["mremap_calls"],
                "calls": st["python"]["mem"]["calls"] + st["python"]["obj"]["calls"],
                "limit": limit,
            }
            self.results.append((item.nodeid, figures))
            self.pending.append(a)
            del a
            self._close_finished()
        if limit is not None and figures["peak_heap_used"] > limit:
            pytest.fail(f"scralloc_limit: peak heapUsed {_mib(figures['peak_heap_used'])} "
                        f"({figures['peak_heap_used']} bytes) is over the limit of {_mib(limit)} "
                        f"({marker.args[0]!r})", pytrace=False)
        return result

    def pytest_terminal_summary(self, terminalreporter):
        gc.collect()
        self._close_finished()
        tr = terminalreporter
        tr.section("scralloc: peak heapUsed per test")
        if not self.results:
            tr.write_line("no test ran")
            return
        rows = sorted(self.results, key=lambda r: r[1]["peak_heap_used"], reverse=True)
        tr.write_line(f"{'peak heapUsed':>14} {'heapTotal':>12} {'mmap':>6} {'munmap':>7} "
                      f"{'madvise':>8} {'calls':>10}  test")
        for nodeid, f in rows[: self.top]:
            over = "  OVER LIMIT" if f["limit"] is not None and f["peak_heap_used"] > f["limit"] else ""
            tr.write_line(f"{_mib(f['peak_heap_used']):>14} {_mib(f['heap_total']):>12} "
                          f"{f['mmap']:>6} {f['munmap']:>7} {f['madvise']:>8} {f['calls']:>10}  "
                          f"{nodeid}{over}")
        if len(rows) > self.top:
            tr.write_line(f"({len(rows) - self.top} more; --scralloc-top N shows more)")
        if self.pending:
            blocks = sum(a.python_blocks for a in self.pending)
            tr.write_line(f"{len(self.pending)} allocator(s) still hold {blocks} block(s) of objects "
                          f"the tests left behind")
