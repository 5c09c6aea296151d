/* scralloc for Lua: the module `require "scralloc"`.
 *
 * Allocator objects (full userdata "scralloc.allocator") own one scr_heap.
 * Addresses cross into Lua as integers; every address that comes back
 * from Lua goes through the checked calls of the core, so a bad address
 * is a Lua error and never a crash.  Blocks are counted in a scrl_acct
 * (scrlua.h), shared with the lua_Alloc adapter, which also carries the
 * failure limits (count and bytes) used to drive out-of-memory paths.
 *
 * Uses only lua.h, lauxlib.h, lualib.h and scralloc.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lauxlib.h"
#include "lualib.h"
#include "scrlua.h"

#define LSCR_ALLOCATOR "scralloc.allocator"
#define LSCR_RUNGUARD  "scralloc.runguard"

typedef struct lscr_alloc {
  scrl_acct acct;          /* acct.heap == NULL once closed */
  int busy;                /* states of run() open on this heap */
} lscr_alloc;

/* ---- errors -------------------------------------------------------- */

static const char *lscr_code_name(int err) {
  switch (err) {
#define ERROR_NAME(name, value, msg) case name: return #name;
    SCR_ERRORS(ERROR_NAME)
#undef ERROR_NAME
    default: return "SCR_E?";
  }
}

/* "what(0x1234): text (SCR_ECODE)"; the name in parentheses is stable,
 * the text comes from scr_strerror. */
static int lscr_error(lua_State *L, const char *what, const void *p, int err) {
  char addr[32];
  snprintf(addr, sizeof addr, "0x%" PRIxPTR, (uintptr_t)p);
  return luaL_error(L, "%s(%s): %s (%s)", what, addr, scr_strerror(err), lscr_code_name(err));
}

/* ---- arguments ----------------------------------------------------- */

/* "bad argument #arg to 'name' (msg)", as luaL_argerror says it, with
 * the name every method closure carries as its upvalue 1: Lua knows no
 * name for a method called as pcall(a.free, a, p).  Elsewhere (module
 * functions, metamethods) luaL_argerror finds the name. */
static int lscr_argerror(lua_State *L, int arg, const char *msg) {
  if (lua_type(L, lua_upvalueindex(1)) != LUA_TSTRING)
    return luaL_argerror(L, arg, msg);
  const char *name = lua_tostring(L, lua_upvalueindex(1));
  lua_Debug ar;
  if (lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.namewhat != NULL &&
      strcmp(ar.namewhat, "method") == 0 && --arg == 0)  /* a:name(...): self is not counted */
    return luaL_error(L, "calling '%s' on bad self (%s)", name, msg);
  return luaL_error(L, "bad argument #%d to '%s' (%s)", arg, name, msg);
}

/* The one conversion of a Lua value to an integer: what math.tointeger
 * accepts (an integer, a float with an integral value, a string that
 * reads as one). */
static int lscr_toint(lua_State *L, int idx, lua_Integer *v) {
  int ok;
  *v = lua_tointegerx(L, idx, &ok);
  return ok;
}

/* The argument at idx, named argname, is missing or not what expected says. */
static int lscr_typeerror(lua_State *L, int idx, const char *argname, const char *expected) {
  if (lua_isnone(L, idx))
    return lscr_argerror(L, idx, lua_pushfstring(L, "%s is missing", argname));
  return lscr_argerror(L, idx, lua_pushfstring(L, "%s: %s expected, got %s", argname, expected,
                                               luaL_typename(L, idx)));
}

static int lscr_badint(lua_State *L, int idx, const char *argname) {
  if (!lua_isnone(L, idx) && lua_isnumber(L, idx))
    return lscr_argerror(L, idx, lua_pushfstring(L, "%s: number has no integer representation",
                                                 argname));
  return lscr_typeerror(L, idx, argname, "number");
}

static lua_Integer lscr_checkint(lua_State *L, int idx, const char *argname) {
  lua_Integer v;
  if (!lscr_toint(L, idx, &v))
    lscr_badint(L, idx, argname);
  return v;
}

static lua_Integer lscr_optint(lua_State *L, int idx, const char *argname, lua_Integer def) {
  return lua_isnoneornil(L, idx) ? def : lscr_checkint(L, idx, argname);
}

static const char *lscr_checkstring(lua_State *L, int idx, const char *argname, size_t *len) {
  const char *s = lua_type(L, idx) == LUA_TSTRING || lua_type(L, idx) == LUA_TNUMBER
                      ? lua_tolstring(L, idx, len) : NULL;
  if (s == NULL)
    lscr_typeerror(L, idx, argname, "string");
  return s;
}

static lscr_alloc *lscr_checkobj(lua_State *L) {
  lscr_alloc *A = (lscr_alloc *)luaL_testudata(L, 1, LSCR_ALLOCATOR);
  if (A == NULL)
    lscr_argerror(L, 1, lua_pushfstring(L, LSCR_ALLOCATOR " expected, got %s",
                                        luaL_typename(L, 1)));
  return A;
}

static lscr_alloc *lscr_checkopen(lua_State *L) {
  lscr_alloc *A = lscr_checkobj(L);
  if (A->acct.heap == NULL)
    luaL_error(L, "scralloc: the allocator is closed");
  return A;
}

static void *lscr_checkaddr(lua_State *L, int idx) {
  return (void *)(uintptr_t)(lua_Unsigned)lscr_checkint(L, idx, "address");
}

