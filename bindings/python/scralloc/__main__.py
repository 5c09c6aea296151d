"""python -m scralloc run: a Python program with its memory on scralloc.

    python -m scralloc run [options] script.py [args ...]
    python -m scralloc run [options] -m module [args ...]

By default the program runs in this interpreter inside
``Allocator(**options).serve_python(domains)``: every allocation of the
chosen domains comes from one scralloc heap, and a summary of that heap is
printed at exit (on stderr, or to ``--output``): peak heapUsed, heapUsed
and heapTotal at exit with heapTotal's parts (``scralloc.HEAP_PARTS``),
peak RSS of the program's process and of its largest child, the syscalls
by kind, Python's calls per domain, and the size classes in use.

``--preload`` runs the program instead as a child interpreter with
``LD_PRELOAD=libscralloc.so`` (the process allocator serves every malloc
of the process, not only Python's) and reports the same figures, read
from the library's ``scr_process_stats_json`` in the child at exit; the
child samples them every ``--interval`` ms for the peak heapUsed (the
process allocator keeps no peak of its own).  The library is, in order:
``--library PATH``, ``$SCRALLOC_LIBRARY``, ``libscralloc.so`` inside the
installed package (none is shipped by ``pip install``), and
``build/release/libscralloc.so`` of the checkout this package sits in
(found from ``bindings/python/scralloc`` or ``build/python/*-lib/scralloc``)
(``make build/release/libscralloc.so``).

``--profile FILE`` samples the program's allocation sites (docs/profile.md)
at ``--profile-rate`` bytes (default ``scralloc.PROFILE_DEFAULT_RATE``, 512
KiB) and writes at exit what is still live: folded stacks to FILE
(flamegraph.pl's input), the pprof profile to FILE.pb.gz, the page-pinning
blame to FILE.blame, and the top sites on stderr.  In this interpreter the
samples carry the Python frames (file, function, line) of the allocating
code, and ``--native`` adds the native frames below them.  The program's
module globals are kept alive until the profile is written, so what the
script still holds at its end is what the profile shows.  With
``--preload`` the library writes the files (``SCRALLOC_PROFILE=FILE``),
and the child registers the same Python frames hook in it.

``--timeline FILE.csv`` records a :class:`scralloc.Sampler` row every
``--interval`` ms (default 10) and writes them as CSV.  ``--json`` prints
the summary as one JSON object.  Core options are ``--retain N``,
``--retain-bytes 8M`` and so on (every name of ``scralloc.OPTIONS``; sizes
take K, M, G).  A bad option is one line on stderr and exit status 2;
otherwise the program's exit status is the command's.
"""
import builtins
import json
import os
# runpy.run_path imports pkgutil at its first call: imported here, so that
# the import is not made (and sampled) inside the program's served region
import pkgutil  # noqa: F401
import runpy
import subprocess
import sys
import resource
import tempfile
import time
import traceback
import types
import warnings
import zipfile

import scralloc

USAGE = "usage: python -m scralloc run [options] (script.py | -m module) [args ...]"
DOMAINS = ("raw", "mem", "obj")
MIB = 1024.0 * 1024.0


class UsageError(Exception):
    pass


def check_writable(option, path):
    """UsageError unless a file can be written at path (before the program
    runs, so that a long run is not lost for a typo)."""
    where = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory")
    if not os.path.isdir(where):
        raise UsageError(f"{option} {path}: no such directory {where}")
    if not os.access(path if os.path.exists(path) else where, os.W_OK):
        raise UsageError(f"{option} {path}: not writable")


