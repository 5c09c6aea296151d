#!/usr/bin/env bash
# Real programs on scralloc through LD_PRELOAD: python3 (a workload of its
# own and a slice of its standard test suite) and lua5.4.  Each must exit 0
# and SCRALLOC_STATS=1 must show that scralloc served it.
# Usage: tests/preload/run.sh path/to/libscralloc.so
# SCR_PRELOAD_QUICK=1 skips the standard test suite (debug library).
set -euo pipefail
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Preload a private copy: a rebuild of the library while the tests run
# (their subprocesses inherit LD_PRELOAD) must not swap it under them.
cp "$lib" "$tmp/libscralloc.so"
lib=$tmp/libscralloc.so
# The real interpreter, not a wrapper script (pyenv shims are bash).
py=$(python3 -c 'import sys; print(sys.executable)')
fail=0

# The exit report is the measured program's alone: a Python program drops
# SCRALLOC_STATS from its environment at start (sitecustomize), after
# scralloc read it, so that the interpreters it spawns, whose stderr some
# tests check stays empty, print none (a SCRALLOC_STATS_FD they do not
# inherit would send theirs to stderr).
mkdir -p "$tmp/site"
printf 'import os\nos.environ.pop("SCRALLOC_STATS", None)\nos.environ.pop("SCRALLOC_STATS_FD", None)\n' \
  >"$tmp/site/sitecustomize.py"
# run NAME CMD...: runs with the library preloaded, checks exit status and
# that the exit report names at least one arena claim.  The report goes to
# fd 9 (SCRALLOC_STATS_FD), not stderr.
run() {
  local name=$1; shift
  local t0=$SECONDS
  : >"$tmp/stats"
  env LD_PRELOAD="$lib" SCRALLOC_STATS=1 SCRALLOC_STATS_FD=9 PYTHONPATH="$tmp/site${PYTHONPATH:+:$PYTHONPATH}" \
    "$@" >"$tmp/out" 2>"$tmp/err" 9>>"$tmp/stats" &
  local pid=$! status=0
  wait $pid || status=$?
  if [ $status -ne 0 ]; then
    echo "FAIL $name: exit status $status"; tail -n 20 "$tmp/out" "$tmp/err"; fail=1; return
  fi
  # the report of the program's own process (env execs it: same pid)
  local report
  report=$(grep -E "^scralloc\[$pid\]: [0-9]+ arenas" "$tmp/stats" | tail -1 || true)
  if [ -z "$report" ] || ! echo "$report" | grep -qE '[1-9][0-9]* claims'; then
    echo "FAIL $name: no scralloc report"; tail -n 20 "$tmp/stats" "$tmp/err"; fail=1; return
  fi
  echo "ok $name ($((SECONDS - t0)) s): ${report#*: }"
}

run python-workload "$py" "$here/py_workload.py"
run python-workload-pymalloc-off env PYTHONMALLOC=malloc "$py" "$here/py_workload.py"
# The same workload with PYTHONMALLOC=malloc under drawn option sets (as
# tests/c/test_process_fuzz.c draws them): seeds 1-4, or SCR_PRELOAD_SEED;
# the first two of them with SCR_PRELOAD_QUICK.
draw_options() {
  RANDOM=$1
  local draws=(
    "CACHE_BYTES 0 1024 16384 65536"
    "CACHE_MEDIUM 0 2 8" "CACHE_MAX 0 4096 65536" "CACHE_GROW 0 64K 2M"
    "DISCARD 0 1 poison" "DECAY_MAX_MS 5 10000"
    "RETAIN_MAX 0 1M 4M" "DECAY_MS 0 5 1000"
    "RETAIN_BYTES 0 64K 1M" "DECOMMIT_BATCH 0 256K")
  local i d words
  for i in 1 2 3 4 5 6 7 8; do
    d=${draws[RANDOM % ${#draws[@]}]}
    read -ra words <<<"$d"
    printf 'SCRALLOC_%s=%s ' "${words[0]}" "${words[1 + RANDOM % (${#words[@]} - 1)]}"
  done
}
drawn=0
for seed in ${SCR_PRELOAD_SEED:-1 2 3 4}; do
  if [ -n "${SCR_PRELOAD_QUICK:-}" ] && [ $drawn -ge 2 ]; then break; fi
  drawn=$((drawn + 1))
  opts=$(draw_options "$seed")
  # shellcheck disable=SC2086  # the words are NAME=VALUE pairs
  run "python-workload-options-$seed ($opts)" env $opts PYTHONMALLOC=malloc "$py" "$here/py_workload.py"
done
if [ -z "${SCR_PRELOAD_QUICK:-}" ] && "$py" -c 'import test.libregrtest' 2>/dev/null; then
  run python-stdlib-tests "$py" -m test -q --timeout 300 test_list test_dict test_set test_bytes test_unicode \
    test_re test_json test_thread test_queue test_collections test_struct test_array test_deque
else
  echo "skip python-stdlib-tests"
fi
if command -v lua5.4 >/dev/null; then
  run lua5.4 lua5.4 "$here/workload.lua"
else
  echo "skip lua5.4 (not installed)"
fi
run fork-exec "$py" -c '
import os, subprocess, threading
subprocess.run(["ls", "/"], capture_output=True, check=True)
stop = False
def busy():
    while not stop:
        [bytes(i) for i in range(200)]
ts = [threading.Thread(target=busy) for _ in range(3)]
[t.start() for t in ts]
for _ in range(5):  # fork while other threads allocate
    pid = os.fork()
    if pid == 0:
        x = [str(i) * 50 for i in range(20000)]
        os._exit(0 if len(x) == 20000 else 1)
    assert os.waitpid(pid, 0)[1] == 0
stop = True
[t.join() for t in ts]
'
# A bad SCRALLOC_<NAME> value is said on stderr (in every build) and the
# program runs on with the default.
out=$(env LD_PRELOAD="$lib" SCRALLOC_RETAIN_MAX=1T SCRALLOC_RETAIN_BYTES=lots "$py" -c 'print("ran")' 2>"$tmp/err") || true
if [ "$out" = ran ] && grep -q "^scralloc: ignoring SCRALLOC_RETAIN_MAX=1T (not a valid value)$" "$tmp/err" &&
   grep -q "^scralloc: ignoring SCRALLOC_RETAIN_BYTES=lots (not a valid value)$" "$tmp/err"; then
  echo "ok bad-option-warning"
else
  echo "FAIL bad-option-warning: $out"; cat "$tmp/err"; fail=1
fi
exit $fail
