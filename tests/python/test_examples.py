"""The examples run (small), so the README's numbers cannot rot silently."""
import os
import subprocess
import sys

import scralloc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def run_example(name, *args):
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(scralloc.__file__))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *args],
                          capture_output=True, text=True, env=env, timeout=120, check=True).stdout


def test_seed_table_example():
    out = run_example("seed_table.py", "2000")
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("64", "0"), ("64", "1"), ("4096", "0"), ("4096", "1")]
    for size, retain, mmaps, munmaps, *_ in rows:
        if retain == "1":
            assert int(mmaps.replace(",", "")) <= 2 and munmaps == "0"
