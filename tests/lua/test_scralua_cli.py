"""scralua against the reference interpreter: the same command lines and
inputs given to lua5.4 and to scralua must give the same stdout, stderr
and exit status.

    python3 tests/lua/test_scralua_cli.py SCRALUA [LUA]

Both run with argv[0] = "lua" (so error messages carry the same program
name) in a scratch directory, with LUA_INIT, LUA_PATH and the SCRALLOC_*
variables under the test's control.  Addresses ("table: 0x...") differ
between two heaps and are masked.  scralua documents one option more in
its usage text (-S); that line is dropped before comparing.  Interactive
cases run both on a pseudo-terminal, line by line, and compare what the
terminal shows.  Exit status 0 when every case matches.
"""
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SCRALUA = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else None
LUA = shutil.which(sys.argv[2] if len(sys.argv) > 2 else "lua5.4")

ADDR = re.compile(rb"0x[0-9a-fA-F]+")
SCRIPT = r"""
local args = {...}
print("script", #args, ...)
print(arg[0], arg[-1] ~= nil, #arg)
io.write("stderr says hi\n"); io.stderr:write("to stderr\n")
if args[1] == "fail" then error("failing on purpose") end
if args[1] == "table" then error({}) end
if args[1] == "exit" then os.exit(tonumber(args[2]) or args[2] == "true", args[3] == "close") end
if args[1] == "read" then print(io.read("l"), io.read("n"), io.read("a")) end
return 1, 2
"""


