"""scralloc: allocator objects that show and control how memory goes back
to the OS.

    >>> import scralloc
    >>> with scralloc.Allocator(retain=1) as a:
    ...     p = a.malloc(64)
    ...     a.view(p)[:5] = b"hello"
    ...     a.free(p)

Addresses are plain ints.  Every address handed back to the allocator is
checked: a foreign, interior or never-allocated address raises
InvalidPointerError (a ValueError), a double free DoubleFreeError (a
subclass of it); the allocator stays usable after either.  The exception's
``code`` is one of the error codes of :class:`Error`.

What the core reports outside a call's result (a ``SCRALLOC_*`` environment
value it ignores, a failed munmap) arrives as a ScrallocWarning.
"""
import enum as _enum
import os as _os
from typing import TypedDict as _TypedDict

from ._scralloc import (
    CLASS_COUNT,
    CLASS_STATS_FIELDS,
    DEBUG,
    HAVE_PROCESS,
    MIN_ALIGN,
    OPTIONS,
    PAGE_SIZE,
    SEGMENT_SIZE,
    SIZE_CLASSES,
    SMALL_MAX,
    STATS_FIELDS,
    VERSION,
    Allocator,
    DoubleFreeError,
    InvalidPointerError,
    ScrallocWarning,
    __version__,
    debug_fail_os_call,
    debug_os_calls,
    debug_advance_clock,
    process_stats,
    size_class,
    strerror,
    version_info,
)
from . import _scralloc

__all__ = [
    "Allocator",
    "InvalidPointerError",
    "DoubleFreeError",
    "ScrallocWarning",
    "Error",
    "OK",
    "ENOMEM",
    "EINVAL",
    "EFOREIGN",
    "EINTERIOR",
    "ENOTALLOC",
    "EDOUBLEFREE",
    "MemoryUsage",
    "OptionInfo",
    "HEAP_PARTS",
    "heap_parts",
    "memory_usage",
    "rss",
    "process_stats",
    "size_class",
    "strerror",
    "debug_fail_os_call",
    "debug_os_calls",
    "debug_advance_clock",
    "PAGE_SIZE",
    "SEGMENT_SIZE",
    "SMALL_MAX",
    "MIN_ALIGN",
    "CLASS_COUNT",
    "SIZE_CLASSES",
    "OPTIONS",
    "STATS_FIELDS",
    "CLASS_STATS_FIELDS",
    "DEBUG",
    "HAVE_PROCESS",
    "VERSION",
    "version_info",
    "__version__",
]


class Error(_enum.IntEnum):
    """The scralloc error codes, the C API's ``SCR_*`` values.

    ``InvalidPointerError.code`` is one of them, and :func:`strerror` gives
    the text of each."""

    OK = _scralloc.SCR_OK  #: success
    ENOMEM = _scralloc.SCR_ENOMEM  #: out of memory: the OS refused, or limit_bytes
    EINVAL = _scralloc.SCR_EINVAL  #: invalid size or alignment
    EFOREIGN = _scralloc.SCR_EFOREIGN  #: not an address of this allocator
    EINTERIOR = _scralloc.SCR_EINTERIOR  #: inside a block, not its start
    ENOTALLOC = _scralloc.SCR_ENOTALLOC  #: a position never handed out
    EDOUBLEFREE = _scralloc.SCR_EDOUBLEFREE  #: a block that is already free


OK = Error.OK
ENOMEM = Error.ENOMEM
EINVAL = Error.EINVAL
EFOREIGN = Error.EFOREIGN
EINTERIOR = Error.EINTERIOR
ENOTALLOC = Error.ENOTALLOC
EDOUBLEFREE = Error.EDOUBLEFREE


class OptionInfo(_TypedDict):
    """One entry of :data:`OPTIONS`."""

    default: int
    min: int
    max: int
    doc: str


class MemoryUsage(_TypedDict):
    """What :func:`memory_usage` returns."""

    rss: int
    heapTotal: int
    heapUsed: int
    external: int


#: heap_total's parts, in the order summaries print them: (stats field,
#: what it is).  They add up to heap_total in every stats() dict.
HEAP_PARTS = (
    ("heap_used", "in live blocks"),
    ("busy_free_bytes", "free in busy pages"),
    ("retained_bytes", "retained pages"),
    ("dirty_bytes", "waiting to be returned"),
    ("cached_bytes", "cached large blocks"),
)


