/* scralua: the Lua 5.4 stand-alone interpreter with its main state on a
 * scralloc heap.
 *
 * Command line: the same as `lua` (script and arguments, the `arg` table,
 * -e -l -i -v -E -W, "--" and "-"), plus
 *   -S        print the heap's figures at exit (also SCRALLOC_STATS=1;
 *             SCRALLOC_STATS=json prints them as JSON) on stderr, or
 *             appended to the file SCRALLOC_STATS_FILE names
 * scralua takes SCRALLOC_STATS and SCRALLOC_STATS_FILE out of its
 * environment, so the programs a script starts (io.popen, os.execute)
 * do not write reports of their own into the output the script reads.
 * The heap takes its options from the SCRALLOC_<NAME> variables.  The
 * module is preloaded: `require "scralloc"` works without a C path, and
 * scralloc.heap_stats() reports the heap this interpreter runs on. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(SCRALUA_READLINE)
#include <readline/history.h>
#include <readline/readline.h>
#endif

#include "lauxlib.h"
#include "lualib.h"
#include "scrlua.h"

enum {
  SR_E = 1,                /* -e seen */
  SR_I = 2,                /* -i: interactive after the script */
  SR_V = 4,                /* -v: version */
  SR_NOENV = 8,            /* -E: ignore LUA_INIT, LUA_PATH, LUA_CPATH */
  SR_STATS = 16,           /* -S: heap figures at exit */
  SR_BAD = 1 << 30         /* bad command line */
};

static const char *sr_progname = "scralua";
static lua_State *sr_interrupted_L;  /* the state SIGINT stops */
static scr_heap *sr_heap;
static scrl_acct sr_acct;
static scrl_warn sr_warn;
static int sr_stats;                 /* print figures at exit */
static int sr_closed;                /* the main state is closed */
static int sr_printed;               /* figures already printed */
static char *sr_stats_file;          /* SCRALLOC_STATS_FILE, or NULL for stderr */
static FILE *sr_out;                 /* where the figures go, once opened */

/* ---- messages ------------------------------------------------------ */

static void sr_message(const char *prog, const char *msg) {
  if (prog != NULL)
    fprintf(stderr, "%s: ", prog);
  fprintf(stderr, "%s\n", msg);
  fflush(stderr);
}

static int sr_report(lua_State *L, int status) {
  if (status != LUA_OK) {
    /* a non-string reaches here only as the value the reference
     * interpreter prints with "%s" of NULL: glibc's "(null)" */
    const char *msg = lua_tostring(L, -1);
    sr_message(sr_progname, msg != NULL ? msg : "(null)");
    lua_pop(L, 1);
  }
  return status;
}

static void sr_usage(const char *bad) {
  if (bad[1] == 'e' || bad[1] == 'l')
    fprintf(stderr, "%s: '%s' needs argument\n", sr_progname, bad);
  else
    fprintf(stderr, "%s: unrecognized option '%s'\n", sr_progname, bad);
  fprintf(stderr,
          "usage: %s [options] [script [args]]\n"
          "Available options are:\n"
          "  -e stat   execute string 'stat'\n"
          "  -i        enter interactive mode after executing 'script'\n"
          "  -l mod    require library 'mod' into global 'mod'\n"
          "  -l g=mod  require library 'mod' into global 'g'\n"
          "  -v        show version information\n"
          "  -E        ignore environment variables\n"
          "  -W        turn warnings on\n"
          "  -S        print the scralloc heap's figures at exit (or SCRALLOC_STATS=1)\n"
          "  --        stop handling options\n"
          "  -         stop handling options and execute stdin\n",
          sr_progname);
  fflush(stderr);
}

static void sr_version(void) {
  printf("%s\n", LUA_COPYRIGHT);
  fflush(stdout);
}

/* ---- heap figures -------------------------------------------------- */

/* The figures go to stderr, or are appended to SCRALLOC_STATS_FILE
 * (stderr, with a message, when it cannot be opened). */
static void sr_open_stats(void) {
  if (sr_out != NULL)
    return;
  sr_out = stderr;
  if (sr_stats_file == NULL)
    return;
  FILE *f = fopen(sr_stats_file, "a");
  if (f == NULL) {
    fprintf(stderr, "scralua: cannot open SCRALLOC_STATS_FILE '%s': %s\n", sr_stats_file,
            strerror(errno));
    return;
  }
  sr_out = f;
}