static void lscr_pushaddr(lua_State *L, const void *p) {
  lua_pushinteger(L, (lua_Integer)(uintptr_t)p);
}

/* A call is described as "name(arg2, arg3, ...)" (argument 1 is the
 * allocator).  The name of argument idx, into buf. */
static const char *lscr_argname(const char *call, int idx, char *buf, size_t cap) {
  const char *s = strchr(call, '(') + 1;
  for (int i = 2; i < idx && s[strcspn(s, ",)")] == ','; i++)
    s += strcspn(s, ",)") + 2;
  snprintf(buf, cap, "%.*s", (int)strcspn(s, ",)"), s);
  return buf;
}

/* Raise "name(arguments): text (SCR_ECODE[, extra])" with the arguments
 * the call was given: integers, the one named "address" in hex. */
static int lscr_callerror(lua_State *L, const char *call, int err, const char *extra) {
  int top = lua_gettop(L);
  const char *s = strchr(call, '(') + 1;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addlstring(&b, call, (size_t)(s - call));
  for (int i = 2; i <= top; i++) {
    size_t len = strcspn(s, ",)");
    char text[32];
    lua_Integer v;
    if (!lscr_toint(L, i, &v))
      snprintf(text, sizeof text, "%s", luaL_typename(L, i));
    else if (len == 7 && memcmp(s, "address", 7) == 0)
      snprintf(text, sizeof text, "0x%" PRIxPTR, (uintptr_t)(lua_Unsigned)v);
    else
      snprintf(text, sizeof text, LUA_INTEGER_FMT, v);
    luaL_addstring(&b, text);
    if (s[len] != ',' || i == top)
      break;
    luaL_addstring(&b, ", ");
    s += len + 2;
  }
  luaL_addstring(&b, "): ");
  luaL_addstring(&b, scr_strerror(err));
  luaL_addstring(&b, " (");
  luaL_addstring(&b, lscr_code_name(err));
  if (extra != NULL) {
    luaL_addstring(&b, ", ");
    luaL_addstring(&b, extra);
  }
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  return lua_error(L);
}

/* A size argument of the call: an integer; negative is SCR_EINVAL. */
static size_t lscr_checksize(lua_State *L, int idx, const char *call) {
  lua_Integer n;
  char name[32], extra[48];
  if (!lscr_toint(L, idx, &n))
    lscr_badint(L, idx, lscr_argname(call, idx, name, sizeof name));
  if (n < 0) {
    snprintf(extra, sizeof extra, "%s is negative", lscr_argname(call, idx, name, sizeof name));
    lscr_callerror(L, call, SCR_EINVAL, extra);
  }
  return (size_t)n;
}

/* The usable size of the live block at p, or an error naming what the
 * call did.  A free block is a double free only for free and realloc;
 * for read, write and usable_size it is the use of a freed block. */
static size_t lscr_checkblock(lua_State *L, lscr_alloc *A, void *p, const char *what) {
  size_t us = 0;
  int err = scr_heap_usable_size_checked(A->acct.heap, p, &us);
  if (err == SCR_EDOUBLEFREE && strcmp(what, "free") != 0 && strcmp(what, "realloc") != 0) {
    char addr[32];
    snprintf(addr, sizeof addr, "0x%" PRIxPTR, (uintptr_t)p);
    luaL_error(L, "%s(%s): use of a freed block (SCR_EDOUBLEFREE: the block was freed "
               "before this call)", what, addr);
  }
  if (err != SCR_OK)
    lscr_error(L, what, p, err);
  return us;
}

static void lscr_admit(lua_State *L, lscr_alloc *A, size_t n, const char *call) {
  if (!scrl_admit(&A->acct, n))
    lscr_callerror(L, call, SCR_ENOMEM, "refused by the allocator's limit");
}

/* Push the heap's new block, or raise the refusal its NULL stands for. */
static int lscr_pushblock(lua_State *L, lscr_alloc *A, void *p, const char *call) {
  if (scrl_grant(&A->acct, 0, p) == NULL)
    return lscr_callerror(L, call, SCR_ENOMEM, NULL);
  lscr_pushaddr(L, p);
  return 1;
}

/* ---- allocation ---------------------------------------------------- */

#define LSCR_MALLOC "malloc(size)"
static int lscr_malloc(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  size_t n = lscr_checksize(L, 2, LSCR_MALLOC);
  lscr_admit(L, A, n, LSCR_MALLOC);
  return lscr_pushblock(L, A, scr_heap_malloc(A->acct.heap, n), LSCR_MALLOC);
}

/* An overflowing count * size is a bad request, not a refusal: it is
 * neither admitted nor counted as a failure. */
#define LSCR_CALLOC "calloc(count, size)"
static int lscr_calloc(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  size_t count = lscr_checksize(L, 2, LSCR_CALLOC);
  size_t size = lscr_checksize(L, 3, LSCR_CALLOC);
  if (size != 0 && count > SIZE_MAX / size)
    return lscr_callerror(L, LSCR_CALLOC, SCR_ENOMEM, "count * size overflows");
  lscr_admit(L, A, count * size, LSCR_CALLOC);
  return lscr_pushblock(L, A, scr_heap_calloc(A->acct.heap, count, size), LSCR_CALLOC);
}

