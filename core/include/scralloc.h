/* scralloc: an allocator that shows and controls how memory goes back to
 * the OS.  This is the whole public C API; the Python and Lua bindings use
 * nothing else.
 *
 * Two layers:
 *  - allocator objects (scr_heap): each has its own pages, counters and
 *    retention policy.  A heap belongs to one thread at a time (no locks).
 *  - the process allocator (scr_malloc and friends, and the malloc symbols
 *    of libscralloc.so): thread-safe, one arena per thread.
 *
 * Bad input never crashes a call (docs/misuse.md says what is detected
 * and how).  A NULL heap, a destroyed one (while its descriptor is not
 * taken again by a new heap: a magic word tells), a NULL output or name:
 * the error code or the no-op written next to each function, and a
 * report through the error handler where the call has no error code.  A
 * bad pointer given to the unchecked heap calls (scr_heap_free,
 * scr_heap_realloc, scr_heap_usable_size) is detected (foreign, interior,
 * never handed out, double free), reported through the error handler and
 * the call ignored; the *_checked calls classify any address exactly and
 * return the error code.  The process allocator's free & co. do as
 * SCRALLOC_ON_ERROR says (abort by default, as glibc).
 */
#ifndef SCRALLOC_H
#define SCRALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SCR_API __attribute__((visibility("default")))
#else
#define SCR_API
#endif

#define SCR_VERSION_MAJOR 0
#define SCR_VERSION_MINOR 1
#define SCR_VERSION_PATCH 0
#define SCR_VERSION "0.1.0"

/* Geometry (fixed at build time). */
#define SCR_PAGE_SIZE    ((size_t)64 * 1024)        /* one size-class page */
#define SCR_SEGMENT_SIZE ((size_t)4 * 1024 * 1024)  /* reservation unit: 64 pages, page 0 holds metadata */
#define SCR_SMALL_MAX    ((size_t)64 * 1024)        /* largest size-class block */
#define SCR_MIN_ALIGN    ((size_t)16)               /* every block is at least this aligned */
#define SCR_CLASS_COUNT  52                         /* number of size classes */

/* ---- errors -------------------------------------------------------- */

/* X(name, value, message) */
#define SCR_ERRORS(X)                                                              \
  X(SCR_OK, 0, "success")                                                          \
  X(SCR_ENOMEM, 1, "out of memory")              /* the OS refused, or limit_bytes */ \
  X(SCR_EINVAL, 2, "invalid size or alignment")                                    \
  X(SCR_EFOREIGN, 3, "invalid pointer: not owned by this allocator")              \
  X(SCR_EINTERIOR, 4, "invalid pointer: interior of a block")                      \
  X(SCR_ENOTALLOC, 5, "invalid pointer: never allocated")   /* a position never handed out */ \
  X(SCR_EDOUBLEFREE, 6, "double free")           /* a block that is already free */

typedef enum scr_error {
#define SCR_ERROR_ENUM_(name, value, msg) name = value,
  SCR_ERRORS(SCR_ERROR_ENUM_)
#undef SCR_ERROR_ENUM_
} scr_error;

SCR_API const char *scr_strerror(int err);

/* A handler called when scralloc detects misuse or an internal failure in
 * a call that cannot return an error code (an unchecked heap free of a bad
 * pointer, a call on a NULL or destroyed heap, a failed munmap, a bad
 * SCRALLOC_<NAME> in the environment).  Default: print to stderr in debug
 * builds and with SCRALLOC_VERBOSE=1, nothing otherwise (the environment's
 * warnings always print).  The process allocator's misuse reports do not
 * come here: they follow SCRALLOC_ON_ERROR.  Safe to call while other
 * threads run, but a report racing the change may pair the old function
 * with the new argument: set it before starting threads. */
typedef void scr_error_handler(int err, const char *msg, void *arg);
SCR_API void scr_set_error_handler(scr_error_handler *fn, void *arg);

/* ---- options ------------------------------------------------------- */

