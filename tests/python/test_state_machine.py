"""A Hypothesis state machine that drives one Allocator against a model.

Rules allocate (malloc, calloc, aligned_alloc, realloc; sizes up to 4 MiB),
fill blocks with a pattern derived from their address, free, trim, take
views, inject OS failures and try bad frees.  After every step the
invariants check that the counters equal the model, that live blocks never
overlap and are aligned, that usable_size covers the request, that contents
survive realloc and other blocks' frees, and that with nothing live a trim
brings mmaps and bytes to zero.

Bounded by the `ci` profile in conftest.py; SCRALLOC_HYPOTHESIS_LONG=1 runs
the `long` profile.
"""
import struct

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, initialize

import scralloc

KiB, MiB = 1 << 10, 1 << 20
MAX_LIVE = 24
EDGE = 64  # bytes checked at each end of every block after every step

sizes = st.one_of(
    st.integers(0, 256),
    st.sampled_from(scralloc.SIZE_CLASSES),
    st.integers(257, scralloc.SMALL_MAX + 64),
    st.integers(scralloc.SMALL_MAX, 1 * MiB + 4 * KiB),
    st.integers(1 * MiB, 4 * MiB),
)
alignments = st.sampled_from([1, 8, 16, 32, 64, 128, 512, 4 * KiB, 16 * KiB, 64 * KiB, 256 * KiB, 1 * MiB])