#define LSCR_ALIGNED "aligned_alloc(alignment, size)"
static int lscr_aligned_alloc(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  lua_Integer al = lscr_checkint(L, 2, "alignment");
  size_t n = lscr_checksize(L, 3, LSCR_ALIGNED);
  if (al <= 0 || (al & (al - 1)) != 0)
    return lscr_callerror(L, LSCR_ALIGNED, SCR_EINVAL, "alignment is not a power of two");
  lscr_admit(L, A, n, LSCR_ALIGNED);
  return lscr_pushblock(L, A, scr_heap_aligned_alloc(A->acct.heap, (size_t)al, n), LSCR_ALIGNED);
}

static int lscr_free(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  void *p = lscr_checkaddr(L, 2);
  if (p == NULL)
    return 0;
  size_t us = lscr_checkblock(L, A, p, "free");
  int err = scr_heap_free_checked(A->acct.heap, p);
  if (err != SCR_OK)
    return lscr_error(L, "free", p, err);
  scrl_account(&A->acct, us, 0);
  return 0;
}

/* realloc(0, n) = malloc(n); realloc(p, 0) frees p and returns nil; on
 * an error the block is untouched. */
#define LSCR_REALLOC "realloc(address, size)"
static int lscr_realloc(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  void *p = lscr_checkaddr(L, 2);
  size_t n = lscr_checksize(L, 3, LSCR_REALLOC);
  if (p == NULL) {
    lscr_admit(L, A, n, LSCR_REALLOC);
    return lscr_pushblock(L, A, scr_heap_malloc(A->acct.heap, n), LSCR_REALLOC);
  }
  size_t old = lscr_checkblock(L, A, p, "realloc");
  if (n == 0) {
    int err = scr_heap_free_checked(A->acct.heap, p);
    if (err != SCR_OK)
      return lscr_error(L, "realloc", p, err);
    scrl_account(&A->acct, old, 0);
    lua_pushnil(L);
    return 1;
  }
  if (n > old)
    lscr_admit(L, A, n - old, LSCR_REALLOC);
  void *q = NULL;
  int err = scr_heap_realloc_checked(A->acct.heap, p, n, &q);
  if (err == SCR_OK && q == NULL)
    err = SCR_ENOMEM;
  if (n > old)
    scrl_grant(&A->acct, old, q);  /* a growth: an allocation, or a failure */
  else if (q != NULL)
    scrl_account(&A->acct, old, scr_heap_usable_size(A->acct.heap, q));
  if (err != SCR_OK)
    return lscr_callerror(L, LSCR_REALLOC, err, NULL);
  lscr_pushaddr(L, q);
  return 1;
}

static int lscr_usable_size(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  void *p = lscr_checkaddr(L, 2);
  lua_pushinteger(L, (lua_Integer)lscr_checkblock(L, A, p, "usable_size"));
  return 1;
}

