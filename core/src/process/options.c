/* Options of the process allocator: one table (process.h), each with a
 * default, a clamp and an environment name SCRALLOC_<NAME>.  Read without
 * malloc (getenv only), so it can run inside the first malloc call.
 * Layer: base.  Owns _scr_proc.opt's values (written under
 * _scr_proc.lock, read by every layer without it). */
#include "process.h"
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

void _scr_proc_options_init(scr_proc_options *o) {
#define SCR_PROC_OPT_DEF_(name, def, lo, hi, doc) o->name = (uint64_t)(def);
  SCR_PROC_OPTIONS(SCR_PROC_OPT_DEF_)
#undef SCR_PROC_OPT_DEF_
}

/* A size as the core parses it ("8M"), on/off words, and the words of
 * discard ("poison"), stats ("json") and on_error ("abort", "warn",
 * "ignore").  -1 on bad text. */
static int proc_parse_value(const char *name, const char *s, uint64_t *out) {
  if (strcmp(name, "discard") == 0 && strcmp(s, "poison") == 0) { *out = 2; return 0; }
  if (strcmp(name, "stats") == 0 && strcmp(s, "json") == 0) { *out = SCR_STATS_JSON; return 0; }
  if (strcmp(name, "on_error") == 0) {
    static const char *const words[] = {"abort", "warn", "ignore"};
    for (unsigned i = 0; i < 3; i++)
      if (strcmp(s, words[i]) == 0) { *out = i; return 0; }
  }
  if (strcmp(name, "profile_rate") == 0 && strcmp(s, "on") == 0) { *out = SCR_PROFILE_DEFAULT_RATE; return 0; }
  if (strcmp(s, "on") == 0 || strcmp(s, "true") == 0 || strcmp(s, "yes") == 0) { *out = 1; return 0; }
  if (strcmp(s, "off") == 0 || strcmp(s, "false") == 0 || strcmp(s, "no") == 0) { *out = 0; return 0; }
  return _scr_parse_size(s, out) == SCR_OK ? 0 : -1;
}

/* Out of line: a bound of 0 would otherwise draw "comparison is always
 * false" warnings. */
static __attribute__((noinline)) bool proc_outside(uint64_t v, uint64_t lo, uint64_t hi) { return v < lo || v > hi; }

/* SCR_OK; SCR_EINVAL for an unknown name or text that is not a value; a
 * value outside the option's range is refused too (SCR_EINVAL), and
 * *range (when not NULL) then gets the range, for the warning. */
