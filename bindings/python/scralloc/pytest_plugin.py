"""A pytest plugin: the memory each test's call takes, and limits on it.

Off unless asked::

    pytest --scralloc                       # (installed: the pytest11 entry point)
    pytest -p scralloc.pytest_plugin --scralloc   # from a checkout
    LD_PRELOAD=/path/to/libscralloc.so pytest --scralloc --scralloc-mode=process

Two modes (``--scralloc-mode``), which see different memory:

- ``python`` (the default): each test's call runs inside
  ``Allocator(**options).serve_python()`` on an allocator of its own, so
  the figures are those of Python's objects made by the call (the ``mem``
  and ``obj`` domains), exactly, peak included.  Memory that C extensions
  take with ``malloc`` (numpy's arrays, a ctypes ``malloc``) is not seen.
- ``process``: pytest runs under ``LD_PRELOAD=libscralloc.so``, whose
  process allocator serves every ``malloc`` of the process; the figures
  are the process allocator's, as growth above the call's start: sampled
  on a thread every ``--scralloc-interval`` ms and read on the test's own
  thread at the call's start and end.  Python's small objects are seen
  only with ``PYTHONMALLOC=malloc`` (pymalloc takes its arenas from mmap).

At the end pytest prints the tests with the largest peak heapUsed, with
heapTotal at the call's end in its parts and the syscalls.
``@pytest.mark.scralloc_limit("24 MB")`` fails a test whose peak heapUsed
goes over the limit (units: B, KB, MB, GB, or KiB, MiB, GiB, all powers of
1024; a plain int is bytes).  ``--scralloc-top N`` sets the length of the
report (default 10), ``--scralloc-option NAME=VALUE`` a core option of the
allocators (``retain=0``; repeatable; python mode).

A test over its limit (python mode) names its top allocation sites: the
test's heap samples allocations while a limit is in force (every
limit/64 bytes on average, at most ``scralloc.PROFILE_DEFAULT_RATE``, or
``--scralloc-profile-rate BYTES``; 0 turns it off), keeps a copy of the
live samples each time heapUsed reaches a new high above the limit
(``Allocator.watch_peak``), and the failure lists the Python lines that
held the most estimated bytes at that peak (``scralloc.top_sites``).

Only the test's call is measured (not its fixtures' setup and teardown).
Objects a test leaves behind (a module-level cache that grew, an object on
a free list) keep their allocator's heap after it is closed, until they
are freed; the report says how many blocks still do.
"""
import gc
import warnings

import pytest

import scralloc
from scralloc.sampler import Sampler, preloaded_process_stats

MODES = ("python", "process")


def parse_limit(value):
    """'24 MB' -> 25165824; an int is bytes."""
    try:
        return scralloc._parse_size(value)
    except ValueError as e:
        raise ValueError(f"scralloc_limit: {e}") from None


def _mib(v):
    return f"{v / (1024 * 1024):.2f} MiB"


def pytest_addoption(parser):
    group = parser.getgroup("scralloc", "scralloc: the memory each test takes, and limits on it")
    group.addoption("--scralloc", action="store_true", default=False,
                    help="measure each test's call (see --scralloc-mode) and report the largest")
    group.addoption("--scralloc-mode", default="python", metavar="MODE",
                    help="python: the call's Python objects on a fresh scralloc heap "
                         "(serve_python; default); process: every malloc of the process, "
                         "with pytest under LD_PRELOAD=libscralloc.so")
    group.addoption("--scralloc-interval", default="2", metavar="MS",
                    help="process mode: milliseconds between samples (default 2)")
    group.addoption("--scralloc-top", default="10", metavar="N",
                    help="tests listed in the scralloc report (default 10)")
    group.addoption("--scralloc-option", action="append", default=[], metavar="NAME=VALUE",
                    help="a core option of the allocators, e.g. retain=0 (repeatable)")
    group.addoption("--scralloc-profile-rate", default=None, metavar="BYTES",
                    help="python mode: sample allocation sites every BYTES on average in a test "
                         "with a scralloc_limit (default: limit/64, at most 512K; 0: off); a "
                         "test over its limit names its top sites")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "scralloc_limit(size): with --scralloc, fail the test if its peak heapUsed goes over "
        "size ('24 MB'; units are powers of 1024)")
    if config.getoption("scralloc"):
        config.pluginmanager.register(ScrallocPlugin(config), "scralloc-serve")