/* One table of every option, the heap's and the process allocator's:
 * X(scope, type, name, default, min, max, words, description).
 *   scope  SCR_SCOPE_HEAP: a field of scr_options (scr_options_set, a
 *          heap's option); SCR_SCOPE_PROCESS: the process allocator's
 *          (scr_process_option_set, _get); SCR_SCOPE_BOTH: both, one value
 *          each.  Each setter refuses a name outside its scope.
 *   words  the option's own words, "word=value ..." ("" for none).
 * Every option has an environment name SCRALLOC_<NAME>, the name in upper
 * case, read by scr_options_from_env() (heap and both) and by the process
 * allocator's first call (process and both).
 * Values (one parser for every setter and the environment): a number,
 * with K, M, G (binary) for sizes ("64K", "4MiB"), the option's words,
 * and on/true/yes (1), off/false/no (0).
 * Case: names and words match in any case ("RETAIN", "On"); the
 * environment is the one exception, its variable's name is upper case
 * exactly (SCRALLOC_retain is not read: it gets the unknown-name
 * warning). */
enum scr_option_scope { SCR_SCOPE_HEAP = 1, SCR_SCOPE_PROCESS = 2, SCR_SCOPE_BOTH = 3 };
#define SCR_OPTION_TABLE(X) SCR_OPTION_TABLE_(SCR_OPTION_ALL_, X)
#define SCR_OPTION_TABLE_(E, X)                                                 \
  E(X, HEAP, unsigned, retain, 1, 0, 1u << 20, "",                              \
    "empty pages kept per size class before they are decommitted")             \
  E(X, HEAP, size_t, retain_bytes, SIZE_MAX, 0, SIZE_MAX, "",                   \
    "cap on the bytes of empty pages a heap keeps committed (retained pages and pages waiting for the purge); by default none: the purge delay bounds them") \
  E(X, HEAP, unsigned, large_cache, 8, 0, 1024, "",                             \
    "freed large blocks kept for reuse (with purge_delay_ms, huge mappings only)") \
  E(X, HEAP, size_t, large_cache_bytes, (size_t)16 << 20, 0, SIZE_MAX, "",      \
    "cap on the bytes of cached large blocks")                                 \
  E(X, HEAP, size_t, huge_threshold, (size_t)1 << 20, SCR_SMALL_MAX, SCR_SEGMENT_SIZE / 2, "", \
    "blocks above this get a mapping of their own")                            \
  E(X, HEAP, size_t, madv_free_below, 0, 0, SIZE_MAX, "",                       \
    "decommit runs shorter than this with MADV_FREE, longer with MADV_DONTNEED")\
  E(X, HEAP, size_t, limit_bytes, 0, 0, SIZE_MAX, "",                           \
    "refuse (ENOMEM) to hold more than this many committed bytes; 0 = no limit")\
  E(X, HEAP, unsigned, purge_delay_ms, 1000, 0, 3600000, "",                    \
    "keep freed pages committed (reused first, no fault) this long before decommitting them (the passes run at the heap's calls); 0 = at once") \
  E(X, HEAP, size_t, decommit_batch, 0, 0, SIZE_MAX, "",                        \
    "freed pages past retain_bytes wait (reused first) until this many bytes of them gather or the next purge, then go back in one call; 0 = each run at once") \
  E(X, BOTH, size_t, profile_rate, 0, 0, (size_t)1 << 40, "on=512K",            \
    "mean bytes allocated between sampled blocks, whose allocation sites the profile keeps (docs/profile.md); 0 = off, on = 512 KiB (SCR_PROFILE_DEFAULT_RATE)") \
  E(X, PROCESS, uint64_t, discard, 1, 0, 2, "poison=2",                         \
    "return all free memory of an arena parked for the decay delay (decay_ms): 0 off, 1 on, 2 = poison") \
  E(X, PROCESS, uint64_t, pool, 1, 0, 1, "",                                    \
    "full cache lists hand other arenas' blocks to a process-wide pool per size class, for threads whose lists run empty: 0 off (they go home), 1 on") \
  E(X, PROCESS, uint64_t, cache_bytes, 16384, 0, (uint64_t)1 << 20, "",         \
    "bytes of one size class a thread's cache keeps (at most 64 blocks)")      \
  E(X, PROCESS, uint64_t, cache_medium, 2, 0, 64, "",                           \
    "blocks of one medium class (20-64 KiB) a thread's cache keeps")           \
  E(X, PROCESS, uint64_t, cache_medium_after, 16, 0, 65535, "",                 \
    "mallocs of a medium class a thread that claimed its arena while no other was held (the main thread, as a rule) makes before its cache keeps blocks of that class (0: from the first)") \
  E(X, PROCESS, uint64_t, cache_max, 65536, 0, 65536, "",                       \
    "blocks above this size skip the thread's cache (0: no cache)")            \
  E(X, PROCESS, uint64_t, cache_grow, (uint64_t)4 << 20, 0, (uint64_t)1 << 30, "", \
    "bytes by which the caps of one thread's cache lists may grow (below 4 KiB up to 1024 blocks, the others up to 64), a block at a time when a full list is freed into; back to their bases when the thread exits or trims, or when no malloc found the list empty for a decay delay (0: the caps stay as cache_bytes and cache_medium set them)") \
  E(X, PROCESS, uint64_t, decay_ms, 1000, 0, 3600000, "",                       \
    "free memory unused this long goes back to the OS (pages between half of it and all of it after they were freed, cached huge blocks after it), by the helper thread, without a call from the program; 0: at once") \
  E(X, PROCESS, uint64_t, decay_max_ms, 10000, 0, 3600000, "",                  \
    "the longest the decay delay grows to while memory that went back is faulted in again soon after (refaults)") \
  E(X, PROCESS, uint64_t, retain_max, 0, 0, UINT64_MAX, "",                     \
    "a hard cap on the free memory the arenas and the huge cache keep committed (shared by the threads holding arenas): above it, freed memory goes back at once (0: no cap; the decay alone decides)") \
  E(X, PROCESS, uint64_t, dontdump, 2, 0, 2, "",                                \
    "MADV_DONTDUMP on segments: 0 never, 1 always, 2 auto (when no core would be written)") \
  E(X, PROCESS, uint64_t, stats, 0, 0, 3, "json=3",                             \
    "print statistics at exit: 1 summary, 2 also per arena, 3 (json) scr_process_stats_json's object on one line") \
  E(X, PROCESS, uint64_t, stats_fd, 2, 0, 1 << 20, "",                          \
    "file descriptor the exit report goes to (stderr by default)")             \
  E(X, PROCESS, uint64_t, verbose, 0, 0, 1, "",                                 \
    "1: say on stderr every misuse (SCRALLOC_ON_ERROR=ignore too) and every internal failure (a failed munmap) the allocator meets") \
  E(X, PROCESS, uint64_t, on_error, 0, 0, 2, "abort=0 warn=1 ignore=2",         \
    "what free, realloc, malloc_usable_size of a bad pointer (double free, interior, never allocated, not scralloc's) does: abort (0) says it on stderr and calls abort(), warn (1) says it and ignores the call, ignore (2) only counts it")
