/* scralloc for Lua: the lua_Alloc adapter that runs a Lua state on a
 * scralloc heap, with the accounting and failure limits shared with the
 * allocator objects of the module.
 *
 * Lua's contract (lua_Alloc in the manual): ptr == NULL means a new block
 * and osize is then a type tag; nsize == 0 means free; otherwise resize.
 * Lua assumes a shrink never fails, so a shrink the heap cannot do keeps
 * the old block, which is at least as large as asked. */
#include <stdio.h>
#include <string.h>

#include "lauxlib.h"
#include "scrlua.h"

void scrl_acct_init(scrl_acct *a, scr_heap *h) {
  a->heap = h;
  a->live = 0;
  a->peak = 0;
  a->allocs = 0;
  a->failures = 0;
  a->limit_count = UINT64_MAX;
  a->limit_bytes = SIZE_MAX;
}

int scrl_admit(scrl_acct *a, size_t n) {
  if (a->limit_count == 0 ||
      (a->limit_bytes != SIZE_MAX && (n > a->limit_bytes || a->live > a->limit_bytes - n))) {
    a->failures++;
    return 0;
  }
  if (a->limit_count != UINT64_MAX)
    a->limit_count--;
  return 1;
}

void *scrl_grant(scrl_acct *a, size_t old_usable, void *q) {
  if (q == NULL) {
    a->failures++;
    return NULL;
  }
  a->allocs++;
  scrl_account(a, old_usable, scr_heap_usable_size(a->heap, q));
  return q;
}

void scrl_account(scrl_acct *a, size_t old_usable, size_t new_usable) {
  a->live = a->live - old_usable + new_usable;
  if (a->live > a->peak)
    a->peak = a->live;
}

void *scrl_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  scrl_acct *a = (scrl_acct *)ud;
  scr_heap *h = a->heap;
  (void)osize;  /* the heap knows the block's size better than Lua */
  if (nsize == 0) {
    if (ptr != NULL) {
      scrl_account(a, scr_heap_usable_size(h, ptr), 0);
      scr_heap_free(h, ptr);
    }
    return NULL;
  }
  if (ptr == NULL)
    return scrl_admit(a, nsize) ? scrl_grant(a, 0, scr_heap_malloc(h, nsize)) : NULL;
  size_t old_us = scr_heap_usable_size(h, ptr);
  if (nsize > old_us)
    return scrl_admit(a, nsize - old_us) ? scrl_grant(a, old_us, scr_heap_realloc(h, ptr, nsize))
                                         : NULL;
  void *q = scr_heap_realloc(h, ptr, nsize);
  if (q == NULL)  /* the heap could not move it: a shrink keeps its old block */
    return ptr;
  scrl_account(a, old_us, scr_heap_usable_size(h, q));
  return q;
}

/* ---- state creation ------------------------------------------------ */

static int scrl_panic(lua_State *L) {
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                    : "error object is not a string";
  fprintf(stderr, "PANIC: unprotected error in call to Lua API (%s)\n", msg);
  fflush(stderr);
  return 0;  /* Lua aborts */
}

/* A control message is a whole message (one piece, tocont == 0) that
 * starts with '@': "@on" and "@off" switch printing, others are ignored.
 * Pieces of a multi-part message are never control messages, so
 * warn("@off", "x", "@off") prints "@offx@off" while warnings are on.
 * While they are off every piece is checked on its own, as lauxlib does:
 * the last piece of a message can switch them on. */
static int scrl_warn_control(scrl_warn *w, const char *msg, int tocont) {
  if (tocont || msg[0] != '@')
    return 0;
  if (strcmp(msg + 1, "on") == 0)
    w->on = 1;
  else if (strcmp(msg + 1, "off") == 0)
    w->on = 0;
  return 1;
}

static void scrl_warnf(void *ud, const char *msg, int tocont) {
  scrl_warn *w = (scrl_warn *)ud;
  if (!w->on) {
    scrl_warn_control(w, msg, tocont);
    return;
  }
  if (!w->cont) {
    if (scrl_warn_control(w, msg, tocont))
      return;
    fputs("Lua warning: ", stderr);
  }
  fputs(msg, stderr);
  if (!tocont)
    fputs("\n", stderr);
  fflush(stderr);
  w->cont = tocont;
}

lua_State *scrl_newstate(scrl_acct *a, scrl_warn *w) {
  lua_State *L = lua_newstate(scrl_alloc, a);
  if (L != NULL) {
    w->on = 0;
    w->cont = 0;
    lua_atpanic(L, scrl_panic);
    lua_setwarnf(L, scrl_warnf, w);
  }
  return L;
}

scrl_acct *scrl_state_acct(lua_State *L) {
  void *ud = NULL;
  lua_Alloc f = lua_getallocf(L, &ud);
  return f == scrl_alloc ? (scrl_acct *)ud : NULL;
}
