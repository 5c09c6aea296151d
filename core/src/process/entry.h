/* The entry points' layer of the process allocator.
 * Layer: entry.  scr_malloc and friends (malloc.c, free_many.c), the
 * malloc symbols of libscralloc.so (override.c), the shared arena that
 * threads which do not run at once start on (share.c: which arena a call
 * runs on), and the fork handlers (fork.c: every layer's locks, top
 * down).  Uses the caches' layer (caches.h) and, through it, the arenas'.
 * Files, bottom up: share.c malloc.c free_many.c fork.c override.c. */
#ifndef SCR_PROCESS_ENTRY_H
#define SCR_PROCESS_ENTRY_H

#include "caches.h"

/* share.c: threads that do not run at once share one arena */
SCR_INTERNAL scr_arena *_scr_share_enter(void);
SCR_INTERNAL void _scr_share_leave(void);
SCR_INTERNAL void _scr_share_publish(void);
SCR_INTERNAL size_t _scr_share_trim(void);
SCR_INTERNAL void _scr_share_lock(void);   /* fork: held across it */
SCR_INTERNAL void _scr_share_unlock(void);
/* A caller that holds no arena: 1 when it is to use the shared arena (a
 * call goes between _scr_share_enter and _scr_share_leave). */
static inline int _scr_share_wanted(void) {
  if (_scr_tl_share == SCR_SHARE_SOLO) return 0;
  _scr_proc_init(); /* the first call of the process makes its thread solo */
  return _scr_tl_share != SCR_SHARE_SOLO && _scr_proc.opt.share != 0;
}

/* In an entry point of a caller that is to use the shared arena: the
 * entry point's call, made again on that arena, and return its result. */
#define SCR_SHARE_RETURN(no_arena, call)                                   \
  do {                                                                     \
    if ((no_arena) && _scr_share_wanted() && _scr_share_enter() != NULL) { \
      __typeof__(call) share_result_ = (call);                             \
      _scr_share_leave();                                                  \
      return share_result_;                                                \
    }                                                                      \
  } while (0)

/* malloc.c: the entry points used by override.c */
SCR_INTERNAL size_t _scr_proc_usable_size_named(const void *p, const char *call);

#endif /* SCR_PROCESS_ENTRY_H */
