/* A minimal test harness for the C tests: CHECK records a failure and
 * goes on; TEST runs one function; check_done() prints the closing line
 * "N passed, N failed" and gives the exit status. */
#ifndef SCR_CHECK_H
#define SCR_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failures_in_test, check_passed, check_failed;

#define CHECK(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
      check_failures_in_test++;                                             \
    }                                                                       \
  } while (0)

#define CHECK_EQ(a, b)                                                      \
  do {                                                                      \
    unsigned long long check_a_ = (unsigned long long)(a), check_b_ = (unsigned long long)(b); \
    if (check_a_ != check_b_) {                                             \
      fprintf(stderr, "  FAIL %s:%d: %s == %s (%llu != %llu)\n", __FILE__, __LINE__, #a, #b, check_a_, check_b_); \
      check_failures_in_test++;                                             \
    }                                                                       \
  } while (0)

#define TEST(fn)                                                            \
  do {                                                                      \
    check_failures_in_test = 0;                                             \
    fn();                                                                   \
    if (check_failures_in_test) { check_failed++; fprintf(stderr, "not ok %s\n", #fn); } \
    else { check_passed++; printf("ok %s\n", #fn); }                        \
  } while (0)

#ifdef __unix__
#include <sys/wait.h>
#include <unistd.h>
/* Does reading p[i] in a child process end it with a failure?  (ASan
 * builds: a use after free of poisoned memory.)  The child's report goes
 * to /dev/null. */
static inline int check_read_kills_child(const volatile char *p, size_t i) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen("/dev/null", "w", stderr)) _exit(0);
    volatile char c = p[i];
    (void)c;
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return 0;
  return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
#endif

static inline int check_done(void) {
  printf("%d passed, %d failed\n", check_passed, check_failed);
  return check_failed ? 1 : 0;
}
#endif
