/* The lua_Alloc adapter (bindings/lua/scrlalloc.c) in C: Lua's contract,
 * the failure limits, and shrinks that never fail, with OS calls failing
 * under them.  Built and run by `make test-lua`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lualib.h"
#include "scrlua.h"

static int failures;
#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                          \
    }                                                                      \
  } while (0)

static uint64_t live_blocks(scr_heap *h) {
  struct scr_stats st;
  scr_heap_stats(h, &st);
  return st.allocs;
}

static void quiet(int err, const char *msg, void *arg) {
  (void)err, (void)msg, (void)arg;
}

static scr_heap *new_heap(void) {
  scr_options o;
  scr_options_init(&o);
  o.huge_threshold = SCR_SMALL_MAX;
  o.large_cache = 0;
  o.retain = 0;
  scr_heap *h = scr_heap_new(&o);
  CHECK(h != NULL);
  return h;
}

/* Lua's contract: NULL ptr = new block (osize is a type tag), nsize 0 = free. */
static void test_contract(void) {
  scr_heap *h = new_heap();
  scrl_acct a;
  scrl_acct_init(&a, h);
  char *p = scrl_alloc(&a, NULL, LUA_TTABLE, 100);
  CHECK(p != NULL && a.live == scr_heap_usable_size(h, p));
  memset(p, 'x', 100);
  char *q = scrl_alloc(&a, p, 100, 5000);
  CHECK(q != NULL && memcmp(q, "xxxxxxxxxx", 10) == 0);
  CHECK(a.live == scr_heap_usable_size(h, q) && a.peak >= a.live);
  CHECK(scrl_alloc(&a, q, 5000, 0) == NULL);
  CHECK(scrl_alloc(&a, NULL, LUA_TSTRING, 0) == NULL);  /* Lua never asks; harmless */
  CHECK(a.live == 0 && live_blocks(h) == 0);
  scr_heap_destroy(h);
}

/* Limits refuse new blocks and growth, never frees and shrinks. */
static void test_limits(void) {
  scr_heap *h = new_heap();
  scrl_acct a;
  scrl_acct_init(&a, h);
  a.limit_count = 1;
  char *p = scrl_alloc(&a, NULL, 0, 3000);
  CHECK(p != NULL);
  CHECK(scrl_alloc(&a, NULL, 0, 10) == NULL);
  CHECK(scrl_alloc(&a, p, 3000, 100000) == NULL);      /* growth refused: p untouched */
  CHECK(scr_heap_check(h, p) == SCR_OK);
  char *q = scrl_alloc(&a, p, 3000, 10);               /* a shrink is never refused */
  CHECK(q != NULL);
  CHECK(a.failures == 2);
  a.limit_count = UINT64_MAX;
  a.limit_bytes = a.live + 1000;
  CHECK(scrl_alloc(&a, NULL, 0, 2000) == NULL);
  char *r = scrl_alloc(&a, NULL, 0, 500);
  CHECK(r != NULL);
  scrl_alloc(&a, q, 10, 0);
  scrl_alloc(&a, r, 500, 0);
  CHECK(a.live == 0 && live_blocks(h) == 0);
  scr_heap_destroy(h);
}

/* The heap's own refusals (its limit_bytes) count as failures, and only
 * the allocations that got a block count as allocations. */
static void test_heap_refusals(void) {
  scr_options o;
  scr_options_init(&o);
  o.limit_bytes = (size_t)1 << 20;
  scr_heap *h = scr_heap_new(&o);
  CHECK(h != NULL);
  scrl_acct a;
  scrl_acct_init(&a, h);
  CHECK(scrl_alloc(&a, NULL, 0, (size_t)2 << 20) == NULL);
  char *p = scrl_alloc(&a, NULL, 0, 100);
  CHECK(p != NULL);
  CHECK(scrl_alloc(&a, p, 100, (size_t)2 << 20) == NULL);  /* growth refused: p untouched */
  CHECK(scr_heap_check(h, p) == SCR_OK);
  CHECK(a.failures == 2 && a.allocs == 1);
  scrl_alloc(&a, p, 100, 0);
  CHECK(a.live == 0 && live_blocks(h) == 0);
  scr_heap_destroy(h);
}

