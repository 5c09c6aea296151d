/* scralloc for Lua: what the module (lscralloc.c), the lua_Alloc adapter
 * (scrlalloc.c) and the interpreter (scralua.c) share.  Like lauxlib, this
 * layer uses only official APIs: lua.h/lauxlib.h and scralloc.h. */
#ifndef SCRLUA_H
#define SCRLUA_H

#include <stddef.h>
#include <stdint.h>

#include "lua.h"
#include "scralloc.h"

#if defined(__GNUC__)
#define SCRL_EXPORT __attribute__((visibility("default")))
#else
#define SCRL_EXPORT
#endif

/* Accounting and failure injection for every block a binding hands out
 * from one heap: allocator methods and lua_Alloc alike.
 *
 *   live  == sum of scr_heap_usable_size() over the blocks handed out
 *   peak  >= live
 *   limit_count: allocations still admitted (UINT64_MAX: no limit)
 *   limit_bytes: an allocation of n bytes is refused when live + n > limit_bytes
 *                (SIZE_MAX: no limit); growth counts only the bytes added
 *   allocs + failures == allocations and growths asked for, each counted
 *                once its outcome is known
 *
 * Frees and shrinks are never refused. */
typedef struct scrl_acct {
  scr_heap *heap;          /* the heap every block comes from */
  size_t live;             /* usable bytes of live blocks */
  size_t peak;             /* highest value of live */
  uint64_t allocs;         /* allocations and growths that got their block (cumulative) */
  uint64_t failures;       /* allocations and growths refused, by the limits below or by
                              the heap (its limit_bytes, the OS) (cumulative) */
  uint64_t limit_count;    /* allocations still admitted; UINT64_MAX = no limit */
  size_t limit_bytes;      /* cap on live + request; SIZE_MAX = no limit */
} scrl_acct;

void scrl_acct_init(scrl_acct *a, scr_heap *h);
/* 1 if the limits admit an allocation adding n bytes (an admission spends
 * one of limit_count), 0 if they refuse it (counted as a failure). */
int scrl_admit(scrl_acct *a, size_t n);
/* The outcome of an admitted allocation or growth from a block of
 * old_usable bytes: q, the heap's new block, counted as an allocation, or
 * NULL, the heap's refusal, counted as a failure.  Returns q. */
void *scrl_grant(scrl_acct *a, size_t old_usable, void *q);
void scrl_account(scrl_acct *a, size_t old_usable, size_t new_usable);

/* The lua_Alloc adapter: ud is a scrl_acct*.  Shrinking never fails: when
 * the heap cannot move a block to a smaller one the old block is kept. */
void *scrl_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/* Warning state for a lua_WarnFunction (off until "@on", as luaL_newstate). */
typedef struct scrl_warn {
  int on;                  /* warnings are printed */
  int cont;                /* inside a multi-part message */
} scrl_warn;

/* A new state on the heap of `a`, with a panic handler and a warning
 * function writing to stderr; NULL when memory runs out. */
lua_State *scrl_newstate(scrl_acct *a, scrl_warn *w);

/* The scrl_acct under L when L runs on scrl_alloc, else NULL. */
scrl_acct *scrl_state_acct(lua_State *L);

SCRL_EXPORT int luaopen_scralloc(lua_State *L);

#endif /* SCRLUA_H */