static void sr_close_stats(void) {
  if (sr_out != NULL && sr_out != stderr)
    fclose(sr_out);
  sr_out = NULL;
  free(sr_stats_file);
  sr_stats_file = NULL;
}

/* name=value for every figure, then the size classes in use as
 * block_size:live/pages; SCRALLOC_STATS=json prints the JSON instead. */
static void sr_print_stats(void) {
  if (!sr_stats || sr_printed || sr_heap == NULL)
    return;
  sr_printed = 1;
  sr_open_stats();
  const char *when = sr_closed ? "after lua_close" : "at exit";
  if (sr_stats == 2) {
    char small[4096];
    char *buf = small;
    size_t n = scr_heap_stats_json(sr_heap, small, sizeof small);
    if (n >= sizeof small && (buf = malloc(n + 1)) != NULL)
      scr_heap_stats_json(sr_heap, buf, n + 1);
    fprintf(sr_out, "scralua: heap %s: %s\n", when, buf != NULL ? buf : small);
    if (buf != small)
      free(buf);
  } else {
    struct scr_stats st;
    scr_heap_stats(sr_heap, &st);
    fprintf(sr_out, "scralua: heap %s:", when);
#define SR_FIELD_(name, doc) fprintf(sr_out, " " #name "=%llu", (unsigned long long)st.name);
    SCR_STATS_FIELDS(SR_FIELD_)
#undef SR_FIELD_
    fprintf(sr_out, "\nscralua: classes in use (block_size:live/pages):");
    for (int i = 0; i < SCR_CLASS_COUNT; i++)
      if (st.classes[i].pages != 0)
        fprintf(sr_out, " %llu:%llu/%llu", (unsigned long long)st.classes[i].block_size,
                (unsigned long long)st.classes[i].live, (unsigned long long)st.classes[i].pages);
    fprintf(sr_out, "\n");
  }
  fprintf(sr_out, "scralua: lua peak %zu bytes in live blocks, %llu allocations, %llu refused\n",
          sr_acct.peak, (unsigned long long)sr_acct.allocs,
          (unsigned long long)sr_acct.failures);
  fflush(sr_out);
}

/* ---- calling Lua --------------------------------------------------- */

static void sr_stop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

/* Without SA_RESTART, as the reference interpreter: a read blocked in
 * io.read returns at Ctrl-C and the hook stops the script. */
static void sr_setsignal(int sig, void (*handler)(int)) {
  struct sigaction sa;
  sa.sa_handler = handler;
  sa.sa_flags = 0;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, NULL);
}

/* A hook is the only thing a signal handler may safely give Lua. */
static void sr_on_sigint(int sig) {
  sr_setsignal(sig, SIG_DFL);  /* a second Ctrl-C ends the process */
  lua_sethook(sr_interrupted_L, sr_stop,
              LUA_MASKCALL | LUA_MASKRET | LUA_MASKLINE | LUA_MASKCOUNT, 1);
}

/* Error messages get a traceback; non-string errors a description. */
static int sr_traceback(lua_State *L) {
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
      return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  luaL_traceback(L, L, msg, 1);
  return 1;
}

static int sr_call(lua_State *L, int nargs, int nres) {
  int base = lua_gettop(L) - nargs;
  lua_pushcfunction(L, sr_traceback);
  lua_insert(L, base);
  sr_interrupted_L = L;
  sr_setsignal(SIGINT, sr_on_sigint);
  int status = lua_pcall(L, nargs, nres, base);
  sr_setsignal(SIGINT, SIG_DFL);
  lua_remove(L, base);
  return status;
}

static int sr_run_loaded(lua_State *L, int status) {
  if (status == LUA_OK)
    status = sr_call(L, 0, 0);
  return sr_report(L, status);
}