def parse_args(argv):
    """Our options up to the program: (options dict, module or None,
    [script or module, args ...]).  The program's own arguments are never
    looked at, so `-m test -v test_dict` passes `-v` to the program."""
    opts = {"domains": ("mem", "obj"), "timeline": None, "interval": 10.0, "json": False,
            "preload": False, "output": None, "library": None, "core": {},
            "profile": None, "native": False}
    takes_value = {"--domains", "--timeline", "--interval", "--output", "-o", "--library",
                   "--profile"}
    core_names = {"--" + name.replace("_", "-"): name for name in core_option_names()}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            return opts, argv[i + 1], argv[i + 1:]
        if arg in ("-h", "--help"):
            raise UsageError(None)
        if not arg.startswith("-") or arg == "-":
            return opts, None, argv[i:]
        name, eq, value = arg.partition("=")
        if name in ("--json", "--preload", "--native"):
            if eq:
                raise UsageError(f"{name} takes no value")
            opts[name[2:]] = True
            i += 1
            continue
        if name not in takes_value and name not in core_names:
            raise UsageError(f"unknown option {name}")
        if not eq:
            if i + 1 >= len(argv):
                raise UsageError(f"{name} needs a value")
            value = argv[i + 1]
            i += 1
        i += 1
        try:
            if name in core_names:
                opts["core"][core_names[name]] = scralloc._parse_option(core_names[name], value)
            elif name == "--domains":
                doms = tuple(d.strip() for d in value.split(",") if d.strip())
                bad = [d for d in doms if d not in DOMAINS]
                if bad or not doms:
                    raise ValueError(f"--domains: {value!r} (a list of raw, mem, obj)")
                opts["domains"] = doms
            elif name == "--interval":
                opts["interval"] = float(value)
                if not opts["interval"] > 0:
                    raise ValueError("--interval must be > 0 ms")
            elif name in ("--output", "-o"):
                check_writable(name, value)
                opts["output"] = value
            elif name == "--timeline":
                check_writable(name, value)
                opts["timeline"] = value
            elif name == "--profile":
                for path in (value, value + ".pb.gz", value + ".blame"):
                    check_writable(name, path)
                opts["profile"] = value
            else:
                opts[name[2:]] = value
        except ValueError as e:
            raise UsageError(str(e)) from None
    raise UsageError("no program given")


def check_profile_opts(opts):
    if opts["profile"] is None and opts["native"]:
        raise UsageError("--native needs --profile FILE")


def core_option_names():
    return list(scralloc.OPTIONS)


def options_help():
    lines = []
    for name, info in scralloc.OPTIONS.items():
        default = "none" if info["default"] == 2**64 - 1 else info["default"]  # retain_bytes: no cap
        lines.append(f"  --{name.replace('_', '-')} N   {info['doc']} (default {default})")
    return "\n".join(lines)


HELP = f"""{USAGE}

options:
  --domains LIST     Python's allocator domains to serve: raw,mem,obj
                     (default mem,obj; raw is called without the GIL and
                     makes the heap take a lock)
  --timeline FILE    write a Sampler row every --interval ms as CSV
  --interval MS      sampling interval (default 10)
  --json             the summary as one JSON object
  -o, --output FILE  write the summary there instead of stderr
  --preload          run a child python under LD_PRELOAD=libscralloc.so
  --library PATH     the libscralloc.so for --preload
  --profile FILE     sample allocation sites; at exit write what is live:
                     folded stacks to FILE, pprof to FILE.pb.gz, the blame
                     to FILE.blame, the top sites on stderr
                     (--profile-rate N: mean bytes between samples,
                     default 512K)
  --native           native frames below the Python frames in the profile
core options (scralloc.OPTIONS; sizes take K, M, G):
{options_help()}
"""


# ---- the summary ------------------------------------------------------

def children_peak_rss(before=0):
    """The largest peak RSS among the children this process waited for
    (and theirs), in bytes (getrusage RUSAGE_CHILDREN); 0 when it is not
    above ``before`` (a launcher's children before exec count there too,
    so a run compares with the figure at its start)."""
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024
    return peak if peak > before else 0


