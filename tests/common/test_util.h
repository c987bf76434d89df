/* Helpers shared by the C tests: status assertions that also check the
 * message, and seeded random bytes (seed printed, reproducible with
 * TY_TEST_SEED=<seed>). Built on cmocka; include after its prerequisites. */
#ifndef TY_TESTS_COMMON_TEST_UTIL_H_
#define TY_TESTS_COMMON_TEST_UTIL_H_

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hal/status.h"

/* Fails the test unless `status` has `code` and (when `substring` is not
 * NULL) its message contains `substring`. Always frees the status. */
void ty_test_expect_status(ty_status_t status, ty_code_t code,
                           const char *substring, const char *expr,
                           const char *file, int line);
#define TY_EXPECT_STATUS(expr, code, substring) \
  ty_test_expect_status((expr), (code), (substring), #expr, __FILE__, __LINE__)
#define TY_EXPECT_OK(expr) TY_EXPECT_STATUS((expr), TY_CODE_OK, NULL)

/* Fails the test unless `haystack` contains `needle`. */
void ty_test_expect_contains(const char *haystack, const char *needle,
                             const char *file, int line);
#define TY_EXPECT_CONTAINS(haystack, needle) \
  ty_test_expect_contains((haystack), (needle), __FILE__, __LINE__)

/* The process-wide seed: TY_TEST_SEED if set, else drawn from the clock and
 * the pid. Printed on first use so a failure can be replayed. */
uint64_t ty_test_seed(void);

/* splitmix64: small, fast, good enough to fill test buffers. */
typedef struct ty_test_rng_t {
  uint64_t state;
} ty_test_rng_t;

void ty_test_rng_init(ty_test_rng_t *rng, uint64_t seed);
uint64_t ty_test_rng_next(ty_test_rng_t *rng);
/* Fills dst with random bytes; never leaves n > 0 bytes all zero. */
void ty_test_fill_random(ty_test_rng_t *rng, void *dst, size_t n);

#endif /* TY_TESTS_COMMON_TEST_UTIL_H_ */
