/* The checks of the programs in tests/preload/ that run with
 * LD_PRELOAD=libscralloc.so and link nothing but libc (tests/c/check.h
 * is the C tests' harness, which they do not share: it counts per test
 * function).  CHECK counts; preload_check_done prints "N passed, N
 * failed" and gives the exit status. */
#ifndef SCR_PRELOAD_CHECK_H
#define SCR_PRELOAD_CHECK_H
#include <stdio.h>

static int passed, failed;
#define CHECK(c)                                                           \
  do {                                                                     \
    if (c) passed++;                                                       \
    else {                                                                 \
      failed++;                                                            \
      fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);         \
    }                                                                      \
  } while (0)

static inline int preload_check_done(void) {
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
#endif