/* Helpers: SCR_OPTION_TABLE passes every entry on; SCR_OPTIONS those of
 * scope heap or both, without their scope and words. */
#define SCR_OPTION_ALL_(X, scope, ...) X(SCR_SCOPE_##scope, __VA_ARGS__)
#define SCR_OPTION_IN_HEAP_(X, scope, ...) SCR_OPTION_HEAP_##scope(X, __VA_ARGS__)
#define SCR_OPTION_HEAP_HEAP(X, type, name, def, lo, hi, words, doc) X(type, name, def, lo, hi, doc)
#define SCR_OPTION_HEAP_BOTH(X, type, name, def, lo, hi, words, doc) X(type, name, def, lo, hi, doc)
#define SCR_OPTION_HEAP_PROCESS(X, ...)

/* The options of a heap (scope heap or both), the fields of scr_options
 * in this order: X(type, name, default, min, max, description).  Sizes
 * accept K, M, G suffixes. */
#define SCR_OPTIONS(X) SCR_OPTION_TABLE_(SCR_OPTION_IN_HEAP_, X)

typedef struct scr_options {
#define SCR_OPTION_FIELD_(type, name, def, lo, hi, doc) type name;
  SCR_OPTIONS(SCR_OPTION_FIELD_)
#undef SCR_OPTION_FIELD_
} scr_options;

SCR_API void scr_options_init(scr_options *opt);     /* defaults; NULL: no-op */
/* Override from SCRALLOC_<NAME>; a value that is not one, or out of the
 * option's range, is ignored with a warning naming the range, and a
 * SCRALLOC_ variable that names no option (misspelt, or not in upper
 * case) is warned about with the closest name; each warning once per
 * variable and process, to the error handler when one is set, else on
 * stderr.  NULL: no-op. */
SCR_API void scr_options_from_env(scr_options *opt);
/* Set one option by name from text ("4M", "0"); returns SCR_OK, or
 * SCR_EINVAL for a NULL argument, an unknown name, bad text or a value
 * out of range (nothing set). */
SCR_API int scr_options_set(scr_options *opt, const char *name, const char *value);

/* ---- statistics ---------------------------------------------------- */

