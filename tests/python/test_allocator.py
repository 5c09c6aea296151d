"""Every method, attribute and edge case of scralloc.Allocator."""
import gc
import json
import pickle
import warnings
import weakref

import pytest

import scralloc
from scralloc import _scralloc


def fill(a, p, n=None, seed=0):
    mv = a.view(p)
    n = len(mv) if n is None else n
    data = bytes((p // 16 + seed + i) & 0xFF for i in range(min(n, 256))) * (n // 256 + 1)
    mv[:n] = data[:n]
    mv.release()
    return data[:n]


def content(a, p, n):
    with a.view(p) as mv:
        return bytes(mv[:n])


# ---- module ------------------------------------------------------------


def test_constants():
    assert scralloc.PAGE_SIZE == 64 * 1024
    assert scralloc.SEGMENT_SIZE % scralloc.PAGE_SIZE == 0
    assert scralloc.MIN_ALIGN == 16
    assert len(scralloc.SIZE_CLASSES) == scralloc.CLASS_COUNT
    assert list(scralloc.SIZE_CLASSES) == sorted(set(scralloc.SIZE_CLASSES))
    assert scralloc.SIZE_CLASSES[-1] == scralloc.SMALL_MAX
    assert all(s % scralloc.MIN_ALIGN == 0 for s in scralloc.SIZE_CLASSES)
    assert scralloc.__version__ == scralloc.VERSION == "%d.%d.%d" % scralloc.version_info
    assert scralloc.DEBUG in (0, 1, 2, 3)
    assert isinstance(scralloc.HAVE_PROCESS, bool)


def test_size_class():
    for i, size in enumerate(scralloc.SIZE_CLASSES):
        assert scralloc.size_class(size) == i
        assert scralloc.size_class(size - 1) == (i if size - 1 > (scralloc.SIZE_CLASSES[i - 1] if i else 0) else i - 1) or size == 16
    assert scralloc.size_class(scralloc.SMALL_MAX + 1) == -1
    with pytest.raises(ValueError):
        scralloc.size_class(-1)


def test_strerror():
    for code in range(0, 7):
        assert isinstance(scralloc.strerror(code), str) and scralloc.strerror(code)
    assert scralloc.strerror(12345)
    assert scralloc.strerror(2**100)


def test_tables():
    assert set(scralloc.OPTIONS) == {
        "retain", "retain_bytes", "large_cache", "large_cache_bytes",
        "huge_threshold", "madv_free_below", "limit_bytes", "purge_delay_ms",
        "decommit_batch", "profile_rate",
    }
    for name, info in scralloc.OPTIONS.items():
        assert info["min"] <= info["default"] <= info["max"], name
        assert info["doc"]
    assert scralloc.OPTIONS["retain"]["default"] == 1
    assert {"allocs", "mmaps", "bytes", "mmap_calls", "munmap_calls", "heap_total",
            "heap_used"} <= set(scralloc.STATS_FIELDS)
    assert set(scralloc.CLASS_STATS_FIELDS) == {"block_size", "live", "pages", "retained"}


def test_extension_does_not_replace_malloc():
    """The extension exports PyInit__scralloc only, malloc least of all."""
    import shutil
    import subprocess

    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm not installed")
    def defined(*flags):
        out = subprocess.run([nm, *flags, "--defined-only", _scralloc.__file__],
                             capture_output=True, text=True, check=True).stdout
        return {line.split()[-1] for line in out.splitlines() if line.strip()}

    exported = defined("-D")
    assert exported == {"PyInit__scralloc"}
    # Not even a local definition (SCR_OVERRIDE would make one).
    every = defined()
    if every:  # not stripped
        assert not every & {"malloc", "free", "calloc", "realloc", "posix_memalign"}


# ---- allocation -------------------------------------------------------------


def test_malloc_free(a):
    p = a.malloc(64)
    assert p % scralloc.MIN_ALIGN == 0
    assert a.usable_size(p) >= 64
    assert a.allocs == 1 and a.Allocs == 1
    assert a.owns(p)
    a.check(p)
    a.free(p)
    assert a.allocs == 0
    assert not a.owns(p)


def test_malloc_zero_is_unique(a):
    p, q = a.malloc(0), a.malloc(0)
    assert p != q and p and q
    assert a.usable_size(p) >= 0
    a.free(p)
    a.free(q)


def test_every_class_and_large_sizes(a):
    sizes = list(scralloc.SIZE_CLASSES) + [scralloc.SMALL_MAX + 1, 100_000, 1 << 20,
                                           (1 << 20) + 1, 3 << 20]
    blocks = {}
    for n in sizes:
        p = a.malloc(n)
        assert a.usable_size(p) >= n
        blocks[p] = (n, fill(a, p, n))
    assert a.allocs == len(sizes)
    spans = sorted((p, p + a.usable_size(p)) for p in blocks)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start
    for p, (n, data) in blocks.items():
        assert content(a, p, n) == data
        a.free(p)
    assert a.allocs == 0


def test_calloc_zeroes(a):
    for n in (64, 4096, 100_000):
        p = a.malloc(n)
        fill(a, p)
        a.free(p)
        q = a.calloc(n // 8, 8)
        assert content(a, q, n) == bytes(n)
        a.free(q)
    p = a.calloc(0, 5)
    a.free(p)


@pytest.mark.parametrize("alignment", [1, 2, 8, 16, 32, 64, 256, 4096, 1 << 16, 1 << 20])
def test_aligned_alloc(a, alignment):
    ps = [a.aligned_alloc(alignment, n) for n in (1, 100, 5000, 70_000)]
    for p in ps:
        assert p % alignment == 0 and p % scralloc.MIN_ALIGN == 0
    for p in ps:
        a.free(p)


def test_realloc_keeps_contents(a):
    p = a.malloc(100)
    data = fill(a, p, 100)
    for n in (200, 5000, 20_000, 2 << 20, 3000, 50):
        p = a.realloc(p, n)
        keep = min(len(data), n)
        assert content(a, p, keep) == data[:keep]
        data = fill(a, p, n, seed=n)
        assert a.allocs == 1
    a.free(p)


def test_realloc_null_and_zero(a):
    p = a.realloc(0, 64)
    assert a.allocs == 1 and a.usable_size(p) >= 64
    assert a.realloc(p, 0) == 0
    assert a.allocs == 0
    a.free(0)  # free(NULL) is a no-op
    assert a.usable_size(0) == 0


# ---- views ------------------------------------------------------------------


def test_view_is_writable_and_sized(a):
    p = a.malloc(100)
    mv = a.view(p)
    assert isinstance(mv, memoryview)
    assert not mv.readonly and mv.format == "B" and mv.itemsize == 1
    assert len(mv) == a.usable_size(p)
    mv[:3] = b"abc"
    with a.view(p) as mv2:
        assert bytes(mv2[:3]) == b"abc"
    mv.release()
    a.free(p)


def test_view_blocks_free_realloc_close(a):
    p = a.malloc(64)
    q = a.malloc(64)
    mv = a.view(p)
    mv2 = a.view(p)
    assert a.exports == 2
    assert mv.obj is mv2.obj and mv.obj.exports == 2
    with pytest.raises(BufferError):
        a.free(p)
    with pytest.raises(BufferError):
        a.realloc(p, 1000)
    with pytest.raises(BufferError):
        a.realloc(p, 0)
    with pytest.raises(BufferError):
        a.close()
    assert not a.closed and a.allocs == 2
    a.free(q)  # other blocks are not affected
    mv[0] = 7
    mv.release()
    with pytest.raises(BufferError):
        a.free(p)
    assert mv2[0] == 7
    mv2.release()
    assert a.exports == 0
    a.free(p)
    a.close()


def dropped_open(*drop):
    """Run the calls that drop the last reference to an open allocator: it
    warns (ResourceWarning) once; the warning, which holds the allocator
    as its source, is then let go."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for f in drop:
            f()
        gc.collect()
    assert [w.category for w in seen] == [ResourceWarning]
    del seen[:]
    gc.collect()


def test_view_survives_allocator_reference_drop():
    a = scralloc.Allocator()
    ref = weakref.ref(a)
    p = a.malloc(4096)
    mv = a.view(p)
    del a
    gc.collect()
    assert ref() is not None  # the view keeps the heap alive
    mv[:4] = b"live"
    assert bytes(mv[:4]) == b"live"
    dropped_open(mv.release)
    assert ref() is None


def test_view_alive_at_with_exit_closes_with_the_last_view():
    with scralloc.Allocator() as a:
        mv = a.view(a.malloc(10))
    assert a.closed  # for every call at once
    with pytest.raises(ValueError):
        a.malloc(1)
    mv[0] = 1  # the view still reaches its block
    mv.release()
    assert a.closed
    a.close()  # closing again does nothing


def test_expired_block_refuses_new_exports(a):
    p = a.malloc(64)
    mv = a.view(p)
    block = mv.obj
    assert "export" in repr(block)
    again = memoryview(block)  # while exported: fine, counted
    assert block.exports == 2
    again.release()
    mv.release()
    with pytest.raises(BufferError):
        memoryview(block)
    a.free(p)
    q = a.malloc(64)  # may reuse p's address
    with pytest.raises(BufferError):
        memoryview(block)
    a.free(q)


def test_view_in_garbage_cycle():
    a = scralloc.Allocator()
    ref = weakref.ref(a)

    class Holder:
        pass

    h = Holder()
    h.me = h
    h.alloc = a
    h.mv = a.view(a.malloc(128))
    del a, h
    dropped_open()
    assert ref() is None


def test_block_type_cannot_be_instantiated():
    with pytest.raises(TypeError):
        _scralloc.Block()


# ---- trim, counters, stats --------------------------------------------------


def test_trim_gives_everything_back():
    a = scralloc.Allocator(retain=1)
    ps = [a.malloc(n) for n in (16, 64, 4096, 16384, 100_000, 2 << 20)]
    for p in ps:
        a.free(p)
    assert a.allocs == 0
    assert a.bytes > 0  # retained pages / cached blocks
    given = a.trim()
    assert given > 0
    assert (a.allocs, a.mmaps, a.bytes) == (0, 0, 0)
    assert (a.Allocs, a.Mmaps, a.Bytes) == (0, 0, 0)
    assert a.trim() == 0
    a.validate()
    a.close()


def test_purge_delay_keeps_freed_pages():
    # a freed run of pages stays committed (no madvise) and is taken again
    # first; trim gives it back
    with scralloc.Allocator(retain=0, large_cache=0, purge_delay_ms=60_000) as a:
        keep = a.malloc(100)
        p = a.malloc(200_000)
        before = a.stats()
        a.free(p)
        s = a.stats()
        assert s["dirty_bytes"] == 4 * scralloc.PAGE_SIZE
        assert s["madvise_calls"] == before["madvise_calls"]
        assert s["heap_total"] == before["heap_total"]
        assert a.malloc(200_000) == p
        assert a.stats()["dirty_bytes"] == 0
        a.free(p)
        a.free(keep)
        a.trim()
        s = a.stats()
        assert (s["dirty_bytes"], s["bytes"], s["mmaps"]) == (0, 0, 0)
    # the default: freed pages wait a second, with no byte cap on them
    assert scralloc.OPTIONS["purge_delay_ms"]["default"] == 1000
    assert scralloc.OPTIONS["retain_bytes"]["default"] == 2**64 - 1
    with scralloc.Allocator() as a:
        keep = a.malloc(100)
        p = a.malloc(200_000)
        a.free(p)
        s = a.stats()
        assert s["dirty_bytes"] == 4 * scralloc.PAGE_SIZE and s["madvise_calls"] == 0
        a.free(keep)


def test_trim_with_live_blocks(a):
    p = a.malloc(64)
    q = a.malloc(5000)
    a.free(q)
    a.trim()
    assert a.allocs == 1 and a.mmaps >= 1 and a.bytes > 0
    a.free(p)
    a.trim()
    assert (a.allocs, a.mmaps, a.bytes) == (0, 0, 0)


def test_retention_per_option():
    for retain in (0, 1, 4):
        with scralloc.Allocator(retain=retain) as a:
            ps = [a.malloc(64) for _ in range(3 * scralloc.PAGE_SIZE // 64)]
            for p in ps:
                a.free(p)
            assert a.stats()["retained_pages"] <= retain
            a.trim()
            assert a.stats()["retained_pages"] == 0


def test_counters_read_only(a):
    for name in ("allocs", "mmaps", "bytes", "Allocs", "Mmaps", "Bytes", "closed", "options"):
        with pytest.raises(AttributeError):
            setattr(a, name, 1)


def test_stats_dict(a):
    p = a.malloc(64)
    big = a.malloc(2 << 20)
    s = a.stats()
    assert set(s) == set(scralloc.STATS_FIELDS) | {"classes", "peak_heap_used", "python",
                                                    "busy_free_bytes"}
    assert s["allocs"] == a.allocs == 2
    assert s["mmaps"] == a.mmaps and s["bytes"] == a.bytes
    assert s["heap_used"] == a.usable_size(p) + a.usable_size(big) == a.heap_used
    assert s["heap_total"] >= s["heap_used"] and a.heap_total == s["heap_total"]
    assert s["large_allocs"] == 1
    classes = s["classes"]
    assert len(classes) == scralloc.CLASS_COUNT
    assert [c["block_size"] for c in classes] == list(scralloc.SIZE_CLASSES)
    c64 = classes[scralloc.size_class(64)]
    assert c64["live"] == 1 and c64["pages"] >= 1
    assert sum(c["live"] for c in classes) == s["allocs"] - s["large_allocs"]
    assert s["mmap_calls"] >= 1
    a.free(p)
    a.free(big)


@pytest.mark.parametrize("options", [{}, {"retain": 0}, {"purge_delay_ms": 1000},
                                     {"decommit_batch": 1 << 20}, {"large_cache": 0}])
def test_heap_total_parts_add_up(options):
    with scralloc.Allocator(**options) as a:
        blocks = [a.malloc(n) for n in (16, 100, 5000, 70_000, 200_000, 3 << 20) * 20]
        seen = [a.stats()]
        for p in blocks[::2]:
            a.free(p)
        seen.append(a.stats())
        for p in blocks[1::2]:
            a.free(p)
        seen.append(a.stats())
        a.trim()
        seen.append(a.stats())
    for st in seen:
        parts = scralloc.heap_parts(st)
        assert list(parts) == [k for k, _ in scralloc.HEAP_PARTS]
        assert sum(parts.values()) == st["heap_total"], parts
        assert parts["busy_free_bytes"] == st["busy_free_bytes"]
        # the library's JSON has no busy_free_bytes: heap_parts computes it alike
        json_like = {k: v for k, v in st.items() if k != "busy_free_bytes"}
        assert scralloc.heap_parts(json_like) == parts
    # something in each part at some point: free pages, cached large blocks
    assert any(s["busy_free_bytes"] for s in seen[:2])
    if options.get("large_cache", 8):
        assert seen[2]["cached_bytes"] > 0


def test_stats_json_matches(a):
    p = a.malloc(300)
    j = json.loads(a.stats_json())
    s = a.stats()
    for name in scralloc.STATS_FIELDS:
        assert j[name] == s[name], name
    a.free(p)


def test_options(a):
    assert a.options == {k: v["default"] for k, v in scralloc.OPTIONS.items()}
    b = scralloc.Allocator(retain=3, large_cache=0, limit_bytes=1 << 30)
    assert b.options["retain"] == 3 and b.options["large_cache"] == 0
    assert b.options["limit_bytes"] == 1 << 30
    assert "retain=3" in repr(b)
    b.close()


def test_bad_options():
    with pytest.raises(TypeError):
        scralloc.Allocator(1)
    with pytest.raises(TypeError):
        scralloc.Allocator(nonsense=1)
    with pytest.raises(TypeError):
        scralloc.Allocator(retain="1")
    with pytest.raises(ValueError):
        scralloc.Allocator(retain=-1)
    with pytest.raises(ValueError):
        scralloc.Allocator(retain=scralloc.OPTIONS["retain"]["max"] + 1)
    with pytest.raises(ValueError):
        scralloc.Allocator(huge_threshold=0)  # below SMALL_MAX
    with pytest.raises(OverflowError):
        scralloc.Allocator(retain=2**70)
    with pytest.raises((OverflowError, ValueError)):
        scralloc.Allocator(retain_bytes=2**70)


def test_from_env(monkeypatch):
    monkeypatch.setenv("SCRALLOC_RETAIN", "5")
    monkeypatch.setenv("SCRALLOC_RETAIN_BYTES", "4M")
    with scralloc.Allocator.from_env(large_cache=2) as a:
        assert a.options["retain"] == 5
        assert a.options["retain_bytes"] == 4 << 20
        assert a.options["large_cache"] == 2
    with pytest.raises(TypeError):
        scralloc.Allocator.from_env(5)
    with scralloc.Allocator() as b:  # the constructor does not read the environment
        assert b.options["retain"] == scralloc.OPTIONS["retain"]["default"]


# ---- life cycle -------------------------------------------------------------


def test_close_and_closed_errors():
    a = scralloc.Allocator()
    p = a.malloc(10)
    a.close()  # live blocks are given back too
    assert a.closed
    a.close()  # idempotent
    assert "closed" in repr(a)
    calls = [
        lambda: a.malloc(1), lambda: a.calloc(1, 1), lambda: a.aligned_alloc(16, 1),
        lambda: a.realloc(p, 5), lambda: a.free(p), lambda: a.usable_size(p),
        lambda: a.check(p), lambda: a.owns(p), lambda: a.view(p), lambda: a.trim(),
        lambda: a.stats(), lambda: a.stats_json(), lambda: a.validate(),
        lambda: a.allocs, lambda: a.mmaps, lambda: a.bytes, lambda: a.Allocs,
        lambda: a.options, lambda: a.__enter__(),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="operation on a closed allocator"):
            call()


def test_context_manager():
    with scralloc.Allocator() as a:
        assert not a.closed
        a.malloc(100)
    assert a.closed


def test_close_gives_back_to_os():
    before = scralloc.memory_usage()
    a = scralloc.Allocator()
    p = a.malloc(1 << 20)
    assert a.usable_size(p) >= 1 << 20
    during = scralloc.memory_usage()
    assert during["heapUsed"] >= before["heapUsed"] + (1 << 20)
    assert during["heapTotal"] >= during["heapUsed"]
    a.close()
    after = scralloc.memory_usage()
    assert after["heapUsed"] == before["heapUsed"]
    assert after["heapTotal"] == before["heapTotal"]


def test_repr(a):
    r = repr(a)
    assert r.startswith("<scralloc.Allocator") and "allocs=0" in r and "retain=1" in r


def test_weakref_and_no_pickle(a):
    assert weakref.ref(a)() is a
    with pytest.raises(TypeError):
        pickle.dumps(a)


def test_not_subclassable():
    with pytest.raises(TypeError):
        type("Sub", (scralloc.Allocator,), {})


# ---- memory_usage -----------------------------------------------------------


def test_memory_usage_shape():
    m = scralloc.memory_usage()
    assert set(m) == {"rss", "heapTotal", "heapUsed", "external", "peakRss", "peakHeapUsed"}
    assert all(isinstance(v, int) and v >= 0 for v in m.values())
    assert m["rss"] > 0 and m["rss"] == pytest.approx(scralloc.rss(), rel=0.5)


def test_memory_usage_sums_allocators():
    base = scralloc.memory_usage()
    a, b = scralloc.Allocator(), scralloc.Allocator()
    pa, pb = a.malloc(1000), b.malloc(3000)
    m = scralloc.memory_usage()
    assert m["heapUsed"] - base["heapUsed"] == a.heap_used + b.heap_used
    assert m["heapTotal"] - base["heapTotal"] == a.heap_total + b.heap_total
    assert m["external"] >= base["external"]
    a.free(pa)
    b.free(pb)
    a.close()
    b.close()
    assert scralloc.memory_usage()["heapUsed"] == base["heapUsed"]


def test_process_stats():
    s = scralloc.process_stats()
    if scralloc.HAVE_PROCESS:
        assert set(s) - {"process"} == set(scralloc.STATS_FIELDS) | {"classes", "busy_free_bytes"}
        assert sum(scralloc.heap_parts(s).values()) == s["heap_total"]
        assert len(s["classes"]) == scralloc.CLASS_COUNT
        if "process" in s:
            assert {"arenas", "remote_frees", "discards"} <= set(s["process"])
            # retention: the decay, the huge-block cache, interior return, trims asked
            assert {"decay_delay_ms", "decay_bytes", "refault_bytes", "decay_backoffs", "huge_cache_bytes",
                    "huge_cache_hits", "interior_bytes", "interior_lazy_bytes", "trim_answers",
                    "free_committed", "decay_passes", "lazy_free_pending", "committed",
                    "committed_peak"} <= set(s["process"])
            assert {"dontneed_bytes", "lazy_free_bytes", "purge_passes", "refault_bytes"} <= set(s)
        # memory_usage() counts the process allocator too
        m = scralloc.memory_usage()
        assert m["heapTotal"] >= s["heap_total"] and m["heapUsed"] >= s["heap_used"]
    else:
        assert s is None


# ---- the seed's table -------------------------------------------------------


@pytest.mark.parametrize("size", [64, 4096])
def test_seed_table(size):
    """The seed's pathology (one mmap and munmaps per alloc/free pair) is
    gone with retain=1; retain=0 must still be correct."""
    pairs = 20_000
    calls = {}
    for retain in (0, 1):
        with scralloc.Allocator(retain=retain) as a:
            for _ in range(pairs):
                a.free(a.malloc(size))
            s = a.stats()
            calls[retain] = s["mmap_calls"] + s["munmap_calls"] + s["madvise_calls"]
            assert s["allocs"] == 0
            if retain:
                assert s["mmap_calls"] <= 2 and s["munmap_calls"] == 0
                assert (s["mmaps"], s["bytes"]) == (1, scralloc.PAGE_SIZE) or s["mmaps"] == 1
            a.trim()
            assert (a.allocs, a.mmaps, a.bytes) == (0, 0, 0)
    assert calls[1] <= calls[0]
