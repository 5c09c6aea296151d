#!/usr/bin/env bash
# The malloc tracer and the replay (bench/malloc_trace.c, malloc_replay.c):
# a threaded python3 run is traced under glibc, every record is replayed
# under scralloc (its exit report must show it served them), and the
# replay's counts match the trace.
# Usage: tests/preload/replay_check.sh path/to/libscralloc.so path/to/bench-dir
set -euo pipefail
lib=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
bin=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=$(python3 -c 'import sys; print(sys.executable)')
SCR_TRACE_OUT="$tmp/py.trace" LD_PRELOAD="$bin/libmalloc_trace.so" "$py" -c '
import json, threading
def work(i):
    d = {str(k): [k] * (k % 50) for k in range(2000)}
    json.loads(json.dumps(d))
ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
for t in ts: t.start()
for t in ts: t.join()
'
records=$(( $(stat -c %s "$tmp/py.trace") / 40 ))
out=$(SCR_REPLAY_PACE=0 SCRALLOC_STATS=1 SCRALLOC_STATS_FD=9 LD_PRELOAD="$lib" "$bin/malloc_replay" "$tmp/py.trace" 9>"$tmp/stats")
echo "$out" | grep -q "^ops=$records threads=4 " || { echo "FAIL replay: '$out' for $records records"; exit 1; }
grep -qE '[1-9][0-9]* claims' "$tmp/stats" || { echo "FAIL replay: no scralloc report"; cat "$tmp/stats"; exit 1; }
echo "ok malloc trace and replay ($records calls, 4 threads): $out"
