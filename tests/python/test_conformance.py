"""The package behaves as CPython's own objects do: signatures inspect, the
stub matches the module, errors have public codes, an object dropped open
warns, the core's reports are warnings, a with block never hides its own
exception, and misuse of __init__/__exit__ is an error."""
import gc
import inspect
import os
import subprocess
import sys
import warnings

import pytest

import scralloc
from scralloc import _scralloc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
PKG_PARENT = os.path.dirname(os.path.dirname(scralloc.__file__))


def open_allocators():
    return _scralloc._heap_totals()["allocators"]


# ---- signatures ----------------------------------------------------------

SIGNATURES = {
    "malloc": "(size, /)",
    "calloc": "(count, size, /)",
    "aligned_alloc": "(alignment, size, /)",
    "realloc": "(addr, size, /)",
    "free": "(addr, /)",
    "usable_size": "(addr, /)",
    "check": "(addr, /)",
    "owns": "(addr, /)",
    "block_kind": "(addr, /)",
    "view": "(addr, /)",
    "trim": "()",
    "stats": "()",
    "stats_json": "()",
    "validate": "()",
    "close": "()",
    "__enter__": "()",
    "__exit__": "(exc_type, exc, tb, /)",
    "from_env": "(**options)",
    "serve_python": "(domains=('mem', 'obj'))",
    "reset_peak": "()",
    "profile": "(*, native=True, peak=False)",
    "watch_peak": "(from_bytes, /)",
    "write_profile": "(path, format='folded', *, native=False)",
}


def test_every_method_has_a_signature(a):
    methods = [n for n, v in vars(scralloc.Allocator).items()
               if callable(v) and (not n.startswith("__") or n in ("__enter__", "__exit__"))]
    assert set(methods) == set(SIGNATURES), "a method without an expected signature"
    for name, text in SIGNATURES.items():
        assert str(inspect.signature(getattr(a, name))) == text, name


def test_class_signature_lists_every_option_with_its_default():
    sig = inspect.signature(scralloc.Allocator)
    assert list(sig.parameters) == list(scralloc.OPTIONS)
    for name, p in sig.parameters.items():
        assert p.kind is inspect.Parameter.KEYWORD_ONLY
        assert p.default == scralloc.OPTIONS[name]["default"], name


def test_every_module_function_has_a_signature():
    for name in scralloc.__all__:
        obj = getattr(scralloc, name)
        if callable(obj) and not isinstance(obj, type):
            inspect.signature(obj)  # raises ValueError when there is none
    assert str(inspect.signature(scralloc.size_class)) == "(size, /)"
    assert str(inspect.signature(scralloc.process_stats)) == "()"


# ---- the stub ------------------------------------------------------------

def test_stub_matches_the_module(tmp_path):
    """mypy's stubtest finds no difference between __init__.pyi and the
    module.  CI installs mypy (.ci/install-deps), so it runs there."""
    if os.environ.get("CI"):
        import mypy.stubtest  # noqa: F401  (CI must run it, not skip it)
    else:
        pytest.importorskip("mypy.stubtest")
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "mypy.stubtest", "scralloc"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_stub_all_is_the_module_all():
    with open(os.path.join(os.path.dirname(scralloc.__file__), "__init__.pyi")) as f:
        stub = f.read()
    for name in scralloc.__all__:
        assert f'"{name}"' in stub, name
    assert set(scralloc.__all__) <= set(dir(scralloc))


# ---- error codes ---------------------------------------------------------

def test_error_codes_are_public(a):
    assert issubclass(scralloc.Error, int)
    assert {e.name for e in scralloc.Error} == {
        "OK", "ENOMEM", "EINVAL", "EFOREIGN", "EINTERIOR", "ENOTALLOC", "EDOUBLEFREE"}
    for e in scralloc.Error:
        assert getattr(scralloc, e.name) is e
        assert e == getattr(_scralloc, "SCR_" + e.name)
    assert scralloc.strerror(scralloc.EDOUBLEFREE) == "double free"
    p = a.malloc(64)
    with pytest.raises(scralloc.InvalidPointerError) as info:
        a.free(p + 8)
    assert info.value.code == scralloc.EINTERIOR
    assert scralloc.Error(info.value.code) is scralloc.Error.EINTERIOR
    a.free(p)


