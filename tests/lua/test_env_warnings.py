"""The environment seen from Lua: scralua and scralloc.new{env = true}
warn of a misspelt SCRALLOC_ variable as the preload library does (the
core's scr_options_from_env says it), and scralua's report is not turned
on by a SCRALLOC_STATS value that is none of its values.

    python3 tests/lua/test_env_warnings.py SCRALUA MODULE_DIR LUA
"""
import os
import subprocess
import sys

RETIAN = "scralloc: ignoring SCRALLOC_RETIAN (no such option; the closest is SCRALLOC_RETAIN)"


def run(argv, extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUA_", "SCRALLOC_"))}
    env.update(extra)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def main():
    scralua, module_dir, lua = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    fail = 0

    def check(name, ok, p):
        nonlocal fail
        print(f"ok {name}" if ok else f"FAIL {name}: status {p.returncode}, stderr {p.stderr!r}")
        fail |= not ok

    p = run([scralua, "-e", "print(1)"], {"SCRALLOC_RETIAN": "1"})
    check("scralua-misspelt-name", p.returncode == 0 and p.stderr.splitlines() == [RETIAN], p)
    p = run([lua, "-e", 'local s = require "scralloc"; local a <close> = s.new{env = true}'],
            {"SCRALLOC_RETIAN": "1", "LUA_CPATH": f"{module_dir}/?.so;;"})
    check("new-env-misspelt-name", p.returncode == 0 and p.stderr.splitlines() == [RETIAN], p)
    p = run([scralua, "-e", "print(1)"], {"SCRALLOC_STATS": "lots"})
    check("scralua-stats-bad-value", p.returncode == 0 and p.stderr.splitlines() == [
        "scralua: ignoring SCRALLOC_STATS=lots (not a valid value: 0, 1, 2, on, off or json)"], p)
    p = run([scralua, "-e", "print(1)"], {"SCRALLOC_STATS": "off"})
    check("scralua-stats-off", p.returncode == 0 and p.stderr == "", p)
    p = run([scralua, "-e", "print(1)"], {"SCRALLOC_STATS": "on"})
    check("scralua-stats-on", p.returncode == 0 and "scralua: heap at exit:" in p.stderr, p)
    return fail


if __name__ == "__main__":
    sys.exit(main())
