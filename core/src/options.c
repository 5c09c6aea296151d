/* Options: one table (SCR_OPTION_TABLE in scralloc.h) gives each option
 * its scope (heap, process or both), default, range, words and
 * environment name SCRALLOC_<NAME>.  This file holds the one name parser
 * (_scr_option_find), the one value parser (_scr_option_parse) and the
 * environment's reader and unknown-name warning, for the heap's setters
 * here and the process allocator's (process/options.c).  No malloc
 * (getenv only): the process allocator reads its options inside the first
 * malloc call. */
#include "internal.h"
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
  const char *name, *words;
  unsigned scope;
  uint64_t lo, hi;
} opt_desc[SCR_OPT_COUNT] = {
#define X(scope, type, name, def, lo, hi, words, doc) {#name, words, scope, (uint64_t)(lo), (uint64_t)(hi)},
    SCR_OPTION_TABLE(X)
#undef X
};

void scr_options_init(scr_options *opt) {
  if (opt == NULL) return;
#define X(type, name, def, lo, hi, doc) opt->name = (type)(def);
  SCR_OPTIONS(X)
#undef X
  _scr_env_unknown_names();
}

static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void _scr_options_clamp(scr_options *opt) {
#define X(type, name, def, lo, hi, doc) opt->name = (type)clamp((uint64_t)opt->name, (uint64_t)(lo), (uint64_t)(hi));
  SCR_OPTIONS(X)
#undef X
  if (opt->large_cache > SCR_LARGE_CACHE_MAX) opt->large_cache = SCR_LARGE_CACHE_MAX;
}

/* "123", "64K", "4M", "1G", "4KiB", "4MB" (binary multiples); the first
 * len characters of s. */
static int parse_size(const char *s, size_t len, uint64_t *out) {
  char buf[32];
  if (len >= sizeof buf || !isdigit((unsigned char)*s)) return SCR_EINVAL;
  memcpy(buf, s, len), buf[len] = '\0';
  errno = 0;
  char *end;
  unsigned long long v = strtoull(buf, &end, 10);
  if (errno != 0) return SCR_EINVAL;
  unsigned shift = 0;
  switch (toupper((unsigned char)*end)) {
  case 'K': shift = 10; end++; break;
  case 'M': shift = 20; end++; break;
  case 'G': shift = 30; end++; break;
  default: break;
  }
  if (shift && toupper((unsigned char)*end) == 'I') end++;
  if (toupper((unsigned char)*end) == 'B') end++;
  if (*end != '\0') return SCR_EINVAL;
  if (shift && v > (UINT64_MAX >> shift)) return SCR_EINVAL;
  *out = (uint64_t)v << shift;
  return SCR_OK;
}

int _scr_option_find(const char *name, unsigned scope) {
  if (name == NULL) return -1;
  for (int id = 0; id < SCR_OPT_COUNT; id++)
    if (strcasecmp(name, opt_desc[id].name) == 0) return opt_desc[id].scope & scope ? id : -1;
  return -1;
}

/* words: "word=value ..." */
static bool word_value(const char *words, const char *s, uint64_t *out) {
  size_t n = strlen(s);
  for (const char *w = words; *w;) {
    const char *eq = strchr(w, '='), *sp = strchr(eq, ' ');
    size_t vlen = sp ? (size_t)(sp - eq - 1) : strlen(eq + 1);
    if ((size_t)(eq - w) == n && strncasecmp(w, s, n) == 0) return parse_size(eq + 1, vlen, out) == SCR_OK;
    w = eq + 1 + vlen + (sp != NULL);
  }
  return false;
}

int _scr_option_parse(int id, const char *s, uint64_t *out) {
  static const char *const yes[] = {"on", "true", "yes"}, *const no[] = {"off", "false", "no"};
  uint64_t v = UINT64_MAX;
  if (s == NULL) return SCR_OPT_BAD;
  if (!word_value(opt_desc[id].words, s, &v))
    for (unsigned i = 0; i < 3; i++) {
      if (strcasecmp(s, yes[i]) == 0) v = 1;
      if (strcasecmp(s, no[i]) == 0) v = 0;
    }
  if (v == UINT64_MAX && parse_size(s, strlen(s), &v) != SCR_OK) return SCR_OPT_BAD;
  if (v < opt_desc[id].lo || v > opt_desc[id].hi) return SCR_OPT_RANGE;
  *out = v;
  return SCR_OK;
}

