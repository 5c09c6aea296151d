#!/bin/sh
# make install for real: into a scratch DESTDIR (with PREFIX), and into a
# scratch PREFIX; a program built with `pkg-config --cflags --libs scralloc`
# must run with the C library's malloc and a working scr_* API, and the
# same program linked with -lscralloc (the drop-in) must get scralloc's.
set -eu
cd "$(git rev-parse --show-toplevel)"
CC=${CC:-cc}
MAKE=${MAKE:-make}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. DESTDIR staging, as a package build does: the .pc file names PREFIX,
#    pkg-config finds the staged files through PKG_CONFIG_SYSROOT_DIR
$MAKE --no-print-directory -s install DESTDIR="$work/stage" PREFIX=/opt/scr >/dev/null
for f in include/scralloc.h lib/libscralloc.a lib/libscralloc.so lib/libscralloc-api.so \
         lib/libscralloc-api.so.0 lib/pkgconfig/scralloc.pc; do
  [ -e "$work/stage/opt/scr/$f" ] || fail "make install did not install $f"
done
grep -q '^prefix=/opt/scr$' "$work/stage/opt/scr/lib/pkgconfig/scralloc.pc" ||
  fail "scralloc.pc does not name PREFIX"
nm -D --defined-only "$work/stage/opt/scr/lib/libscralloc-api.so" | grep -qw scr_heap_new ||
  fail "libscralloc-api.so lacks scr_heap_new"
if nm -D --defined-only "$work/stage/opt/scr/lib/libscralloc-api.so" | grep -qwE 'malloc|free'; then
  fail "libscralloc-api.so defines malloc or free"
fi
flags=$(PKG_CONFIG_PATH="$work/stage/opt/scr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$work/stage" \
        pkg-config --cflags --libs scralloc)
$CC -o "$work/prog" tests/install/api_program.c $flags -ldl
out=$(LD_LIBRARY_PATH="$work/stage/opt/scr/lib" "$work/prog") || fail "the program failed: $out"
echo "$out" | sed 's/^/      /'
echo "$out" | grep -q "^malloc from the C library; scralloc owns malloc's block: no; process allocator live blocks: 0$" ||
  fail "a program built with pkg-config does not keep the C library's malloc"
echo "ok    DESTDIR install: pkg-config build keeps the C library's malloc, the scr_* API works"

# 2. the same program linked with the drop-in gets scralloc's malloc (what
#    the check above would see if scralloc.pc pointed at libscralloc.so)
$CC -o "$work/prog-dropin" tests/install/api_program.c -I"$work/stage/opt/scr/include" \
    -L"$work/stage/opt/scr/lib" -lscralloc -ldl
out=$(LD_LIBRARY_PATH="$work/stage/opt/scr/lib" "$work/prog-dropin") || fail "drop-in program: $out"
echo "$out" | grep -q "^malloc from libscralloc.so; scralloc owns malloc's block: yes" ||
  fail "linked with -lscralloc, malloc is not scralloc's: $out"
echo "ok    linked with -lscralloc instead, malloc is scralloc's (the drop-in)"

# 3. a plain PREFIX install, found with PKG_CONFIG_PATH, run without
#    LD_LIBRARY_PATH through the libdir the .pc file gives
$MAKE --no-print-directory -s install PREFIX="$work/prefix" >/dev/null
pc="$work/prefix/lib/pkgconfig"
libdir=$(PKG_CONFIG_PATH="$pc" pkg-config --variable=libdir scralloc)
[ "$libdir" = "$work/prefix/lib" ] || fail "libdir is $libdir"
$CC -o "$work/prog2" tests/install/api_program.c $(PKG_CONFIG_PATH="$pc" pkg-config --cflags --libs scralloc) \
    -Wl,-rpath,"$libdir" -ldl
"$work/prog2" | grep -q "^malloc from the C library" || fail "PREFIX install"
$MAKE --no-print-directory -s uninstall PREFIX="$work/prefix" >/dev/null
left=$(find "$work/prefix" -type f)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "ok    PREFIX install, pkg-config, rpath from libdir; make uninstall removes every file"