def _usage(option, value, why):
    return pytest.UsageError(f"{option} {value}: {why}")


class ScrallocPlugin:
    def __init__(self, config):
        self.mode = config.getoption("scralloc_mode")
        if self.mode not in MODES:
            raise _usage("--scralloc-mode", self.mode, f"expected one of {', '.join(MODES)}")
        top = config.getoption("scralloc_top")
        try:
            self.top = int(top)
        except ValueError:
            raise _usage("--scralloc-top", top, "not a number") from None
        if self.top < 0:
            raise _usage("--scralloc-top", top, "must be 0 or more")
        interval = config.getoption("scralloc_interval")
        try:
            self.interval = float(interval) / 1000.0
        except ValueError:
            raise _usage("--scralloc-interval", interval, "not a number of milliseconds") from None
        if not self.interval > 0:
            raise _usage("--scralloc-interval", interval, "must be above 0")
        self.options = {}
        for item in config.getoption("scralloc_option"):
            name, eq, value = item.partition("=")
            if not eq or name not in scralloc.OPTIONS:
                raise pytest.UsageError(f"--scralloc-option {item!r}: expected NAME=VALUE with "
                                        f"NAME one of {', '.join(scralloc.OPTIONS)}")
            try:
                self.options[name] = scralloc._parse_option(name, value)
            except ValueError as e:
                raise _usage("--scralloc-option", item, str(e)) from None
        rate = config.getoption("scralloc_profile_rate")
        try:
            self.profile_rate = None if rate is None else scralloc._parse_option("profile_rate", rate)
        except ValueError as e:
            raise _usage("--scralloc-profile-rate", rate, str(e)) from None
        if self.mode == "process" and preloaded_process_stats() is None:
            raise _usage("--scralloc-mode", "process", "malloc is not scralloc's: run pytest "
                         "under LD_PRELOAD=/path/to/libscralloc.so (make build/release/libscralloc.so)")
        self.results = []       # (nodeid, figures)
        self.kept = []          # closed allocators whose heap Python's blocks keep

    def _limit(self, item):
        marker = item.get_closest_marker("scralloc_limit")
        if marker is None:
            return None, None
        if len(marker.args) != 1 or marker.kwargs:
            pytest.fail(f"{item.nodeid}: scralloc_limit takes one size, e.g. "
                        f"scralloc_limit('24 MB')", pytrace=False)
        try:
            return parse_limit(marker.args[0]), marker.args[0]
        except ValueError as e:
            pytest.fail(f"{item.nodeid}: {e}", pytrace=False)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        limit, text = self._limit(item)
        figures = {"limit": limit}          # filled in even when the test fails
        self.results.append((item.nodeid, figures))
        if self.mode == "python":
            result = yield from self._measure_python(figures, limit)
        else:
            result = yield from self._measure_process(figures)
        if limit is not None and figures["peak_heap_used"] > limit:
            what = "peak heapUsed" if self.mode == "python" else \
                "peak heapUsed of the process allocator above the call's start"
            pytest.fail(f"scralloc_limit: {what} {_mib(figures['peak_heap_used'])} "
                        f"({figures['peak_heap_used']} bytes) is over the limit of {_mib(limit)} "
                        f"({text!r})" + figures.get("sites", ""), pytrace=False)
        return result

    def _rate(self, limit):
        """The sampling rate of a test's heap: --scralloc-profile-rate, or,
        under a limit, limit/64 within [4 KiB, the default rate]."""
        if self.profile_rate is not None:
            return self.profile_rate
        if limit is None:
            return 0
        return min(scralloc.PROFILE_DEFAULT_RATE, max(4096, limit // 64))

    @staticmethod
    def _sites(a, limit, rate):
        """The failure's lines on the top sites, from the copy kept at the
        peak (else what is live at the call's end)."""
        p = a.profile(native=False, peak=True)
        when = f"at heapUsed {_mib(p.heap_used)}, near the peak" if p.heap_used else None
        if not p:
            p = a.profile(native=False)
            when = "live at the call's end"
        if not p:
            return f"\n(no allocation site sampled at rate {rate}: --scralloc-profile-rate)"
        return (f"\ntop allocation sites {when} (estimated from samples every {rate} bytes on "
                f"average):\n" + p.table(5))

    def _measure_python(self, figures, limit=None):
        options = dict(self.options)
        rate = self._rate(limit)
        if rate:
            options["profile_rate"] = rate
        a = scralloc.Allocator(**options)
        if rate and limit is not None:
            a.watch_peak(limit + 1)
        try:
            with a.serve_python():
                return (yield)
        finally:
            st = a.stats()
            if rate and limit is not None and st["peak_heap_used"] > limit:
                figures["sites"] = self._sites(a, limit, rate)
            figures.update({
                "peak_heap_used": st["peak_heap_used"],
                "heap_total": st["heap_total"],
                "parts": scralloc.heap_parts(st),
                "mmap": st["mmap_calls"], "munmap": st["munmap_calls"],
                "madvise": st["madvise_calls"],
                "calls": st["python"]["mem"]["calls"] + st["python"]["obj"]["calls"],
            })
            with warnings.catch_warnings():   # the report counts what keeps a heap
                warnings.simplefilter("ignore", scralloc.ScrallocWarning)
                a.close()
            if a.python_blocks:
                self.kept.append(a)

    def _measure_process(self, figures):
        s = Sampler("process", interval=self.interval)
        s.start()                           # the first row on this thread: current
        try:
            return (yield)
        finally:
            s.stop()                        # and the last
            first, last = s.rows[0], s.rows[-1]
            figures.update({
                "peak_heap_used": max(r["heap_used"] for r in s.rows) - first["heap_used"],
                "heap_total": last["heap_total"],
                "parts": scralloc.heap_parts(last),
                "mmap": last["mmap_calls"] - first["mmap_calls"],
                "munmap": last["munmap_calls"] - first["munmap_calls"],
                "madvise": last["madvise_calls"] - first["madvise_calls"],
                "calls": None,
            })

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        if self.mode == "python":
            tr.section("scralloc: peak heapUsed per test (Python's objects, serve_python)")
        else:
            tr.section(f"scralloc: peak heapUsed per test (every malloc, the process allocator, "
                       f"above the call's start; sampled every {self.interval * 1000:g} ms)")
        if not self.results:
            tr.write_line("no test ran")
            return
        rows = sorted(self.results, key=lambda r: r[1]["peak_heap_used"], reverse=True)
        tr.write_line(f"{'peak heapUsed':>14} | {'heapTotal at end':>16} = {'live':>7} + {'free':>7} + "
                      f"{'retained':>8} + {'waiting':>7} + {'cached':>7} | {'mmap':>6} "
                      f"{'munmap':>7} {'madvise':>8} {'calls':>10}  test")
        for nodeid, f in rows[: self.top]:
            over = "  OVER LIMIT" if f["limit"] is not None and f["peak_heap_used"] > f["limit"] else ""
            p = [v / (1024 * 1024) for v in f["parts"].values()]
            calls = "-" if f["calls"] is None else f["calls"]
            tr.write_line(f"{_mib(f['peak_heap_used']):>14} | {f['heap_total'] / (1024 * 1024):16.2f} = "
                          f"{p[0]:7.2f} + {p[1]:7.2f} + {p[2]:8.2f} + {p[3]:7.2f} + {p[4]:7.2f} | "
                          f"{f['mmap']:>6} {f['munmap']:>7} {f['madvise']:>8} {calls:>10}  "
                          f"{nodeid}{over}")
        if len(rows) > self.top:
            tr.write_line(f"({len(rows) - self.top} more; --scralloc-top N shows more)")
        where = "the process allocator's" if self.mode == "process" else "the test's heap"
        tr.write_line(f"heapTotal: {where} at the call's end, in MiB = " + " + ".join(
            label for _, label in scralloc.HEAP_PARTS))
        gc.collect()
        self.kept = [a for a in self.kept if a.python_blocks]
        if self.kept:
            blocks = sum(a.python_blocks for a in self.kept)
            tr.write_line(f"{len(self.kept)} closed allocator(s) kept for {blocks} block(s) of "
                          f"objects the tests left behind")
