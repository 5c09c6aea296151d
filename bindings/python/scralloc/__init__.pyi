from enum import IntEnum
from types import TracebackType
import os
from typing import IO, Any, Final, Iterable, Literal, NamedTuple, TypedDict, final

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
    "Sampler",
    "peak_rss",
    "reset_peak",
    "Serving",
    "PROFILE_DEFAULT_RATE",
    "Frame",
    "Profile",
    "Sample",
    "Site",
    "format_top",
    "profile",
    "top_sites",
    "write_folded",
    "write_profile",
]

__version__: Final[str]
VERSION: Final[str]
version_info: Final[tuple[int, int, int]]
PAGE_SIZE: Final[int]
SEGMENT_SIZE: Final[int]
SMALL_MAX: Final[int]
MIN_ALIGN: Final[int]
CLASS_COUNT: Final[int]
SIZE_CLASSES: Final[tuple[int, ...]]
DEBUG: Final[int]
HAVE_PROCESS: Final[bool]

class OptionInfo(TypedDict):
    default: int
    min: int
    max: int
    doc: str

OPTIONS: Final[dict[str, OptionInfo]]
STATS_FIELDS: Final[dict[str, str]]
CLASS_STATS_FIELDS: Final[dict[str, str]]

class InvalidPointerError(ValueError):
    address: int | None
    reason: str | None
    code: int | None

class DoubleFreeError(InvalidPointerError): ...
class ScrallocWarning(RuntimeWarning): ...

class Error(IntEnum):
    OK = 0
    ENOMEM = 1
    EINVAL = 2
    EFOREIGN = 3
    EINTERIOR = 4
    ENOTALLOC = 5
    EDOUBLEFREE = 6

OK: Final = Error.OK
ENOMEM: Final = Error.ENOMEM
EINVAL: Final = Error.EINVAL
EFOREIGN: Final = Error.EFOREIGN
EINTERIOR: Final = Error.EINTERIOR
ENOTALLOC: Final = Error.ENOTALLOC
EDOUBLEFREE: Final = Error.EDOUBLEFREE

class MemoryUsage(TypedDict):
    rss: int
    heapTotal: int
    heapUsed: int
    external: int
    peakRss: int
    peakHeapUsed: int

