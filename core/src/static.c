/* The unity file: every core source in one translation unit, so that
 * setup.py, the Lua module and the preload library each build one file.
 * Keep the list in dependency order; the process allocator's sources come
 * last. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* before any system header: mremap, MADV_* in prim/ */
#endif
#include "error.c"
#include "prim/os.c"
#include "options.c"
#include "size_class.c"
#include "misuse.c"
#include "segmap.c"
#include "segment.c"
#include "page.c"
#include "queue.c"
#include "heap.c"
#include "large.c"
#include "interior.c"
#include "classify.c"
#include "stats.c"
#include "validate.c"
#include "profile.c"
#include "profile_report.c"
/* ---- process allocator (core/src/process/), layer by layer, bottom up
 * (process.h draws them; tests/tools/process_layers.py checks them) ---- */
/* base */
#include "process/os_linux.c"
#include "process/options.c"
#include "process/state.c"
#include "process/misuse.c"
/* arenas */
#include "process/hooks.c"
#include "process/huge_cache.c"
#include "process/decay.c"
#include "process/validate.c"
#include "process/arena.c"
#include "process/discard.c"
#include "process/helper.c"
/* caches */
#include "process/remote.c"
#include "process/pool.c"
#include "process/tcache.c"
#include "process/holder.c"
/* entry */
#include "process/malloc.c"
#include "process/free_many.c"
#include "process/fork.c"
#include "process/override.c"
/* observers */
#include "process/stats.c"
#include "process/override_stats.c"