/* X(name, description).  Every field is a uint64_t. */
#define SCR_STATS_FIELDS(X)                                                     \
  X(allocs, "live blocks")                                                      \
  X(mmaps, "live OS mappings (segments and dedicated large mappings)")          \
  X(bytes, "committed bytes held from the OS and not given back")              \
  X(mmap_calls, "mmap calls made (cumulative)")                                 \
  X(munmap_calls, "munmap calls made (cumulative)")                             \
  X(madvise_calls, "madvise calls made (cumulative; one process_madvise of a batch counts once)") \
  X(mremap_calls, "mremap calls made (cumulative)")                             \
  X(os_failures, "OS calls that failed (cumulative)")                           \
  X(heap_total, "bytes held for blocks: pages in use, retained, cached and dirty") \
  X(heap_used, "bytes in live blocks (usable sizes)")                           \
  X(retained_pages, "empty size-class pages kept")                              \
  X(retained_bytes, "bytes of empty size-class pages kept")                     \
  X(cached_blocks, "freed large blocks kept for reuse")                         \
  X(cached_bytes, "bytes of freed large blocks kept for reuse")                 \
  X(dirty_bytes, "bytes of freed pages kept committed until the purge (purge_delay_ms) or the batched decommit (decommit_batch)") \
  X(large_allocs, "live blocks above the size classes")                         \
  X(large_bytes, "bytes of live blocks above the size classes")                 \
  X(reserved_bytes, "address space mapped (committed or not)")                  \
  X(meta_bytes, "bytes of segment headers (page descriptors)")                  \
  X(decommits, "page runs decommitted (cumulative)")                            \
  X(page_acquires, "pages taken from segments or the OS (cumulative)")          \
  X(page_releases, "pages given back to segments or the OS (cumulative)")      \
  X(dontneed_bytes, "bytes given back with MADV_DONTNEED, which read as zero afterwards (cumulative)") \
  X(lazy_free_bytes, "bytes given back with MADV_FREE, which the kernel takes only under memory pressure (cumulative)") \
  X(purge_passes, "timed passes that gave back pages freed more than purge_delay_ms before (cumulative)") \
  X(refault_bytes, "bytes given back by the process allocator's decay and taken again within twice its delay: refaulted after return (cumulative)") \
  X(madvise_hints, "of madvise_calls, advice that gives no memory back: MADV_DONTDUMP, MADV_NOHUGEPAGE (cumulative)")

#define SCR_CLASS_STATS_FIELDS(X)                                               \
  X(block_size, "bytes per block")                                              \
  X(live, "live blocks")                                                        \
  X(pages, "pages holding this class (retained included)")                      \
  X(retained, "empty pages kept for this class")

typedef struct scr_class_stats {
#define SCR_STATS_FIELD_(name, doc) uint64_t name;
  SCR_CLASS_STATS_FIELDS(SCR_STATS_FIELD_)
} scr_class_stats;

/* Like struct stat and stat(): the type is `struct scr_stats` and the
 * process allocator's function of the same name, scr_stats(), fills one. */
struct scr_stats {
  SCR_STATS_FIELDS(SCR_STATS_FIELD_)
  scr_class_stats classes[SCR_CLASS_COUNT];
#undef SCR_STATS_FIELD_
};

/* ---- size classes -------------------------------------------------- */

SCR_API size_t scr_class_size(unsigned cls);  /* 0 if cls >= SCR_CLASS_COUNT */
SCR_API int scr_size_class(size_t n);         /* class of a request, -1 above SCR_SMALL_MAX */

/* ---- allocator objects --------------------------------------------- */

typedef struct scr_heap scr_heap;

/* NULL opt means defaults (environment not read).  Returns NULL with errno
 * ENOMEM when the heap's descriptor cannot be mapped. */
SCR_API scr_heap *scr_heap_new(const scr_options *opt);
/* Close: unmaps every segment and mapping, live blocks included.  NULL:
 * no-op; a destroyed heap: no-op, reported (SCR_EINVAL).  The descriptor's
 * first OS page stays mapped, marked destroyed, for the next scr_heap_new. */
SCR_API void scr_heap_destroy(scr_heap *h);
/* NULL out: no-op; NULL or destroyed h: no-op, reported (SCR_EINVAL). */
SCR_API void scr_heap_options(const scr_heap *h, scr_options *out);

/* malloc(0) returns a unique minimum-size block.  Overflowing or absurd
 * sizes return NULL with errno ENOMEM; a bad alignment (zero, not a power
 * of two) returns NULL with errno EINVAL.  A NULL or destroyed heap:
 * NULL with errno EINVAL, reported. */
