/* Helpers for the ops tests: a seeded random source whose seed is printed
 * (and can be forced with TY_TEST_SEED=<n> to replay a failure), random
 * non-zero fills, and a central finite-difference gradient checker in f64.
 *
 * Not thread-safe (one global random state per test binary); tests only.
 */
#ifndef TY_TESTS_OPS_TEST_UTIL_H_
#define TY_TESTS_OPS_TEST_UTIL_H_

#include <stdint.h>

/* Seeds the generator from TY_TEST_SEED or the clock and prints the seed
 * with the test binary's name. Call once at the start of main(). */
void ty_test_rng_init(const char *binary_name);

uint64_t ty_test_rng_u64(void);
/* Uniform in [lo, hi). */
double ty_test_rng_uniform(double lo, double hi);
/* Uniform integer in [0, n). */
int64_t ty_test_rng_below(int64_t n);
/* Fills x with values whose magnitude is in [0.1, 1] and sign random: never
 * zero, so no test passes on a degenerate input. */
void ty_test_fill(double *x, int64_t n);
/* Same with magnitudes in [lo, hi]. */
void ty_test_fill_range(double *x, int64_t n, double lo, double hi);

/* Computes out (out_n values) from the parameters' current contents. */
typedef void (*ty_gc_forward_fn)(void *ctx, double *out);

typedef struct ty_gc_param_t {
  const char *name;
  double *x;              /* perturbed in place, restored afterwards */
  int64_t n;
  const double *analytic; /* the backward kernel's gradient, n values */
} ty_gc_param_t;

/* For L(x) = <upstream, forward(x)>, compares every analytic dL/dx_i against
 * the central difference (L(x + h e_i) - L(x - h e_i)) / 2h with
 * h = 1e-6 * max(1, |x_i|). Returns the largest, over parameters, of
 * ||fd - analytic||_2 / max(||fd||_2, ||analytic||_2, floor), printing
 * each parameter's error under `label`. The floor is the finite-difference
 * rounding noise (eps * sum_k |u_k f_k| / h, summed in quadrature) divided by
 * TY_GC_TOLERANCE: a gradient that cancels to near zero is held to the
 * absolute accuracy differences can deliver rather than to a relative one
 * they cannot. An all-zero analytic gradient counts as
 * infinite error: no check may pass vacuously. */
double ty_gc_check(const char *label, ty_gc_forward_fn forward, void *ctx,
                   int64_t out_n, const double *upstream,
                   const ty_gc_param_t *params, int param_count);

/* The tolerance the ops gradient tests hold every kernel to. */
#define TY_GC_TOLERANCE 1e-6

/* Relative difference |a - b| / max(|a|, |b|), 0 when both are 0. */
double ty_test_rel_diff(double a, double b);

#endif /* TY_TESTS_OPS_TEST_UTIL_H_ */
