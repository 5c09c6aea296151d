"""bench/proc_launch.c, through which bench/proc_bench.py runs every
measured program: the figures it reports are the program's own.

    python3 tests/preload/launch_check.py build/release/bench build/release/libscralloc.so

- A driver holding 96 MiB resident starts a small program through the
  launcher: the program's max RSS is its own (a few MiB), not the
  driver's.  (Forked from the driver directly, Linux counts the driver's
  pages in the program's ru_maxrss; the check prints that figure.)
- A program that touches 48 MiB reports at least that.
- PROC_LAUNCH_PRELOAD reaches the program as LD_PRELOAD and not the
  launcher: exactly one scralloc exit report, from the program.
- The program's exit status comes back in `status`.
"""
import os
import re
import subprocess
import sys

MIB = 1 << 20


def launch(launcher, argv, env_extra=None):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(env_extra or {})
    p = subprocess.run([launcher] + argv, env=env, capture_output=True, text=True, check=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("proc_launch ")]
    assert len(lines) == 1, f"expected one report line, got {p.stdout!r}"
    return dict(kv.split("=", 1) for kv in lines[0].split()[1:]), p.stderr


def main():
    bindir, lib = sys.argv[1], os.path.abspath(sys.argv[2])
    launcher = os.path.join(bindir, "proc_launch")
    py = sys.executable

    held = bytearray(96 * MIB)
    for i in range(0, len(held), 4096):  # resident, not just mapped
        held[i] = 1

    small = [py, "-c", "pass"]
    r, _ = launch(launcher, small)
    own = int(r["maxrss_kib"]) * 1024
    assert own < 48 * MIB, f"python3 -c pass through the launcher: max RSS {own / MIB:.1f} MiB, the driver's?"
    pid = os.fork()
    if pid == 0:
        os.execv(py, small)
    _, _, ru = os.wait4(pid, 0)
    print(f"ok python3 -c pass: {own / MIB:.1f} MiB max RSS through the launcher, "
          f"{ru.ru_maxrss / 1024:.1f} forked from this 96 MiB driver")

    big = [py, "-c", "b = bytearray(48 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1"]
    r, _ = launch(launcher, big)
    peak = int(r["maxrss_kib"]) * 1024
    assert peak >= 48 * MIB, f"a program touching 48 MiB reported {peak / MIB:.1f} MiB"
    assert int(r["wall_ns"]) > 0 and int(r["minflt"]) > 0, r
    print(f"ok a program touching 48 MiB: {peak / MIB:.1f} MiB, {r['minflt']} faults")

    r, err = launch(launcher, small, {"PROC_LAUNCH_PRELOAD": lib, "SCRALLOC_STATS": "1"})
    reports = [l for l in err.splitlines() if re.match(r"scralloc\[\d+\]: \d+ arenas ", l)]
    assert len(reports) == 1, f"expected the program's scralloc report alone, got {err!r}"
    print("ok PROC_LAUNCH_PRELOAD: the program ran on scralloc, the launcher did not")

    r, _ = launch(launcher, ["/bin/sh", "-c", "exit 3"])
    assert os.waitstatus_to_exitcode(int(r["status"])) == 3, r
    print("ok exit status passed back")
    del held


if __name__ == "__main__":
    main()
