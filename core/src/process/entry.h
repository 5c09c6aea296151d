/* The entry points' layer of the process allocator.
 * Layer: entry.  scr_malloc and friends (malloc.c, free_many.c), the
 * malloc symbols of libscralloc.so (override.c), and the fork handlers
 * (fork.c: every layer's locks, top down).  Uses the caches' layer
 * (caches.h) and, through it, the arenas'.
 * Files, bottom up: malloc.c free_many.c fork.c override.c. */
#ifndef SCR_PROCESS_ENTRY_H
#define SCR_PROCESS_ENTRY_H

#include "caches.h"

/* malloc.c: the entry points used by override.c */
SCR_INTERNAL size_t _scr_proc_usable_size_named(const void *p, const char *call);

#endif /* SCR_PROCESS_ENTRY_H */
