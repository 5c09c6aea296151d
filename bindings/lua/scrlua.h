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
 *
 * Frees and shrinks are never refused. */
typedef struct scrl_acct {
  scr_heap *heap;          /* the heap every block comes from */
  size_t live;             /* usable bytes of live blocks */
  size_t peak;             /* highest value of live */
  uint64_t allocs;         /* allocations and growths admitted (cumulative) */
  uint64_t failures;       /* allocations refused by the limits below (cumulative) */
  uint64_t limit_count;    /* allocations still admitted; UINT64_MAX = no limit */
  size_t limit_bytes;      /* cap on live + request; SIZE_MAX = no limit */
} scrl_acct;

void scrl_acct_init(scrl_acct *a, scr_heap *h);
/* 1 if an allocation adding n bytes is admitted (and counts it), 0 if the
 * limits refuse it (and counts a failure). */
int scrl_admit(scrl_acct *a, size_t n);
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