def test_addresses_print_in_hex(a):
    with pytest.raises(scralloc.InvalidPointerError, match=r"^check\(0x0\): "):
        a.check(0)
    with pytest.raises(scralloc.InvalidPointerError, match=r"^view\(0x0\): "):
        a.view(0)
    p = a.malloc(64)
    with pytest.raises(scralloc.InvalidPointerError, match=rf"^free\({hex(p + 16)}\): "):
        a.free(p + 16)
    mv = a.view(p)
    with pytest.raises(BufferError, match=hex(p)):
        a.free(p)
    assert hex(p) in repr(mv.obj)
    mv.release()
    a.free(p)


# ---- double free when the page went back --------------------------------

@pytest.mark.parametrize("size", [64, 5000, 100_000, 3 << 20])
def test_double_free_with_retain_0_is_a_double_free(size):
    with scralloc.Allocator(retain=0, large_cache=0, purge_delay_ms=0) as a:
        p = a.malloc(size)
        a.free(p)
        assert a.mmaps == 0  # its page (and segment) went back to the OS
        with pytest.raises(scralloc.DoubleFreeError) as info:
            a.free(p)
        assert info.value.code == scralloc.EDOUBLEFREE and info.value.reason == "double free"
        with pytest.raises(scralloc.DoubleFreeError):
            a.check(p)
        with pytest.raises(scralloc.DoubleFreeError):
            a.realloc(p, 10)
        assert not a.owns(p)
        a.validate()


def test_double_free_on_a_page_given_back_inside_a_live_segment():
    with scralloc.Allocator(retain=0) as a:
        keep = a.malloc(64)  # keeps the segment mapped
        p = a.malloc(5000)
        q = a.malloc(5000)
        a.free(p)
        a.free(q)  # the class's page empties and goes back
        for addr in (q, p):
            with pytest.raises(scralloc.DoubleFreeError):
                a.free(addr)
        with pytest.raises(scralloc.InvalidPointerError) as info:
            a.free(p + 16)  # inside a freed block: still not a double free
        assert info.value.code != scralloc.EDOUBLEFREE
        a.free(keep)


def test_foreign_block_stays_foreign():
    with scralloc.Allocator(retain=0) as a, scralloc.Allocator(retain=0) as b:
        p = b.malloc(64)
        with pytest.raises(scralloc.InvalidPointerError) as info:
            a.free(p)
        assert info.value.code == scralloc.EFOREIGN
        b.free(p)


# ---- an allocator dropped open ------------------------------------------

def test_dropped_open_allocator_warns_and_frees():
    before = open_allocators()
    a = scralloc.Allocator()
    a.malloc(100_000)
    assert open_allocators() == before + 1
    with pytest.warns(ResourceWarning, match="unclosed allocator"):
        del a
        gc.collect()
    assert open_allocators() == before


def test_dropped_allocator_in_a_cycle_warns_and_frees():
    """A live view makes a cycle (allocator -> views -> block -> allocator);
    the garbage collector finds it with the view."""
    before = open_allocators()
    a = scralloc.Allocator()
    mv = a.view(a.malloc(64))
    holder = [mv]
    holder.append(holder)
    del a, mv
    with pytest.warns(ResourceWarning, match="unclosed allocator"):
        del holder
        gc.collect()
    assert open_allocators() == before


def test_closed_or_never_opened_allocator_does_not_warn():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        a = scralloc.Allocator()
        a.close()
        del a
        with scralloc.Allocator():
            pass
        scralloc.Allocator.__new__(scralloc.Allocator)
        gc.collect()
    assert [w for w in seen if issubclass(w.category, ResourceWarning)] == []


# ---- the core's reports are warnings -------------------------------------

def test_bad_environment_value_is_a_warning(monkeypatch, capfd):
    monkeypatch.setenv("SCRALLOC_RETAIN", "lots")
    with pytest.warns(scralloc.ScrallocWarning, match="SCRALLOC_RETAIN=lots") as seen:
        a = scralloc.Allocator.from_env()
    assert seen[0].filename == __file__  # points at the caller
    assert a.options["retain"] == scralloc.OPTIONS["retain"]["default"]
    a.close()
    assert "SCRALLOC_RETAIN" not in capfd.readouterr().err  # nothing raw on fd 2
    assert issubclass(scralloc.ScrallocWarning, RuntimeWarning)