SCR_API void *scr_heap_malloc(scr_heap *h, size_t n);
SCR_API void *scr_heap_calloc(scr_heap *h, size_t count, size_t size);
SCR_API void *scr_heap_aligned_alloc(scr_heap *h, size_t alignment, size_t n);
/* realloc(NULL, n) = malloc(n).  realloc(p, 0) frees p and returns NULL
 * (glibc's behaviour).  On failure p is untouched and NULL is returned.
 * A p that is not a live block of h: reported, NULL with errno EINVAL.
 * A NULL or destroyed heap: NULL with errno EINVAL, reported. */
SCR_API void *scr_heap_realloc(scr_heap *h, void *p, size_t n);
/* NULL p: no-op.  A p that is not a live block of h (foreign, interior,
 * never handed out, already free): reported with its code, ignored.  A
 * NULL or destroyed heap: no-op, reported. */
SCR_API void scr_heap_free(scr_heap *h, void *p);
/* 0 for NULL p, and for a p that is not a live block of h (reported);
 * 0 for a NULL or destroyed heap (reported). */
SCR_API size_t scr_heap_usable_size(const scr_heap *h, const void *p);

/* Checked forms: exact classification of any address, never a crash.
 * NULL is SCR_EFOREIGN for check and usable_size_checked, SCR_OK (nothing
 * to do) for free_checked, and malloc for realloc_checked.  A NULL or
 * destroyed heap is SCR_EINVAL, and so is a NULL out for realloc_checked
 * (out is optional for usable_size_checked).  A block whose page went
 * back (to its segment, or with it to the OS) is still a double free
 * while that page is among the last 16 pages (or large blocks) the heap
 * gave back; past that it is no longer this heap's, and freeing it again
 * is SCR_EFOREIGN or SCR_ENOTALLOC rather than SCR_EDOUBLEFREE, but
 * always an error. */
SCR_API int scr_heap_check(const scr_heap *h, const void *p);  /* SCR_OK if p is a live block */
SCR_API int scr_heap_free_checked(scr_heap *h, void *p);        /* NULL -> SCR_OK */
SCR_API int scr_heap_realloc_checked(scr_heap *h, void *p, size_t n, void **out);
SCR_API int scr_heap_usable_size_checked(const scr_heap *h, const void *p, size_t *out);

/* Give back every retained page and cached large block; returns the number
 * of committed bytes given back.  With no live block, afterwards
 * allocs == mmaps == bytes == 0. */
SCR_API size_t scr_heap_trim(scr_heap *h); /* NULL or destroyed: 0, reported */

/* NULL out: no-op; NULL or destroyed h: *out zeroed, reported. */
SCR_API void scr_heap_stats(const scr_heap *h, struct scr_stats *out);
/* Writes the stats as one JSON object; returns the length it needs (like
 * snprintf: the output is complete when the result < len).  NULL buf: the
 * length only.  NULL or destroyed h, NULL st: "" and 0. */
SCR_API size_t scr_heap_stats_json(const scr_heap *h, char *buf, size_t len);
SCR_API size_t scr_stats_json(const struct scr_stats *st, char *buf, size_t len);

/* Runs the heap validator (every page, every queue, every counter);
 * returns SCR_OK or SCR_EINVAL and reports through the error handler.
 * NULL or destroyed h: SCR_EINVAL. */
SCR_API int scr_heap_validate(const scr_heap *h);

/* The heap whose mapping holds p (any address; NULL when no heap's does),
 * and in *usable (when not NULL) the usable size of the block at p, which
 * means something only when p is a live block (0 when no heap holds p).
 * O(1) through the segment map, never touches memory that may be unmapped;
 * says nothing about whether p is a live block (scr_heap_check does).  For
 * routers that send each free to the heap that made the block. */
SCR_API scr_heap *scr_heap_of(const void *p, size_t *usable);

/* ---- testing hooks ------------------------------------------------- */

/* Make the n-th OS call from now (mmap, munmap, madvise, mremap; 1 = the
 * next) fail with ENOMEM.  0 disables.  Process-wide; for tests. */
SCR_API void scr_debug_fail_os_call(unsigned long n);
/* Number of OS calls made by the whole process so far (every heap). */
SCR_API unsigned long scr_debug_os_calls(void);
/* Move the clock the purge delay is measured on ms milliseconds ahead
 * (process-wide, cumulative); for tests of purge_delay_ms. */