def summary(mode, target, opts, stats, python, peak_heap_used, peak_rss, peak_rss_children,
            wall, status, sampled_peak=None):
    classes = [
        {"class": i, **c} for i, c in enumerate(stats.get("classes", []))
        if c.get("live") or c.get("pages")
    ]
    out = {
        "mode": mode,
        "program": target,
        "options": opts["core"],
        "domains": list(opts["domains"]) if mode == "serve_python" else None,
        "status": status,
        "wall_s": round(wall, 6),
        "peak_heap_used": peak_heap_used,
        "heap_used": stats.get("heap_used"),
        "heap_total": stats.get("heap_total"),
        "heap_parts": scralloc.heap_parts(stats),
        "peak_rss": peak_rss,
        "peak_rss_children": peak_rss_children,
        "allocs": stats.get("allocs"),
        "syscalls": {k: stats.get(k + "_calls", 0) for k in ("mmap", "munmap", "madvise", "mremap")},
        "os_failures": stats.get("os_failures", 0),
        "retained_bytes": stats.get("retained_bytes"),
        "dirty_bytes": stats.get("dirty_bytes"),
        "python": python,
        "classes": classes,
    }
    if sampled_peak is not None:
        out["peak_heap_total_sampled"] = sampled_peak
    return out


def mib(v):
    return "-" if v is None else f"{v / MIB:.2f} MiB"


def render(s):
    lines = [f"scralloc run ({s['mode']}): {' '.join(s['program'])}"]
    if s["domains"]:
        lines[0] += f"  [domains {','.join(s['domains'])}]"
    if s["options"]:
        lines.append("  options        " + ", ".join(f"{k}={v}" for k, v in s["options"].items()))
    lines.append(f"  exit status    {s['status']}   wall {s['wall_s']:.3f} s")
    note = " (sampled)" if s["mode"] == "preload" else ""
    lines.append(f"  peak heapUsed  {mib(s['peak_heap_used'])}{note}")
    lines.append(f"  at exit        heapUsed {mib(s['heap_used'])}, heapTotal {mib(s['heap_total'])}, "
                 f"{s['allocs']} live blocks")
    parts = [f"{s['heap_parts'][k] / MIB:.2f} {label}" for k, label in scralloc.HEAP_PARTS]
    lines.append(f"  heapTotal      {mib(s['heap_total'])} = {' + '.join(parts[:2])}")
    lines.append(f"                 + {' + '.join(parts[2:])}")
    if "peak_heap_total_sampled" in s:
        lines.append(f"  peak heapTotal {mib(s['peak_heap_total_sampled'])} (sampled)")
    children = (f"{mib(s['peak_rss_children'])} its largest child process"
                if s["peak_rss_children"] else "no child process waited for during the run")
    lines.append(f"  peak RSS       {mib(s['peak_rss'])} the program's process; {children}")
    sc = s["syscalls"]
    lines.append(f"  syscalls       mmap {sc['mmap']}, munmap {sc['munmap']}, madvise {sc['madvise']}, "
                 f"mremap {sc['mremap']}" + (f", {s['os_failures']} failed" if s["os_failures"] else ""))
    if s["python"]:
        parts = [f"{d} {f['calls']} calls ({f['blocks']} live, {mib(f['bytes'])})"
                 for d, f in s["python"].items() if isinstance(f, dict) and f["calls"]]
        if parts:
            lines.append("  Python's calls " + "; ".join(parts))
    if s["classes"]:
        lines.append("  size classes at exit:")
        lines.append("    class   block    live blocks     pages  retained")
        for c in s["classes"]:
            lines.append(f"    {c['class']:5d} {c['block_size']:7d} {c['live']:14d} {c['pages']:9d} "
                         f"{c['retained']:9d}")
    return "\n".join(lines) + "\n"


