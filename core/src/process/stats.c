/* Process-wide statistics: the heap figures summed over every arena (in
 * the shape of memoryUsage(): heap_total is what the arenas hold, after
 * what discards returned; heap_used what live blocks take), the process
 * layer's own counters, and the SCRALLOC_STATS=1 report at exit.
 * Layer: observers: reads every layer (arena snapshots under their
 * snap_lock, the counters, the pool's and the huge-block cache's
 * figures); owns nothing, and nothing below calls it. */
#include "observers.h"
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void proc_stats_add(struct scr_stats *sum, const struct scr_stats *st) {
#define SCR_PSUM_(name, doc) sum->name += st->name;
  SCR_STATS_FIELDS(SCR_PSUM_)
#undef SCR_PSUM_
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) {
    sum->classes[c].live += st->classes[c].live;
    sum->classes[c].pages += st->classes[c].pages;
    sum->classes[c].retained += st->classes[c].retained;
  }
}

/* The caller's own arena first gets a fresh snapshot. */
static void proc_refresh_own(void) {
  scr_arena *me = _scr_tl.arena;
  if (me) {
    _scr_remote_poll(me);
    _scr_holder_publish(me);
  }
}

void scr_stats(struct scr_stats *out) {
  if (out == NULL) return;
  memset(out, 0, sizeof *out);
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) out->classes[c].block_size = scr_class_size(c);
  _scr_proc_init();
  proc_refresh_own();
  struct scr_stats lent;
  memset(&lent, 0, sizeof lent);
  uint64_t large = 0;
  for (scr_arena *a = atomic_load_explicit(&_scr_proc.all, memory_order_acquire); a; a = a->next_all) {
    large += _scr_heap_large_bytes(a->heap);
    pthread_mutex_lock(&a->snap_lock);
    proc_stats_add(out, &a->snap);
    proc_stats_add(&lent, &a->snap_lent);
    pthread_mutex_unlock(&a->snap_lock);
  }
  _scr_pool_account(&lent);
  /* The live large and huge blocks as they are now, not as last published
   * (a thread that makes few calls publishes rarely): the difference goes
   * into the figures that count them, which then still add up. */
  if (large >> 62) large = 0; /* a free counted before its malloc, for a moment */
  int64_t d = (int64_t)(large - out->large_bytes);
  if (d < 0 && (uint64_t)-d > out->heap_used) d = -(int64_t)out->heap_used;
  out->large_bytes += (uint64_t)d;
  out->heap_used += (uint64_t)d;
  out->heap_total += (uint64_t)d;
  out->bytes += (uint64_t)d;
  /* the process's cached huge blocks belong to no arena (huge_cache.c) */
  uint64_t hc_blocks, hc_bytes_, hc_munmaps, hc_failures;
  _scr_huge_cache_counts(&hc_blocks, &hc_bytes_, &hc_munmaps, &hc_failures);
  out->mmaps += hc_blocks;
  out->bytes += hc_bytes_;
  out->heap_total += hc_bytes_;
  out->reserved_bytes += hc_bytes_;
  out->cached_blocks += hc_blocks;
  out->cached_bytes += hc_bytes_;
  out->munmap_calls += hc_munmaps;
  out->os_failures += hc_failures;
  /* Blocks a thread keeps for reuse and pooled blocks are live in their
   * owner's heap: off the sum.  (Snapshots of different times: never
   * below zero.) */
#define SCR_TAKE_OFF_(x, y) ((x) = (x) > (y) ? (x) - (y) : 0)
  SCR_TAKE_OFF_(out->allocs, lent.allocs);
  SCR_TAKE_OFF_(out->heap_used, lent.heap_used);
  for (unsigned c = 0; c < SCR_CLASS_COUNT; c++) SCR_TAKE_OFF_(out->classes[c].live, lent.classes[c].live);
#undef SCR_TAKE_OFF_
}