SCR_API void scr_debug_advance_clock(unsigned long ms);
/* on = 0: decommit the runs of a purge pass one madvise each, as on a
 * kernel that refuses process_madvise(MADV_DONTNEED); on = 1: batch them
 * again where the kernel takes it.  Process-wide; for tests. */
SCR_API void scr_debug_batch_decommits(int on);

/* ---- process allocator --------------------------------------------- */
/* (owned by core/src/process/; declarations added there) */

/* Thread-safe: one arena (a heap) per thread, claimed on the thread's first
 * allocation and parked when it exits; a block may be freed or realloc'ed
 * by any thread.  libscralloc.so also defines malloc & co. with these.
 * Options: environment SCRALLOC_<NAME> (see docs/process.md), read at the
 * first call; the heap options apply to every arena. */
#define SCR_HAVE_PROCESS 1

SCR_API void *scr_malloc(size_t n);
SCR_API void *scr_calloc(size_t count, size_t size);
/* Moves another arena's block into the caller's.  A p that is not a live
 * block: as scr_free (on_error), then NULL with errno EINVAL. */
SCR_API void *scr_realloc(void *p, size_t n);
/* NULL: no-op.  A p that is not a live block of an arena (not scralloc's,
 * as memory of a scr_heap the program made; inside a block; never handed
 * out; already free, wherever it waits) is counted by kind
 * (scr_process_stats) and handled as SCRALLOC_ON_ERROR (option on_error)
 * says: abort (default) prints "scralloc: free(0x...): double free" on
 * stderr and calls abort(); warn prints it and ignores the call; ignore
 * only counts.  Which cases are found exactly: docs/misuse.md. */
SCR_API void scr_free(void *p);
SCR_API void *scr_aligned_alloc(size_t alignment, size_t n);
/* 0 for NULL; a p that is not a live block: as scr_free (on_error), then 0. */
SCR_API size_t scr_usable_size(const void *p);
/* Frees n blocks; sets of 16384 or more are freed in descending address
 * order (the array is reordered) so later allocations come back ascending.
 * NULL ptrs: no-op; each pointer as scr_free. */
SCR_API void scr_free_many(void **ptrs, size_t n);
/* Gives back the caller's arena's and every parked arena's free pages and
 * cached blocks now; returns the committed bytes given back. */
SCR_API size_t scr_trim(void);
/* Process-wide figures: the sum over every arena (the caller's exact, the
 * others as of their last snapshot).  NULL out: no-op. */
SCR_API void scr_stats(struct scr_stats *out);