def test_bad_environment_value_under_warnings_as_errors(monkeypatch):
    # names no other test sets: the core warns once per process and name
    monkeypatch.setenv("SCRALLOC_HUGE_THRESHOLD", "huge")
    monkeypatch.setenv("SCRALLOC_LIMIT_BYTES", "none")
    before = open_allocators()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(scralloc.ScrallocWarning, match="SCRALLOC_HUGE_THRESHOLD"):
            scralloc.Allocator.from_env()
    assert open_allocators() == before


def test_bad_environment_value_in_a_fresh_process():
    env = dict(os.environ, SCRALLOC_RETAIN="lots")
    env["PYTHONPATH"] = PKG_PARENT + os.pathsep + env.get("PYTHONPATH", "")
    code = "import scralloc; scralloc.Allocator.from_env().close()"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0
    assert r.stderr.count("SCRALLOC_RETAIN=lots") == 1
    assert "ScrallocWarning" in r.stderr
    r = subprocess.run([sys.executable, "-W", "ignore::scralloc.ScrallocWarning", "-c", code],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == ""


# ---- with blocks and views -----------------------------------------------

def test_with_block_exception_is_not_hidden_by_a_live_view():
    before = open_allocators()
    with pytest.raises(KeyError, match="body"):
        with scralloc.Allocator() as a:
            mv = a.view(a.malloc(64))
            mv[:4] = b"kept"
            raise KeyError("body")
    assert a.closed
    assert bytes(mv[:4]) == b"kept"  # the view still reaches its block
    assert open_allocators() == before + 1  # its memory is still held
    mv.release()
    assert open_allocators() == before  # and goes back with the last view


def test_with_block_without_exception_closes_with_the_last_view():
    before = open_allocators()
    with scralloc.Allocator() as a:
        p = a.malloc(64)
        mv = a.view(p)
        mv2 = a.view(p)
    assert a.closed
    for call in (lambda: a.malloc(1), lambda: a.free(p), lambda: a.view(p), lambda: a.stats()):
        with pytest.raises(ValueError, match="closed"):
            call()
    with pytest.raises(BufferError):
        memoryview(mv.obj)  # no new export from a closed allocator
    a.close()  # nothing to do
    mv.release()
    assert open_allocators() == before + 1
    mv2.release()
    assert open_allocators() == before


# ---- __init__ and __exit__ misuse ---------------------------------------

def test_exit_needs_three_arguments(a):
    for args in ((), (1,), (None, None)):
        with pytest.raises(TypeError):
            a.__exit__(*args)
    assert not a.closed
    assert a.__exit__(None, None, None) is False
    assert a.closed


def test_second_init_is_an_error(a):
    p = a.malloc(64)
    for kwargs in ({}, {"retain": 5}):
        with pytest.raises(RuntimeError, match="already initialized"):
            a.__init__(**kwargs)
    assert a.options["retain"] == scralloc.OPTIONS["retain"]["default"]
    a.free(p)  # the first heap is untouched
    b = scralloc.Allocator.from_env()
    with pytest.raises(RuntimeError):
        b.__init__()
    b.close()
    with pytest.raises(RuntimeError):
        b.__init__()  # closed is not reopened either


def test_new_without_init_is_unusable():
    a = scralloc.Allocator.__new__(scralloc.Allocator)
    with pytest.raises(ValueError, match="__init__"):
        a.malloc(1)
    a.__init__(retain=3)
    assert a.options["retain"] == 3
    a.close()
    with pytest.raises(TypeError):
        scralloc.Allocator(3)


# ---- which build the tests and an editable install use ------------------

def test_source_tree_holds_no_checked_extension():
    """`make test-python` builds the checked extension outside the source
    tree, so an editable install (which imports bindings/python/scralloc)
    cannot pick it up; an extension in place is a release one."""
    src = os.path.join(ROOT, "bindings", "python")
    built = [n for n in os.listdir(os.path.join(src, "scralloc")) if n.startswith("_scralloc.")]
    for name in built:
        r = subprocess.run([sys.executable, "-c", "import scralloc; print(scralloc.DEBUG)"],
                           env=dict(os.environ, PYTHONPATH=src), cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
        assert r.stdout.strip() == "0", f"{name} in the source tree is a checked build"
    if os.environ.get("SCRALLOC_EXPECT_DEBUG", "") not in ("", "0"):
        assert os.path.realpath(os.path.dirname(scralloc.__file__)) != \
            os.path.realpath(os.path.join(src, "scralloc"))