def emit(s, opts):
    text = json.dumps(s) + "\n" if opts["json"] else render(s)
    if opts["output"]:
        try:
            with open(opts["output"], "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise UsageError(f"-o {opts['output']}: {e.strerror}") from None
    else:
        sys.stderr.flush()
        sys.stderr.write(text)
        sys.stderr.flush()


# ---- running in this interpreter (serve_python) ----------------------

def load_script(path):
    """A script's code object, compiled now, for run_program to execute:
    the compile's own allocations (and samples) are made before the
    served region, not inside it.  None for what runpy.run_path opens
    itself (a directory or a zip file with a __main__.py) and for a
    script that does not compile (run_path reports it as it would)."""
    try:
        if not os.path.isfile(path) or zipfile.is_zipfile(path):
            return None
        with open(path, "rb") as f:
            return compile(f.read(), path, "exec")
    except (OSError, SyntaxError, ValueError):
        return None


def run_program(module, args, keep=None, script=None):
    """Run a script or module as __main__ with sys.argv = args; returns
    the exit status (SystemExit's code, 1 for an uncaught exception).
    script: the script's code from load_script, or None (runpy opens it).
    keep, a list, gets what holds the program's module globals (its
    globals, or the exception whose traceback does), for a profile at
    exit to see what the program still held."""
    sys.argv = list(args)
    saved_main = sys.modules.get("__main__")
    if module is None:  # a script: its directory first on sys.path, as python script.py
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
    try:
        if module is not None:
            g = runpy.run_module(module, run_name="__main__", alter_sys=True)
        elif script is not None:
            # as runpy.run_path runs a file: a fresh __main__ module in
            # sys.modules while it runs
            main = types.ModuleType("__main__")
            main.__file__ = args[0]
            main.__cached__ = None
            main.__loader__ = None
            main.__builtins__ = builtins
            sys.modules["__main__"] = main
            g = main.__dict__
            exec(script, g)
        else:
            g = runpy.run_path(args[0], run_name="__main__")
        if keep is not None:
            keep.append(g)
    except SystemExit as e:
        if keep is not None:
            keep.append(e)
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as e:  # the program's uncaught exception, as python prints it
        if keep is not None:
            keep.append(e)
        traceback.print_exc()
        return 1
    finally:
        if script is not None and saved_main is not None:
            sys.modules["__main__"] = saved_main
    return 0


def profile_from_the_program():
    """Samples' Python frames start at the program's: run_program's and
    the runpy frames between it and the program are left out."""
    scralloc._scralloc._set_frames_root(run_program.__code__, runpy._run_code.__code__.co_filename)


def profile_rate(opts):
    """The rate --profile samples at: the core option --profile-rate, else
    (or 0) the default."""
    return opts["core"].get("profile_rate") or scralloc.PROFILE_DEFAULT_RATE


def write_profiles(a, opts):
    """FILE, FILE.pb.gz, FILE.blame and the top sites on stderr, from a's
    live samples; the summary's "profile" entry."""
    path, native = opts["profile"], opts["native"]
    try:
        a.write_profile(path, "folded", native=native)
        a.write_profile(path + ".pb.gz", "pprof", native=native)
        a.write_profile(path + ".blame", "blame", native=native)
    except OSError as e:
        raise UsageError(f"--profile {e.filename}: {e.strerror}") from None
    p = a.profile(native=native)
    sys.stderr.flush()
    sys.stderr.write(f"scralloc run --profile: {len(p)} live samples at rate {profile_rate(opts)}, "
                     f"{p.bytes / MIB:.2f} MiB estimated; top sites (innermost Python line):\n")
    sys.stderr.write(p.table(10))
    sys.stderr.write(f"folded stacks: {path}; pprof: {path}.pb.gz; blame: {path}.blame\n")
    sys.stderr.flush()
    return {"file": path, "rate": profile_rate(opts), "samples": len(p),
            "estimated_bytes": round(p.bytes),
            "top": [{"where": str(t.where), "bytes": round(t.bytes), "blocks": round(t.blocks),
                     "pinned": round(t.pinned), "samples": t.samples} for t in p.top(10)]}


def run_serve(opts, module, args):
    core = dict(opts["core"])
    if opts["profile"]:
        core["profile_rate"] = profile_rate(opts)
    a = scralloc.Allocator(**core)
    keep = [] if opts["profile"] else None
    if opts["profile"]:
        profile_from_the_program()
    sampler = None
    if opts["timeline"]:
        sampler = scralloc.Sampler(a, interval=opts["interval"] / 1000.0)
    script = load_script(args[0]) if module is None else None
    children_before = children_peak_rss()
    t0 = time.perf_counter()
    with a.serve_python(domains=opts["domains"]):
        if sampler is not None:
            sampler.start()
        try:
            status = run_program(module, args, keep, script)
        finally:
            if sampler is not None:
                sampler.stop()
    wall = time.perf_counter() - t0
    prof = write_profiles(a, opts) if opts["profile"] else None
    del keep
    stats = a.stats()
    python = stats.pop("python")
    sampled = None
    if sampler is not None:
        write_timeline(sampler, opts["timeline"])
        sampled = max((r.get("heap_total", 0) for r in sampler.rows), default=None)
    s = summary("serve_python", args, opts, stats, python, stats["peak_heap_used"],
                scralloc.peak_rss(), children_peak_rss(children_before), wall, status, sampled)
    if prof is not None:
        s["profile"] = prof
    emit(s, opts)
    # What the program left on the heap (its objects, the interpreter's
    # caches) keeps it until freed or the process ends; the summary said
    # how much, so no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scralloc.ScrallocWarning)
        a.close()
    return status


def write_timeline(sampler, path):
    try:
        sampler.to_csv(path)
    except OSError as e:
        raise UsageError(f"--timeline {path}: {e.strerror}") from None


# ---- running a child under LD_PRELOAD --------------------------------

def find_library(explicit=None):
    """The libscralloc.so for --preload (see the module's doc), or None."""
    if explicit:
        if not os.path.isfile(explicit):
            raise UsageError(f"--library {explicit}: no such file")
        return os.path.abspath(explicit)
    here = os.path.dirname(os.path.abspath(scralloc.__file__))
    candidates = [os.environ.get("SCRALLOC_LIBRARY"), os.path.join(here, "libscralloc.so")]
    # a checkout: the package is bindings/python/scralloc or
    # build/python/<flavour>-lib/scralloc below the directory holding build/
    d = here
    for _ in range(4):
        d = os.path.dirname(d)
        candidates.append(os.path.join(d, "build", "release", "libscralloc.so"))
    for c in candidates:
        if c and os.path.isfile(c):
            return os.path.abspath(c)
    return None


# The child's side: run the program, sample the preloaded allocator, and
# write its figures as JSON at exit.
CHILD = r"""
import json, os, sys, threading, time
sys.path.insert(0, os.environ["SCRALLOC_RUN_PKG"])
from scralloc.__main__ import UsageError, children_peak_rss, load_script, run_program, write_timeline
from scralloc.sampler import Sampler, preloaded_process_stats
import scralloc
report, timeline, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
profile, native = sys.argv[4], sys.argv[5] == "1"
module = sys.argv[6] or None
args = sys.argv[7:]
if preloaded_process_stats() is None:
    sys.exit("scralloc run --preload: malloc is not scralloc's in the child (LD_PRELOAD failed?)")
if profile:
    # the extension's Python frames hook, in the preloaded library
    import ctypes
    lib = ctypes.CDLL(None)
    lib.scr_profile_set_lang_hook.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.scr_profile_write.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint]
    from scralloc.__main__ import profile_from_the_program
    profile_from_the_program()
    lib.scr_profile_set_lang_hook(scralloc._scralloc._lang_hook(), None)
sampler = Sampler("process", interval=interval / 1000.0)
script = load_script(args[0]) if module is None else None
children_before = children_peak_rss()
t0 = time.perf_counter()
sampler.start()
keep = [] if profile else None
try:
    status = run_program(module, args, keep, script)
finally:
    sampler.stop()
wall = time.perf_counter() - t0
sampler.sample()
d = preloaded_process_stats()
if timeline:
    try:
        write_timeline(sampler, timeline)
    except UsageError as e:
        print(f"python -m scralloc run: {e}", file=sys.stderr)
out = {"heap": d["heap"], "process": d["process"], "wall": wall, "status": status,
       "peak_heap_used": max((r.get("heap_used", 0) for r in sampler.rows), default=None),
       "peak_heap_total": max((r.get("heap_total", 0) for r in sampler.rows), default=None),
       "peak_rss": scralloc.peak_rss(), "peak_rss_children": children_peak_rss(children_before)}
if profile:
    # os._exit below skips the library's own exit files: written here
    nat = 0x100 if native else 0
    for suffix, fmt in (("", 1), (".pb.gz", 2), (".blame", 3)):
        if lib.scr_profile_write(None, os.fsencode(profile + suffix), fmt | nat) != 0:
            print(f"python -m scralloc run: --profile {profile + suffix}: not written",
                  file=sys.stderr)
    lib.scr_profile_set_lang_hook(None, None)
with open(report, "w") as f:
    json.dump(out, f)
sys.stdout.flush(); sys.stderr.flush()
os._exit(status if isinstance(status, int) else 1)
"""


def run_preload(opts, module, args):
    lib = find_library(opts["library"])
    if lib is None:
        raise UsageError("--preload: no libscralloc.so found (build it with `make "
                         "build/release/libscralloc.so` in the checkout, or give --library "
                         "PATH or SCRALLOC_LIBRARY)")
    env = dict(os.environ)
    env["LD_PRELOAD"] = lib + ((" " + env["LD_PRELOAD"]) if env.get("LD_PRELOAD") else "")
    env["SCRALLOC_RUN_PKG"] = os.path.dirname(os.path.dirname(os.path.abspath(scralloc.__file__)))
    for name, value in opts["core"].items():
        env["SCRALLOC_" + name.upper()] = str(value)
    if opts["profile"]:
        env["SCRALLOC_PROFILE"] = os.path.abspath(opts["profile"])
        env["SCRALLOC_PROFILE_RATE"] = str(profile_rate(opts))

    fd, report = tempfile.mkstemp(prefix="scralloc-run-", suffix=".json")
    os.close(fd)
    try:
        cmd = [sys.executable, "-c", CHILD, report, opts["timeline"] or "",
               str(opts["interval"]),
               os.path.abspath(opts["profile"]) if opts["profile"] else "",
               "1" if opts["native"] else "0", module or ""] + list(args)
        status = subprocess.call(cmd, env=env)
        with open(report, encoding="utf-8") as f:
            text = f.read()
        if not text:
            sys.stderr.write("scralloc run --preload: the child wrote no figures\n")
            return status or 1
        r = json.loads(text)
    finally:
        os.unlink(report)
    s = summary("preload", args, opts, r["heap"], None, r["peak_heap_used"], r["peak_rss"],
                r["peak_rss_children"], r["wall"], r["status"], r["peak_heap_total"])
    s["process"] = r["process"]
    if opts["profile"]:
        s["profile"] = folded_top(opts["profile"], profile_rate(opts))
    emit(s, opts)
    return status


def folded_top(path, rate, n=10):
    """The top sites of a folded-stacks file (the innermost frame of each
    stack, bytes added up), printed on stderr; the summary's entry."""
    sites = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                stack, _, value = line.rstrip("\n").rpartition(" ")
                if stack and value.isdigit():
                    inner = stack.rsplit(";", 1)[-1]
                    sites[inner] = sites.get(inner, 0) + int(value)
    except OSError as e:
        sys.stderr.write(f"scralloc run --profile: {path}: {e.strerror}\n")
        return {"file": path, "rate": rate, "top": []}
    total = sum(sites.values())
    top = sorted(sites.items(), key=lambda kv: kv[1], reverse=True)[:n]
    sys.stderr.write(f"scralloc run --profile: {total / MIB:.2f} MiB estimated live at exit; "
                     f"top sites (innermost frame):\n{'MiB':>9} {'%':>6}  site\n")
    for where, v in top:
        sys.stderr.write(f"{v / MIB:9.2f} {100.0 * v / total if total else 0:6.1f}  {where}\n")
    sys.stderr.write(f"folded stacks: {path}; pprof: {path}.pb.gz; blame: {path}.blame\n")
    return {"file": path, "rate": rate, "estimated_bytes": total,
            "top": [{"where": w, "bytes": v} for w, v in top]}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(HELP)
        return 0 if argv else 2
    if argv[0] != "run":
        print(f"python -m scralloc: unknown command {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        opts, module, args = parse_args(argv[1:])
        check_profile_opts(opts)
        if opts["preload"]:
            return run_preload(opts, module, args)
        return run_serve(opts, module, args)
    except UsageError as e:
        if e.args[0] is None:
            print(HELP)
            return 0
        print(f"python -m scralloc run: {e.args[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
