"""Sampled allocation sites: what :func:`scralloc.profile` and
``Allocator.profile()`` return, top sites, folded stacks.

The core samples blocks so that each allocated byte has the same chance,
1/rate, to be sampled (docs/profile.md); a sample stands for ``bytes``
live bytes (size / (1 - exp(-size / rate))), so a site's estimate is the
sum of its samples' ``bytes``.  Frames are kept outermost first, as in
tracemalloc's tracebacks and in folded stacks: ``python[-1]`` is the line
that allocated, ``native[-1]`` the innermost native frame.
"""
import math
import os
from typing import NamedTuple

from . import _scralloc  # type: ignore[attr-defined]  # (the stub declares the package, not the extension)

__all__ = ["Frame", "Sample", "Site", "Profile", "profile", "top_sites", "format_top",
           "write_folded", "write_profile", "PROFILE_DEFAULT_RATE"]

PROFILE_DEFAULT_RATE = _scralloc.PROFILE_DEFAULT_RATE


class Frame(NamedTuple):
    """One Python frame of a sample."""

    file: str
    function: str
    line: int

    def __str__(self):
        return f"{self.function} ({self.file}:{self.line})"


class Sample(NamedTuple):
    """One live sampled block."""

    address: int
    size: int                   #: bytes requested
    rate: int                   #: the sampling rate it was taken at
    bytes: float                #: estimated live bytes it stands for
    blocks: float               #: estimated live blocks it stands for
    pinned: float               #: its share of the free bytes of partly used pages (blame)
    site: int                   #: equal for samples of equal stacks
    allocator: object           #: its Allocator, or None (the process allocator's)
    kind: str                   #: "python" (serve_python), "allocator" (its methods), "process", "heap"
    python: tuple               #: Frame records, outermost first
    native: tuple               #: native frames' names, outermost first (() with native=False)

    @property
    def where(self):
        """The innermost Python frame, else the innermost native frame's
        name, else ``"site <id>"``."""
        if self.python:
            return self.python[-1]
        if self.native:
            return self.native[-1]
        return f"site {self.site:#x}"

    def stack(self, native=False):
        """Frame names, outermost first: the Python frames, and with
        native=True the native frames below them (all of them when there
        is no Python frame)."""
        names = [str(f) for f in self.python]
        if native or not names:
            names += list(self.native)
        return names or [f"site {self.site:#x}"]


class Site(NamedTuple):
    """Samples added up by :func:`top_sites`."""

    where: object               #: Frame, native frame name, or site text (the group's key)
    bytes: float                #: estimated live bytes
    blocks: float               #: estimated live blocks
    pinned: float               #: blame: free bytes its blocks keep committed
    samples: int                #: samples in the group
    stack: tuple                #: the largest sample's stack (Sample.stack()), outermost first


_symbols: dict = {}


def _symbol(pc):
    name = _symbols.get(pc)
    if name is None:
        name = _symbols[pc] = _scralloc._profile_symbol(pc)
    return name


def _python_frames(text):
    frames = []
    if text:
        for line in text.split("\n"):
            parts = line.split("\t")
            if len(parts) == 3:
                fn, file, no = parts
                frames.append(Frame(file, fn, int(no) if no.lstrip("-").isdigit() else 0))
    frames.reverse()            # the hook writes innermost first
    return tuple(frames)


class Profile(list):
    """A list of :class:`Sample` with helpers.  ``heap_used`` is the
    heap_used a peak copy was taken at (``profile(peak=True)``), else
    None."""

    heap_used = None

    @property
    def bytes(self):
        """Estimated live bytes of every sample."""
        return math.fsum(s.bytes for s in self)

    def top(self, n=10, by="line", key="bytes"):
        return top_sites(self, n, by=by, key=key)

    def table(self, n=10, by="line", key="bytes"):
        return format_top(top_sites(self, n, by=by, key=key), total=self.bytes)

    def write_folded(self, path_or_file, native=False, value="bytes"):
        write_folded(self, path_or_file, native=native, value=value)


def _records(raw, native, heap_used):
    out = Profile()
    out.heap_used = heap_used
    for (addr, size, rate, nbytes, blocks, pinned, site, alloc, kind, pcs, lang) in raw:
        names = tuple(_symbol(pc) for pc in reversed(pcs)) if native else ()
        out.append(Sample(addr, size, rate, nbytes, blocks, pinned, site, alloc, kind,
                          _python_frames(lang), names))
    return out


