/* A malloc tracer for LD_PRELOAD: records every malloc, calloc, realloc,
 * free and aligned allocation of a program (the thread, the pointers, the
 * size, the time) and passes each call on to the next allocator in the
 * link order (glibc, or a library preloaded after this one).
 *
 *     SCR_TRACE_OUT=py.trace LD_PRELOAD=build/release/bench/libmalloc_trace.so python3 bench/proc_py.py 4 3
 *
 * bench/malloc_replay.c plays a trace back under any allocator, in the
 * recorded order of the threads and at the recorded pace, so that two
 * allocators can be compared on the same interleaving of a threaded
 * program (a real run's max RSS moves with that interleaving).  The calls
 * are serialized by one lock while tracing; a "%p" in SCR_TRACE_OUT becomes
 * the process id (a program that starts others). */
#define _GNU_SOURCE
#include "malloc_trace.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BUF_RECORDS (1u << 15) /* flushed to the file when full */

static scr_trace_rec buf[BUF_RECORDS];
static unsigned nbuf;
static int out_fd = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int thread_index = -1;
static int threads;

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static void *(*next_calloc)(size_t, size_t);
static void *(*next_realloc)(void *, size_t);
static void *(*next_memalign)(size_t, size_t);

/* dlsym may allocate: those calls get memory from here, never freed. */
static _Alignas(16) char boot[1 << 14];
static size_t boot_used;
static int resolving;

static void *boot_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (boot_used + n > sizeof boot) return NULL;
  void *p = boot + boot_used;
  boot_used += n;
  return p;
}
static int is_boot(const void *p) { return (const char *)p >= boot && (const char *)p < boot + sizeof boot; }

static int resolve(void) {
  if (next_malloc) return 1;
  if (resolving) return 0;
  resolving = 1;
  next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  next_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  next_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  next_memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  resolving = 0;
  return next_malloc != NULL;
}

static void open_out(void) {
  const char *name = getenv("SCR_TRACE_OUT");
  char path[4096];
  if (name == NULL) name = "malloc-%p.trace";
  const char *pid = strstr(name, "%p");
  if (pid) snprintf(path, sizeof path, "%.*s%d%s", (int)(pid - name), name, (int)getpid(), pid + 2);
  else snprintf(path, sizeof path, "%s", name);
  out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

static void flush_locked(void) {
  if (out_fd < 0) open_out();
  size_t len = nbuf * sizeof buf[0];
  const char *p = (const char *)buf;
  while (out_fd >= 0 && len > 0) {
    ssize_t w = write(out_fd, p, len);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    p += w;
    len -= (size_t)w;
  }
  nbuf = 0;
}

static void record(uint8_t op, const void *in, const void *out, size_t size, size_t align) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  pthread_mutex_lock(&lock);
  if (thread_index < 0) thread_index = threads < 255 ? threads++ : 255;
  scr_trace_rec *r = &buf[nbuf++];
  r->op = op;
  r->thread = (uint8_t)thread_index;
  r->pad = 0;
  r->align = (uint32_t)align;
  r->in = (uintptr_t)in;
  r->out = (uintptr_t)out;
  r->size = size;
  r->ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  if (nbuf == BUF_RECORDS) flush_locked();
  pthread_mutex_unlock(&lock);
}

__attribute__((destructor)) static void trace_end(void) {
  pthread_mutex_lock(&lock);
  flush_locked();
  pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) void *malloc(size_t n) {
  if (!resolve()) return boot_alloc(n);
  void *q = next_malloc(n);
  if (q) record(SCR_TRACE_MALLOC, NULL, q, n, 0);
  return q;
}

__attribute__((visibility("default"))) void free(void *p) {
  if (p == NULL || is_boot(p) || !resolve()) return;
  record(SCR_TRACE_FREE, p, NULL, 0, 0);
  next_free(p);
}

__attribute__((visibility("default"))) void *calloc(size_t count, size_t size) {
  if (!resolve()) {
    if (size && count > (size_t)-1 / size) return NULL;
    return boot_alloc(count * size); /* static memory: already zero */
  }
  void *q = next_calloc(count, size);
  if (q) record(SCR_TRACE_CALLOC, NULL, q, count * size, 0);
  return q;
}

__attribute__((visibility("default"))) void *realloc(void *p, size_t n) {
  if (is_boot(p)) { /* moves out of the bootstrap area */
    size_t avail = (size_t)(boot + sizeof boot - (char *)p);
    void *q = malloc(n);
    if (q) memcpy(q, p, n < avail ? n : avail);
    return q;
  }
  if (!resolve()) return boot_alloc(n);
  void *q = next_realloc(p, n);
  if (q || n == 0) record(SCR_TRACE_REALLOC, p, q, n, 0);
  return q;
}

__attribute__((visibility("default"))) void *memalign(size_t align, size_t n) {
  if (!resolve()) return NULL;
  void *q = next_memalign(align, n);
  if (q) record(SCR_TRACE_ALIGNED, NULL, q, n, align);
  return q;
}

__attribute__((visibility("default"))) void *aligned_alloc(size_t align, size_t n) { return memalign(align, n); }

__attribute__((visibility("default"))) int posix_memalign(void **out, size_t align, size_t n) {
  void *q = memalign(align, n);
  if (q == NULL) return ENOMEM;
  *out = q;
  return 0;
}

__attribute__((visibility("default"))) void *valloc(size_t n) { return memalign((size_t)sysconf(_SC_PAGESIZE), n); }
