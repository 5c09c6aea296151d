"""Build the scralloc Python package (the C extension scralloc._scralloc).

The extension compiles three sources: the core's unity file
core/src/static.c, the binding bindings/python/_scralloc.c, and
bindings/python/_serve.c (serve_python: Python's own allocations on a heap);
the binding includes only the public header core/include/scralloc.h.

Build flavours, chosen by environment variables at build time:

  (default)               release: -O2 -DNDEBUG -DSCR_DEBUG=0
  SCRALLOC_DEBUG_BUILD=1  checked: -O1 -g -UNDEBUG -DSCR_DEBUG=3 (the core's
                          validators run at every state change); the tests
                          use this one (see mk/python.mk)
  SCRALLOC_WERROR=1       add -Werror

The extension never defines SCR_OVERRIDE: importing scralloc must not
replace the process's malloc.
"""
import os
import re
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.join("core", "include", "scralloc.h")


def _flag(name):
    return os.environ.get(name, "").strip().lower() not in ("", "0", "no", "false", "off")


def _read_header():
    with open(os.path.join(HERE, HEADER), encoding="utf-8") as f:
        return f.read()


def _version(header):
    m = re.search(r'#define\s+SCR_VERSION\s+"([^"]+)"', header)
    if not m:
        raise RuntimeError("SCR_VERSION not found in " + HEADER)
    return m.group(1)


def _have_process(header):
    # The process allocator declares `void scr_stats(struct scr_stats *out)`
    # (or defines SCR_HAVE_PROCESS itself).
    if re.search(r"#\s*define\s+SCR_HAVE_PROCESS\b", header):
        return False  # the header says so; do not redefine it
    return re.search(r"\bscr_stats\s*\(\s*struct\s+scr_stats\s*\*", header) is not None


def _core_files():
    out = [HEADER]
    for root, _dirs, files in os.walk(os.path.join("core", "src")):
        for name in sorted(files):
            if name.endswith((".c", ".h")):
                out.append(os.path.join(root, name))
    return sorted(out)


header = _read_header()
debug = _flag("SCRALLOC_DEBUG_BUILD")

warnings = ["-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes",
            "-Wmissing-prototypes", "-Wno-unused-parameter"]
compile_args = ["-std=gnu11", "-fvisibility=hidden", "-pthread"]
link_args = ["-pthread"]
macros = []
undef = ["SCR_OVERRIDE"]

if sys.platform.startswith("win"):
    raise SystemExit("scralloc: Windows is not supported")

compile_args += warnings
if debug:
    compile_args += ["-O1", "-g", "-UNDEBUG"]
    macros.append(("SCR_DEBUG", "3"))
else:
    compile_args += ["-O2"]
    macros += [("SCR_DEBUG", "0"), ("NDEBUG", None)]
if _flag("SCRALLOC_WERROR"):
    compile_args.append("-Werror")
if _have_process(header):
    macros.append(("SCR_HAVE_PROCESS", "1"))


# The release build pads jumps off 32-byte boundaries where the assembler
# can, as the Makefile's JCC_PAD does for the C library: on x86 cores with
# the JCC erratum a jump that crosses or ends on one leaves the decoded-
# instruction cache, and the heap's hit paths then run slower or faster as
# unrelated code moves them (docs/process.md).
JCC_PAD = "-Wa,-mbranches-within-32B-boundaries"


def _assembler_pads_jumps(cc):
    try:
        return subprocess.run([cc, JCC_PAD, "-x", "c", "-c", os.devnull, "-o", os.devnull],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False


class BuildExt(build_ext):
    """On Linux, export PyInit__scralloc only: the scr_* symbols stay
    private to the extension, so it cannot clash with libscralloc.so or
    the Lua module loaded in the same process."""

    def build_extension(self, ext):
        if not debug and _assembler_pads_jumps(self.compiler.compiler_so[0]):
            ext.extra_compile_args = list(ext.extra_compile_args) + [JCC_PAD]
        if sys.platform.startswith("linux"):
            os.makedirs(self.build_temp, exist_ok=True)
            path = os.path.join(self.build_temp, "scralloc-exports.map")
            with open(path, "w", encoding="ascii") as f:
                f.write("{ global: PyInit__scralloc; local: *; };\n")
            ext.extra_link_args = list(ext.extra_link_args) + ["-Wl,--version-script=" + path]
        super().build_extension(ext)


ext = Extension(
    "scralloc._scralloc",
    sources=["core/src/static.c", "bindings/python/_scralloc.c", "bindings/python/_serve.c"],
    include_dirs=["core/include", "core/src"],
    define_macros=macros,
    undef_macros=undef,
    extra_compile_args=compile_args,
    extra_link_args=link_args,
    depends=_core_files() + ["bindings/python/_serve.h"],
)

setup(
    version=_version(header),
    package_dir={"": "bindings/python"},
    packages=["scralloc"],
    package_data={"scralloc": ["__init__.pyi", "py.typed"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
)