def profile(native=True):
    """The live sampled blocks of every heap of this module (every
    Allocator's, serve_python()'s included) and of its process allocator,
    as a :class:`Profile` of :class:`Sample` records.  Sampling is off
    until a heap has a profile_rate (``Allocator(profile_rate=...)``,
    ``Allocator.profile_rate = ...``)."""
    return _scralloc._profile(bool(native))


def write_profile(path, format="folded", *, native=False):
    """The core's report of every heap and the process allocator, written
    to path: "folded", "pprof", "blame" or "top" (docs/profile.md)."""
    _scralloc.write_profile(os.fspath(path), format, native=native)


def _group_key(s, by):
    if by == "site":
        return s.site
    if s.python:
        f = s.python[-1]
        if by == "line":
            return f
        if by == "function":
            return Frame(f.file, f.function, 0)
        if by == "file":
            return Frame(f.file, "", 0)
    return s.native[-1] if s.native else f"site {s.site:#x}"


def top_sites(samples, n=10, by="line", key="bytes"):
    """The n largest groups of samples as :class:`Site` records, largest
    first.  by: "line" (the innermost Python frame; without one, the
    innermost native frame), "function", "file" (Frame with line 0, and
    function "" for a file), or "site" (the whole stack, native frames
    included).  key: "bytes", "blocks" or "pinned"."""
    if by not in ("line", "function", "file", "site"):
        raise ValueError(f"by={by!r}: one of 'line', 'function', 'file', 'site'")
    if key not in ("bytes", "blocks", "pinned"):
        raise ValueError(f"key={key!r}: one of 'bytes', 'blocks', 'pinned'")
    groups = {}
    for s in samples:
        k = _group_key(s, by)
        g = groups.get(k)
        if g is None:
            groups[k] = [s.bytes, s.blocks, s.pinned, 1, s]
        else:
            g[0] += s.bytes
            g[1] += s.blocks
            g[2] += s.pinned
            g[3] += 1
            if s.bytes > g[4].bytes:
                g[4] = s
    index = {"bytes": 0, "blocks": 1, "pinned": 2}[key]
    rows = sorted(groups.items(), key=lambda kv: kv[1][index], reverse=True)
    where = (lambda k, g: g[4].site) if by == "site" else (lambda k, g: k)
    return [Site(where(k, g), g[0], g[1], g[2], g[3], tuple(g[4].stack(native=by == "site")))
            for k, g in rows[:n]]


def _mib(v):
    return f"{v / (1024 * 1024):.2f}"


def format_top(sites, total=None):
    """A text table of :func:`top_sites`' records."""
    lines = [f"{'MiB':>9} {'%':>6} {'blocks':>10} {'pinned MiB':>10} {'samples':>7}  site"]
    for s in sites:
        share = f"{100.0 * s.bytes / total:6.1f}" if total else f"{'-':>6}"
        lines.append(f"{_mib(s.bytes):>9} {share} {s.blocks:10.0f} {_mib(s.pinned):>10} "
                     f"{s.samples:7d}  {s.where if isinstance(s.where, (str, Frame)) else hex(s.where)}")
    return "\n".join(lines) + "\n"


def _folded_name(name):
    return name.replace(";", ":").replace("\n", " ")


def write_folded(samples, path_or_file, native=False, value="bytes"):
    """Folded stacks ("outer;...;inner value" lines, flamegraph.pl's,
    speedscope's and inferno's input), one line per stack, value the
    stack's estimated live bytes (value="blocks": blocks, "pinned": the
    blame), rounded.  path_or_file: a path or a text file."""
    if value not in ("bytes", "blocks", "pinned"):
        raise ValueError(f"value={value!r}: one of 'bytes', 'blocks', 'pinned'")
    totals = {}
    for s in samples:
        k = ";".join(_folded_name(n) for n in s.stack(native=native))
        totals[k] = totals.get(k, 0.0) + getattr(s, value)
    lines = [f"{k} {round(v)}\n" for k, v in sorted(totals.items()) if round(v) > 0]
    if hasattr(path_or_file, "write"):
        path_or_file.writelines(lines)
    else:
        with open(path_or_file, "w", encoding="utf-8") as f:
            f.writelines(lines)