int scr_arena_stats(unsigned i, struct scr_stats *out) {
  if (out == NULL) return SCR_EINVAL;
  _scr_proc_init();
  proc_refresh_own();
  for (scr_arena *a = atomic_load_explicit(&_scr_proc.all, memory_order_acquire); a; a = a->next_all) {
    if (a->id != i) continue;
    pthread_mutex_lock(&a->snap_lock);
    *out = a->snap;
    pthread_mutex_unlock(&a->snap_lock);
    return SCR_OK;
  }
  memset(out, 0, sizeof *out);
  return SCR_EINVAL;
}

/* The kernel's LazyFree for the process (/proc/self/smaps_rollup), the
 * bytes advised MADV_FREE that it has not reclaimed: only the kernel
 * knows when it takes a page, and a read walks the page tables
 * (milliseconds for a large process), so at most once a second, and never while no byte
 * went back that way (lazy_advised: the arenas' lazy_free_bytes; the
 * default madv_free_below of 0 never does). */
static uint64_t proc_lazy_free_pending(uint64_t lazy_advised) {
  static _Atomic uint64_t read_at_ms, value;
  if (lazy_advised == 0) return 0;
  uint64_t now = _scr_os_now_ms(), at = atomic_load_explicit(&read_at_ms, memory_order_relaxed);
  if (at != 0 && now - at < 1000) return atomic_load_explicit(&value, memory_order_relaxed);
  atomic_store_explicit(&read_at_ms, now, memory_order_relaxed);
  char buf[2048];
  if (_scr_proc_read_file("/proc/self/smaps_rollup", buf, sizeof buf) < 0) return 0;
  const char *line = strstr(buf, "LazyFree:");
  uint64_t kib = line ? strtoull(line + 9, NULL, 10) : 0;
  atomic_store_explicit(&value, kib << 10, memory_order_relaxed);
  return kib << 10;
}

void scr_process_stats(struct scr_process_stats *o) {
  if (o == NULL) return;
  scr_proc *P = &_scr_proc;
  memset(o, 0, sizeof *o);
  _scr_proc_init();
  proc_refresh_own();
  pthread_mutex_lock(&P->lock);
  o->arenas = P->narenas;
  o->arenas_owned = P->nowned;
  o->arenas_parked = P->nparked;
  o->thp_mode = (uint64_t)P->thp_mode;
  pthread_mutex_unlock(&P->lock);
  uint64_t sent = 0, drained = 0, lazy = 0;
  for (scr_arena *a = atomic_load_explicit(&P->all, memory_order_acquire); a; a = a->next_all) {
    pthread_mutex_lock(&a->snap_lock);
    sent += atomic_load_explicit(&a->remote_pushed, memory_order_relaxed) +
            atomic_load_explicit(&a->ring_tail, memory_order_relaxed);
    drained += atomic_load_explicit(&a->remote_drained, memory_order_relaxed);
    o->free_committed += a->snap.retained_bytes + a->snap.dirty_bytes + a->snap.cached_bytes;
    o->refault_bytes += a->snap.refault_bytes;
    lazy += a->snap.lazy_free_bytes;
    pthread_mutex_unlock(&a->snap_lock);
  }
  o->lazy_free_pending = proc_lazy_free_pending(lazy);
  o->remote_frees = sent;
  o->remote_pending = sent > drained ? sent - drained : 0;
#define SCR_PLOAD_(name) o->name = atomic_load_explicit(&_scr_pc.name, memory_order_relaxed);
  SCR_PROC_COUNTERS(SCR_PLOAD_)
#undef SCR_PLOAD_
  o->decay_passes += o->discards; /* a discard is a pass over a parked arena */
  uint64_t munmaps, failures;
  _scr_huge_cache_counts(&o->huge_cache_blocks, &o->huge_cache_bytes, &munmaps, &failures);
  o->free_committed += o->huge_cache_bytes;
  o->decay_delay_ms = _scr_decay_delay_ms();
  o->refault_bytes += _scr_huge_cache_refaults();
  o->committed = atomic_load_explicit(&_scr_owned_bytes, memory_order_relaxed);
  o->committed_peak = atomic_load_explicit(&_scr_owned_peak, memory_order_relaxed);
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0) o->rss_peak = (uint64_t)ru.ru_maxrss << 10;
}


