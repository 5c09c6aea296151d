/* Runs one program and reports what it alone cost: bench/proc_bench.py
 * starts every measured program through it.
 *
 *     proc_launch PROGRAM [ARGS...]
 *
 * It forks, execs PROGRAM with the environment it was given, where
 * PROC_LAUNCH_PRELOAD, when set, becomes the program's LD_PRELOAD (the
 * launcher itself runs on glibc's malloc under every allocator), waits
 * for it with wait4 and then prints one line on stdout, after whatever
 * the program printed:
 *
 *     proc_launch wall_ns=... maxrss_kib=... minflt=... utime_us=... stime_us=... status=...
 *
 * and exits 0 (status is the program's wait status).
 *
 * Why: a process keeps the resident pages of the process it was forked
 * from until it execs, and Linux counts them in its ru_maxrss (exec
 * folds the old image's high-water mark in).  Forked straight from the
 * Python driver, a program that peaks below the driver's own RSS (the
 * threaded stress, 11-13 MiB) reported the driver's figure under every
 * allocator.  Forked from this small launcher, it reports its own peak
 * (plus this launcher's few hundred KiB).  The wall is timed here too,
 * from just before the fork to the end of the wait, which leaves the
 * driver's fork out of it. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long tv_us(struct timeval t) { return (long long)t.tv_sec * 1000000LL + t.tv_usec; }

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: proc_launch PROGRAM [ARGS...]\n");
    return 2;
  }
  fflush(stdout);
  long long t0 = now_ns();
  pid_t pid = fork();
  if (pid < 0) {
    perror("proc_launch: fork");
    return 2;
  }
  if (pid == 0) {
    const char *preload = getenv("PROC_LAUNCH_PRELOAD");
    if (preload != NULL) {
      if (setenv("LD_PRELOAD", preload, 1) != 0) _exit(127);
      unsetenv("PROC_LAUNCH_PRELOAD");
    }
    execv(argv[1], argv + 1);
    perror("proc_launch: exec");
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid) {
    perror("proc_launch: wait4");
    return 2;
  }
  long long wall = now_ns() - t0;
  printf("proc_launch wall_ns=%lld maxrss_kib=%ld minflt=%ld utime_us=%lld stime_us=%lld status=%d\n", wall,
         ru.ru_maxrss, ru.ru_minflt, tv_us(ru.ru_utime), tv_us(ru.ru_stime), status);
  return 0;
}
