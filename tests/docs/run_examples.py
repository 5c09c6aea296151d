#!/usr/bin/env python3
"""Run every example of the README and docs/*.md as written.

    python3 tests/docs/run_examples.py [--list] [FILE.md ...]

Each fenced code block is taken by its language:

  python   with `>>>` lines: a doctest (ELLIPSIS and NORMALIZE_WHITESPACE),
           run by `python3 -m doctest` in a fresh process; without: run as a
           script, which must exit 0.
  lua      run as a script by lua5.4; every `print` line carries its
           expected output as a `--> ...` comment, and the printed lines
           must match those comments in order.
  c        a whole program: compiled against core/include and the debug
           build's libscralloc.a, run, must exit 0; a line that prints
           carries its expected output as a `/* --> ... */` comment, as
           in Lua.
  sh       run by bash -e from the repository root, must exit 0.
  console  `$ command` lines, each followed by its expected output: the
           command runs in bash from the repository root and its stdout and
           stderr together must match.

Expected output matches with whitespace runs taken as equal and `...`
standing for any text (several lines included).  Blocks in other
languages (text, json) are not examples.  A block that cannot run alone
(it installs packages, it is a fragment of a longer program) carries
`<!-- norun -->` (optionally `<!-- norun: why -->`) on the line before its
fence; keep those rare.

Environment of every example: the repository root as the working
directory, PYTHONPATH=build/python/debug-lib (the checked package that
`make python` builds outside the source tree), LUA_CPATH on build/debug/lua (`make lua`).  `make test-docs`
builds those first and runs this.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LUA = os.environ.get("LUA", "lua5.4")
CC = os.environ.get("CC", "cc")
PYTHON = sys.executable
TIMEOUT = 300

FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$")
NORUN = re.compile(r"^\s*<!--\s*norun\b.*-->\s*$")


def blocks(path):
    """[(line number, language, text, norun)] of the file's fenced blocks"""
    out = []
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        out.append((start + 1, lang, "\n".join(body) + "\n", bool(NORUN.match(prev))))
        i += 1
    return out


def pattern(expected):
    """expected text -> a regex: whitespace runs equal, `...` any text"""
    parts = []
    for piece in re.split(r"(\.\.\.|\s+)", expected.strip()):
        if piece == "...":
            parts.append(r".*?")
        elif piece and piece.isspace():
            parts.append(r"\s+")
        elif piece:
            parts.append(re.escape(piece))
    return re.compile("".join(parts), re.S)


def matches(expected, actual):
    return pattern(expected).fullmatch(actual.strip()) is not None


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(ROOT, "build", "python", "debug-lib") + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["LUA_CPATH"] = os.path.join(ROOT, "build", "debug", "lua", "?.so") + ";;"
    e.pop("LD_PRELOAD", None)
    return e


def run(argv, **kw):
    return subprocess.run(argv, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=TIMEOUT, **kw)


def run_python(text, tmp):
    path = os.path.join(tmp, "example.txt" if ">>>" in text else "example.py")
    with open(path, "w") as f:
        f.write(text)
    if ">>>" in text:
        p = run([PYTHON, "-m", "doctest", "-o", "ELLIPSIS", "-o", "NORMALIZE_WHITESPACE", path])
    else:
        p = run([PYTHON, path])
    return None if p.returncode == 0 else p.stdout + p.stderr


def run_lua(text, tmp):
    path = os.path.join(tmp, "example.lua")
    with open(path, "w") as f:
        f.write(text)
    expected = [m.group(1) for m in (re.search(r"-->\s?(.*)$", line) for line in text.split("\n")) if m]
    p = run([LUA, path])
    if p.returncode != 0:
        return p.stdout + p.stderr
    return compare_lines(expected, p.stdout)


def compare_lines(expected, stdout):
    """the printed lines against the `-->` comments, in order"""
    got = stdout.rstrip("\n").split("\n") if stdout.strip() else []
    if len(got) != len(expected):
        return f"printed {len(got)} lines, the `-->` comments expect {len(expected)}:\n{stdout}"
    for want, line in zip(expected, got):
        if not matches(want, line):
            return f"printed   {line!r}\nexpected  {want!r}"
    return None


def run_c(text, tmp):
    src, exe = os.path.join(tmp, "example.c"), os.path.join(tmp, "example")
    with open(src, "w") as f:
        f.write(text)
    lib = os.path.join(ROOT, "build", "debug", "libscralloc.a")
    p = run([CC, "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(ROOT, "core", "include"),
             "-o", exe, src, lib, "-ldl", "-pthread"])
    if p.returncode != 0:
        return "does not compile:\n" + p.stderr
    p = run([exe])
    if p.returncode != 0:
        return f"exit {p.returncode}\n{p.stdout}{p.stderr}"
    expected = [m.group(1) for m in (re.search(r"/\*\s*-->\s?(.*?)\s*\*/", line) for line in text.split("\n")) if m]
    return compare_lines(expected, p.stdout)


def run_sh(text, tmp):
    p = run(["bash", "-e", "-c", text])
    return None if p.returncode == 0 else f"exit {p.returncode}\n{p.stdout}{p.stderr}"


def run_console(text, tmp):
    steps = []  # [(command, expected output)]
    for line in text.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            steps.append([line[2:], []])
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            return "a console block starts with a `$ command` line"
    for cmd, want in steps:
        p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
        if p.returncode != 0:
            return f"$ {cmd}\nexit {p.returncode}\n{p.stdout}"
        if not matches("\n".join(want), p.stdout):
            return f"$ {cmd}\nprinted:\n{p.stdout}\nexpected:\n" + "\n".join(want)
    return None


RUNNERS = {"python": run_python, "lua": run_lua, "c": run_c, "sh": run_sh, "console": run_console}


def main(argv):
    listing = "--list" in argv
    files = [a for a in argv if a != "--list"]
    if not files:
        docs = os.path.join(ROOT, "docs")
        files = [os.path.join(ROOT, "README.md")] + sorted(
            os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    ran = skipped = 0
    failed = []
    for path in files:
        rel = os.path.relpath(path, ROOT)
        for line, lang, text, norun in blocks(path):
            if lang not in RUNNERS:
                continue
            where = f"{rel}:{line} ({lang})"
            if norun:
                skipped += 1
                if listing:
                    print(f"norun {where}")
                continue
            if listing:
                print(f"run   {where}")
                continue
            with tempfile.TemporaryDirectory(prefix="scr-doc-") as tmp:
                try:
                    err = RUNNERS[lang](text, tmp)
                except subprocess.TimeoutExpired:
                    err = f"timed out after {TIMEOUT} s"
            ran += 1
            print(f"{'FAIL' if err else 'ok  '} {where}", flush=True)
            if err:
                failed.append((where, err))
    for where, err in failed:
        print(f"\n== {where}\n{err.rstrip()}")
    if not listing:
        print(f"\n{ran} examples run, {len(failed)} failed, {skipped} marked norun")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