static void heap_store(scr_options *opt, int id, uint64_t v) {
  switch (id) {
#define X(type, name, def, lo, hi, doc) \
  case SCR_OPT_##name: opt->name = (type)v; break;
    SCR_OPTIONS(X)
#undef X
  default: break;
  }
}

int scr_options_set(scr_options *opt, const char *name, const char *value) {
  uint64_t v;
  int id = _scr_option_find(name, SCR_SCOPE_HEAP);
  if (opt == NULL || id < 0 || _scr_option_parse(id, value, &v) != SCR_OK) return SCR_EINVAL;
  heap_store(opt, id, v);
  return SCR_OK;
}

const char *_scr_env_option(const char *name, char *env, size_t len) {
  size_t i = 0;
  memcpy(env, "SCRALLOC_", 9);
  for (; name[i] && i + 10 < len; i++) env[9 + i] = (char)toupper((unsigned char)name[i]);
  env[9 + i] = '\0';
  const char *v = getenv(env);
  return v && *v ? v : NULL;
}

bool _scr_option_env(int id, unsigned scope, uint64_t *out) {
  char env[64];
  const char *s = opt_desc[id].scope & scope ? _scr_env_option(opt_desc[id].name, env, sizeof env) : NULL;
  if (s == NULL) return false;
  int r = _scr_option_parse(id, s, out);
  if (r == SCR_OPT_RANGE) _scr_report_env(env, s, opt_desc[id].lo, opt_desc[id].hi);
  if (r == SCR_OPT_BAD) _scr_report_env(env, s, 1, 0);
  return r == SCR_OK;
}

void scr_options_from_env(scr_options *opt) {
  if (opt == NULL) return;
  uint64_t v;
  for (int id = 0; id < SCR_OPT_COUNT; id++)
    if (_scr_option_env(id, SCR_SCOPE_HEAP, &v)) heap_store(opt, id, v);
  _scr_env_unknown_names();
}

/* ---- SCRALLOC_ variables that name no option ---- */

/* The names of SCRALLOC_ variables that are no option: the project's build
 * and test switches, which reach programs under LD_PRELOAD through the
 * test harnesses' environment, and the variables of its tools (scralua's
 * report file, python -m scralloc's library, the notebooks' size, folder
 * and figures), which reach the programs those tools start. */
static const char *const tool_names[] = {
    "DEBUG_BUILD", "EXPECT_DEBUG", "WERROR", "HYPOTHESIS_LONG", "HYPOTHESIS_PROFILE", /* build and tests */
    "STATS_FILE",                                                                      /* scralua */
    "PROFILE",                                                                         /* profile.c: the exit's profile files */
    "LIBRARY", "RUN_PKG",                                                              /* python -m scralloc */
    "ROOT", "NOTEBOOK_SIZE", "FIGURES",                                                /* the notebooks */
};

/* Edit distance of a and b, letters in any case, on their first 63
 * characters; no malloc. */
static unsigned distance(const char *a, size_t a_len, const char *b) {
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

/* The variable's name is the option's in upper case, exactly. */
static bool env_is(const char *name, size_t len, const char *option) {
  size_t i = 0;
  for (; i < len && option[i]; i++)
    if (name[i] != toupper((unsigned char)option[i])) return false;
  return i == len && option[i] == '\0';
}

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
    for (int id = 0; id < SCR_OPT_COUNT; id++) {
      unsigned d = distance(name, len, opt_desc[id].name);
      known |= env_is(name, len, opt_desc[id].name);
      if (d < best_d) best_d = d, best = opt_desc[id].name;
    }
    for (unsigned i = 0; i < sizeof tool_names / sizeof tool_names[0]; i++)
      if (strlen(tool_names[i]) == len && strncmp(name, tool_names[i], len) == 0) known = true;
    if (known) continue;
    char up[64];
    size_t i = 0;
    for (; best[i] && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)best[i]);
    up[i] = '\0';
    _scr_report_unknown_env(name, len, up);
  }
}