/* check(addr) -> true | false, message, code name */
static int lscr_check(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  void *p = lscr_checkaddr(L, 2);
  int err = scr_heap_check(A->acct.heap, p);
  if (err == SCR_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  lua_pushstring(L, scr_strerror(err));
  lua_pushstring(L, lscr_code_name(err));
  return 3;
}

/* The byte range [off, off + n) of the live block at p, bounds-checked
 * against its usable size. */
static char *lscr_range(lua_State *L, lscr_alloc *A, void *p, lua_Integer off, size_t n,
                        const char *what) {
  size_t us = lscr_checkblock(L, A, p, what);
  if (off < 0 || (size_t)off > us || n > us - (size_t)off) {
    char addr[32];
    snprintf(addr, sizeof addr, "0x%" PRIxPTR, (uintptr_t)p);
    luaL_error(L, "%s(%s): %I bytes at offset %I are outside the block's usable size %I "
               "(SCR_EINVAL)", what, addr, (lua_Integer)n, off, (lua_Integer)us);
  }
  return (char *)p + off;
}

/* write(addr, string [, offset]) */
static int lscr_write(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  void *p = lscr_checkaddr(L, 2);
  size_t len;
  const char *s = lscr_checkstring(L, 3, "data", &len);
  lua_Integer off = lscr_optint(L, 4, "offset", 0);
  memcpy(lscr_range(L, A, p, off, len, "write"), s, len);
  return 0;
}

/* read(addr, n [, offset]) -> string */
static int lscr_read(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  void *p = lscr_checkaddr(L, 2);
  size_t n = lscr_checksize(L, 3, "read(address, size, offset)");
  lua_Integer off = lscr_optint(L, 4, "offset", 0);
  const char *src = lscr_range(L, A, p, off, n, "read");
  lua_pushlstring(L, src, n);
  return 1;
}

static int lscr_trim(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  lua_pushinteger(L, (lua_Integer)scr_heap_trim(A->acct.heap));
  return 1;
}

static int lscr_validate(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  int err = scr_heap_validate(A->acct.heap);
  if (err != SCR_OK)
    return luaL_error(L, "validate: the heap is inconsistent: %s (%s)", scr_strerror(err),
                      lscr_code_name(err));
  lua_pushboolean(L, 1);
  return 1;
}

/* ---- statistics and options ---------------------------------------- */

static void lscr_pushu64(lua_State *L, uint64_t v) {
  if (v <= (uint64_t)LUA_MAXINTEGER)
    lua_pushinteger(L, (lua_Integer)v);
  else
    lua_pushnumber(L, (lua_Number)v);
}

static void lscr_pushstats(lua_State *L, const struct scr_stats *st) {
  lua_createtable(L, 0, 24);
#define LSCR_FIELD_(name, doc) lscr_pushu64(L, st->name); lua_setfield(L, -2, #name);
  SCR_STATS_FIELDS(LSCR_FIELD_)
  lua_createtable(L, SCR_CLASS_COUNT, 0);
  for (int i = 0; i < SCR_CLASS_COUNT; i++) {
    const scr_class_stats *cs = &st->classes[i];
    lua_createtable(L, 0, 4);
#define LSCR_CFIELD_(name, doc) lscr_pushu64(L, cs->name); lua_setfield(L, -2, #name);
    SCR_CLASS_STATS_FIELDS(LSCR_CFIELD_)
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, "classes");
#undef LSCR_FIELD_
#undef LSCR_CFIELD_
}

static int lscr_stats(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  struct scr_stats st;
  scr_heap_stats(A->acct.heap, &st);
  lscr_pushstats(L, &st);
  return 1;
}

static int lscr_stats_json(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  char small[2048];
  size_t need = scr_heap_stats_json(A->acct.heap, small, sizeof small);
  if (need < sizeof small) {
    lua_pushlstring(L, small, need);
    return 1;
  }
  luaL_Buffer b;
  char *buf = luaL_buffinitsize(L, &b, need + 1);
  scr_heap_stats_json(A->acct.heap, buf, need + 1);
  luaL_pushresultsize(&b, need);
  return 1;
}

/* An option's value past math.maxinteger (retain_bytes' default, no cap,
 * is SIZE_MAX) reads as math.maxinteger, which means the same to the heap
 * and which new{} takes back: a heap's options make a heap with the same
 * ones. */
static void lscr_pushopt(lua_State *L, uint64_t v) {
  lua_pushinteger(L, v > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : (lua_Integer)v);
}

static void lscr_pushoptions(lua_State *L, const scr_options *o) {
  lua_createtable(L, 0, 8);
#define LSCR_OPT_(type, name, def, lo, hi, doc) \
  lscr_pushopt(L, (uint64_t)o->name);           \
  lua_setfield(L, -2, #name);
  SCR_OPTIONS(LSCR_OPT_)
#undef LSCR_OPT_
}

static int lscr_options(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  scr_options o;
  scr_heap_options(A->acct.heap, &o);
  lscr_pushoptions(L, &o);
  return 1;
}

/* usage() -> the binding's own figures: live_bytes, peak_bytes,
 * allocations, failures, and the limits when set. */
static int lscr_usage(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  const scrl_acct *a = &A->acct;
  lua_createtable(L, 0, 6);
  lscr_pushu64(L, a->live);
  lua_setfield(L, -2, "live_bytes");
  lscr_pushu64(L, a->peak);
  lua_setfield(L, -2, "peak_bytes");
  lscr_pushu64(L, a->allocs);
  lua_setfield(L, -2, "allocations");
  lscr_pushu64(L, a->failures);
  lua_setfield(L, -2, "failures");
  if (a->limit_count != UINT64_MAX) {
    lscr_pushu64(L, a->limit_count);
    lua_setfield(L, -2, "limit_count");
  }
  if (a->limit_bytes != SIZE_MAX) {
    lscr_pushu64(L, a->limit_bytes);
    lua_setfield(L, -2, "limit_bytes");
  }
  return 1;
}

/* limit{count = n, bytes = b}: admit n more allocations, and refuse any
 * allocation that would take the live bytes above b; limit() lifts both.
 * Frees and shrinks are never refused.  Returns usage(). */
static int lscr_limit(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  uint64_t count = UINT64_MAX;
  size_t bytes = SIZE_MAX;
  if (!lua_isnoneornil(L, 2)) {
    if (!lua_istable(L, 2))
      return lscr_typeerror(L, 2, "limits", "table");
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
      if (lua_type(L, -2) == LUA_TNUMBER)
        return luaL_error(L, "limit: a positional value is not accepted; "
                          "name it: limit{count = n, bytes = b}");
      if (lua_type(L, -2) != LUA_TSTRING)
        return luaL_error(L, "limit: a key must be the string 'count' or 'bytes', not a %s",
                          luaL_typename(L, -2));
      const char *k = lua_tostring(L, -2);
      if (strcmp(k, "count") != 0 && strcmp(k, "bytes") != 0)
        return luaL_error(L, "limit: unknown key '%s' (expected 'count' or 'bytes')", k);
      lua_Integer v;
      if (!lscr_toint(L, -1, &v) || v < 0)
        return luaL_error(L, "limit: '%s' must be a non-negative integer, not %s", k,
                          luaL_tolstring(L, -1, NULL));
      if (k[0] == 'c')
        count = (uint64_t)v;
      else
        bytes = (size_t)v;
      lua_pop(L, 1);
    }
  }
  A->acct.limit_count = count;
  A->acct.limit_bytes = bytes;
  lua_settop(L, 1);
  return lscr_usage(L);
}

/* ---- running Lua on the heap --------------------------------------- */

/* A to-be-closed guard on the caller's stack owns the child state, so that
 * any error (in the child or while copying its results) closes it. */
typedef struct lscr_run {
  lua_State *child;        /* NULL once closed */
  lscr_alloc *owner;       /* allocator whose heap the child runs on */
  scrl_warn warn;          /* the child's warning state */
  lua_State *parent;       /* where the arguments are */
  const char *code;        /* the chunk */
  size_t len;              /* its length */
  int arg0, nargs;         /* arguments: parent stack arg0 .. arg0+nargs-1 */
} lscr_run;

/* run() inside run() nests C stacks; past this depth it is an error
 * rather than a stack overflow. */
#define LSCR_RUN_DEPTH 32
static _Thread_local int lscr_run_depth;

static int lscr_run_close(lua_State *L) {
  lscr_run *r = (lscr_run *)luaL_checkudata(L, 1, LSCR_RUNGUARD);
  if (r->child != NULL) {
    lua_close(r->child);
    r->child = NULL;
    r->owner->busy--;
    lscr_run_depth--;
  }
  return 0;
}

static int lscr_scalar(int t) {
  return t == LUA_TNIL || t == LUA_TBOOLEAN || t == LUA_TNUMBER || t == LUA_TSTRING;
}

/* Copy the scalar at index i of `from` onto `to` (strings allocate). */
static void lscr_xmove(lua_State *from, int i, lua_State *to) {
  switch (lua_type(from, i)) {
    case LUA_TBOOLEAN: lua_pushboolean(to, lua_toboolean(from, i)); break;
    case LUA_TNUMBER:
      if (lua_isinteger(from, i))
        lua_pushinteger(to, lua_tointeger(from, i));
      else
        lua_pushnumber(to, lua_tonumber(from, i));
      break;
    case LUA_TSTRING: {
      size_t len;
      const char *s = lua_tolstring(from, i, &len);
      lua_pushlstring(to, s, len);
      break;
    }
    default: lua_pushnil(to); break;
  }
}

/* Runs in the child, protected: open the libraries, load, call. */
static int lscr_run_main(lua_State *C) {
  lscr_run *r = (lscr_run *)lua_touserdata(C, 1);
  luaL_openlibs(C);
  luaL_getsubtable(C, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);  /* same module, same adapter */
  lua_pushcfunction(C, luaopen_scralloc);
  lua_setfield(C, -2, "scralloc");
  lua_pop(C, 1);
  if (luaL_loadbufferx(C, r->code, r->len, "=(run)", "t") != LUA_OK)
    return lua_error(C);
  luaL_checkstack(C, r->nargs, "too many arguments");
  for (int i = 0; i < r->nargs; i++)
    lscr_xmove(r->parent, r->arg0 + i, C);
  lua_call(C, r->nargs, LUA_MULTRET);
  return lua_gettop(C) - 1;
}

/* run(code, ...) -> the chunk's results.  The chunk runs in a fresh state
 * whose every allocation comes from this allocator's heap (and obeys its
 * limits); nil, booleans, numbers and strings cross in both directions.
 * An error in the chunk is raised here with the chunk's message. */
static int lscr_runchunk(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  size_t len;
  const char *code = lscr_checkstring(L, 2, "code", &len);
  int top = lua_gettop(L);
  for (int i = 3; i <= top; i++)
    if (!lscr_scalar(lua_type(L, i)))
      return lscr_argerror(L, i, "only nil, booleans, numbers and strings go to run()");
  if (lscr_run_depth >= LSCR_RUN_DEPTH)
    return luaL_error(L, "run: nested more than %d deep", LSCR_RUN_DEPTH);
  lscr_run *r = (lscr_run *)lua_newuserdatauv(L, sizeof *r, 0);
  memset(r, 0, sizeof *r);
  luaL_setmetatable(L, LSCR_RUNGUARD);
  int guard = lua_gettop(L);
  lua_toclose(L, guard);
  r->owner = A;
  r->parent = L;
  r->code = code;
  r->len = len;
  r->arg0 = 3;
  r->nargs = top - 2;
  r->child = scrl_newstate(&A->acct, &r->warn);
  if (r->child == NULL)
    return luaL_error(L, "run: not enough memory to create a state (SCR_ENOMEM)");
  A->busy++;
  lscr_run_depth++;
  lua_State *C = r->child;
  lua_pushcfunction(C, lscr_run_main);  /* neither push allocates */
  lua_pushlightuserdata(C, r);
  int status = lua_pcall(C, 1, LUA_MULTRET, 0);
  if (status != LUA_OK) {
    if (lua_type(C, -1) == LUA_TSTRING)
      lscr_xmove(C, -1, L);
    else
      lua_pushfstring(L, "(error object is a %s value)", luaL_typename(C, -1));
    return lua_error(L);  /* the guard closes the child */
  }
  int n = lua_gettop(C);
  for (int i = 1; i <= n; i++)
    if (!lscr_scalar(lua_type(C, i)))
      return luaL_error(L, "run: result #%d is a %s; only nil, booleans, numbers and "
                           "strings come back", i, luaL_typename(C, i));
  luaL_checkstack(L, n, "too many results");
  for (int i = 1; i <= n; i++)
    lscr_xmove(C, i, L);
  lua_closeslot(L, guard);
  return n;
}

/* ---- life cycle ---------------------------------------------------- */

/* close(), __close and __gc: idempotent. */
static int lscr_close(lua_State *L) {
  lscr_alloc *A = lscr_checkobj(L);
  if (A->acct.heap != NULL) {
    if (A->busy > 0)
      return luaL_error(L, "scralloc: cannot close an allocator while run() uses it");
    scr_heap_destroy(A->acct.heap);
    A->acct.heap = NULL;
  }
  return 0;
}

static int lscr_gc(lua_State *L) {
  lscr_alloc *A = lscr_checkobj(L);
  if (A->acct.heap != NULL && A->busy == 0) {
    scr_heap_destroy(A->acct.heap);
    A->acct.heap = NULL;
  }
  return 0;
}

static int lscr_tostring(lua_State *L) {
  lscr_alloc *A = lscr_checkobj(L);
  if (A->acct.heap == NULL) {
    lua_pushfstring(L, "scralloc.allocator (closed) (%p)", (void *)A);
    return 1;
  }
  struct scr_stats st;
  scr_heap_stats(A->acct.heap, &st);
  lua_pushfstring(L, "scralloc.allocator (%p): allocs=%I mmaps=%I bytes=%I", (void *)A,
                  (lua_Integer)st.allocs, (lua_Integer)st.mmaps, (lua_Integer)st.bytes);
  return 1;
}

/* Fields: allocs, mmaps, bytes (live figures), closed; then the methods. */
static int lscr_index(lua_State *L) {
  lscr_alloc *A = lscr_checkobj(L);
  if (lua_type(L, 2) == LUA_TSTRING) {
    const char *k = lua_tostring(L, 2);
    if (strcmp(k, "closed") == 0) {
      lua_pushboolean(L, A->acct.heap == NULL);
      return 1;
    }
    if (strcmp(k, "allocs") == 0 || strcmp(k, "mmaps") == 0 || strcmp(k, "bytes") == 0) {
      struct scr_stats st;
      lscr_checkopen(L);
      scr_heap_stats(A->acct.heap, &st);
      lscr_pushu64(L, k[0] == 'a' ? st.allocs : k[0] == 'm' ? st.mmaps : st.bytes);
      return 1;
    }
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

/* new{retain = 1, ...}: keys are the core's options (integers, or text
 * such as "4M"); env = true first applies the SCRALLOC_<NAME> variables. */
static int lscr_setopt(lua_State *L, scr_options *o, const char *key, int vidx) {
  lua_Integer v = 0;
  int number = lua_type(L, vidx) == LUA_TNUMBER;
  if (number && !lscr_toint(L, vidx, &v))
    return luaL_error(L, "new: option '%s' must be a whole number, not %f", key,
                      lua_tonumber(L, vidx));
  if (number) {
#define LSCR_SETOPT_(type, name, def, lo, hi, doc)                                       \
  if (strcmp(key, #name) == 0) {                                                          \
    uint64_t lo_ = (uint64_t)(lo), hi_ = (uint64_t)(hi);                                  \
    if (v < 0 || (uint64_t)v < lo_ || (uint64_t)v > hi_)                                  \
      return luaL_error(L, "new: option '%s' = %I is out of range [%I, %I]", key, v,      \
                        (lua_Integer)lo_,                                                 \
                        hi_ > (uint64_t)LUA_MAXINTEGER ? LUA_MAXINTEGER : (lua_Integer)hi_); \
    o->name = (type)v;                                                                    \
    return 0;                                                                             \
  }
    SCR_OPTIONS(LSCR_SETOPT_)
#undef LSCR_SETOPT_
  } else if (lua_type(L, vidx) == LUA_TSTRING) {
#define LSCR_ISOPT_(type, name, def, lo, hi, doc) || strcmp(key, #name) == 0
    if (0 SCR_OPTIONS(LSCR_ISOPT_)) {
      if (scr_options_set(o, key, lua_tostring(L, vidx)) != SCR_OK)
        return luaL_error(L, "new: bad value '%s' for option '%s'", lua_tostring(L, vidx), key);
      return 0;
    }
#undef LSCR_ISOPT_
  } else {
    return luaL_error(L, "new: option '%s' must be an integer or a string, not %s", key,
                      luaL_typename(L, vidx));
  }
  return luaL_error(L, "new: unknown option '%s'", key);
}

static int lscr_new(lua_State *L) {
  scr_options o;
  scr_options_init(&o);
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    if (lua_getfield(L, 1, "env") != LUA_TNIL && lua_toboolean(L, -1))
      scr_options_from_env(&o);
    lua_pop(L, 1);
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
      if (lua_type(L, -2) != LUA_TSTRING)
        return luaL_error(L, "new: option names must be strings");
      const char *k = lua_tostring(L, -2);
      if (strcmp(k, "env") != 0)
        lscr_setopt(L, &o, k, lua_gettop(L));
      lua_pop(L, 1);
    }
  }
  lscr_alloc *A = (lscr_alloc *)lua_newuserdatauv(L, sizeof *A, 0);
  scrl_acct_init(&A->acct, NULL);
  A->busy = 0;
  luaL_setmetatable(L, LSCR_ALLOCATOR);
  scr_heap *h = scr_heap_new(&o);
  if (h == NULL)
    return luaL_error(L, "new: cannot create a heap: %s (SCR_ENOMEM)", scr_strerror(SCR_ENOMEM));
  A->acct.heap = h;
  return 1;
}

/* ---- module functions ---------------------------------------------- */

/* heap_stats() -> stats of the heap the calling Lua state runs on (in
 * scralua, or in run()), or nil when it does not run on scralloc. */
static int lscr_heap_stats(lua_State *L) {
  scrl_acct *a = scrl_state_acct(L);
  if (a == NULL || a->heap == NULL)
    return 0;
  struct scr_stats st;
  scr_heap_stats(a->heap, &st);
  lscr_pushstats(L, &st);
  return 1;
}

static int lscr_class_size(lua_State *L) {
  lua_Integer i = lscr_checkint(L, 1, "index");
  if (i < 1 || i > SCR_CLASS_COUNT)
    return 0;
  lua_pushinteger(L, (lua_Integer)scr_class_size((unsigned)(i - 1)));
  return 1;
}

/* size_class(n) -> index into stats().classes, or nil above small_max */
static int lscr_size_class(lua_State *L) {
  lua_Integer n = lscr_checkint(L, 1, "size");
  int c = n < 0 ? -1 : scr_size_class((size_t)n);
  if (c < 0)
    return 0;
  lua_pushinteger(L, c + 1);
  return 1;
}

static int lscr_strerror(lua_State *L) {
  int err = (int)lscr_checkint(L, 1, "code");
  lua_pushstring(L, scr_strerror(err));
  lua_pushstring(L, lscr_code_name(err));
  return 2;
}

static int lscr_fail_os_call(lua_State *L) {
  lua_Integer n = lscr_checkint(L, 1, "n");
  scr_debug_fail_os_call(n < 0 ? 0 : (unsigned long)n);
  return 0;
}

static int lscr_os_calls(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)scr_debug_os_calls());
  return 1;
}