/* X(name, description); every field is a uint64_t. */
#define SCR_PROCESS_STATS_FIELDS(X)                                             \
  X(arenas, "arenas created")                                                   \
  X(arenas_owned, "arenas held by a thread")                                    \
  X(arenas_parked, "arenas waiting for a thread")                               \
  X(claims, "arenas claimed by threads (cumulative)")                           \
  X(parks, "arenas parked at thread exit (cumulative)")                         \
  X(pool_puts, "batches of other arenas' blocks that full thread caches gave the pool (cumulative)") \
  X(pool_takes, "batches that threads with an empty cache took from the pool (cumulative)") \
  X(cache_grows, "blocks by which threads' full cache lists grew within cache_grow (cumulative)") \
  X(cache_gc_blocks, "blocks thread caches sent home from lists no malloc had emptied for the decay delay (cumulative)") \
  X(remote_frees, "blocks freed by another thread than their arena's")          \
  X(remote_pending, "remote frees not yet taken by their arena")                \
  X(foreign_frees, "frees, reallocs and usable sizes of memory scralloc does not own (SCRALLOC_ON_ERROR)") \
  X(double_frees, "frees of blocks already free, and reallocs and usable sizes of them (SCRALLOC_ON_ERROR)") \
  X(interior_frees, "frees, reallocs and usable sizes of addresses inside a block, not its start (SCRALLOC_ON_ERROR)") \
  X(unallocated_frees, "frees, reallocs and usable sizes of slots or pages never handed out (SCRALLOC_ON_ERROR)") \
  X(realloc_moves, "reallocs that moved a block into the caller's arena")       \
  X(discards, "parked arenas whose free memory went back (after the decay delay, or by scr_trim)") \
  X(discard_bytes, "committed bytes returned by discards")                      \
  X(dontdump_segments, "segments advised MADV_DONTDUMP")                        \
  X(thp_mode, "transparent huge pages: 0 never/absent, 1 madvise, 2 always (the JSON has the name)") \
  X(parked_drains, "parked arenas a freeing thread freed a batch of blocks into")\
  X(forks, "forks survived")                                                   \
  X(trim_answers, "trims threads holding arenas made at their next call that reached their heap, asked by another thread's scr_trim or malloc_trim (cumulative)") \
  X(trim_answer_bytes, "bytes those trims gave back (cumulative)") \
  X(interior_bytes, "bytes given back inside pages that still hold live blocks (free slots, never carved tails), by trims and discards (cumulative)") \
  X(interior_lazy_bytes, "of those, bytes given back with MADV_FREE, which the kernel reclaims only under memory pressure (cumulative)") \
  X(huge_cache_puts, "freed huge blocks put in the process's cache for any thread (cumulative)") \
  X(huge_cache_hits, "huge blocks served from the process's cache, resized (cumulative)") \
  X(huge_cache_evicted, "bytes of cached huge blocks unmapped when the process grew while it cached them, or to stay within retain_max (cumulative)") \
  X(huge_cache_decayed, "bytes of cached huge blocks unmapped after the decay delay by the helper (cumulative)") \
  X(huge_cache_blocks, "huge blocks the process's cache holds") \
  X(huge_cache_bytes, "bytes of huge blocks the process's cache holds") \
  X(free_committed, "free bytes the arenas and the huge cache keep committed now, waiting for reuse or the decay: retained and dirty pages, cached large and huge blocks") \
  X(decay_delay_ms, "the decay delay now: decay_ms, doubled while refaults grow (up to decay_max_ms)") \
  X(decay_passes, "passes of the decay over every arena and the discards of waiting arenas: memory unused past its delay given back without a call from the program (cumulative)") \
  X(decay_bytes, "bytes the decay gave back: free pages and cached huge blocks unused past the delay (cumulative)") \
  X(decay_backoffs, "times refaults doubled the decay delay, which the discards wait too (cumulative)") \
  X(refault_bytes, "bytes the decay and the discards gave back that the program faulted in again within twice the delay: refaulted after return (cumulative)") \
  X(committed, "bytes the arenas and the huge cache hold committed now (heap_total's figure), current to the byte for every thread: kept where memory is committed or given back") \
  X(committed_peak, "the most committed has been since the process started") \
  X(rss_peak, "the kernel's peak resident set of the process (getrusage's ru_maxrss, VmHWM), in bytes") \
  X(lazy_free_pending, "bytes given back with MADV_FREE that the kernel has not reclaimed yet: its LazyFree for the process, read at most once a second, 0 while nothing went back that way")

struct scr_process_stats {
#define SCR_PSTATS_FIELD_(name, doc) uint64_t name;
  SCR_PROCESS_STATS_FIELDS(SCR_PSTATS_FIELD_)
#undef SCR_PSTATS_FIELD_
};
SCR_API void scr_process_stats(struct scr_process_stats *out); /* NULL: no-op */
/* Per-arena heap figures (arena i in creation order): SCR_OK, or SCR_EINVAL
 * when there is no arena i (*out zeroed) or out is NULL. */
SCR_API int scr_arena_stats(unsigned i, struct scr_stats *out);
/* {"heap": {scr_stats}, "process": {...}} as JSON; returns the length it
 * needs, like snprintf (NULL buf: the length only). */
SCR_API size_t scr_process_stats_json(char *buf, size_t len);
/* Process options at run time (name as in SCRALLOC_<NAME>, lower case):
 * SCR_OK, or SCR_EINVAL for a NULL argument, an unknown name, text that is
 * not a value or a value out of the option's range (nothing set; the
 * environment's SCRALLOC_<NAME> gets a warning naming the range).  Words:
 * on_error abort|warn|ignore, stats json, discard poison, on/off.  get
 * returns UINT64_MAX for an unknown or NULL name. */
SCR_API int scr_process_option_set(const char *name, const char *value);
SCR_API uint64_t scr_process_option_get(const char *name);
/* Runs the process allocator's validator (arena lists, counts, states):
 * SCR_OK or SCR_EINVAL, reported through the error handler. */
SCR_API int scr_process_validate(void);


/* ---- sampled allocation sites (docs/profile.md) -------------------- */

