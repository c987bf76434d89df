/* The cases of cpu_kernels_test.c: one-node graphs for every op of op set
 * v1, each an op, its inputs (kind of random data, dtype, shape), attributes
 * and outputs. Tests only; not thread-safe. */
#ifndef TY_TESTS_BACKENDS_CPU_KERNELS_CASES_H_
#define TY_TESTS_BACKENDS_CPU_KERNELS_CASES_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/backend_abi.h"
#include "ops/attrs.h"

enum {
  K_FLOAT,     /* uniform in [a, b) */
  K_NONZERO,   /* random sign, magnitude in [a, b) */
  K_IDS,       /* integers in [0, a) */
  K_TARGETS,   /* integers in [-1, a), about 1 in 8 of them -1 */
  K_SCALAR,    /* the value a */
  K_RNG,       /* i64 [2]: random seed, random step */
  K_ABSENT,    /* an absent optional input */
  K_LIST,      /* the values of `list`, one per element (block tables, slots) */
  K_VALUES,    /* the values of `values`, one per element (params rows) */
  K_PERM,      /* each row (last dim, n long) a random permutation of (j - n/2) * a,
                  j = 0..n-1: distinct, well-separated logits */
};

typedef struct {
  int kind;
  ty_dtype_t dtype; /* TY_DTYPE_INVALID: the run's float dtype */
  uint32_t rank;
  int64_t dims[6];
  double a, b;
  bool state; /* a STATE value (for in-place updates) */
  const int64_t *list; /* K_LIST: as many values as the input has elements */
  const double *values; /* K_VALUES: as many values as the input has elements */
} tin_t;

#define MAX_IN 12
#define MAX_OUT 4

typedef struct {
  const char *op;
  char label[64];
  uint32_t n_in, n_out;
  tin_t in[MAX_IN];
  ty_attrs_t attrs;
  int update[MAX_OUT]; /* per output: the state input it replaces, or -1 */
  bool exact;          /* outputs must match bit for bit */
  bool fixed;          /* dtypes as written: no f32/bf16/f16 sweep */
  const char *refused_on; /* the device-name prefix of a backend that refuses the
                             feature by name (docs/ops.md): not run against such a
                             TY_TEST_KERNELS_DEVICE */
  int runs;
} tcase_t;

/* Every case, built on first use (cmocka's assertions guard the builder). */
const tcase_t *cpu_test_cases(int *out_count);

#endif /* TY_TESTS_BACKENDS_CPU_KERNELS_CASES_H_ */