static int lscr_advance_clock(lua_State *L) {
  lua_Integer ms = lscr_checkint(L, 1, "ms");
  scr_debug_advance_clock(ms < 0 ? 0 : (unsigned long)ms);
  return 0;
}

/* The core's reports (failures in calls that cannot return an error code,
 * such as a failed munmap) are process-wide; reports(true) collects them
 * silently here instead of the core's default (stderr in debug builds). */
static struct {
  uint64_t count;          /* reports since collection began */
  int err;                 /* code of the last one */
  char msg[256];           /* text of the last one */
} lscr_reported;

static void lscr_on_report(int err, const char *msg, void *arg) {
  (void)arg;
  lscr_reported.count++;
  lscr_reported.err = err;
  snprintf(lscr_reported.msg, sizeof lscr_reported.msg, "%s", msg);
}

/* reports([collect]) -> count, last message, last code */
/* ---- sampled allocation sites (docs/profile.md) ---- */

/* The samples are copied out first (malloc), then turned into tables:
 * a Lua error (out of memory) then cannot leave the library's snapshot
 * behind. */
typedef struct {
  scr_profile_sample *v;
  size_t n, cap;
  int failed;
} lscr_samples;

static int lscr_collect(const scr_profile_sample *s, void *arg) {
  lscr_samples *c = arg;
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    scr_profile_sample *v = realloc(c->v, cap * sizeof *v);
    if (v == NULL) {
      c->failed = 1;
      return 1;
    }
    c->v = v;
    c->cap = cap;
  }
  c->v[c->n++] = *s; /* (frames and lang are the site's: they stay) */
  return 0;
}

