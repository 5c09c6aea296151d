"""scralloc.Sampler: memory figures over time, as rows of a table.

Each row is a dict:

- ``t``: seconds since the sampler's first sample;
- ``rss``: the resident set size, from the kernel (this process:
  ``/proc/self/statm``, with ``peakRss``; another process: ``VmRSS`` of
  ``/proc/PID/status``, with ``rss_hwm``, its ``VmHWM``);
- with a source, its statistics, flattened (scalar fields only; the
  per-class list is left out): an :class:`~scralloc.Allocator`'s
  ``stats()``, or the process allocator's heap figures and its ``process``
  figures; without one, the heap fields of :func:`scralloc.memory_usage`
  (``heapTotal``, ``heapUsed``, ``external``, ``peakHeapUsed``).  One name
  per figure: a row never has both ``heapUsed`` and ``heap_used``.

Rows are taken at each :meth:`Sampler.sample` call, or every ``interval``
seconds on a background thread (:meth:`start` / :meth:`stop`, or the
``with`` form).  Peaks are the largest values seen at the samples.
"""
import ctypes
import json
import os
import threading
import time

from . import _scralloc  # type: ignore[attr-defined]  # (the stub declares the package, not the extension)

__all__ = ["Sampler", "preloaded_process_stats", "pid_memory", "pid_rss"]

#: The fields :meth:`Sampler.plot` draws when none are named: rows with a
#: source's figures, rows without.
DEFAULT_PLOT_FIELDS = ("rss", "heap_total", "heap_used")
MEMORY_USAGE_PLOT_FIELDS = ("rss", "heapTotal", "heapUsed")
#: memory_usage() fields a row with a source leaves out (the source's
#: heap_total, heap_used and peak_heap_used say it of the source).
_SUMMED_FIELDS = ("heapTotal", "heapUsed", "external", "peakHeapUsed")


def _process_stats_json_fn():
    """scr_process_stats_json of a libscralloc.so loaded into this process
    (LD_PRELOAD), or None.  The extension's own copy of the process
    allocator is built with hidden symbols, so a global lookup finds only
    the library that really serves malloc."""
    try:
        fn = ctypes.CDLL(None).scr_process_stats_json
    except (AttributeError, OSError):
        return None
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return fn


_PRELOADED = _process_stats_json_fn()


def preloaded_process_stats():
    """The statistics of the process allocator serving this process's
    malloc (``LD_PRELOAD=libscralloc.so``), as the dict
    ``{"heap": {...}, "process": {...}}`` of ``scr_process_stats_json``;
    None when malloc is not scralloc's."""
    if _PRELOADED is None:
        return None
    need = _PRELOADED(None, 0)
    # Figures may grow between the two calls: leave room, and retry once.
    for _ in range(2):
        buf = ctypes.create_string_buffer(need + 512)
        n = _PRELOADED(buf, len(buf))
        if n < len(buf):
            return json.loads(buf.value)
        need = n
    raise RuntimeError("scr_process_stats_json: the report kept growing")


def pid_memory(pid):
    """``{"rss": VmRSS, "rss_hwm": VmHWM}`` of process ``pid`` in bytes,
    from ``/proc/PID/status`` (VmHWM: the kernel's peak RSS of the program
    the process runs, counted from its exec); None for both once the
    process has exited (a zombie has no memory left)."""
    out = {"rss": None, "rss_hwm": None}
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmRSS:"):
                    out["rss"] = int(line.split()[1]) * 1024
                elif line.startswith(b"VmHWM:"):
                    out["rss_hwm"] = int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return out


def pid_rss(pid):
    """The resident set size of process ``pid`` in bytes (``VmRSS`` of
    ``/proc/PID/status``); None once the process has exited."""
    return pid_memory(pid)["rss"]


def _scalars(d, out):
    for k, v in d.items():
        if isinstance(v, (int, float)):
            out[k] = v
    return out


