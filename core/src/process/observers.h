/* The observers of the process allocator.
 * Layer: observers.  The stats (stats.c) and glibc's statistics calls
 * (override_stats.c) read every layer below (snapshots, counters, the
 * pool's and the huge-block cache's figures) and nothing below calls
 * them; the validator of the arena lists is the arenas' (validate.c),
 * which debug builds run at every claim and park. */
#ifndef SCR_PROCESS_OBSERVERS_H
#define SCR_PROCESS_OBSERVERS_H

#include "entry.h"

/* stats.c: the text report (SCRALLOC_STATS at exit, malloc_stats) */
SCR_INTERNAL void _scr_proc_report(int fd, bool per_arena);

#endif /* SCR_PROCESS_OBSERVERS_H */
