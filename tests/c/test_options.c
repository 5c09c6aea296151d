/* The one options table (SCR_OPTION_TABLE in scralloc.h): each option's
 * scope is enforced (a heap's setter refuses the process allocator's own
 * options, the process allocator's refuses the heap's own, an option of
 * both is taken by both), and a name or a value is parsed the same by
 * scr_options_set and scr_process_option_set: names and words in any
 * case, the same words. */
#include "check.h"
#include "scralloc.h"
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const struct {
  unsigned scope;
  const char *name;
  uint64_t def;
} table[] = {
#define ENTRY_(scope, type, name, def, lo, hi, words, doc) {scope, #name, (uint64_t)(def)},
    SCR_OPTION_TABLE(ENTRY_)
#undef ENTRY_
};
#define COUNT (sizeof table / sizeof table[0])

static void upper(char *dst, const char *src) {
  while ((*dst++ = (char)toupper((unsigned char)*src++))) {}
}

/* Each option, set to its default in lower and upper case, is taken by
 * the setters of its scope and refused by the other one. */
static void each_scope_is_enforced(void) {
  scr_options o;
  scr_options_init(&o);
  char up[64], v[32];
  for (unsigned i = 0; i < COUNT; i++) {
    int heap = (table[i].scope & SCR_SCOPE_HEAP) != 0, proc = (table[i].scope & SCR_SCOPE_PROCESS) != 0;
    CHECK(heap || proc);
    upper(up, table[i].name);
    snprintf(v, sizeof v, "%llu", (unsigned long long)table[i].def);
    for (int c = 0; c < 2; c++) {
      const char *name = c ? up : table[i].name;
      if ((scr_options_set(&o, name, v) == SCR_OK) != heap) fprintf(stderr, "  scr_options_set %s\n", name);
      CHECK_EQ(scr_options_set(&o, name, v) == SCR_OK, heap);
      if ((scr_process_option_set(name, v) == SCR_OK) != proc) fprintf(stderr, "  scr_process_option_set %s\n", name);
      CHECK_EQ(scr_process_option_set(name, v) == SCR_OK, proc);
      if (proc) CHECK_EQ(scr_process_option_get(name), table[i].def);
      else CHECK_EQ(scr_process_option_get(name), UINT64_MAX);
    }
  }
  /* the same, spelled out for one of each scope */
  CHECK_EQ(scr_options_set(&o, "on_error", "warn"), SCR_EINVAL);       /* process only */
  CHECK_EQ(scr_options_set(&o, "decay_ms", "100"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_set("retain_bytes", "1M"), SCR_EINVAL); /* heap only */
  CHECK_EQ(scr_process_option_set("purge_delay_ms", "100"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_get("retain"), UINT64_MAX);
  CHECK_EQ(scr_options_set(&o, "no_such_option", "1"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_set("no_such_option", "1"), SCR_EINVAL);
}

/* profile_rate, of scope both: every spelling gives both the same value. */
static void both_parse_a_name_and_value_alike(void) {
  static const struct {
    const char *name, *value;
    uint64_t want; /* UINT64_MAX: refused */
  } cases[] = {
      {"profile_rate", "on", SCR_PROFILE_DEFAULT_RATE},
      {"PROFILE_RATE", "ON", SCR_PROFILE_DEFAULT_RATE},
      {"Profile_Rate", "On", SCR_PROFILE_DEFAULT_RATE},
      {"profile_rate", "off", 0},
      {"profile_rate", "No", 0},
      {"profile_rate", "true", 1},
      {"profile_rate", "1M", 1 << 20},
      {"profile_rate", "64kib", 64 << 10},
      {"profile_rate", "lots", UINT64_MAX},
      {"profile_rate", "json", UINT64_MAX},   /* stats's word */
      {"profile_rate", "poison", UINT64_MAX}, /* discard's */
      {"profile_rate", "2048G", UINT64_MAX},  /* above the range */
      {"profile_rate", "", UINT64_MAX},
      {"profile-rate", "1", UINT64_MAX},
      {"profile_rate ", "1", UINT64_MAX},
  };
  for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    scr_options o;
    scr_options_init(&o);
    o.profile_rate = 7;
    CHECK_EQ(scr_process_option_set("profile_rate", "7"), SCR_OK);
    int want = cases[i].want == UINT64_MAX ? SCR_EINVAL : SCR_OK;
    int h = scr_options_set(&o, cases[i].name, cases[i].value), p = scr_process_option_set(cases[i].name, cases[i].value);
    if (h != want || p != want) fprintf(stderr, "  %s=%s: heap %d, process %d\n", cases[i].name, cases[i].value, h, p);
    CHECK_EQ(h, want);
    CHECK_EQ(p, want);
    uint64_t got = want == SCR_OK ? cases[i].want : 7;
    CHECK_EQ(o.profile_rate, got);
    CHECK_EQ(scr_process_option_get("PROFILE_RATE"), got);
  }
  CHECK_EQ(scr_process_option_set("profile_rate", "0"), SCR_OK);
}

/* The words of the process allocator's options, in any case; each word
 * belongs to its option; on/off/true/false/yes/no to every option, the
 * heap's too. */
static void words_in_any_case(void) {
  uint64_t on_error = scr_process_option_get("on_error"), discard = scr_process_option_get("discard");
  CHECK_EQ(scr_process_option_set("on_error", "WARN"), SCR_OK);
  CHECK_EQ(scr_process_option_get("on_error"), 1);
  CHECK_EQ(scr_process_option_set("On_Error", "Ignore"), SCR_OK);
  CHECK_EQ(scr_process_option_get("on_error"), 2);
  CHECK_EQ(scr_process_option_set("on_error", "json"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_set("on_error", "on"), SCR_OK); /* 1: warn */
  CHECK_EQ(scr_process_option_get("on_error"), 1);
  CHECK_EQ(scr_process_option_set("discard", "POISON"), SCR_OK);
  CHECK_EQ(scr_process_option_get("discard"), 2);
  CHECK_EQ(scr_process_option_set("discard", "abort"), SCR_EINVAL);
  CHECK_EQ(scr_process_option_set("stats", "Json"), SCR_OK);
  CHECK_EQ(scr_process_option_get("stats"), 3);
  CHECK_EQ(scr_process_option_set("stats", "OFF"), SCR_OK);
  CHECK_EQ(scr_process_option_get("stats"), 0);
  scr_options o;
  scr_options_init(&o);
  CHECK_EQ(scr_options_set(&o, "RETAIN", "Off"), SCR_OK);
  CHECK_EQ(o.retain, 0);
  CHECK_EQ(scr_options_set(&o, "retain", "YES"), SCR_OK);
  CHECK_EQ(o.retain, 1);
  CHECK_EQ(scr_options_set(&o, "retain", "poison"), SCR_EINVAL);
  char v[32];
  snprintf(v, sizeof v, "%llu", (unsigned long long)on_error);
  CHECK_EQ(scr_process_option_set("on_error", v), SCR_OK);
  snprintf(v, sizeof v, "%llu", (unsigned long long)discard);
  CHECK_EQ(scr_process_option_set("discard", v), SCR_OK);
}

int main(void) {
  TEST(each_scope_is_enforced);
  TEST(both_parse_a_name_and_value_alike);
  TEST(words_in_any_case);
  return check_done();
}