def pattern(seed, n):
    """n bytes derived from seed (a block's address), cheap for MiB."""
    word = struct.pack("<Q", (seed * 0x9E3779B97F4A7C15 + 0x5BD1E995) & (2**64 - 1))
    return (word * (n // 8 + 1))[:n]


class Block:
    __slots__ = ("addr", "size", "align")

    def __init__(self, addr, size, align):
        self.addr = addr  # also the seed of its contents
        self.size = size  # requested size
        self.align = align  # requested alignment

    def __repr__(self):
        return f"Block({self.addr:#x}, size={self.size}, align={self.align})"

    @property
    def data(self):
        """Expected contents of the first `size` bytes."""
        return pattern(self.addr, self.size)


class HeapMachine(RuleBasedStateMachine):
    @initialize(
        retain=st.integers(0, 3),
        large_cache=st.sampled_from([0, 1, 8]),
        limited=st.booleans(),
        # 10 minutes: passes come due only when time_passes moves the clock,
        # so the heap (and what is drawn from it) replays exactly
        purge_delay_ms=st.sampled_from([0, 0, 600_000]),
        decommit_batch=st.sampled_from([0, 0, 128 * 1024, MiB]),
        retain_bytes=st.sampled_from([None, 0, 64 * 1024, 8 * MiB]),  # None: the default, no cap
    )
    def start(self, retain, large_cache, limited, purge_delay_ms, decommit_batch, retain_bytes):
        self.limit = 12 * MiB if limited else 0
        capped = {} if retain_bytes is None else {"retain_bytes": retain_bytes}
        self.a = scralloc.Allocator(retain=retain, large_cache=large_cache, limit_bytes=self.limit,
                                    purge_delay_ms=purge_delay_ms, decommit_batch=decommit_batch, **capped)
        self.other = scralloc.Allocator()
        self.foreign = self.other.malloc(100)
        self.live = {}  # addr -> Block
        self.freed = []  # recently freed addresses
        self.injected = False

    def teardown(self):
        if hasattr(self, "a"):
            scralloc.debug_fail_os_call(0)
            self.a.validate()
            self.a.close()
            self.other.close()

    # ---- helpers ----

    def may_fail(self):
        """A MemoryError is legitimate only under a byte limit or an
        injected OS failure."""
        return self.limit != 0 or self.injected

    def adopt(self, addr, size, align, zeroed=False):
        assert addr not in self.live, "address handed out twice"
        if zeroed:
            with self.a.view(addr) as mv:
                assert mv[:size] == bytes(size), "calloc block not zeroed"
        data = pattern(addr, size)
        with self.a.view(addr) as mv:
            mv[:size] = data
        self.live[addr] = Block(addr, size, align)
        if addr in self.freed:
            self.freed.remove(addr)

    def check_contents(self, b):
        with self.a.view(b.addr) as mv:
            assert mv[: b.size] == b.data, f"block {b.addr:#x} ({b.size} B) was overwritten"

    def forget(self, addr):
        del self.live[addr]
        self.freed.append(addr)
        del self.freed[:-8]

    def pick(self, data):
        return self.live[data.draw(st.sampled_from(sorted(self.live)), label="block")]

    # ---- allocation rules ----

    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(size=sizes)
    def malloc(self, size):
        try:
            p = self.a.malloc(size)
        except MemoryError:
            assert self.may_fail()
            return
        self.adopt(p, size, scralloc.MIN_ALIGN)

    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(count=st.integers(0, 64), size=sizes)
    def calloc(self, count, size):
        size //= max(count, 1)
        try:
            p = self.a.calloc(count, size)
        except MemoryError:
            assert self.may_fail()
            return
        self.adopt(p, count * size, scralloc.MIN_ALIGN, zeroed=True)

    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(alignment=alignments, size=sizes)
    def aligned_alloc(self, alignment, size):
        try:
            p = self.a.aligned_alloc(alignment, size)
        except MemoryError:
            assert self.may_fail()
            return
        self.adopt(p, size, max(alignment, scralloc.MIN_ALIGN))

    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(size=sizes)
    def realloc_null(self, size):
        try:
            p = self.a.realloc(0, size)
        except MemoryError:
            assert self.may_fail()
            return
        self.adopt(p, size, scralloc.MIN_ALIGN)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), size=sizes)
    def realloc(self, data, size):
        b = self.pick(data)
        self.check_contents(b)
        try:
            q = self.a.realloc(b.addr, size)
        except MemoryError:
            assert self.may_fail()
            self.check_contents(b)  # untouched
            return
        del self.live[b.addr]
        if size == 0:
            assert q == 0
            self.freed.append(b.addr)
            return
        keep = min(b.size, size)
        with self.a.view(q) as mv:
            assert mv[:keep] == pattern(b.addr, keep), "realloc lost the contents"
        if q != b.addr:
            self.freed.append(b.addr)
        self.adopt(q, size, scralloc.MIN_ALIGN)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        b = self.pick(data)
        self.check_contents(b)
        self.a.free(b.addr)
        self.forget(b.addr)

    @rule()
    def trim(self):
        before = self.a.bytes
        given = self.a.trim()
        assert 0 <= given <= before
        s = self.a.stats()
        assert s["retained_pages"] == 0 and s["cached_blocks"] == 0 and s["dirty_bytes"] == 0

    @rule(ms=st.sampled_from([100_000, 300_000, 600_000]))
    def time_passes(self, ms):
        # purge passes come due at the next page-level call
        scralloc.debug_advance_clock(ms)
        s = self.a.stats()
        # (pages waiting for the batched decommit count in dirty_bytes, past
        # retain_bytes by definition)
        if self.a.options["decommit_batch"] == 0:
            assert s["retained_bytes"] + s["dirty_bytes"] <= self.a.options["retain_bytes"]

    # ---- views ----

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def view_blocks_free(self, data):
        b = self.pick(data)
        mv = self.a.view(b.addr)
        assert len(mv) == self.a.usable_size(b.addr)
        with pytest.raises(BufferError):
            self.a.free(b.addr)
        with pytest.raises(BufferError):
            self.a.realloc(b.addr, b.size + 1)
        with pytest.raises(BufferError):
            self.a.close()
        mv.release()
        assert self.a.exports == 0

    # ---- bad input ----

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free_interior(self, data):
        b = self.pick(data)
        usable = self.a.usable_size(b.addr)
        if usable < 2:
            return
        off = data.draw(st.integers(1, usable - 1), label="offset")
        with pytest.raises(scralloc.InvalidPointerError) as e:
            self.a.free(b.addr + off)
        assert e.value.reason == "interior", e.value

    @precondition(lambda self: self.freed)
    @rule(data=st.data())
    def free_again(self, data):
        addr = data.draw(st.sampled_from(self.freed), label="freed")
        if addr in self.live:
            return
        with pytest.raises(scralloc.InvalidPointerError):
            self.a.free(addr)

    @rule(addr=st.one_of(st.integers(1, 2**48), st.just(-1), st.just(2**64)))
    def free_wild(self, addr):
        if any(b.addr <= addr < b.addr + max(self.a.usable_size(b.addr), 1) for b in self.live.values()):
            return
        with pytest.raises(scralloc.InvalidPointerError):
            self.a.free(addr)

    @rule()
    def free_foreign(self):
        with pytest.raises(scralloc.InvalidPointerError) as e:
            self.a.free(self.foreign)
        assert e.value.reason == "foreign"

    # ---- OS failures ----

    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(n=st.integers(1, 3), size=sizes)
    def malloc_with_os_failure(self, n, size):
        self.injected = True
        scralloc.debug_fail_os_call(n)
        try:
            p = self.a.malloc(size)
        except MemoryError:
            p = None
        finally:
            scralloc.debug_fail_os_call(0)
            self.injected = False
        if p is not None:
            self.adopt(p, size, scralloc.MIN_ALIGN)

    # ---- invariants ----

    @invariant()
    def counters_match_model(self):
        s = self.a.stats()
        assert self.a.allocs == s["allocs"] == len(self.live)
        assert s["mmaps"] == self.a.mmaps and s["bytes"] == self.a.bytes
        used = sum(self.a.usable_size(p) for p in self.live)
        assert s["heap_used"] == used
        assert s["heap_total"] >= s["heap_used"]
        assert sum(c["live"] for c in s["classes"]) == s["allocs"] - s["large_allocs"]
        assert sum(scralloc.heap_parts(s).values()) == s["heap_total"]

    @invariant()
    def block_kinds_match_model(self):
        # the Allocator's own blocks, as the binding tracks them apart from
        # the blocks serve_python() makes for Python's objects
        assert all(self.a.block_kind(p) == "allocator" for p in self.live)
        assert all(self.a.block_kind(p) is None for p in self.freed if p not in self.live)

    @invariant()
    def blocks_disjoint_aligned_sized(self):
        end = 0
        for p in sorted(self.live):
            b = self.live[p]
            usable = self.a.usable_size(p)
            assert usable >= b.size
            assert p % b.align == 0 and p % scralloc.MIN_ALIGN == 0
            assert p >= end, f"block {p:#x} overlaps the previous one"
            end = p + max(usable, 1)

    @invariant()
    def contents_survive(self):
        for b in self.live.values():
            if b.size <= 2 * EDGE:
                self.check_contents(b)
                continue
            start = (b.size - EDGE) & ~7  # the pattern is 8-periodic
            with self.a.view(b.addr) as mv:
                assert mv[:EDGE] == pattern(b.addr, EDGE)
                assert mv[start : b.size] == pattern(b.addr, b.size - start)

    @invariant()
    def empty_trim_gives_all_back(self):
        if not self.live:
            self.a.trim()
            assert (self.a.allocs, self.a.mmaps, self.a.bytes) == (0, 0, 0)

    @invariant()
    def heap_validates(self):
        self.a.validate()
        assert self.a.exports == 0


TestHeapMachine = HeapMachine.TestCase
