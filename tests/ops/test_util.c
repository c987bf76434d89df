/* Helpers for the ops tests (see test_util.h). */
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static uint64_t ty_test_rng_state;

void ty_test_rng_init(const char *binary_name) {
  const char *forced = getenv("TY_TEST_SEED");
  uint64_t seed;
  if (forced && *forced) {
    seed = strtoull(forced, NULL, 0);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
           ((uint64_t)getpid() << 32);
  }
  ty_test_rng_state = seed;
  print_message("%s: random seed %llu (replay with TY_TEST_SEED=%llu)\n",
                binary_name, (unsigned long long)seed,
                (unsigned long long)seed);
}

/* splitmix64: tiny, full-period, good enough for test data. */
uint64_t ty_test_rng_u64(void) {
  uint64_t z = (ty_test_rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double ty_test_rng_uniform(double lo, double hi) {
  double u = (double)(ty_test_rng_u64() >> 11) * 0x1p-53;
  return lo + (hi - lo) * u;
}

int64_t ty_test_rng_below(int64_t n) {
  return (int64_t)(ty_test_rng_u64() % (uint64_t)n);
}

void ty_test_fill_range(double *x, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; ++i) {
    double mag = ty_test_rng_uniform(lo, hi);
    x[i] = (ty_test_rng_u64() & 1) ? mag : -mag;
  }
}

void ty_test_fill(double *x, int64_t n) { ty_test_fill_range(x, n, 0.1, 1.0); }

double ty_test_rel_diff(double a, double b) {
  double m = fmax(fabs(a), fabs(b));
  return m == 0.0 ? 0.0 : fabs(a - b) / m;
}

static double ty_gc_loss(ty_gc_forward_fn forward, void *ctx, int64_t out_n,
                         const double *upstream, double *scratch) {
  forward(ctx, scratch);
  double acc = 0.0;
  for (int64_t i = 0; i < out_n; ++i) acc += upstream[i] * scratch[i];
  return acc;
}

double ty_gc_check(const char *label, ty_gc_forward_fn forward, void *ctx,
                   int64_t out_n, const double *upstream,
                   const ty_gc_param_t *params, int param_count) {
  double *scratch = malloc((size_t)(out_n > 0 ? out_n : 1) * sizeof(double));
  assert_non_null(scratch);
  /* Rounding noise of one evaluation of L is about eps * sum |u_k f_k|; a
   * central difference divides it by the step. */
  forward(ctx, scratch);
  double loss_abs = 0.0;
  for (int64_t k = 0; k < out_n; ++k) loss_abs += fabs(upstream[k] * scratch[k]);
  double worst = 0.0;
  char line[512];
  int used = snprintf(line, sizeof(line), "gradcheck %-28s", label);
  for (int p = 0; p < param_count; ++p) {
    const ty_gc_param_t *prm = &params[p];
    double diff2 = 0.0, fd2 = 0.0, an2 = 0.0, noise2 = 0.0;
    for (int64_t i = 0; i < prm->n; ++i) {
      const double saved = prm->x[i];
      const double h = 1e-6 * fmax(1.0, fabs(saved));
      prm->x[i] = saved + h;
      const double step_up = prm->x[i] - saved; /* the step actually taken */
      const double up = ty_gc_loss(forward, ctx, out_n, upstream, scratch);
      prm->x[i] = saved - h;
      const double step_down = saved - prm->x[i];
      const double down = ty_gc_loss(forward, ctx, out_n, upstream, scratch);
      prm->x[i] = saved;
      const double fd = (up - down) / (step_up + step_down);
      const double an = prm->analytic[i];
      const double noise = DBL_EPSILON * loss_abs / h;
      diff2 += (fd - an) * (fd - an);
      fd2 += fd * fd;
      an2 += an * an;
      noise2 += noise * noise;
    }
    /* Relative error, except that a gradient which cancels down towards the
     * finite-difference noise is compared against that noise instead (the
     * floor is noise / tolerance), so a rare cancellation cannot make the
     * check flaky while any real formula error, O(|gradient|), still fails.
     * An all-zero analytic gradient would let a broken pair pass vacuously;
     * every check here is built so the gradient is non-zero. */
    const double noise_floor = sqrt(noise2) / TY_GC_TOLERANCE;
    const double denom = fmax(sqrt(fmax(fd2, an2)), noise_floor);
    const double err = an2 == 0.0 ? INFINITY : sqrt(diff2) / denom;
    if (err > worst || err != err) worst = err != err ? INFINITY : err;
    if (used > 0 && (size_t)used < sizeof(line)) {
      used += snprintf(line + used, sizeof(line) - (size_t)used, " %s %.1e",
                       prm->name, err);
    }
  }
  free(scratch);
  print_message("%s%s\n", line, worst <= TY_GC_TOLERANCE ? "" : "  FAIL");
  return worst;
}