static const char *proc_thp_name(uint64_t mode) {
  static const char *const names[] = {"never", "madvise", "always"};
  return names[mode < 3 ? mode : 0];
}

/* A field of the JSON: a number, but the THP mode by its name. */
static void proc_json_field(_scr_out *o, const char *sep, const char *name, uint64_t v) {
  if (strcmp(name, "thp_mode") == 0) _scr_out_put(o, "%s\"%s\":\"%s\"", sep, name, proc_thp_name(v));
  else _scr_out_put(o, "%s\"%s\":%llu", sep, name, (unsigned long long)v);
}

size_t scr_process_stats_json(char *buf, size_t len) {
  if (buf == NULL) len = 0; /* the length it needs */
  struct scr_stats st;
  struct scr_process_stats ps;
  scr_stats(&st);
  scr_process_stats(&ps);
  _scr_out o = {buf, len, 0};
  if (len) buf[0] = '\0';
  _scr_out_put(&o, "{\"heap\":");
  size_t room = o.pos < len ? len - o.pos : 0;
  o.pos += scr_stats_json(&st, room ? buf + o.pos : NULL, room);
  _scr_out_put(&o, ",\"process\":{");
  const char *sep = "";
#define SCR_PJSON_(name, doc) proc_json_field(&o, sep, #name, ps.name), sep = ",";
  SCR_PROCESS_STATS_FIELDS(SCR_PJSON_)
#undef SCR_PJSON_
  _scr_out_put(&o, "}}");
  return o.pos;
}

/* ---- SCRALLOC_STATS=1: a report on stderr at exit ---- */

/* The report's lines: each "scralloc[PID]: " and one group of figures,
 * under 100 characters, written as it is made. */
typedef struct proc_report {
  int fd, pid;
} proc_report;

static void proc_line(const proc_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void proc_line(const proc_report *r, const char *fmt, ...) {
  char line[256];
  int n = snprintf(line, sizeof line, "scralloc[%d]: ", r->pid);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m > 0 ? (size_t)m : 0);
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  ssize_t w = write(r->fd, line, len);
  (void)w;
}

static double proc_mib(uint64_t b) { return (double)b / (1024.0 * 1024.0); }
#define U(x) (unsigned long long)(x)

