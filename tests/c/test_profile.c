/* The sampler (core/src/profile.c): which blocks it samples, what their
 * samples carry, that frees (of every kind, from any thread) remove them
 * and put the page's fast frees back, the estimates, and the blame. */
#include "check.h"
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include "scralloc.h"

typedef struct {
  size_t n, bytes_req;
  double bytes, pinned;
  size_t in_fn;        /* samples with a frame inside [fn, fn + 256) */
  const void *fn;
  const scr_heap *heap;
  int heap_ok;         /* every sample's heap was `heap` */
  size_t lang;         /* samples with language frames */
  uint64_t site_of_fn; /* the site id of the last sample in fn */
  double pinned_fn;
} tally;

static uintptr_t fn_span = 256; /* bytes of code after a function's start that count as its own */

static int count_sample(const scr_profile_sample *s, void *arg) {
  tally *t = arg;
  t->n++;
  t->bytes_req += s->size;
  t->bytes += s->bytes;
  t->pinned += s->pinned;
  if (s->heap != t->heap) t->heap_ok = 0;
  if (s->lang) t->lang++;
  for (unsigned i = 0; i < s->depth; i++)
    if ((uintptr_t)s->frames[i] >= (uintptr_t)t->fn && (uintptr_t)s->frames[i] < (uintptr_t)t->fn + fn_span) {
      t->in_fn++;
      t->site_of_fn = s->site;
      t->pinned_fn += s->pinned;
      break;
    }
  return 0;
}

static tally count(const scr_heap *h, const void *fn) {
  tally t = {0};
  t.fn = fn;
  t.heap = h;
  t.heap_ok = 1;
  scr_profile_samples(h, count_sample, &t);
  return t;
}

static void *blocks[200000];

