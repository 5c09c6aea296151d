"""Every error the binding can raise, and the allocator stays usable after
each one (the core's validator runs after every case)."""
import warnings

import pytest

import scralloc
from scralloc import _scralloc

ADDRESS_METHODS = ["free", "usable_size", "check", "view", "realloc"]


def call(a, method, addr):
    if method == "realloc":
        return a.realloc(addr, 32)
    return getattr(a, method)(addr)


def still_usable(a):
    a.validate()
    p = a.malloc(48)
    a.view(p)[:2] = b"ok"
    a.free(p)
    a.validate()


def test_error_hierarchy():
    assert issubclass(scralloc.InvalidPointerError, ValueError)
    assert issubclass(scralloc.DoubleFreeError, scralloc.InvalidPointerError)
    assert scralloc.InvalidPointerError.__module__ == "scralloc"
    assert scralloc.InvalidPointerError.address is None


@pytest.mark.parametrize("method", ADDRESS_METHODS)
def test_foreign_address(a, method):
    other = scralloc.Allocator()
    q = other.malloc(64)
    big = other.malloc(2 << 20)
    for addr in (q, big, 0x1000, id(a), 0xFFFF_FFFF_FFF0):
        with pytest.raises(scralloc.InvalidPointerError) as e:
            call(a, method, addr)
        assert type(e.value) is scralloc.InvalidPointerError
        assert e.value.address == addr
        assert e.value.reason == "foreign" and e.value.code == _scralloc.SCR_EFOREIGN
        assert hex(addr)[2:] in str(e.value)
    assert a.owns(q) is False
    other.free(q)
    other.free(big)
    other.close()
    still_usable(a)


@pytest.mark.parametrize("method", ADDRESS_METHODS)
def test_interior_address(a, method):
    p = a.malloc(256)
    big = a.malloc(2 << 20)
    for addr in (p + 16, p + 1, p + 255, big + 4096, big + 1):
        with pytest.raises(scralloc.InvalidPointerError) as e:
            call(a, method, addr)
        assert e.value.reason == "interior" and e.value.code == _scralloc.SCR_EINTERIOR
    assert a.allocs == 2
    a.check(p)
    a.free(p)
    a.free(big)
    still_usable(a)


@pytest.mark.parametrize("method", ADDRESS_METHODS)
def test_never_allocated(a, method):
    p = a.malloc(64)
    size = a.usable_size(p)
    never = p + 10 * size  # a slot of p's page that was never handed out
    with pytest.raises(scralloc.InvalidPointerError) as e:
        call(a, method, never)
    assert e.value.reason == "not allocated" and e.value.code == _scralloc.SCR_ENOTALLOC
    a.free(p)
    still_usable(a)


@pytest.mark.parametrize("method", ADDRESS_METHODS)
def test_double_free(a, method):
    keep = a.malloc(64)  # keeps the page in use
    p = a.malloc(64)
    a.free(p)
    with pytest.raises(scralloc.DoubleFreeError) as e:
        call(a, method, p)
    assert e.value.address == p and e.value.reason == "double free"
    assert e.value.code == _scralloc.SCR_EDOUBLEFREE
    assert isinstance(e.value, ValueError)
    assert a.allocs == 1
    a.free(keep)
    still_usable(a)


def test_double_free_large(a):
    p = a.malloc(3 << 20)
    a.free(p)
    with pytest.raises(scralloc.InvalidPointerError):
        a.free(p)
    still_usable(a)


def test_null_address(a):
    a.free(0)
    assert a.usable_size(0) == 0
    assert a.owns(0) is False
    for method in ("check", "view"):
        with pytest.raises(scralloc.InvalidPointerError):
            getattr(a, method)(0)


@pytest.mark.parametrize("method", ADDRESS_METHODS)
@pytest.mark.parametrize("addr", [-1, -(2**70), 2**64, 2**100])
def test_impossible_address(a, method, addr):
    with pytest.raises(scralloc.InvalidPointerError):
        call(a, method, addr)
    assert a.owns(addr) is False
    still_usable(a)


@pytest.mark.parametrize("method", ADDRESS_METHODS)
@pytest.mark.parametrize("addr", ["0x10", 1.5, None, b"x"])
def test_address_type(a, method, addr):
    with pytest.raises(TypeError):
        call(a, method, addr)