/* Shrinks with every OS call in turn failing: the adapter returns a block
 * (the old one when the heap cannot shrink) with the prefix intact. */
static void test_shrink_never_fails(void) {
  scr_heap *h = new_heap();
  scrl_acct a;
  scrl_acct_init(&a, h);
  int kept = 0, moved = 0;
  for (unsigned long n = 1; n <= 12; n++) {
    size_t big = (size_t)1 << 20, small = n * 700;
    char *p = scrl_alloc(&a, NULL, LUA_TSTRING, big);
    CHECK(p != NULL);
    if (p == NULL)
      break;
    for (size_t i = 0; i < big; i += 4096)
      p[i] = (char)(i >> 12);
    scr_debug_fail_os_call(n);
    char *q = scrl_alloc(&a, p, big, small);
    scr_debug_fail_os_call(0);
    CHECK(q != NULL);
    if (q == NULL)
      break;
    for (size_t i = 0; i < small; i += 4096)
      CHECK(q[i] == (char)(i >> 12));
    if (q == p && scr_heap_usable_size(h, q) >= big)
      kept++;
    else
      moved++;
    CHECK(a.live == scr_heap_usable_size(h, q));
    scrl_alloc(&a, q, small, 0);
    CHECK(a.live == 0);
  }
  printf("adapter: shrinks under failing OS calls: %d kept the old block, %d shrank\n", kept, moved);
  CHECK(live_blocks(h) == 0);
  CHECK(scr_heap_validate(h) == SCR_OK);
  scr_heap_destroy(h);
}

static const char *const chunk =
    "local t = {} for i = 1, 20000 do t[i] = {tostring(i)} end "
    "local s = {} for i = 1, 2000 do s[#s + 1] = tostring(i):rep(50) end "
    "collectgarbage() return #t + #table.concat(s)";

/* Protected: the libraries too may run out of memory. */
static int run_chunk(lua_State *L) {
  luaL_openlibs(L);
  if (luaL_loadstring(L, chunk) != LUA_OK)
    return lua_error(L);
  lua_call(L, 0, 1);
  return 1;
}

/* A whole Lua state on the adapter, then nothing left. */
static void test_state(void) {
  scr_heap *h = new_heap();
  scrl_acct a;
  scrl_acct_init(&a, h);
  scrl_warn w;
  lua_State *L = scrl_newstate(&a, &w);
  CHECK(L != NULL && scrl_state_acct(L) == &a);
  lua_pushcfunction(L, run_chunk);
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    failures++;
  }
  CHECK(lua_tointeger(L, -1) > 20000);
  CHECK(live_blocks(h) > 20000);
  lua_close(L);
  CHECK(a.live == 0 && live_blocks(h) == 0);
  /* under a count limit, state creation or the chunk fails cleanly */
  for (uint64_t n = 0; n < 3000; n += 37) {
    scrl_acct_init(&a, h);
    a.limit_count = n;
    L = scrl_newstate(&a, &w);
    if (L != NULL) {
      lua_pushcfunction(L, run_chunk);
      int st = lua_pcall(L, 0, 1, 0);
      if (st != LUA_OK && st != LUA_ERRMEM) {
        fprintf(stderr, "limit %llu: %s\n", (unsigned long long)n, lua_tostring(L, -1));
        failures++;
      }
      lua_close(L);
    }
    CHECK(a.live == 0 && live_blocks(h) == 0);
  }
  scr_heap_destroy(h);
}

int main(void) {
  scr_set_error_handler(quiet, NULL);  /* failed munmaps are expected here */
  test_contract();
  test_limits();
  test_heap_refusals();
  test_shrink_never_fails();
  test_state();
  scr_set_error_handler(NULL, NULL);
  printf("adapter: %s\n", failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