/* The process's resident set now (/proc/self/statm), 0 when unknown. */
static uint64_t proc_rss_now(void) {
  char buf[128];
  if (_scr_proc_read_file("/proc/self/statm", buf, sizeof buf) < 0) return 0;
  const char *sp = strchr(buf, ' ');
  return sp ? strtoull(sp + 1, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Memory: committed and resident, now and at their peak, then what the
 * committed bytes hold (a table whose rows add up to heap_total). */
static void proc_report_memory(const proc_report *r, const struct scr_stats *st, const struct scr_process_stats *ps) {
  uint64_t large = st->cached_bytes > ps->huge_cache_bytes ? st->cached_bytes - ps->huge_cache_bytes : 0;
  uint64_t parts = st->heap_used + st->retained_bytes + st->dirty_bytes + st->cached_bytes;
  uint64_t busy_free = st->heap_total > parts ? st->heap_total - parts : 0;
  proc_line(r, "memory (MiB)             now      peak");
  proc_line(r, "  committed         %9.2f %9.2f   held from the OS for blocks", proc_mib(ps->committed),
            proc_mib(ps->committed_peak));
  uint64_t rss = proc_rss_now(); /* the kernel updates its peak lazily: never below now */
  proc_line(r, "  resident (RSS)    %9.2f %9.2f   the kernel's, whole process", proc_mib(rss),
            proc_mib(rss > ps->rss_peak ? rss : ps->rss_peak));
  proc_line(r, "heap_total by use (MiB; other threads' arenas as last published)");
  proc_line(r, "  in live blocks    %9.2f   heap_used: %llu blocks, %llu large", proc_mib(st->heap_used),
            U(st->allocs), U(st->large_allocs));
  proc_line(r, "  free in busy pages%9.2f   free slots of pages that hold live blocks", proc_mib(busy_free));
  proc_line(r, "  empty pages kept  %9.2f   retained for their size class", proc_mib(st->retained_bytes));
  proc_line(r, "  freed, waiting    %9.2f   to go back after the decay delay", proc_mib(st->dirty_bytes));
  proc_line(r, "  cached large      %9.2f   freed large blocks an arena keeps", proc_mib(large));
  proc_line(r, "  cached huge       %9.2f   the huge cache, for any thread", proc_mib(ps->huge_cache_bytes));
  proc_line(r, "  heap_total        %9.2f   in %llu mappings; %.2f MiB of address space", proc_mib(st->heap_total),
            U(st->mmaps), proc_mib(st->reserved_bytes));
}

/* The decay (what went back after the delay, what came back too soon),
 * and the huge cache. */
static void proc_report_decay(const proc_report *r, const struct scr_process_stats *ps) {
  proc_line(r, "decay: free memory unused %llu ms goes back (backed off %llu times)", U(ps->decay_delay_ms),
            U(ps->decay_backoffs));
  proc_line(r, "  given back by the decay %.2f MiB; refaulted after return %.2f MiB",
            proc_mib(ps->decay_bytes), proc_mib(ps->refault_bytes));
  if (_scr_proc.opt.retain_max)
    proc_line(r, "  hard cap on free memory kept (retain_max): %.2f MiB", proc_mib(_scr_proc.opt.retain_max));
  proc_line(r, "huge cache %.2f MiB in %llu blocks: %llu put, %llu reused", proc_mib(ps->huge_cache_bytes),
            U(ps->huge_cache_blocks), U(ps->huge_cache_puts), U(ps->huge_cache_hits));
  proc_line(r, "  unmapped %.2f MiB as the process grew, %.2f MiB after the decay",
            proc_mib(ps->huge_cache_evicted), proc_mib(ps->huge_cache_decayed));
}

/* The system calls, and the memory that went back and how. */
static void proc_report_returns(const proc_report *r, const struct scr_stats *st, const struct scr_process_stats *ps) {
  proc_line(r, "syscalls: %llu mmap, %llu munmap, %llu madvise, %llu mremap, %llu failed", U(st->mmap_calls),
            U(st->munmap_calls), U(st->madvise_calls), U(st->mremap_calls), U(st->os_failures));
  proc_line(r, "madvise: %llu gave memory back, %llu only marked memory (MADV_DONTDUMP, NOHUGEPAGE)",
            U(st->madvise_calls - st->madvise_hints), U(st->madvise_hints));
  proc_line(r, "given back: %.2f MiB with MADV_DONTNEED, %.2f MiB with MADV_FREE",
            proc_mib(st->dontneed_bytes), proc_mib(st->lazy_free_bytes));
  proc_line(r, "  of MADV_FREE, not yet reclaimed by the kernel: %.2f MiB", proc_mib(ps->lazy_free_pending));
  proc_line(r, "  inside pages in use: %.2f MiB (%.2f MiB of it with MADV_FREE)", proc_mib(ps->interior_bytes),
            proc_mib(ps->interior_lazy_bytes));
  proc_line(r, "  unasked: %llu decay passes, %llu discards of waiting arenas (%.2f MiB)",
            U(ps->decay_passes), U(ps->discards), proc_mib(ps->discard_bytes));
  proc_line(r, "  by trims another thread asked for: %llu (%.2f MiB)", U(ps->trim_answers),
            proc_mib(ps->trim_answer_bytes));
}

/* Threads and their arenas, and the bad pointers. */
static void proc_report_threads(const proc_report *r, const struct scr_process_stats *ps) {
  static const char *const on_error[] = {"abort", "warn", "ignore"};
  uint64_t mode = _scr_proc.opt.on_error;
  proc_line(r, "%llu arenas (%llu held by threads, %llu waiting for a thread), %llu claims, %llu parks",
            U(ps->arenas), U(ps->arenas_owned), U(ps->arenas_parked), U(ps->claims), U(ps->parks));
  proc_line(r, "remote frees: %llu (%llu not yet taken back by their arena); %llu realloc moves",
            U(ps->remote_frees), U(ps->remote_pending), U(ps->realloc_moves));
  proc_line(r, "thread caches: %llu pool batches given (%llu taken), %llu grows, %llu unused sent home",
            U(ps->pool_puts), U(ps->pool_takes), U(ps->cache_grows), U(ps->cache_gc_blocks));
  proc_line(r, "bad pointers: %llu double frees, %llu interior, %llu never allocated, %llu foreign",
            U(ps->double_frees), U(ps->interior_frees), U(ps->unallocated_frees), U(ps->foreign_frees));
  proc_line(r, "  SCRALLOC_ON_ERROR=%s", on_error[mode < 3 ? mode : 0]);
  proc_line(r, "THP %s; segments left out of core dumps: %llu", proc_thp_name(ps->thp_mode),
            U(ps->dontdump_segments));
}

/* A row for each arena (malloc_stats, SCRALLOC_STATS=2). */
static void proc_report_arenas(const proc_report *r, unsigned n) {
  proc_line(r, "arena   total MiB    used MiB   blocks  mappings  kept pages  waiting MiB");
  for (unsigned i = 0; i < n; i++) {
    struct scr_stats as;
    if (scr_arena_stats(i, &as) != SCR_OK) continue;
    proc_line(r, "%5u %11.2f %11.2f %8llu %9llu %11llu %12.2f", i, proc_mib(as.heap_total),
              proc_mib(as.heap_used), U(as.allocs), U(as.mmaps),
              U(as.retained_pages), proc_mib(as.dirty_bytes));
  }
}

/* The report, on fd; per_arena: a row for each arena too.  The exit
 * report's (SCRALLOC_STATS) and malloc_stats()'s (override.c).  Every
 * figure is named by what it counts (docs/process.md, "The exit report",
 * has a line on each).  A topic is a function of a few lines. */
void _scr_proc_report(int fd, bool per_arena) {
  struct scr_stats st;
  struct scr_process_stats ps;
  scr_stats(&st);
  scr_process_stats(&ps);
  proc_report r = {fd, (int)getpid()};
  proc_report_memory(&r, &st, &ps);
  proc_report_decay(&r, &ps);
  proc_report_returns(&r, &st, &ps);
  proc_report_threads(&r, &ps);
  if (per_arena) proc_report_arenas(&r, (unsigned)ps.arenas);
  _scr_profile_report_top(fd, r.pid, 10); /* when sampling kept sites (docs/profile.md) */
}

/* SCRALLOC_STATS_FD, when it names a descriptor open for writing; else
 * stderr, said once. */
static int proc_report_fd(void) {
  int fd = (int)_scr_proc.opt.stats_fd;
  int fl = fcntl(fd, F_GETFL);
  if (fl != -1 && (fl & O_ACCMODE) != O_RDONLY) return fd;
  char msg[160];
  int n = snprintf(msg, sizeof msg,
                   "scralloc: SCRALLOC_STATS_FD=%d is not a descriptor open for writing: the report goes to stderr\n", fd);
  if (n > 0) {
    ssize_t w = write(STDERR_FILENO, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    (void)w;
  }
  return STDERR_FILENO;
}

/* SCRALLOC_STATS=json: scr_process_stats_json's object on one line. */
static void proc_report_json(int fd) {
  static char buf[32 << 10]; /* the object is about 6 KiB */
  size_t n = scr_process_stats_json(buf, sizeof buf - 1);
  if (n >= sizeof buf - 1) return; /* cannot happen: the fields are fixed */
  buf[n] = '\n';
  for (size_t off = 0; off <= n;) {
    ssize_t w = write(fd, buf + off, n + 1 - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
}

__attribute__((destructor)) static void proc_stats_at_exit(void) {
  _scr_profile_at_exit(); /* SCRALLOC_PROFILE=PATH's files */
  if (!atomic_load_explicit(&_scr_proc.inited, memory_order_acquire) || _scr_proc.opt.stats == 0) return;
  int fd = proc_report_fd();
  if (_scr_proc.opt.stats == SCR_STATS_JSON) proc_report_json(fd);
  else _scr_proc_report(fd, _scr_proc.opt.stats >= 2);
}