def heap_parts(stats):
    """``{field: bytes}`` for each field of :data:`HEAP_PARTS`, from a
    ``stats()`` dict (an Allocator's, :func:`process_stats`, or the JSON of
    ``scr_heap_stats_json``/``scr_process_stats_json``, whose
    ``busy_free_bytes`` is computed here); they add up to
    ``stats["heap_total"]``."""
    parts = {k: stats.get(k) or 0 for k, _ in HEAP_PARTS}
    if "busy_free_bytes" not in stats:
        named = sum(parts.values())
        parts["busy_free_bytes"] = max(0, (stats.get("heap_total") or 0) - named)
    return parts


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20,
          "MB": 1 << 20, "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30,
          "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}


def _parse_size(text):
    """'24 MB', '8M', '1.5 KiB', '4096', '0x1000' -> bytes (units are powers
    of 1024; an int is itself); ValueError with a one-line message."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        import re

        m = re.fullmatch(r"\s*(-?(?:0[xX][0-9a-fA-F]+|\d+(?:\.\d+)?))\s*([A-Za-z]*)\s*",
                         str(text))
        if not m or m.group(2).upper() not in _UNITS:
            raise ValueError(f"cannot read {text!r} as a size (e.g. 4096, 8M, '24 MB')")
        number = m.group(1)
        mult = _UNITS[m.group(2).upper()]
        value = int(float(number) * mult) if "." in number else int(number, 0) * mult
    if value < 0:
        raise ValueError(f"{text!r} is negative")
    return value


def _parse_option(name, text):
    """A core option's value from text (a size or a count), checked
    against its range in :data:`OPTIONS`; ValueError with a one-line
    message naming the option."""
    info = OPTIONS.get(name)
    if info is None:
        raise ValueError(f"unknown option {name!r} (one of {', '.join(OPTIONS)})")
    try:
        value = _parse_size(text)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    if not info["min"] <= value <= info["max"]:
        raise ValueError(f"{name}: {text} is out of range {info['min']}..{info['max']}")
    return value


def rss() -> int:
    """The resident set size of this process in bytes, from the kernel's
    own accounting (/proc/self/statm on Linux; elsewhere the peak RSS that
    getrusage reports, the best figure available)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            fields = f.read().split()
        return int(fields[1]) * _os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def memory_usage() -> MemoryUsage:
    """Process memory in the shape of Node's ``process.memoryUsage()``.

    - ``rss``: resident set size, from the kernel (see :func:`rss`);
    - ``heapTotal``: bytes held for blocks by every open Allocator (pages in
      use, retained pages, cached large blocks), plus the process allocator
      when this build has one (``HAVE_PROCESS``);
    - ``heapUsed``: bytes in live blocks (usable sizes), same scope;
    - ``external``: bytes scralloc holds from the OS for its own bookkeeping
      (segment headers), same scope;
    - ``peakRss``: the highest resident set size since the process started
      or :func:`reset_peak` (see :func:`peak_rss`);
    - ``peakHeapUsed``: the highest sum of ``heap_used`` over the
      Allocator objects since the process started or :func:`reset_peak`
      (the process allocator is not included: it keeps no peak).
    """
    t = _scralloc._heap_totals()
    return {
        "rss": rss(),
        "heapTotal": t["heap_total"],
        "heapUsed": t["heap_used"],
        "external": t["meta_bytes"],
        "peakRss": peak_rss(),
        "peakHeapUsed": _scralloc._heap_peaks()["peak_heap_used"],
    }


# Memory figures over time (rows, CSV, plots): scralloc.Sampler.
from .sampler import Sampler  # noqa: E402

__all__.append("Sampler")


# ---- sampled allocation sites (scralloc.sites, docs/profile.md) -------

from .sites import (  # noqa: E402
    PROFILE_DEFAULT_RATE,
    Frame,
    Profile,
    Sample,
    Site,
    format_top,
    profile,
    top_sites,
    write_folded,
    write_profile,
)

__all__ += ["PROFILE_DEFAULT_RATE", "Frame", "Profile", "Sample", "Site", "format_top", "profile",
            "top_sites", "write_folded", "write_profile"]


# ---- peaks, as in tracemalloc (get_traced_memory, reset_peak) ----------

__all__ += ["peak_rss", "reset_peak", "Serving"]
Serving = _scralloc.Serving


def peak_rss() -> int:
    """The highest resident set size of this process in bytes: VmHWM from
    /proc/self/status (which :func:`reset_peak` can start again), else the
    ru_maxrss that getrusage reports (since the process started)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def reset_peak() -> None:
    """Start the peaks of :func:`memory_usage` again from the current
    figures: ``peakHeapUsed`` always, ``peakRss`` where the kernel lets a
    process reset its VmHWM (writing 5 to /proc/self/clear_refs, Linux 4.0
    and later; elsewhere it stays the peak since the process started).
    Each Allocator has its own ``reset_peak()`` for ``peak_heap_used``."""
    _scralloc._reset_heap_peak()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