static int sr_dostring(lua_State *L, const char *s, const char *name) {
  return sr_run_loaded(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l [g=]mod: g = require(mod).  Without '=', g is mod (from Lua 5.4.6
 * on, mod up to a '-', the mark that luaopen_ names ignore too). */
static int sr_require(lua_State *L, const char *spec) {
  const char *eq = strchr(spec, '=');
  const char *mod = eq != NULL ? eq + 1 : spec;
#if LUA_VERSION_RELEASE_NUM >= 50406
  size_t glen = eq != NULL ? (size_t)(eq - spec) : strcspn(spec, "-");
#else
  size_t glen = eq != NULL ? (size_t)(eq - spec) : strlen(spec);
#endif
  lua_getglobal(L, "require");
  lua_pushstring(L, mod);
  int status = sr_call(L, 1, 1);
  if (status == LUA_OK) {
    lua_pushglobaltable(L);
    lua_pushlstring(L, spec, glen);
    lua_pushvalue(L, -3);
    lua_settable(L, -3);
    lua_pop(L, 2);
  }
  return sr_report(L, status);
}

/* The script gets arg[1..#arg] as its `...`. */
static int sr_script(lua_State *L, char **argv, int script) {
  const char *fname = argv[script];
  if (strcmp(fname, "-") == 0 && strcmp(argv[script - 1], "--") != 0)
    fname = NULL;  /* stdin */
  int status = luaL_loadfile(L, fname);
  if (status == LUA_OK) {
    if (lua_getglobal(L, "arg") != LUA_TTABLE)
      luaL_error(L, "'arg' is not a table");
    int n = (int)luaL_len(L, -1);
    luaL_checkstack(L, n + 3, "too many arguments to script");
    for (int i = 1; i <= n; i++)
      lua_rawgeti(L, -i, i);
    lua_remove(L, -n - 1);
    status = sr_call(L, n, LUA_MULTRET);
  }
  return sr_report(L, status);
}

/* ---- interactive mode ---------------------------------------------- */

/* Lines come from GNU readline when scralua is built with it (as the
 * reference lua is on Debian): line editing, and history of the lines
 * run.  Without it, from stdin with the prompt on stdout. */
#if defined(SCRALUA_READLINE)
static void sr_initreadline(void) { rl_readline_name = "lua"; }
static void sr_saveline(const char *line) { add_history(line); }
#else
static void sr_initreadline(void) {}
static void sr_saveline(const char *line) { (void)line; }
#endif

/* The prompt is tostring(_PROMPT) (or _PROMPT2), so a table with
 * __tostring works; an unset one leaves nil on the stack and means the
 * default.  The value stays on the stack until a line is read. */
static const char *sr_prompt(lua_State *L, int first) {
  if (lua_getglobal(L, first ? "_PROMPT" : "_PROMPT2") == LUA_TNIL)
    return first ? "> " : ">> ";
  const char *p = luaL_tolstring(L, -1, NULL);
  lua_remove(L, -2);
  return p;
}

/* Push the next line (without its newline) in place of the prompt; 0 at
 * end of input, with the prompt's value left on the stack (the reference
 * interpreter reports that value when input ends inside a statement). */
static int sr_readline(lua_State *L, int first) {
  const char *prompt = sr_prompt(L, first);
#if defined(SCRALUA_READLINE)
  char *line = readline(prompt);
  if (line == NULL)
    return 0;
  size_t len = strlen(line);
  if (len > 0 && line[len - 1] == '\n')
    len--;
  lua_pushlstring(L, line, len);
  free(line);
#else
  fputs(prompt, stdout);
  fflush(stdout);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  char chunk[512];
  int got = 0;
  while (fgets(chunk, sizeof chunk, stdin) != NULL) {
    size_t len = strlen(chunk);
    got = 1;
    if (len > 0 && chunk[len - 1] == '\n') {
      luaL_addlstring(&b, chunk, len - 1);
      break;
    }
    luaL_addlstring(&b, chunk, len);
  }
  luaL_pushresult(&b);
  if (!got) {
    lua_pop(L, 1);
    return 0;
  }
#endif
  lua_remove(L, -2);  /* the prompt */
  if (first && lua_tostring(L, -1)[0] == '=') {  /* "= expr", as Lua 5.2 had */
    lua_pushfstring(L, "return %s", lua_tostring(L, -1) + 1);
    lua_remove(L, -2);
  }
  return 1;
}

/* A syntax error at <eof> means the chunk continues on the next line. */
static int sr_incomplete(lua_State *L, int status) {
  if (status != LUA_ERRSYNTAX)
    return 0;
  size_t len;
  const char *msg = lua_tolstring(L, -1, &len);
  static const char mark[] = "<eof>";
  if (len >= sizeof mark - 1 && strcmp(msg + len - (sizeof mark - 1), mark) == 0) {
    lua_pop(L, 1);
    return 1;
  }
  return 0;
}

/* Load the next statement or expression; -1 at end of input.  The
 * line is at index 1; the loaded function (or error) ends on top.  A
 * line that loads as "return line;" is an expression. */
static int sr_loadline(lua_State *L) {
  lua_settop(L, 0);
  if (!sr_readline(L, 1))
    return -1;
  const char *line = lua_tostring(L, 1);
  const char *expr = lua_pushfstring(L, "return %s;", line);
  int status = luaL_loadbuffer(L, expr, strlen(expr), "=stdin");
  if (status == LUA_OK) {
    lua_remove(L, -2);
    if (line[0] != '\0')
      sr_saveline(line);
    lua_remove(L, 1);
    return status;
  }
  lua_pop(L, 2);
  for (;;) {  /* a statement, maybe over several lines */
    size_t len;
    const char *code = lua_tolstring(L, 1, &len);
    status = luaL_loadbuffer(L, code, len, "=stdin");
    if (!sr_incomplete(L, status) || !sr_readline(L, 0)) {
      sr_saveline(code);
      break;
    }
    lua_pushliteral(L, "\n");
    lua_insert(L, -2);
    lua_concat(L, 3);
  }
  lua_remove(L, 1);
  return status;
}

static void sr_repl(lua_State *L) {
  const char *prog = sr_progname;
  sr_progname = NULL;
  sr_initreadline();
  int status;
  while ((status = sr_loadline(L)) != -1) {
    if (status == LUA_OK)
      status = sr_call(L, 0, LUA_MULTRET);
    if (status == LUA_OK && lua_gettop(L) > 0) {
      int n = lua_gettop(L);
      luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
      lua_getglobal(L, "print");
      lua_insert(L, 1);
      if (lua_pcall(L, n, 0, 0) != LUA_OK)
        sr_message(sr_progname, lua_pushfstring(L, "error calling 'print' (%s)",
                                                lua_tostring(L, -1)));
    } else {
      sr_report(L, status);
    }
  }
  lua_settop(L, 0);
  fputs("\n", stdout);
  fflush(stdout);
  sr_progname = prog;
}

/* ---- command line -------------------------------------------------- */

/* Flags of the options before the script; *script is the index of the
 * script in argv, 0 without one, or the bad option with SR_BAD. */
static int sr_scan(char **argv, int *script) {
  int flags = 0;
  int i;
  for (i = 1; argv[i] != NULL; i++) {
    *script = i;
    const char *a = argv[i];
    if (a[0] != '-')
      return flags;
    switch (a[1]) {
      case '\0':
        return flags;  /* "-": the script is stdin */
      case '-':
        if (a[2] != '\0')
          return SR_BAD;
        *script = argv[i + 1] != NULL ? i + 1 : 0;
        return flags;
      case 'i':
        flags |= SR_I | SR_V;
        if (a[2] != '\0')
          return SR_BAD;
        break;
      case 'v':
      case 'E':
      case 'W':
      case 'S':
        if (a[2] != '\0')
          return SR_BAD;
        flags |= a[1] == 'v' ? SR_V : a[1] == 'E' ? SR_NOENV : a[1] == 'S' ? SR_STATS : 0;
        break;
      case 'e':
      case 'l':
        if (a[1] == 'e')
          flags |= SR_E;
        if (a[2] == '\0') {
          i++;
          if (argv[i] == NULL || argv[i][0] == '-')
            return SR_BAD;
        }
        break;
      default:
        return SR_BAD;
    }
  }
  *script = 0;
  return flags;
}

/* -e, -l and -W in order, up to the script. */
static int sr_options(lua_State *L, char **argv, int limit) {
  for (int i = 1; i < limit; i++) {
    const char *a = argv[i];
    int opt = a[1];
    if (opt == 'W') {
      lua_warning(L, "@on", 0);
    } else if (opt == 'e' || opt == 'l') {
      const char *val = a[2] != '\0' ? a + 2 : argv[++i];
      int status = opt == 'e' ? sr_dostring(L, val, "=(command line)") : sr_require(L, val);
      if (status != LUA_OK)
        return 0;
    }
  }
  return 1;
}

static int sr_init(lua_State *L) {
  const char *name = "=LUA_INIT_" LUA_VERSION_MAJOR "_" LUA_VERSION_MINOR;
  const char *init = getenv(name + 1);
  if (init == NULL) {
    name = "=LUA_INIT";
    init = getenv(name + 1);
  }
  if (init == NULL)
    return LUA_OK;
  if (init[0] == '@')
    return sr_run_loaded(L, luaL_loadfile(L, init + 1));
  return sr_dostring(L, init, name);
}

static int sr_main(lua_State *L) {
  int argc = (int)lua_tointeger(L, 1);
  char **argv = (char **)lua_touserdata(L, 2);
  int script = 0;
  int flags = sr_scan(argv, &script);
  luaL_checkversion(L);
  if (flags == SR_BAD) {
    sr_usage(argv[script]);
    return 0;
  }
  if ((flags & SR_STATS) && !sr_stats)
    sr_stats = 1;
  if (flags & SR_V)
    sr_version();
  if (flags & SR_NOENV) {
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_scralloc);
  lua_setfield(L, -2, "scralloc");
  lua_pop(L, 1);
  /* arg[0] is the script (the interpreter without one), options below 0 */
  lua_createtable(L, argc - script, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
  lua_gc(L, LUA_GCRESTART);
  lua_gc(L, LUA_GCGEN, 0, 0);
  if (!(flags & SR_NOENV) && sr_init(L) != LUA_OK)
    return 0;
  if (!sr_options(L, argv, script > 0 ? script : argc))
    return 0;
  if (script > 0 && sr_script(L, argv, script) != LUA_OK)
    return 0;
  if (flags & SR_I) {
    sr_repl(L);
  } else if (script == 0 && !(flags & (SR_E | SR_V))) {
    if (isatty(0)) {
      sr_version();
      sr_repl(L);
    } else {
      /* as the reference interpreter: an error in a program read from
       * stdin without "-" is reported, and the exit status stays 0 */
      sr_run_loaded(L, luaL_loadfile(L, NULL));
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* SCRALLOC_STATS as the preload library reads it: 0 (or off, no, false)
 * none, json the JSON, 1 or 2 (or on, yes, true) the report; any other
 * value is said and ignored. */
static int sr_stats_value(const char *v) {
  static const char *const off[] = {"0", "off", "no", "false"}, *const on[] = {"1", "2", "on", "yes", "true"};
  for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
    if (strcmp(v, off[i]) == 0) return 0;
  for (size_t i = 0; i < sizeof on / sizeof on[0]; i++)
    if (strcmp(v, on[i]) == 0) return 1;
  if (strcmp(v, "json") == 0) return 2;
  fprintf(stderr, "scralua: ignoring SCRALLOC_STATS=%s (not a valid value: 0, 1, 2, on, off or json)\n", v);
  return 0;
}

int main(int argc, char **argv) {
  if (argv[0] != NULL && argv[0][0] != '\0')
    sr_progname = argv[0];
  const char *env = getenv("SCRALLOC_STATS");
  if (env != NULL && env[0] != '\0')
    sr_stats = sr_stats_value(env);
  env = getenv("SCRALLOC_STATS_FILE");
  if (env != NULL && env[0] != '\0')
    sr_stats_file = strdup(env);
  /* the report is this process's: children do not inherit the request */
  unsetenv("SCRALLOC_STATS");
  unsetenv("SCRALLOC_STATS_FILE");
  scr_options opt;
  scr_options_init(&opt);
  scr_options_from_env(&opt);
  sr_heap = scr_heap_new(&opt);
  if (sr_heap == NULL) {
    sr_message(sr_progname, "cannot create a scralloc heap");
    return EXIT_FAILURE;
  }
  scrl_acct_init(&sr_acct, sr_heap);
  lua_State *L = scrl_newstate(&sr_acct, &sr_warn);
  if (L == NULL) {
    sr_message(sr_progname, "cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  atexit(sr_print_stats);  /* os.exit() leaves without coming back here */
  lua_gc(L, LUA_GCSTOP);
  lua_pushcfunction(L, sr_main);
  lua_pushinteger(L, argc);
  lua_pushlightuserdata(L, argv);
  int status = lua_pcall(L, 2, 1, 0);
  int ok = lua_toboolean(L, -1);
  sr_report(L, status);
  if (sr_stats) {
    sr_print_stats();  /* the state's figures, then what closing leaves */
    lua_close(L);
    sr_closed = 1;
    struct scr_stats st;
    scr_heap_stats(sr_heap, &st);
    sr_open_stats();
    fprintf(sr_out, "scralua: after lua_close: allocs=%llu mmaps=%llu bytes=%llu\n",
            (unsigned long long)st.allocs, (unsigned long long)st.mmaps,
            (unsigned long long)st.bytes);
    sr_close_stats();
  } else {
    lua_close(L);
    sr_closed = 1;
  }
  scr_heap_destroy(sr_heap);
  sr_heap = NULL;
  return ok && status == LUA_OK ? EXIT_SUCCESS : EXIT_FAILURE;
}
