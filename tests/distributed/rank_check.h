/* The fail-fast check of the multi-process tests in tests/distributed (run under
 * mpirun, no cmocka across ranks): CHECK(cond, fmt, ...) prints the rank,
 * file, line and message, then exits 1 (mpirun then stops the others).
 * Each test sets g_rank once it knows its rank. */
#ifndef TY_TESTS_DIST_RANK_CHECK_H_
#define TY_TESTS_DIST_RANK_CHECK_H_

#include <stdio.h>
#include <stdlib.h>

static int g_rank;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank %d: FAILED %s:%d: ", g_rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#endif /* TY_TESTS_DIST_RANK_CHECK_H_ */