/* Sampling picks blocks so that each allocated byte has the same chance,
 * 1/rate, to be sampled (a countdown drawn from an exponential
 * distribution, as tcmalloc and jemalloc do); a sampled block keeps its
 * allocation site (its stack) until it is freed.  A heap samples at its
 * option profile_rate (0: off, the default), the process allocator at
 * SCRALLOC_PROFILE_RATE (scr_process_option_set("profile_rate", ...);
 * "on" is SCR_PROFILE_DEFAULT_RATE).  SCRALLOC_PROFILE=PATH writes, at
 * exit, the folded stacks to PATH, the pprof profile to PATH.pb.gz and
 * the blame to PATH.blame (and turns sampling on at the default rate
 * when SCRALLOC_PROFILE_RATE is not set). */
#define SCR_PROFILE_DEFAULT_RATE ((size_t)512 << 10)
#define SCR_PROFILE_MAX_FRAMES 48 /* native frames kept per sample */

/* One live sampled block, as scr_profile_samples shows it.  The
 * estimates are unbiased: a site's live bytes are the sum of its
 * samples' `bytes` (size / (1 - exp(-size / rate))). */
typedef struct scr_profile_sample {
  const void *block;         /* the block's address */
  size_t size;               /* bytes requested */
  size_t rate;               /* the sampling rate it was taken at */
  double bytes;              /* estimated live bytes it stands for */
  double blocks;             /* estimated live blocks it stands for */
  double pinned;             /* blame: its share of the free bytes of the partly used pages that
                                the sampled blocks keep committed, scaled so that the samples'
                                shares add up to all such bytes of the heap (docs/profile.md) */
  const scr_heap *heap;      /* its heap; NULL: the process allocator's (scr_malloc, malloc) */
  uint64_t site;             /* equal for samples of equal stacks (native and language frames) */
  unsigned depth;            /* native frames */
  const void *const *frames; /* their return addresses, innermost first */
  const char *lang;          /* the language hook's frames, innermost first, one a line as
                                "function\tfile\tline", or NULL */
} scr_profile_sample;

/* Calls fn for each live sampled block of heap h (NULL: of every heap
 * and of the process allocator) until fn returns nonzero; returns the
 * samples visited.
 * The samples are a snapshot: fn may allocate and free (they and their
 * frames stay valid until fn returns).  Thread-safe. */
typedef int scr_profile_visit(const scr_profile_sample *s, void *arg);
SCR_API size_t scr_profile_samples(const scr_heap *h, scr_profile_visit *fn, void *arg);
/* A heap's sampling rate at run time (0: off); NULL or destroyed: reported, no-op. */
SCR_API void scr_heap_profile_rate(scr_heap *h, size_t rate);

/* Frames of an interpreter (the Python binding's), taken at each sample
 * after the native ones: fn writes them into buf, innermost first, one a
 * line as "function\tfile\tline", and returns the bytes written (0:
 * none; at most len, not terminated).  Called in the allocating thread,
 * after the allocation, with no lock of the allocator held; blocks it
 * allocates are not sampled.  NULL: none. */
typedef size_t scr_profile_lang_hook(char *buf, size_t len, void *arg);
SCR_API void scr_profile_set_lang_hook(scr_profile_lang_hook *fn, void *arg);

/* The name of the code at return address pc, at most len bytes with the
 * terminating NUL: "function (file:line)" where debug information gives
 * them, "function", else "module+0xoffset"; returns the length it needs,
 * like snprintf. */
SCR_API size_t scr_profile_symbol(const void *pc, char *buf, size_t len);

/* Writes the live samples of heap h (NULL: every heap's and the process
 * allocator's) to
 * path in one format: SCR_PROFILE_FOLDED ("outer;...;inner bytes" lines,
 * flamegraph.pl's input, bytes the estimated live bytes),
 * SCR_PROFILE_PPROF (pprof's gzipped protobuf, sample types
 * inuse_objects/count and inuse_space/bytes), SCR_PROFILE_BLAME (folded,
 * the bytes pinned), SCR_PROFILE_TOP (a text table of the top sites).
 * Or SCR_PROFILE_NATIVE into the format: samples with language frames
 * show their native frames below them (else the language frames alone).
 * SCR_OK, SCR_EINVAL (bad format, NULL path), or -1 (the file could
 * not be written; errno says why). */
enum {
  SCR_PROFILE_FOLDED = 1,
  SCR_PROFILE_PPROF = 2,
  SCR_PROFILE_BLAME = 3,
  SCR_PROFILE_TOP = 4,
  SCR_PROFILE_NATIVE = 0x100,
};
SCR_API int scr_profile_write(const scr_heap *h, const char *path, unsigned format);

#ifdef __cplusplus
}
#endif
#endif /* SCRALLOC_H */
