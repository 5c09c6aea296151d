/* Options: one table (SCR_OPTIONS in scralloc.h) gives each option its
 * default, its clamp and its environment name SCRALLOC_<NAME>. */
#include "internal.h"
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void scr_options_init(scr_options *opt) {
  if (opt == NULL) return;
#define X(type, name, def, lo, hi, doc) opt->name = (type)(def);
  SCR_OPTIONS(X)
#undef X
  _scr_env_unknown_names();
}

/* Out-of-line comparisons keep the compiler from warning that a bound of
 * 0 can never be undercut. */
static bool outside(uint64_t v, uint64_t lo, uint64_t hi) { return v < lo || v > hi; }
static uint64_t clamp(uint64_t v, uint64_t lo, uint64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void _scr_options_clamp(scr_options *opt) {
#define X(type, name, def, lo, hi, doc) opt->name = (type)clamp((uint64_t)opt->name, (uint64_t)(lo), (uint64_t)(hi));
  SCR_OPTIONS(X)
#undef X
  if (opt->large_cache > SCR_LARGE_CACHE_MAX) opt->large_cache = SCR_LARGE_CACHE_MAX;
}

/* "123", "64K", "4M", "1G", "4KiB", "4MB" (binary multiples). */
int _scr_parse_size(const char *s, uint64_t *out) {
  if (s == NULL || !isdigit((unsigned char)*s)) return SCR_EINVAL;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
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

int scr_options_set(scr_options *opt, const char *name, const char *value) {
  uint64_t v;
  if (opt == NULL || name == NULL) return SCR_EINVAL;
  if (value && strcasecmp(name, "profile_rate") == 0 && strcmp(value, "on") == 0) value = "512K"; /* SCR_PROFILE_DEFAULT_RATE */
  if (_scr_parse_size(value, &v) != SCR_OK) return SCR_EINVAL;
#define X(type, oname, def, lo, hi, doc)                              \
  if (strcasecmp(name, #oname) == 0) {                                 \
    if (outside(v, (uint64_t)(lo), (uint64_t)(hi))) return SCR_EINVAL;   \
    opt->oname = (type)v;                                              \
    return SCR_OK;                                                     \
  }
  SCR_OPTIONS(X)
#undef X
  return SCR_EINVAL;
}

/* The value of SCRALLOC_<NAME> (name in any case), or NULL; env (at
 * least 64 bytes) receives the variable's name.  No malloc. */
const char *_scr_env_option(const char *name, char *env, size_t len) {
  size_t i = 0;
  memcpy(env, "SCRALLOC_", 9);
  for (; name[i] && i + 10 < len; i++) env[9 + i] = (char)toupper((unsigned char)name[i]);
  env[9 + i] = '\0';
  const char *v = getenv(env);
  return v && *v ? v : NULL;
}

void scr_options_from_env(scr_options *opt) {
  if (opt == NULL) return;
  char env[64];
  uint64_t v;
#define X(type, name, def, lo, hi, doc)                                        \
  {                                                                            \
    const char *s = _scr_env_option(#name, env, sizeof env);                   \
    if (s && scr_options_set(opt, #name, s) != SCR_OK) {                       \
      bool range = _scr_parse_size(s, &v) == SCR_OK;                           \
      _scr_report_env(env, s, range ? (uint64_t)(lo) : 1, range ? (uint64_t)(hi) : 0); \
    }                                                                          \
  }
  SCR_OPTIONS(X)
#undef X
  _scr_env_unknown_names();
}