@final
class Allocator:
    def __init__(
        self,
        *,
        retain: int = ...,
        retain_bytes: int = ...,
        large_cache: int = ...,
        large_cache_bytes: int = ...,
        huge_threshold: int = ...,
        madv_free_below: int = ...,
        limit_bytes: int = ...,
        purge_delay_ms: int = ...,
        decommit_batch: int = ...,
        profile_rate: int = ...,
    ) -> None: ...
    @classmethod
    def from_env(cls, **options: int) -> Allocator: ...
    def malloc(self, size: int, /) -> int: ...
    def calloc(self, count: int, size: int, /) -> int: ...
    def aligned_alloc(self, alignment: int, size: int, /) -> int: ...
    def realloc(self, addr: int, size: int, /) -> int: ...
    def free(self, addr: int, /) -> None: ...
    def usable_size(self, addr: int, /) -> int: ...
    def check(self, addr: int, /) -> None: ...
    def owns(self, addr: int, /) -> bool: ...
    def block_kind(self, addr: int, /) -> Literal["allocator", "python"] | None: ...
    def view(self, addr: int, /) -> memoryview: ...
    def trim(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...
    def stats_json(self) -> str: ...
    def validate(self) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Allocator: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> Literal[False]: ...
    @property
    def allocs(self) -> int: ...
    @property
    def mmaps(self) -> int: ...
    @property
    def bytes(self) -> int: ...
    @property
    def Allocs(self) -> int: ...
    @property
    def Mmaps(self) -> int: ...
    @property
    def Bytes(self) -> int: ...
    @property
    def heap_total(self) -> int: ...
    @property
    def heap_used(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def options(self) -> dict[str, int]: ...
    @property
    def exports(self) -> int: ...
    def serve_python(self, domains: Iterable[str] = ("mem", "obj")) -> Serving: ...
    def reset_peak(self) -> None: ...
    @property
    def peak_heap_used(self) -> int: ...
    @property
    def python_blocks(self) -> int: ...
    @property
    def profile_rate(self) -> int: ...
    @profile_rate.setter
    def profile_rate(self, value: int, /) -> None: ...
    def profile(self, *, native: bool = True, peak: bool = False) -> Profile: ...
    def watch_peak(self, from_bytes: int | None, /) -> None: ...
    def write_profile(
        self,
        path: str | os.PathLike[str],
        format: _ProfileFormat = ...,
        *,
        native: bool = False,
    ) -> None: ...

HEAP_PARTS: Final[tuple[tuple[str, str], ...]]
def heap_parts(stats: dict[str, Any]) -> dict[str, int]: ...
def memory_usage() -> MemoryUsage: ...
def rss() -> int: ...
def process_stats() -> dict[str, Any] | None: ...
def size_class(size: int, /) -> int: ...
def strerror(code: int, /) -> str: ...
def debug_fail_os_call(n: int, /) -> None: ...
def debug_os_calls() -> int: ...
def debug_advance_clock(ms: int, /) -> None: ...

class Sampler:
    source: Allocator | str | None
    interval: float | None
    pid: int | None
    rows: list[dict[str, Any]]
    def __init__(
        self,
        source: Allocator | str | None = ...,
        interval: float | None = ...,
        *,
        pid: int | None = ...,
    ) -> None: ...
    def sample(self, **marks: Any) -> dict[str, Any]: ...
    def start(self) -> Sampler: ...
    def stop(self) -> None: ...
    @property
    def running(self) -> bool: ...
    def __enter__(self) -> Sampler: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> bool: ...
    @property
    def peak_rss(self) -> int | None: ...
    @property
    def peak_heap_used(self) -> int | None: ...
    def fields(self) -> list[str]: ...
    def to_csv(self, path_or_file: Any) -> None: ...
    @classmethod
    def read_csv(cls, path_or_file: Any) -> Sampler: ...
    def plot(self, fields: str | tuple[str, ...] | list[str] | None = ..., ax: Any = ..., *, x: str = ..., label_prefix: str = ...) -> Any: ...

# Python's own allocations on a heap (Allocator.serve_python)
@final
class Serving:
    def __enter__(self) -> Serving: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...
    @property
    def domains(self) -> tuple[str, ...]: ...
    @property
    def allocator(self) -> Allocator: ...

def peak_rss() -> int: ...
def reset_peak() -> None: ...

# Sampled allocation sites (scralloc.sites)
_ProfileFormat = Literal["folded", "pprof", "blame", "top"]
_By = Literal["line", "function", "file", "site"]
_Value = Literal["bytes", "blocks", "pinned"]
PROFILE_DEFAULT_RATE: Final[int]

class Frame(NamedTuple):
    file: str
    function: str
    line: int

class Sample(NamedTuple):
    address: int
    size: int
    rate: int
    bytes: float
    blocks: float
    pinned: float
    site: int
    allocator: Allocator | None
    kind: str
    python: tuple[Frame, ...]
    native: tuple[str, ...]
    @property
    def where(self) -> Frame | str: ...
    def stack(self, native: bool = ...) -> list[str]: ...

class Site(NamedTuple):
    where: Frame | str | int
    bytes: float
    blocks: float
    pinned: float
    samples: int
    stack: tuple[str, ...]

class Profile(list[Sample]):
    heap_used: int | None
    @property
    def bytes(self) -> float: ...
    def top(self, n: int = ..., by: _By = ..., key: _Value = ...) -> list[Site]: ...
    def table(self, n: int = ..., by: _By = ..., key: _Value = ...) -> str: ...
    def write_folded(self, path_or_file: str | os.PathLike[str] | IO[str], native: bool = ...,
                     value: _Value = ...) -> None: ...

def profile(native: bool = ...) -> Profile: ...
def top_sites(samples: Iterable[Sample], n: int = ..., by: _By = ..., key: _Value = ...) -> list[Site]: ...
def format_top(sites: Iterable[Site], total: float | None = ...) -> str: ...
def write_folded(samples: Iterable[Sample], path_or_file: str | os.PathLike[str] | IO[str],
                 native: bool = ..., value: _Value = ...) -> None: ...
def write_profile(path: str | os.PathLike[str], format: _ProfileFormat = ..., *,
                  native: bool = ...) -> None: ...