__attribute__((noinline)) static void site_a(scr_heap *h, size_t from, size_t to, size_t size) {
  for (size_t i = from; i < to; i++) blocks[i] = scr_heap_malloc(h, size);
  __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void site_b(scr_heap *h, size_t from, size_t to, size_t size) {
  for (size_t i = from; i < to; i++) blocks[i] = scr_heap_malloc(h, size);
  __asm__ volatile("" ::: "memory");
}

/* Rate 1: every block is sampled, with a stack through its caller. */
static void test_every_block_at_rate_1(void) {
  scr_options o;
  scr_options_init(&o);
  o.profile_rate = 1;
  scr_heap *h = scr_heap_new(&o);
  /* (static functions: their extent is not known; the next one's start bounds it) */
  uintptr_t fa = (uintptr_t)site_a, fb = (uintptr_t)site_b;
  fn_span = fa < fb && fb - fa < 256 ? fb - fa : fb < fa && fa - fb < 256 ? fa - fb : 256;
  site_a(h, 0, 100, 48);
  site_b(h, 100, 150, 3000);
  tally a = count(h, (const void *)site_a), b = count(h, (const void *)site_b);
  CHECK_EQ(a.n, 150);
  CHECK(a.heap_ok);
  CHECK_EQ(a.bytes_req, 100 * 48 + 50 * 3000);
  CHECK_EQ(a.in_fn, 100);
  CHECK_EQ(b.in_fn, 50);
  CHECK(a.bytes > 100 * 48 + 50 * 3000 - 1 && a.bytes < 100 * 48 + 50 * 3000 + 1); /* rate 1: exact */
  CHECK(a.site_of_fn != b.site_of_fn);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  /* every kind of free removes a sample; the page's slot limit comes back */
  for (size_t i = 0; i < 50; i++) scr_heap_free(h, blocks[i]);
  CHECK_EQ(scr_heap_free_checked(h, blocks[50]), SCR_OK);
  blocks[51] = scr_heap_realloc(h, blocks[51], 4000); /* moves, and is sampled again at its new size */
  CHECK_EQ(count(h, NULL).n, 99);
  void *q = NULL;
  CHECK_EQ(scr_heap_realloc_checked(h, blocks[52], 5000, &q), SCR_OK); /* the checked call too */
  blocks[52] = q;
  CHECK_EQ(count(h, NULL).n, 99);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  for (size_t i = 51; i < 150; i++) scr_heap_free(h, blocks[i]);
  CHECK_EQ(count(h, NULL).n, 0);
  CHECK_EQ(scr_heap_validate(h), SCR_OK);
  /* the pages went back to the fast free: a block freed twice is still caught */
  void *p = scr_heap_malloc(h, 48);
  scr_heap_free(h, p);
  CHECK_EQ(scr_heap_free_checked(h, p), SCR_EDOUBLEFREE);
  scr_heap_destroy(h);
}

/* A sampled block freed twice: the second free is reported, and the
 * sample went with the first. */
static int errors_seen;
static void on_error(int err, const char *msg, void *arg) {
  (void)msg;
  (void)arg;
  if (err == SCR_EDOUBLEFREE) errors_seen++;
}

static void test_double_free_of_a_sampled_block(void) {
  scr_options o;
  scr_options_init(&o);
  o.profile_rate = 1;
  scr_heap *h = scr_heap_new(&o);
  void *keep = scr_heap_malloc(h, 64), *p = scr_heap_malloc(h, 64);
  scr_set_error_handler(on_error, NULL);
  errors_seen = 0;
  scr_heap_free(h, p);
  scr_heap_free(h, p);
  CHECK_EQ(errors_seen, 1);
  scr_set_error_handler(NULL, NULL);
  CHECK_EQ(count(h, NULL).n, 1);
  scr_heap_free(h, keep);
  scr_heap_destroy(h);
}

/* The estimate of live bytes is unbiased: 100,000 blocks of 64 B at a
 * rate of 4 KiB (about 1,560 samples, a standard error of 2.5%). */
static void test_estimate(void) {
  scr_options o;
  scr_options_init(&o);
  o.profile_rate = 4096;
  scr_heap *h = scr_heap_new(&o);
  site_a(h, 0, 100000, 64);
  tally t = count(h, NULL);
  CHECK(t.n > 1200 && t.n < 1900);
  CHECK(t.bytes > 0.9 * 6400000 && t.bytes < 1.1 * 6400000);
  if (!(t.bytes > 0.9 * 6400000 && t.bytes < 1.1 * 6400000)) fprintf(stderr, "  estimate %.0f of 6400000\n", t.bytes);
  scr_heap_profile_rate(h, 0); /* off: no new samples; the live ones stay */
  site_b(h, 100000, 200000, 64);
  CHECK_EQ(count(h, (const void *)site_b).in_fn, 0);
  for (size_t i = 0; i < 200000; i++) scr_heap_free(h, blocks[i]);
  CHECK_EQ(count(h, NULL).n, 0);
  /* destroying a heap drops its samples */
  scr_heap_profile_rate(h, 1);
  site_a(h, 0, 10, 64);
  CHECK_EQ(count(h, NULL).n, 10);
  scr_heap_destroy(h);
  CHECK_EQ(count(h, NULL).n, 0);
}

/* Blame: index blocks kept one in 16 among blocks that are freed; the
 * pages' free bytes are all the kept blocks' site's, and they add up to
 * the heap's free bytes in partly used pages. */
__attribute__((noinline)) static void keep_index(scr_heap *h, size_t i) {
  blocks[i] = scr_heap_malloc(h, 1024);
  __asm__ volatile("" ::: "memory");
}

static void test_blame(void) {
  scr_options o;
  scr_options_init(&o);
  o.profile_rate = 16384;
  scr_heap *h = scr_heap_new(&o);
  for (size_t i = 0; i < 64000; i++) {
    if (i % 16 == 0) keep_index(h, i);
    else blocks[i] = scr_heap_malloc(h, 1024);
  }
  for (size_t i = 0; i < 64000; i++)
    if (i % 16 != 0) scr_heap_free(h, blocks[i]);
  tally t = count(h, (const void *)keep_index);
  /* 4,000 blocks of 1 KiB kept on 1,000 pages of 64 KiB: 60 MiB pinned */
  double pinned = 64000.0 * 1024 * 15 / 16;
  CHECK(t.pinned > 0.99 * pinned && t.pinned < 1.01 * pinned);
  CHECK(t.pinned_fn > 0.99 * t.pinned);
  if (!(t.pinned > 0.99 * pinned)) fprintf(stderr, "  pinned %.0f of %.0f (keep_index %.0f)\n", t.pinned, pinned, t.pinned_fn);
  for (size_t i = 0; i < 64000; i += 16) scr_heap_free(h, blocks[i]);
  CHECK_EQ(count(h, NULL).n, 0);
  scr_heap_destroy(h);
}

/* The language hook's frames join the native ones; what it allocates is
 * not sampled (no recursion). */
static size_t hook_calls;
static size_t lang_hook(char *buf, size_t len, void *arg) {
  (void)arg;
  hook_calls++;
  void *p = scr_malloc(100);
  scr_free(p);
  const char *f = "build\tscript.py\t12\n";
  size_t n = strlen(f) < len ? strlen(f) : len;
  memcpy(buf, f, n);
  return n;
}

static int find_lang(const scr_profile_sample *s, void *arg) {
  if (s->lang && strcmp(s->lang, "build\tscript.py\t12\n") == 0) ++*(size_t *)arg;
  return 0;
}

static void test_lang_hook(void) {
  scr_options o;
  scr_options_init(&o);
  o.profile_rate = 1;
  scr_heap *h = scr_heap_new(&o);
  scr_process_option_set("profile_rate", "1");
  scr_profile_set_lang_hook(lang_hook, NULL);
  hook_calls = 0;
  site_a(h, 0, 20, 32);
  scr_profile_set_lang_hook(NULL, NULL);
  scr_process_option_set("profile_rate", "0");
  size_t found = 0;
  scr_profile_samples(h, find_lang, &found);
  CHECK_EQ(found, 20);
  CHECK_EQ(hook_calls, 20);
  CHECK_EQ(count(h, NULL).n, 20);
  for (size_t i = 0; i < 20; i++) scr_heap_free(h, blocks[i]);
  scr_heap_destroy(h);
}

/* The process allocator: samples of scr_malloc & co., freed by the
 * thread that made them or by another one. */
__attribute__((noinline)) static void proc_site(size_t from, size_t to, size_t size) {
  for (size_t i = from; i < to; i++) blocks[i] = (i % 3 == 0) ? scr_calloc(1, size) : scr_malloc(size);
  __asm__ volatile("" ::: "memory");
}

static void *free_half(void *arg) {
  (void)arg;
  for (size_t i = 0; i < 1000; i += 2) scr_free(blocks[i]);
  return NULL;
}

static int is_process(const scr_profile_sample *s, void *arg) {
  if (s->heap == NULL) ++*(size_t *)arg;
  return 0;
}

static size_t process_samples(void) {
  size_t n = 0;
  scr_profile_samples(NULL, is_process, &n);
  return n;
}

static void test_process_allocator(void) {
  CHECK_EQ(scr_process_option_set("profile_rate", "on"), SCR_OK);
  CHECK_EQ(scr_process_option_get("profile_rate"), SCR_PROFILE_DEFAULT_RATE);
  CHECK_EQ(scr_process_option_set("profile_rate", "1"), SCR_OK);
  /* the countdown drawn while sampling was off runs out first */
  for (int i = 0; i < 2000; i++) scr_free(scr_malloc(4096));
  size_t before = process_samples();
  proc_site(0, 1000, 200);
  proc_site(1000, 1010, 300000); /* large blocks */
  scr_process_option_set("profile_rate", "0");
  size_t after = process_samples();
  CHECK_EQ(after - before, 1010);
  fn_span = 256;
  tally t = count(NULL, (const void *)proc_site);
  CHECK_EQ(t.in_fn, 1010);
  pthread_t th;
  pthread_create(&th, NULL, free_half, NULL);
  pthread_join(th, NULL);
  CHECK_EQ(process_samples(), before + 510);
  for (size_t i = 1; i < 1000; i += 2) scr_free(blocks[i]);
  for (size_t i = 1000; i < 1010; i++) blocks[i] = scr_realloc(blocks[i], 10);
  CHECK_EQ(process_samples(), before);
  for (size_t i = 1000; i < 1010; i++) scr_free(blocks[i]);
  CHECK_EQ(scr_process_validate(), SCR_OK);
}

int main(void) {
  TEST(test_every_block_at_rate_1);
  TEST(test_double_free_of_a_sampled_block);
  TEST(test_estimate);
  TEST(test_blame);
  TEST(test_lang_hook);
  TEST(test_process_allocator);
  return check_done();
}
