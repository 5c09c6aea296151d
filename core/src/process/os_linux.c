/* The OS calls of the process layer that the core's prim/ does not have:
 * the transparent-huge-page mode, whether the kernel would write a core,
 * a monotonic clock.  All without malloc.  Every Linux-only path has a
 * fallback that does nothing.
 * Layer: base (the bottom: every other file of the process layer calls
 * the OS through here or through core/src/prim/).  Owns nothing. */
#include "process.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

ssize_t _scr_proc_read_file(const char *path, char *buf, size_t len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, len - 1);
  close(fd);
  if (n < 0) return -1;
  buf[n] = '\0';
  return n;
}

/* 0: never or no THP; 1: madvise; 2: always.  The selected mode is the
 * word in brackets: "always [madvise] never". */
int _scr_proc_thp_mode(void) {
#ifdef __linux__
  char buf[128];
  if (_scr_proc_read_file("/sys/kernel/mm/transparent_hugepage/enabled", buf, sizeof buf) <= 0) return 0;
  if (strstr(buf, "[always]")) return 2;
  if (strstr(buf, "[madvise]")) return 1;
#endif
  return 0;
}

/* Would the kernel write a core of this process?  A piped or @ pattern
 * writes one whatever RLIMIT_CORE says; otherwise RLIMIT_CORE must be > 0. */
int _scr_proc_core_dumps(void) {
#ifdef __linux__
  char buf[16];
  if (_scr_proc_read_file("/proc/sys/kernel/core_pattern", buf, sizeof buf) > 0 && (buf[0] == '|' || buf[0] == '@'))
    return 1;
#endif
  struct rlimit rl;
  if (getrlimit(RLIMIT_CORE, &rl) != 0) return 1;
  return rl.rlim_cur > 0;
}

uint64_t _scr_proc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Memory for the process layer's own descriptors: zeroed, never returned. */
void *_scr_proc_map(size_t size) {
  return _scr_os_map_aligned(size, _scr_os_page_size(), NULL);
}

/* Poison mode: make a discarded range inaccessible, or usable again. */
int _scr_proc_protect(void *p, size_t size, int accessible) {
  return mprotect(p, size, accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0 ? 0 : -1;
}
