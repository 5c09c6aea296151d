#!/bin/sh
# The LuaRocks package, built for real from a copy of this checkout:
#   - `luarocks make` leaves the copy exactly as it was (no object file,
#     no scralloc.so, nothing ignored by git either);
#   - the installed module loads with require and works;
#   - it exports luaopen_scralloc and nothing else (nm -D).
# Usage: tests/lua/test_rock.sh [lua interpreter]   (skipped without luarocks)
set -eu
LUA=${1:-lua5.4}
if ! command -v luarocks >/dev/null 2>&1; then
  echo "skipped: luarocks is not installed"; exit 0
fi
top=$(git rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# the tracked and new files of this checkout, as a fresh repository
mkdir "$work/src"
(cd "$top" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 sh -c 'for f; do [ -e "$f" ] && cp --parents "$f" "$0"; done' "$work/src")
cd "$work/src"
git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm copy
luarocks --lua-version 5.4 make --tree "$work/rocks" scralloc-0.1.0-1.rockspec >"$work/log" 2>&1 ||
  { cat "$work/log"; echo "FAIL: luarocks make"; exit 1; }
left=$(git status --porcelain --ignored)
if [ -n "$left" ]; then
  echo "FAIL: luarocks make left files in the checkout:"; echo "$left"; exit 1
fi
echo "ok    luarocks make leaves the checkout as it was"
so="$work/rocks/lib/lua/5.4/scralloc.so"
# as docs/lua.md says to use a tree of one's own: `luarocks path` sets
# LUA_PATH and LUA_CPATH (and PATH) for it
out=$(cd / && unset LUA_PATH LUA_CPATH LUA_PATH_5_4 LUA_CPATH_5_4 &&
  eval "$(luarocks --lua-version 5.4 --tree "$work/rocks" path)" && "$LUA" -e '
  local s = require "scralloc"
  local a <close> = s.new { retain = 0 }
  local p = a:malloc(100); a:write(p, "rock"); local r = a:read(p, 4); a:free(p)
  print(r, a.allocs, package.searchpath("scralloc", package.cpath))')
[ "$out" = "rock	0	$so" ] || { echo "FAIL: require from the tree printed '$out'"; exit 1; }
echo "ok    require \"scralloc\" from the rock tree works, with the paths of luarocks path"
exported=$(nm -D --defined-only "$so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exported" = "luaopen_scralloc " ] ||
  { echo "FAIL: the rock exports: $exported"; exit 1; }
echo "ok    the rock exports luaopen_scralloc only"
