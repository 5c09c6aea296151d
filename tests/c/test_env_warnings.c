/* Warnings about the environment: every SCRALLOC_ variable that is not
 * applied is said once, whichever option it names, whoever reads it
 * (scr_options_from_env, the process allocator's first call); misspelt
 * names, names in the wrong case and long names included.  The messages
 * reach the error handler, which records them.  One process: the
 * variables are set before anything reads them. */
#include "check.h"
#include "scralloc.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_MSGS 128
static char msgs[MAX_MSGS][256];
static unsigned nmsgs;

static void record(int err, const char *msg, void *arg) {
  (void)err, (void)arg;
  if (nmsgs < MAX_MSGS) snprintf(msgs[nmsgs++], sizeof msgs[0], "%s", msg);
}

static unsigned said(const char *text) {
  unsigned n = 0;
  for (unsigned i = 0; i < nmsgs; i++) n += strcmp(msgs[i], text) == 0;
  return n;
}

static void upper(char *dst, const char *src) {
  size_t i = 0;
  for (; src[i]; i++) dst[i] = (char)(src[i] >= 'a' && src[i] <= 'z' ? src[i] - 32 : src[i]);
  dst[i] = '\0';
}

static const char *const heap_names[] = {
#define NAME_(type, n, ...) #n,
    SCR_OPTIONS(NAME_)
#undef NAME_
};
/* The process allocator's own options (scope process; profile_rate, of
 * scope both, is among the heap's), each checked against
 * scr_process_option_get below. */
static const char *const proc_names[] = {
#define PROC_NAME_(scope, type, n, ...) SCR_OPTION_PROC_ONLY_##scope(n)
#define SCR_OPTION_PROC_ONLY_SCR_SCOPE_HEAP(n)
#define SCR_OPTION_PROC_ONLY_SCR_SCOPE_BOTH(n)
#define SCR_OPTION_PROC_ONLY_SCR_SCOPE_PROCESS(n) #n,
    SCR_OPTION_TABLE(PROC_NAME_)
#undef PROC_NAME_
};
#define COUNT(a) (sizeof a / sizeof a[0])

static char long_name[96];

static void set_all_bad(void) {
  char env[80];
  for (unsigned i = 0; i < COUNT(heap_names); i++) {
    upper(env + 9, heap_names[i]), memcpy(env, "SCRALLOC_", 9);
    setenv(env, "lots", 1);
  }
  for (unsigned i = 0; i < COUNT(proc_names); i++) {
    upper(env + 9, proc_names[i]), memcpy(env, "SCRALLOC_", 9);
    setenv(env, "lots", 1);
  }
  setenv("SCRALLOC_retain", "0", 1);
  setenv("SCRALLOC_RETIAN", "0", 1);
  memcpy(long_name, "SCRALLOC_", 9);
  memset(long_name + 9, 'X', 70);
  long_name[79] = '\0';
  setenv(long_name, "1", 1);
}

/* A bad value of each option of both tables: one warning each, none
 * lost (a filter keyed by a hash of the name silenced some). */
static void every_bad_value_is_said_once(void) {
  char env[80], text[200];
  for (unsigned t = 0; t < 2; t++) {
    const char *const *names = t ? proc_names : heap_names;
    unsigned n = t ? (unsigned)COUNT(proc_names) : (unsigned)COUNT(heap_names);
    for (unsigned i = 0; i < n; i++) {
      upper(env + 9, names[i]), memcpy(env, "SCRALLOC_", 9);
      if (t) CHECK(scr_process_option_get(names[i]) != UINT64_MAX);
      snprintf(text, sizeof text, "ignoring %s=lots (not a valid value)", env);
      if (said(text) != 1) fprintf(stderr, "  %s: said %u times\n", env, said(text));
      CHECK_EQ(said(text), 1);
    }
  }
}

/* Names that are no option: misspelt, in lower case, 70 characters. */
static void unknown_names_are_said_once(void) {
  CHECK_EQ(said("ignoring SCRALLOC_retain (no such option; the closest is SCRALLOC_RETAIN)"), 1);
  CHECK_EQ(said("ignoring SCRALLOC_RETIAN (no such option; the closest is SCRALLOC_RETAIN)"), 1);
  unsigned long_said = 0;
  for (unsigned i = 0; i < nmsgs; i++) long_said += strncmp(msgs[i] + 9, long_name, strlen(long_name)) == 0;
  CHECK_EQ(long_said, 1);
  CHECK_EQ(nmsgs, COUNT(heap_names) + COUNT(proc_names) + 3);
}

/* scr_options_from_env alone says the heap's bad values and every
 * unknown name (scralua and the bindings' env options rely on it), and
 * says nothing the second time. */
static void from_env_says_each_once(void) {
  scr_options opt;
  scr_options_init(&opt);
  scr_options_from_env(&opt);
  CHECK_EQ(nmsgs, COUNT(heap_names) + 3);
  scr_options_from_env(&opt);
  CHECK_EQ(nmsgs, COUNT(heap_names) + 3);
}

int main(void) {
  scr_set_error_handler(record, NULL);
  set_all_bad();
  TEST(from_env_says_each_once);
  (void)scr_process_option_get("stats"); /* the process allocator's first call reads both tables */
  TEST(every_bad_value_is_said_once);
  TEST(unknown_names_are_said_once);
  return check_done();
}
