/* Thread and process exits under LD_PRELOAD=libscralloc.so, from a
 * program that links nothing but libc:
 *   - a thread's pthread key destructors malloc and free after scralloc
 *     may have parked the thread's arena (destructors run in no set
 *     order): the blocks are sound and the arenas do not pile up;
 *   - a process exits (exit, with the exit report on, or _exit) while
 *     its threads malloc and free: it ends with status 0, no crash and
 *     no hang.
 * Prints "N passed, N failed"; exits 0 when all hold. */
#define _GNU_SOURCE
#include "preload_check.h"
#include "scralloc.h" /* the structs only: the functions are looked up in the preloaded library */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


/* ---- mallocs in a thread's key destructors ---- */

static pthread_key_t key;
static _Atomic int bad_late; /* written by exiting threads, two at a time; read after their joins */

static void late_destructor(void *v) {
  for (int i = 0; i < 100; i++) {
    size_t n = 100 + (size_t)i * 150;
    unsigned char *p = malloc(n);
    if (p == NULL) {
      bad_late = 1;
      continue;
    }
    memset(p, i, n);
    if (p[0] != (unsigned char)i || p[n - 1] != (unsigned char)i) bad_late = 1;
    free(p);
  }
  free(v);
}

static void *key_thread(void *arg) {
  (void)arg;
  void *keep[32];
  for (int i = 0; i < 32; i++) keep[i] = malloc(64 + (size_t)i * 100);
  for (int i = 0; i < 32; i++) free(keep[i]);
  pthread_setspecific(key, malloc(40));
  return NULL;
}

static void destructors_allocate(void) {
  CHECK(pthread_key_create(&key, late_destructor) == 0);
  for (int r = 0; r < 300; r++) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK(pthread_create(&t[i], NULL, key_thread, NULL) == 0);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  }
  CHECK(!bad_late);
  /* 600 threads, two at a time: a handful of arenas, reused */
  struct scr_process_stats ps;
  void (*pstats)(struct scr_process_stats *) =
      (void (*)(struct scr_process_stats *))dlsym(RTLD_DEFAULT, "scr_process_stats");
  CHECK(pstats != NULL);
  if (pstats) {
    pstats(&ps);
    CHECK(ps.arenas >= 1 && ps.arenas <= 8);
    CHECK(ps.parks >= 300); /* at least one park a round: the threads' own arenas or the shared one they left */
  }
}

/* ---- exits while threads allocate ---- */

static void *allocate_forever(void *arg) {
  unsigned s = (unsigned)(uintptr_t)arg;
  void *keep[64] = {0};
  for (;;) {
    s = s * 1103515245u + 12345u;
    unsigned k = (s >> 8) % 64;
    free(keep[k]);
    size_t n = 16 + (s >> 12) % 70000;
    keep[k] = malloc(n);
    if (keep[k]) memset(keep[k], 1, n < 64 ? n : 64);
  }
  return NULL;
}

static int exit_while_allocating(int threads, int wait_us, int how) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30); /* a hang ends the child with SIGALRM */
    for (int i = 0; i < threads; i++) {
      pthread_t t;
      if (pthread_create(&t, NULL, allocate_forever, (void *)(uintptr_t)(i + 1)) != 0) _exit(3);
    }
    usleep((useconds_t)wait_us);
    if (how == 0) exit(0); /* atexit handlers, scralloc's exit report among them */
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fprintf(stderr, "  exit with %d threads after %d us (%s): status %d\n", threads, wait_us,
            how == 0 ? "exit" : "_exit", status);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void exits(void) {
  /* the exit report on, to a file nobody reads: it walks the arenas
   * while their threads still run */
  int (*set)(const char *, const char *) =
      (int (*)(const char *, const char *))dlsym(RTLD_DEFAULT, "scr_process_option_set");
  CHECK(set != NULL);
  int fd = open("/dev/null", O_WRONLY);
  if (set && fd >= 0) {
    char fdtext[16];
    snprintf(fdtext, sizeof fdtext, "%d", fd);
    CHECK(set("stats", "2") == 0 && set("stats_fd", fdtext) == 0);
  }
  int ok = 0, runs = 0;
  for (int i = 0; i < 60; i++, runs++) ok += exit_while_allocating(1 + i % 6, (i * 997) % 20000, i % 2);
  CHECK(ok == runs);
  if (set) set("stats", "0");
}

int main(void) {
  destructors_allocate();
  exits();
  return preload_check_done();
}