def test_bad_sizes(a):
    for f in (lambda: a.malloc(-1), lambda: a.calloc(-1, 8), lambda: a.calloc(8, -1),
              lambda: a.realloc(0, -5), lambda: a.aligned_alloc(16, -1),
              lambda: a.aligned_alloc(-16, 8), lambda: a.malloc(-(2**80))):
        with pytest.raises(ValueError):
            f()
    for f in (lambda: a.malloc(2**63), lambda: a.malloc(2**200), lambda: a.calloc(2**40, 2**40),
              lambda: a.realloc(0, 2**64), lambda: a.aligned_alloc(16, 2**64)):
        with pytest.raises(OverflowError):
            f()
    for f in (lambda: a.malloc("1"), lambda: a.malloc(1.0), lambda: a.calloc(1), lambda: a.calloc(1, 2, 3),
              lambda: a.realloc(0), lambda: a.aligned_alloc(16)):
        with pytest.raises(TypeError):
            f()
    still_usable(a)


@pytest.mark.parametrize("alignment", [0, 3, 24, 100, 2**40 + 1])
def test_bad_alignment(a, alignment):
    with pytest.raises(ValueError):
        a.aligned_alloc(alignment, 64)
    still_usable(a)


def test_absurd_but_representable_sizes(a):
    """Sizes a Py_ssize_t can hold but no machine can give: MemoryError."""
    for f in (lambda: a.malloc(2**62), lambda: a.calloc(2**31, 2**31),
              lambda: a.aligned_alloc(4096, 2**62), lambda: a.aligned_alloc(2**62, 64)):
        with pytest.raises(MemoryError):
            f()
    p = a.malloc(64)
    with pytest.raises(MemoryError):
        a.realloc(p, 2**62)
    a.check(p)  # untouched
    a.free(p)
    still_usable(a)


def test_limit_bytes():
    with scralloc.Allocator(limit_bytes=1 << 20) as a:
        with pytest.raises(MemoryError):
            a.malloc(2 << 20)
        p = a.malloc(1000)
        data = bytes(range(256)) * 3
        a.view(p)[: len(data)] = data
        with pytest.raises(MemoryError):
            a.realloc(p, 4 << 20)
        with a.view(p) as mv:
            assert bytes(mv[: len(data)]) == data
        a.free(p)
        still_usable(a)


def test_os_failure_injection():
    """A refused mmap is a MemoryError and leaves the heap consistent."""
    a = scralloc.Allocator()
    scralloc.debug_fail_os_call(1)
    with pytest.raises(MemoryError):
        a.malloc(64)  # a fresh heap needs a segment
    scralloc.debug_fail_os_call(0)
    assert a.allocs == 0
    still_usable(a)
    scralloc.debug_fail_os_call(1)
    with pytest.raises(MemoryError):
        a.malloc(8 << 20)  # a dedicated mapping
    scralloc.debug_fail_os_call(0)
    still_usable(a)
    stats = a.stats()
    assert stats["os_failures"] >= 2
    a.close()


def test_os_failure_while_creating():
    scralloc.debug_fail_os_call(1)
    try:
        a = scralloc.Allocator()
    except MemoryError:
        a = None
    finally:
        scralloc.debug_fail_os_call(0)
    if a is not None:  # the heap descriptor did not need the OS
        still_usable(a)
        a.close()


def test_os_failure_in_trim_and_close():
    """Failing munmap/madvise calls cannot raise (the core reports them, as
    a ScrallocWarning); counters stay consistent and nothing crashes."""
    reports = []
    for n in range(1, 6):
        a = scralloc.Allocator(retain=1)
        ps = [a.malloc(s) for s in (64, 5000, 3 << 20)]
        for p in ps:
            a.free(p)
        calls = scralloc.debug_os_calls()
        scralloc.debug_fail_os_call(n)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            a.trim()
        reports += [str(w.message) for w in seen if w.category is scralloc.ScrallocWarning]
        scralloc.debug_fail_os_call(0)
        assert scralloc.debug_os_calls() >= calls
        a.validate()
        still_usable(a)
        a.trim()
        a.close()
    assert any("munmap" in r for r in reports), reports


def test_debug_hooks_arguments():
    with pytest.raises(ValueError):
        scralloc.debug_fail_os_call(-1)
    assert scralloc.debug_os_calls() > 0


def test_buffer_errors_are_buffer_errors(a):
    p = a.malloc(64)
    mv = a.view(p)
    for f in (lambda: a.free(p), lambda: a.realloc(p, 128), lambda: a.close()):
        with pytest.raises(BufferError):
            f()
    mv.release()
    a.free(p)
    still_usable(a)