class Sampler:
    """Records memory figures over time; see the module's doc for a row.

    ``source``: an :class:`~scralloc.Allocator` (its ``stats()``), the
    string ``"process"`` (the process allocator: the ``LD_PRELOAD``-ed
    library when there is one, else :func:`scralloc.process_stats`), or
    None (the process allocator when it serves malloc, else nothing).
    ``interval``: seconds between samples on the background thread; None
    samples only when asked (and, in the ``with`` form, at entry and exit).
    ``pid``: sample another process instead (its RSS and peak RSS only;
    ``source`` must be None); a row whose process has gone has None there.
    """

    def __init__(self, source=None, interval=None, *, pid=None):
        if interval is not None:
            interval = float(interval)
            if not interval > 0:
                raise ValueError(f"interval must be > 0 seconds or None, not {interval!r}")
        if pid is not None:
            if source is not None:
                raise ValueError("Sampler(pid=...) samples another process: source must be None")
            pid = int(pid)
            if pid <= 0:
                raise ValueError(f"pid must be a positive process id, not {pid}")
        self._stats = self._stats_of(source)
        self.source = source
        self.interval = interval
        self.pid = pid
        self.rows = []
        self._t0 = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    @staticmethod
    def _stats_of(source):
        """A function returning the source's flattened figures (or None)."""
        if isinstance(source, _scralloc.Allocator):
            def allocator_stats():
                # A closed allocator has no figures left: the row keeps the rest.
                return {} if source.closed else _scalars(source.stats(), {})
            return allocator_stats
        if source is None or source == "process":
            if _PRELOADED is not None:
                def preloaded():
                    d = preloaded_process_stats()
                    return _scalars(d["process"], _scalars(d["heap"], {}))
                return preloaded
            if source is None:
                return None
            if _scralloc.process_stats() is None:
                raise ValueError("source='process': this build of scralloc has no process allocator")

            def own():
                d = _scralloc.process_stats()
                return _scalars(d.get("process", {}), _scalars(d, {}))
            return own
        raise TypeError(f"Sampler source must be an Allocator, 'process' or None, not {source!r}")

    # ---- taking rows --------------------------------------------------

    def sample(self, **marks):
        """Take one row now, append it to ``rows`` and return it.  Keyword
        arguments are added to the row as they are (``sample(phase="grow",
        round=3)``), to tell rows apart or to plot against.  ``rows`` stay
        in the order of their times ``t``, also when two threads sample at
        once and the one that started first finishes last."""
        with self._lock:
            now = time.monotonic()
            if self._t0 is None:
                self._t0 = now
        if self.pid is not None:
            row = pid_memory(self.pid)
        else:
            from . import memory_usage  # the package imports this module first

            row = memory_usage()
            if self._stats is not None:
                for k in _SUMMED_FIELDS:
                    del row[k]
                row.update(self._stats())
        row.update(marks)
        with self._lock:
            row = {"t": now - self._t0, **row}
            i = len(self.rows)
            while i and self.rows[i - 1]["t"] > row["t"]:
                i -= 1
            self.rows.insert(i, row)
        return row

    def _run(self):
        while not self._stop.wait(self.interval):
            self.sample()

    @property
    def running(self):
        """True while the background thread samples."""
        return self._thread is not None

    def start(self):
        """Take the first row now, on the caller's thread, then one every
        ``interval`` seconds on a background thread.  Returns self."""
        if self.interval is None:
            raise ValueError("start() needs an interval: Sampler(source, interval=SECONDS)")
        if self._thread is not None:
            raise RuntimeError("this Sampler is already running")
        self.sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="scralloc.Sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stop the background thread (if it runs) and take a last row."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            thread.join()
        self.sample()

    def __enter__(self):
        if self.interval is None:
            self.sample()
        else:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    # ---- reading them -------------------------------------------------

    def _peak(self, key):
        values = [r[key] for r in self.rows if r.get(key) is not None]
        return max(values) if values else None

    @property
    def peak_rss(self):
        """The largest ``rss`` seen at the samples (None before any); for
        another process, the kernel's own peak (``rss_hwm``) when larger,
        which counts the peaks between samples too."""
        peaks = [p for p in (self._peak("rss"), self._peak("rss_hwm")) if p is not None]
        return max(peaks) if peaks else None

    @property
    def peak_heap_used(self):
        """The largest heapUsed seen at the samples: the source's
        ``heap_used`` when it has one, else memory_usage()'s ``heapUsed``."""
        key = "heap_used" if any("heap_used" in r for r in self.rows) else "heapUsed"
        return self._peak(key)

    def fields(self):
        """Every field of the rows, in the order they first appear."""
        seen = {}
        for r in self.rows:
            for k in r:
                seen.setdefault(k, None)
        return list(seen)

    def to_csv(self, path_or_file):
        """Write the rows as CSV (a header line, then one line per row) to a
        path or an open text file."""
        import csv

        def write(f):
            w = csv.DictWriter(f, fieldnames=self.fields(), lineterminator="\n")
            w.writeheader()
            w.writerows(self.rows)

        if hasattr(path_or_file, "write"):
            write(path_or_file)
        else:
            with open(path_or_file, "w", newline="") as f:
                write(f)

    @classmethod
    def read_csv(cls, path_or_file):
        """A stopped Sampler holding the rows of a CSV that :meth:`to_csv`
        wrote (in another process, say), numbers as numbers and empty
        fields as None: to plot or compare them.  A file that is not such
        a timeline (no ``t`` column first, a line with another number of
        fields than the header, a ``t`` that is not a number) raises
        ValueError naming the line."""
        import csv

        name = getattr(path_or_file, "name", None) or (
            "<file>" if hasattr(path_or_file, "read") else str(path_or_file))

        def value(v):
            if v == "":
                return None
            for kind in (int, float):
                try:
                    return kind(v)
                except ValueError:
                    pass
            return v

        def read(f):
            lines = csv.reader(f)
            header = next(lines, None)
            if not header or header[0] != "t":
                raise ValueError(f"{name}: line 1: not a Sampler timeline (its header must "
                                 f"begin with the column t, not {(header or [None])[0]!r})")
            rows = []
            for r in lines:
                if len(r) != len(header):
                    raise ValueError(f"{name}: line {lines.line_num}: {len(r)} fields where "
                                     f"the header has {len(header)}")
                row = {k: value(v) for k, v in zip(header, r)}
                if not isinstance(row["t"], (int, float)):
                    raise ValueError(f"{name}: line {lines.line_num}: t is {r[0]!r}, not "
                                     f"a number of seconds")
                rows.append(row)
            return rows

        s = cls()
        if hasattr(path_or_file, "read"):
            s.rows = read(path_or_file)
        else:
            with open(path_or_file, newline="") as f:
                s.rows = read(f)
        return s

    def plot(self, fields=None, ax=None, *, x="t", label_prefix=""):
        """Draw ``fields`` against ``x`` (seconds, or another field of the
        rows) on ``ax`` (a new figure's axes when None) and return the axes.
        Without ``fields``: rss and the heap's total and used bytes.  Byte fields are drawn in MiB; when every
        field is a count, the raw values.  Lines that lie on each other stay
        visible: each has its own dash pattern and width.  Needs matplotlib
        (``pip install scralloc[plot]``)."""
        try:
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("Sampler.plot() needs matplotlib: pip install 'scralloc[plot]'") from e
        present = set(self.fields())
        if fields is None:
            fields = DEFAULT_PLOT_FIELDS if "heap_used" in present else MEMORY_USAGE_PLOT_FIELDS
        elif isinstance(fields, str):
            fields = (fields,)
        missing = [f for f in (*fields, x) if f not in present]
        if missing:
            raise KeyError(f"no such field in the rows: {', '.join(missing)} "
                           f"(there are: {', '.join(sorted(present))})")
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 4))
        in_mib = all(_is_bytes(f) for f in fields)
        styles = [("-", 2.6), ("--", 1.8), (":", 2.2), ("-.", 1.4)]
        for i, f in enumerate(fields):
            pts = [(r[x], r[f]) for r in self.rows if r.get(f) is not None and r.get(x) is not None]
            ts = [p[0] for p in pts]
            ys = [p[1] / 2**20 if in_mib else p[1] for p in pts]
            ls, lw = styles[i % len(styles)]
            ax.plot(ts, ys, ls, lw=lw, label=label_prefix + f)
        ax.set_xlabel("seconds" if x == "t" else x)
        ax.set_ylabel("MiB" if in_mib else "count")
        ax.legend(fontsize=8)
        return ax

    def __repr__(self):
        what = f"pid={self.pid}" if self.pid is not None else f"source={self.source!r}"
        return f"<scralloc.Sampler {what} interval={self.interval} rows={len(self.rows)}>"


def _is_bytes(field):
    """Fields drawn in MiB: sizes, as opposed to counts of calls or blocks."""
    return (field in ("heapTotal", "heapUsed", "external", "peakRss", "peakHeapUsed")
            or field.startswith(("rss", "heap_", "peak_heap", "peak_rss")) or "bytes" in field)
