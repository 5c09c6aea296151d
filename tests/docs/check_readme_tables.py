#!/usr/bin/env python3
"""bench/update_readme.py refreshes the README's tables and nothing else.

    python3 tests/docs/check_readme_tables.py

Every benchmark that update_readme.py knows has its marker pair in its
file (the README, or the one its entry names); a refresh of one table (the quickest, `seed`, one round, on a
copy of the README) replaces the text between its markers with the
command, the machine and the benchmark's own Markdown, and leaves every
other byte alone; a file without the markers is refused and left as it
was.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import update_readme  # noqa: E402

SCRIPT = os.path.join(ROOT, "bench", "update_readme.py")
BLOCK = re.compile(r"(<!-- bench:seed -->\n)(.*?)(<!-- /bench:seed -->)", re.S)


def main():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    for name, b in update_readme.BENCHES.items():
        where = b.get("file", "README.md")
        text = open(os.path.join(ROOT, where), encoding="utf-8").read()
        assert f"<!-- bench:{name} -->" in text and f"<!-- /bench:{name} -->" in text, \
            f"{where} lacks the markers of benchmark {name!r}"
    with tempfile.TemporaryDirectory(prefix="scr-readme-") as tmp:
        copy = os.path.join(tmp, "README.md")
        with open(copy, "w", encoding="utf-8") as f:
            f.write(readme)
        subprocess.run([sys.executable, SCRIPT, "--file", copy, "--only", "seed", "--rounds", "1", "--quick"],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        after = open(copy, encoding="utf-8").read()
        assert BLOCK.sub("", after) == BLOCK.sub("", readme), "text outside the seed markers changed"
        body = BLOCK.search(after).group(2)
        assert body.startswith("`build/release/bench/bench_pairs 20000 1` on "), body[:200]
        assert f"{os.cpu_count()} cores" in body.split("\n")[0], body.split("\n")[0]
        assert re.search(r"^\| 64 B \| scralloc retain=1 \| 1 \| 0 \| 0 \|", body, re.M), body

        bare = os.path.join(tmp, "bare.md")
        with open(bare, "w") as f:
            f.write("# no markers here\n")
        p = subprocess.run([sys.executable, SCRIPT, "--file", bare, "--only", "seed", "--quick"],
                           cwd=ROOT, capture_output=True, text=True)
        assert p.returncode != 0 and "no <!-- bench:seed -->" in p.stderr, p.stderr
        assert open(bare).read() == "# no markers here\n"
    print("update_readme.py: markers present, a refresh replaces only its table, a file without markers is refused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