static int proc_option_set(scr_proc_options *o, const char *name, const char *value, uint64_t range[2]) {
  uint64_t v;
  if (name == NULL || value == NULL) return SCR_EINVAL;
#define SCR_PROC_OPT_SET_(n, def, lo, hi, doc)                                  \
  if (strcmp(name, #n) == 0) {                                                  \
    if (proc_parse_value(name, value, &v) != 0) return SCR_EINVAL;              \
    if (proc_outside(v, (uint64_t)(lo), (uint64_t)(hi))) {                      \
      if (range) range[0] = (uint64_t)(lo), range[1] = (uint64_t)(hi);          \
      return SCR_EINVAL;                                                        \
    }                                                                           \
    o->n = v;                                                                   \
    return SCR_OK;                                                              \
  }
  SCR_PROC_OPTIONS(SCR_PROC_OPT_SET_)
#undef SCR_PROC_OPT_SET_
  return SCR_EINVAL;
}

int _scr_proc_option_set(scr_proc_options *o, const char *name, const char *value) {
  return proc_option_set(o, name, value, NULL);
}

void _scr_proc_options_from_env(scr_proc_options *o) {
  char env[64];
#define SCR_PROC_OPT_ENV_(n, def, lo, hi, doc)                                  \
  {                                                                             \
    const char *val = _scr_env_option(#n, env, sizeof env);                     \
    uint64_t range[2] = {1, 0};                                                 \
    if (val && proc_option_set(o, #n, val, range) != SCR_OK)                    \
      _scr_report_env(env, val, range[0], range[1]);                            \
  }
  SCR_PROC_OPTIONS(SCR_PROC_OPT_ENV_)
#undef SCR_PROC_OPT_ENV_
}

/* The names of SCRALLOC_ variables that are neither options of the
 * process allocator nor of the heaps: the project's build and test
 * switches, which reach programs under LD_PRELOAD through the test
 * harnesses' environment, and the variables of its tools (scralua's
 * report file, python -m scralloc's library, the notebooks' size, folder
 * and figures), which reach the programs those tools start. */
static const char *const proc_tool_names[] = {
    "DEBUG_BUILD", "EXPECT_DEBUG", "WERROR", "HYPOTHESIS_LONG", "HYPOTHESIS_PROFILE", /* build and tests */
    "STATS_FILE",                                                                      /* scralua */
    "PROFILE",                                                                         /* profile.c: the exit's profile files */
    "LIBRARY", "RUN_PKG",                                                              /* python -m scralloc */
    "ROOT", "NOTEBOOK_SIZE", "FIGURES",                                                /* the notebooks */
};

/* Edit distance of a and b, letters in any case, on their first 63
 * characters; no malloc. */
static unsigned proc_distance(const char *a, size_t a_len, const char *b) {
  unsigned row[64], la = (unsigned)(a_len < 63 ? a_len : 63), lb = (unsigned)strnlen(b, 63);
  for (unsigned j = 0; j <= lb; j++) row[j] = j;
  for (unsigned i = 1; i <= la; i++) {
    unsigned diag = row[0];
    row[0] = i;
    for (unsigned j = 1; j <= lb; j++) {
      unsigned up = row[j];
      unsigned best = diag + (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* The variable's name is the option's, in upper case, exactly. */
static bool proc_env_is(const char *name, size_t len, const char *option) {
  size_t i = 0;
  for (; i < len && option[i]; i++)
    if (name[i] != toupper((unsigned char)option[i])) return false;
  return i == len && option[i] == '\0';
}

static void proc_closer(const char *name, size_t len, const char *option, const char **best, unsigned *best_d,
                        bool *known) {
  if (proc_env_is(name, len, option)) *known = true;
  unsigned d = proc_distance(name, len, option);
  if (d < *best_d) *best_d = d, *best = option;
}

/* Every SCRALLOC_<NAME> in the environment that names no option is said
 * on stderr with the closest option's name (a misspelt option would
 * otherwise be ignored without a word); the names are upper case, so
 * SCRALLOC_retain is one of them. */
void _scr_env_unknown_names(void) {
  extern char **environ;
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "SCRALLOC_", 9) != 0) continue;
    const char *name = *e + 9, *eq = strchr(name, '=');
    size_t len = eq ? (size_t)(eq - name) : strlen(name);
    if (len == 0) continue;
    const char *best = NULL;
    unsigned best_d = ~0u;
    bool known = false;
#define SCR_PROC_OPT_NAME_(o, ...) proc_closer(name, len, #o, &best, &best_d, &known);
    SCR_PROC_OPTIONS(SCR_PROC_OPT_NAME_)
#undef SCR_PROC_OPT_NAME_
#define SCR_HEAP_OPT_NAME_(type, o, ...) proc_closer(name, len, #o, &best, &best_d, &known);
    SCR_OPTIONS(SCR_HEAP_OPT_NAME_)
#undef SCR_HEAP_OPT_NAME_
    for (unsigned i = 0; i < sizeof proc_tool_names / sizeof proc_tool_names[0]; i++)
      if (strlen(proc_tool_names[i]) == len && strncmp(name, proc_tool_names[i], len) == 0) known = true;
    if (known) continue;
    char up[64];
    size_t i = 0;
    for (; best[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)best[i]);
    up[i] = '\0';
    _scr_report_unknown_env(name, len, up);
  }
}