def base_env(extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LUA_", "SCRALLOC_"))}
    env["LUA_PATH"] = "./?.lua;;"
    env["TERM"] = "dumb"
    env.update(extra)
    return env


def normalize(data):
    data = ADDR.sub(b"0xADDR", data)
    return b"".join(line for line in data.splitlines(True)
                    if not line.startswith(b"  -S "))


def run(interp, args, stdin=b"", env=None, cwd=None):
    p = subprocess.run(["lua"] + args, executable=interp, input=stdin, cwd=cwd,
                       env=base_env(env or {}), capture_output=True, timeout=60)
    return normalize(p.stdout), normalize(p.stderr), p.returncode


# (arguments, stdin, extra environment)
CASES = [
    (["prog.lua"], b"", {}),
    (["prog.lua", "a", "b c", ""], b"", {}),
    (["prog.lua", "fail"], b"", {}),
    (["prog.lua", "table"], b"", {}),
    (["prog.lua", "exit", "3"], b"", {}),
    (["prog.lua", "exit", "true", "close"], b"", {}),
    (["prog.lua", "exit", "false"], b"", {}),
    (["prog.lua", "read"], b"first line\n42 rest\nmore\n", {}),
    (["nosuch.lua"], b"", {}),
    (["bad.lua"], b"", {}),
    (["-e", "print(1 + 1)", "-e", "x = 5", "-e", "print(x, arg[0], #arg)"], b"", {}),
    (["-eprint(10)"], b"", {}),
    (["-e", "error('boom')", "-e", "print('not reached')"], b"", {}),
    (["-e", "error(setmetatable({}, {__tostring = function() return 'custom' end}))"], b"", {}),
    (["-e", "error(setmetatable({}, {__tostring = function() return {} end}))"], b"", {}),
    (["-e", "error()"], b"", {}),
    (["-e", "x ="], b"", {}),
    (["-e"], b"", {}),
    (["-e", "-x"], b"", {}),
    (["-l"], b"", {}),
    (["-x"], b"", {}),
    (["-ix"], b"", {}),
    (["-vx"], b"", {}),
    (["-Ex"], b"", {}),
    (["-Wx"], b"", {}),
    (["---"], b"", {}),
    (["-v"], b"", {}),
    (["-v", "-e", "print(2)"], b"", {}),
    (["-l", "mymod", "-e", "print(mymod.answer)"], b"", {}),
    (["-lmymod", "-e", "print(mymod.answer)"], b"", {}),
    (["-l", "m=mymod", "-e", "print(m.answer, mymod)"], b"", {}),
    (["-l", "string", "-e", "print(string == require 'string')"], b"", {}),
    (["-l", "nosuchmodule", "-e", "print('not reached')"], b"", {}),
    (["-W", "-e", "warn('a', 'b')", "-e", "warn('@off', 'XXX', '@off')", "-e", "warn('@off')",
      "-e", "warn('hidden')", "-e", "warn('x', '@on')", "-e", "warn('back')"], b"", {}),
    (["-e", "warn('off by default')", "-W", "-e", "warn('on')"], b"", {}),
    (["--", "prog.lua", "after"], b"", {}),
    (["--"], b"print('stdin after --', #arg, arg[0])", {}),
    (["-", "p", "q"], b"print('stdin', ...) print(arg[0], arg[-1])", {}),
    (["-"], b"error('from stdin')", {}),
    (["--", "-"], b"", {}),
    ([], b"print('no args', #arg, arg[0])", {}),
    ([], b"syntax error here", {}),
    (["-e", "print(os.getenv('LUA_INIT'))"], b"", {"LUA_INIT": "print('init')"}),
    (["-e", "print(2)"], b"", {"LUA_INIT": "print('init')", "LUA_INIT_5_4": "print('init 5.4')"}),
    (["-e", "print(2)"], b"", {"LUA_INIT": "@init.lua"}),
    (["-e", "print(2)"], b"", {"LUA_INIT": "@nosuch.lua"}),
    (["-e", "print(2)"], b"", {"LUA_INIT": "error('in init')"}),
    (["-e", "print(2)"], b"", {"LUA_INIT_5_4": "x ="}),
    (["-E", "-e", "print(package.path == './?.lua;;', x)"], b"",
     {"LUA_INIT": "x = 1", "LUA_PATH": "/custom/?.lua"}),
    (["-e", "print(package.path)"], b"", {"LUA_PATH_5_4": "/five/?.lua"}),
    (["-e", "print(math.maxinteger, 2^53, 7 // 2, 7 % -3, 1e300 * 1e10, 0/0 ~= 0/0)"], b"", {}),
    (["-e", "print(collectgarbage('isrunning'), collectgarbage('incremental'))"], b"", {}),
    (["-i"], b"x = 3\nprint(x * 2)\n= x + 1\nreturn 1, nil, 'two'\n\n", {}),
    (["-i", "prog.lua", "arg"], b"print(#arg)\n", {}),
    (["-i", "prog.lua", "fail"], b"print('not reached')\n", {}),
    (["-i"], b"for i = 1, 2 do\nprint(i)\nend\nlocal t = {\n1,\n}\n", {}),
    (["-i"], b"x = \n", {}),
    (["-i"], b"for i = 1, 2 do\n", {}),
    (["-i"], b"_PROMPT2 = 'more> '\nif x then\n", {}),
    (["-i"], b"error('in repl')\nerror({})\n1 +\n)\nprint('after')\n", {}),
    (["-i"], b"print = function() error('no print') end\n1\n", {}),
    (["-i"], b"_PROMPT = setmetatable({}, {__tostring = function() return 'P> ' end})\n1\n", {}),
    (["-i"], b"_PROMPT = 42\n_PROMPT2 = true\nif x then\nend\n", {}),
    (["-i"], b"_PROMPT = setmetatable({}, {__tostring = function() return {} end})\n1\n", {}),
    (["-i"], b"_PROMPT = setmetatable({}, {__tostring = function() error({}) end})\n1\n", {}),
    (["-i", "-e", "y = 7"], b"y\nos.exit(5)\n", {}),
    (["-i"], b"x = '" + b"a" * 2000 + b"'\nprint(#x)\n", {}),
    (["."], b"", {}),
    (["-e", "io.write('no newline')", "-e", "os.exit(true, true)"], b"", {}),
    (["-e", "local function f() error('deep', 2) end local function g() f() end g()"], b"", {}),
    (["-e", "coroutine.wrap(function() error('in a coroutine') end)()"], b"", {}),
    (["-e", "print(select('#', ...))", "prog.lua", "x"], b"", {}),
    (["-W", "-e", "warn('@on')", "prog.lua", "a"], b"", {}),
    (["-E", "-i"], b"print(os.getenv('LUA_INIT'))\n", {"LUA_INIT": "print('not run')"}),
]


def setup_dir():
    d = tempfile.mkdtemp(prefix="scralua-cli-")
    files = {
        "prog.lua": SCRIPT,
        "bad.lua": "local x = = 1\n",
        "mymod.lua": "return { answer = 42 }\n",
        "init.lua": "print('init from file', ...)\n",
    }
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return d


def uses_readline(interp):
    out = subprocess.run(["ldd", interp], capture_output=True).stdout
    return b"libreadline" in out


def check_cases(d, interactive):
    failures = 0
    for args, stdin, env in CASES:
        if "-i" in args and not interactive:
            continue
        want = run(LUA, args, stdin, env, d)
        got = run(SCRALUA, args, stdin, env, d)
        if got != want:
            failures += 1
            print("FAIL  lua %s  (stdin %r, env %r)" % (" ".join(args), stdin[:60], env))
            for what, g, w in zip(("stdout", "stderr", "status"), got, want):
                if g != w:
                    print("  %s: lua5.4 %r\n  %s: scralua %r" % (what, w, what, g))
    print("%s  %d command lines, the same output as lua5.4"
          % ("ok   " if failures == 0 else "FAIL ",
             sum(1 for c in CASES if interactive or "-i" not in c[0])))
    return failures


def interrupted_read(interp, d):
    """Ctrl-C while io.read waits: the read is not restarted, the script stops."""
    r, w = os.pipe()
    p = subprocess.Popen(["lua", "-e", "print(io.read())"], executable=interp, stdin=r,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=d,
                         env=base_env({}))
    os.close(r)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += b"(still reading 10 s after SIGINT)"
    os.close(w)
    return normalize(out), normalize(err), p.returncode


class Pty:
    """An interpreter on a pseudo-terminal, driven line by line."""

    def __init__(self, interp, args, d):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.chdir(d)
            os.execve(interp, ["lua"] + args, base_env({}))
        self.out = b""
        self.seen = 0  # output before this offset has been matched

    def expect(self, text, timeout=10):
        """Wait for text after what earlier expects matched."""
        end = time.time() + timeout
        while text not in self.out[self.seen:]:
            left = end - time.time()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError("no %r in %r" % (text, self.out))
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                raise AssertionError("ended without %r: %r" % (text, self.out))
            self.out += chunk
        self.seen = self.out.index(text, self.seen) + len(text)

    def send(self, data):
        os.write(self.fd, data)

    def finish(self):
        self.send(b"\x04")  # end of input at the prompt
        end = time.time() + 10
        while time.time() < end:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            self.out += chunk
        _, status = os.waitpid(self.pid, 0)
        return normalize(self.out), os.waitstatus_to_exitcode(status)


def tty_run(interp, d):
    """The banner, _PROMPT and _PROMPT2 through __tostring, and history:
    the up arrow brings back the last line run."""
    t = Pty(interp, [], d)
    try:
        return tty_lines(t)
    except AssertionError as e:
        os.kill(t.pid, signal.SIGKILL)
        os.waitpid(t.pid, 0)
        return str(e).encode(), -1


def tty_lines(t):
    # the prompts are built by concatenation so that the echo of the line
    # typed never contains the prompt awaited
    t.expect(b"> ")
    t.send(b"_PROMPT = setmetatable({}, {__tostring = function() return 'tb' .. 'l> ' end})\r")
    t.expect(b"\ntbl> ")
    t.send(b"_PROMPT2 = setmetatable({}, {__tostring = function() return 'mo' .. 're> ' end})\r")
    t.expect(b"\ntbl> ")
    t.send(b"print(40 +\r")
    t.expect(b"\nmore> ")
    t.send(b"2)\r")
    t.expect(b"\n42\r\n")
    t.expect(b"tbl> ")
    t.send(b"print('his' .. 'tory')\r")
    t.expect(b"\nhistory\r\n")
    t.expect(b"tbl> ")
    t.send(b"\x1b[A\x1b[A\r")  # two lines back: the two-line statement
    t.expect(b"\n42\r\n")
    t.expect(b"tbl> ")
    return t.finish()


def check_terminal(d):
    want = tty_run(LUA, d)
    got = tty_run(SCRALUA, d)
    if got != want:
        print("FAIL  interactive run on a terminal\n  lua5.4  %r\n  scralua %r" % (want, got))
        return 1
    if got[0].count(b"\r\n42\r\n") != 2 or b"tbl> " not in got[0] or b"more> " not in got[0]:
        print("FAIL  interactive run: no prompt through __tostring or no history: %r" % (got,))
        return 1
    print("ok    interactive run on a terminal: __tostring prompts, history (as lua5.4)")
    return 0


def check_signal(d):
    want, got = interrupted_read(LUA, d), interrupted_read(SCRALUA, d)
    if got != want or b"interrupted!" not in got[1]:
        print("FAIL  SIGINT during io.read\n  lua5.4  %r\n  scralua %r" % (want, got))
        return 1
    print("ok    SIGINT during io.read stops the script (as lua5.4)")
    return 0


def check_tty(d, interactive):
    if interactive:
        return check_terminal(d)
    # the interactive mode cannot behave as the reference's: a failure
    print("FAIL  interactive mode: lua5.4 %s readline and scralua %s; build scralua "
          "the same way (libreadline-dev installed, or make SCRALUA_READLINE=)"
          % ("uses" if uses_readline(LUA) else "does not use",
             "does" if uses_readline(SCRALUA) else "does not"))
    return 1


def main():
    if SCRALUA is None or LUA is None:
        print(__doc__)
        return 2
    d = setup_dir()
    try:
        # interactive input goes through readline or not, and the two
        # differ (readline echoes lines read from a pipe): the -i cases
        # are compared when both read lines the same way, else one failure
        interactive = uses_readline(LUA) == uses_readline(SCRALUA)
        failures = check_cases(d, interactive) + check_tty(d, interactive) + check_signal(d)
    finally:
        shutil.rmtree(d)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
