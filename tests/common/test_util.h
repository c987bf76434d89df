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
/* An integer in [lo, hi]; a float in [-1, 1); n such floats, malloc'ed
 * (the caller frees; a test failure when out of memory). */
int64_t ty_test_rng_range(ty_test_rng_t *rng, int64_t lo, int64_t hi);
float ty_test_rng_unit(ty_test_rng_t *rng);
float *ty_test_rng_floats(ty_test_rng_t *rng, int64_t n);

/* The in-tree plugins a registry should have loaded from the build tree:
 * the names in `csv` (TY_TEST_INTREE_PLUGINS, sorted), less the optional
 * ones (opencl and cuda: built where their headers are, rejected as
 * unavailable on a machine without their runtime) that `registry` did not
 * load. Writes
 * up to `max` names (each < 32 bytes) and returns how many there are. */
struct ty_registry_t;
size_t ty_test_intree_plugins(const char *csv, const struct ty_registry_t *registry,
                              char (*names)[32], size_t max);

/* A registry of the plugins in the one folder `plugin_dir` (a test's
 * TY_TEST_PLUGIN_DIR); a test failure when it cannot be made. */
struct ty_registry_t *ty_test_open_registry(const char *plugin_dir);

/* "no backend named '<name>' (loaded: cpu, dataflow, template)" for those
 * plugins, into `out`. */
void ty_test_loaded_message(const char *csv, const struct ty_registry_t *registry,
                            const char *name, char *out, size_t out_size);

#endif /* TY_TESTS_COMMON_TEST_UTIL_H_ */