/* {size=, bytes=, blocks=, pinned=, site=, frames={innermost first},
 * lang=} for each live sample of heap h (NULL: every heap's and the
 * process allocator's). */
static int lscr_pushprofile(lua_State *L, const scr_heap *h) {
  lscr_samples c = {0};
  scr_profile_samples(h, lscr_collect, &c);
  if (c.failed) {
    free(c.v);
    return luaL_error(L, "scralloc: out of memory for the profile");
  }
  lua_createtable(L, (int)c.n, 0);
  for (size_t i = 0; i < c.n; i++) {
    const scr_profile_sample *s = &c.v[i];
    lua_createtable(L, 0, 7);
    lscr_pushu64(L, s->size);
    lua_setfield(L, -2, "size");
    lua_pushnumber(L, s->bytes);
    lua_setfield(L, -2, "bytes");
    lua_pushnumber(L, s->blocks);
    lua_setfield(L, -2, "blocks");
    lua_pushnumber(L, s->pinned);
    lua_setfield(L, -2, "pinned");
    lua_pushfstring(L, "%p", (void *)(uintptr_t)s->site);
    lua_setfield(L, -2, "site");
    lua_createtable(L, (int)s->depth, 0);
    for (unsigned k = 0; k < s->depth; k++) {
      char name[512];
      scr_profile_symbol(s->frames[k], name, sizeof name);
      lua_pushstring(L, name);
      lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    lua_setfield(L, -2, "frames");
    if (s->lang) {
      lua_pushstring(L, s->lang);
      lua_setfield(L, -2, "lang");
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  free(c.v);
  return 1;
}

static const char *const lscr_profile_formats[] = {"folded", "pprof", "blame", "top", NULL};

static int lscr_pushwritten(lua_State *L, const scr_heap *h, int path_arg) {
  const char *path = luaL_checkstring(L, path_arg);
  int fmt = luaL_checkoption(L, path_arg + 1, "folded", lscr_profile_formats) + SCR_PROFILE_FOLDED;
  int r = scr_profile_write(h, path, (unsigned)fmt | SCR_PROFILE_NATIVE);
  if (r == SCR_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushnil(L);
  lua_pushfstring(L, "%s: %s", path, r == SCR_EINVAL ? scr_strerror(r) : strerror(errno));
  return 2;
}

/* a:profile() -> samples; a:profile_rate([bytes]) -> the rate (set first
 * when given); a:profile_write(path [, format]) -> true | nil, message. */
static int lscr_profile(lua_State *L) { return lscr_pushprofile(L, lscr_checkopen(L)->acct.heap); }
static int lscr_profile_rate(lua_State *L) {
  lscr_alloc *A = lscr_checkopen(L);
  if (!lua_isnoneornil(L, 2)) {
    lua_Integer r = luaL_checkinteger(L, 2);
    luaL_argcheck(L, r >= 0, 2, "a rate in bytes, 0 = off");
    scr_heap_profile_rate(A->acct.heap, (size_t)r);
  }
  scr_options o;
  scr_heap_options(A->acct.heap, &o);
  lscr_pushu64(L, o.profile_rate);
  return 1;
}
static int lscr_profile_write(lua_State *L) { return lscr_pushwritten(L, lscr_checkopen(L)->acct.heap, 2); }
/* scralloc.profile() and scralloc.profile_write(path [, format]): every
 * heap's samples and the process allocator's. */
static int lscr_profile_all(lua_State *L) { return lscr_pushprofile(L, NULL); }
static int lscr_profile_write_all(lua_State *L) { return lscr_pushwritten(L, NULL, 1); }

static int lscr_reports(lua_State *L) {
  if (!lua_isnone(L, 1)) {
    luaL_checktype(L, 1, LUA_TBOOLEAN);
    memset(&lscr_reported, 0, sizeof lscr_reported);
    scr_set_error_handler(lua_toboolean(L, 1) ? lscr_on_report : NULL, NULL);
  }
  lscr_pushu64(L, lscr_reported.count);
  if (lscr_reported.count == 0)
    return 1;
  lua_pushstring(L, lscr_reported.msg);
  lua_pushstring(L, lscr_code_name(lscr_reported.err));
  return 3;
}

static void lscr_pushoptinfo(lua_State *L) {
  lua_newtable(L);
  int i = 0;
#define LSCR_OPTINFO_(type, name, def, lo, hi, doc)   \
  lua_createtable(L, 0, 5);                           \
  lua_pushliteral(L, #name);                          \
  lua_setfield(L, -2, "name");                        \
  lscr_pushopt(L, (uint64_t)(def));                   \
  lua_setfield(L, -2, "default");                     \
  lscr_pushopt(L, (uint64_t)(lo));                    \
  lua_setfield(L, -2, "min");                         \
  lscr_pushopt(L, (uint64_t)(hi));                    \
  lua_setfield(L, -2, "max");                         \
  lua_pushliteral(L, doc);                            \
  lua_setfield(L, -2, "doc");                         \
  lua_rawseti(L, -2, ++i);
  SCR_OPTIONS(LSCR_OPTINFO_)
#undef LSCR_OPTINFO_
}

static const luaL_Reg lscr_methods[] = {
  {"malloc", lscr_malloc},
  {"calloc", lscr_calloc},
  {"aligned_alloc", lscr_aligned_alloc},
  {"realloc", lscr_realloc},
  {"free", lscr_free},
  {"usable_size", lscr_usable_size},
  {"check", lscr_check},
  {"write", lscr_write},
  {"read", lscr_read},
  {"trim", lscr_trim},
  {"stats", lscr_stats},
  {"stats_json", lscr_stats_json},
  {"options", lscr_options},
  {"validate", lscr_validate},
  {"limit", lscr_limit},
  {"usage", lscr_usage},
  {"run", lscr_runchunk},
  {"profile", lscr_profile},
  {"profile_rate", lscr_profile_rate},
  {"profile_write", lscr_profile_write},
  {"close", lscr_close},
  {NULL, NULL}
};

static const luaL_Reg lscr_meta[] = {
  {"__gc", lscr_gc},
  {"__close", lscr_gc},
  {"__tostring", lscr_tostring},
  {NULL, NULL}
};

static const luaL_Reg lscr_funcs[] = {
  {"new", lscr_new},
  {"heap_stats", lscr_heap_stats},
  {"class_size", lscr_class_size},
  {"size_class", lscr_size_class},
  {"strerror", lscr_strerror},
  {"debug_fail_os_call", lscr_fail_os_call},
  {"debug_os_calls", lscr_os_calls},
  {"debug_advance_clock", lscr_advance_clock},
  {"reports", lscr_reports},
  {"profile", lscr_profile_all},
  {"profile_write", lscr_profile_write_all},
  {NULL, NULL}
};

SCRL_EXPORT int luaopen_scralloc(lua_State *L) {
  luaL_checkversion(L);
  if (luaL_newmetatable(L, LSCR_ALLOCATOR)) {
    luaL_setfuncs(L, lscr_meta, 0);
    lua_createtable(L, 0, sizeof lscr_methods / sizeof lscr_methods[0] - 1);
    for (const luaL_Reg *m = lscr_methods; m->name != NULL; m++) {
      lua_pushstring(L, m->name);  /* the name for lscr_argerror */
      lua_pushcclosure(L, m->func, 1);
      lua_setfield(L, -2, m->name);
    }
    lua_pushcclosure(L, lscr_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushliteral(L, "scralloc.allocator");
    lua_setfield(L, -2, "__name");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, LSCR_RUNGUARD)) {
    lua_pushcfunction(L, lscr_run_close);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, lscr_run_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_newlib(L, lscr_funcs);
  lua_pushliteral(L, SCR_VERSION);
  lua_setfield(L, -2, "version");
#define LSCR_CONST_(name, v) lua_pushinteger(L, (lua_Integer)(v)); lua_setfield(L, -2, name);
  LSCR_CONST_("page_size", SCR_PAGE_SIZE)
  LSCR_CONST_("segment_size", SCR_SEGMENT_SIZE)
  LSCR_CONST_("small_max", SCR_SMALL_MAX)
  LSCR_CONST_("min_align", SCR_MIN_ALIGN)
  LSCR_CONST_("class_count", SCR_CLASS_COUNT)
#undef LSCR_CONST_
  lscr_pushoptinfo(L);
  lua_setfield(L, -2, "option_info");
  return 1;
}
