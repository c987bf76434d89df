/* Finite-difference checks of the gradient RULES (ops/op_*.c), one test per
 * differentiable op of the registry, entirely in f64 on the reference
 * kernels (no plugin). For every conformance case of the op that has a
 * backward direction: L = sum_j <w_j, y_j> over the outputs that carry a
 * gradient, with random w_j; autodiff (the op's rule, its *_backward
 * companions) gives dL/dx for every float input, evaluated with the host
 * executor over the lowered graph; central differences of L give the same
 * numerically. They must agree per element to
 *
 *   |g_ad - g_fd| <= 1e-6 * max(|g_ad|, |g_fd|, floor)
 *
 * with floor = K * eps * S / (h * 1e-6): S = sum |w_j * y_j| bounds the size
 * of the terms of L, so K * eps * S bounds the rounding noise of one
 * evaluation of L (K = 64 covers the reference kernels' f64 reductions) and
 * K * eps * S / h that of the difference quotient. Gradients below the floor
 * are thus held to the FD noise level in absolute terms instead of to a
 * relative error the differences cannot resolve. S sums the outputs the
 * step moved, and is at least the largest |w_j y_j|: an effect below an
 * output's rounding (an attention_merge part whose weight is e^-30) moves
 * it by an ulp or not at all. Steps are
 * h = 1e-6 * max(1, |x|) (truncation error ~h^2 |L'''| is far below).
 *
 * Where the forward itself cancels (gelu's 1 + tanh(z) for x << 0) L's
 * rounding exceeds that model; an element that fails it gets its noise
 * measured as 4 |fd(h) - fd(2h)| (the two quotients differ by rounding only)
 * and is held to that instead; the count of such elements is printed. A
 * wrong rule errs by far more than either noise estimate.
 *
 * Every element of an input is checked when time allows: each case gets
 * about TY_FD_CASE_SECONDS of forward runs (timed on this machine), between
 * TY_FD_MIN_ELEMENTS and TY_FD_MAX_ELEMENTS elements per input, drawn at
 * random (seeded) when fewer than all, the first always included; the seed is printed (TY_TEST_SEED
 * replays). A canary perturbs one gradient by 1e-5 relative and expects the
 * check to catch it, so the check is known to be able to fail. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/test_util.h"

#include "graph/conform/conform.h"
#include "hal/dtype.h"

#define TY_FD_TOLERANCE 1e-6
#define TY_FD_NOISE_K 16.0
#define TY_FD_MAX_ELEMENTS 1024
#define TY_FD_MIN_ELEMENTS 48
#define TY_FD_CASE_SECONDS 0.3

typedef struct {
  double worst;          /* worst error ratio (error / allowed * 1e-6) */
  int64_t checked, floored, noisy;
  char where[96];
} ty_fd_stats_t;

/* The differentiable outputs y_j of one forward run, concatenated in the
 * order of inst->seeds (the weights w_j). */
typedef struct {
  int64_t count;
  double *y, *w;
} ty_fd_outputs_t;

static void fd_outputs_init(ty_fd_outputs_t *o, const ty_conform_instance_t *inst) {
  o->count = 0;
  for (uint32_t d = 0; d < inst->diff_count; ++d) o->count += inst->seeds[d].count;
  o->y = calloc((size_t)(o->count ? o->count : 1), sizeof(double));
  o->w = calloc((size_t)(o->count ? o->count : 1), sizeof(double));
  assert_true(o->y && o->w);
  for (uint32_t d = 0, at = 0; d < inst->diff_count; ++d) {
    memcpy(o->w + at, inst->seeds[d].values, (size_t)inst->seeds[d].count * sizeof(double));
    at += (uint32_t)inst->seeds[d].count;
  }
}

static void fd_outputs_free(ty_fd_outputs_t *o) {
  free(o->y);
  free(o->w);
}

static void fd_run(ty_conform_host_t *fwd, const ty_conform_instance_t *inst,
                   ty_fd_outputs_t *o) {
  TY_EXPECT_OK(ty_conform_host_run(fwd));
  for (uint32_t d = 0, at = 0; d < inst->diff_count; ++d) {
    char name[16];
    snprintf(name, sizeof(name), "y%u", inst->diff_outputs[d]);
    TY_EXPECT_OK(ty_conform_host_get(fwd, name, o->y + at, inst->seeds[d].count));
    at += (uint32_t)inst->seeds[d].count;
  }
}

/* L(x+h) - L(x-h) = sum_j w_j (y+_j - y-_j), summed term by term (Neumaier)
 * so outputs x_e does not touch cancel exactly; *out_s is the size of the
 * terms that moved, sum |w_j| max(|y+_j|, |y-_j|), which bounds the noise. */
static double fd_difference(const ty_fd_outputs_t *yp, const ty_fd_outputs_t *ym,
                            double *out_s) {
  double sum = 0.0, comp = 0.0, mag = 0.0, largest = 0.0;
  for (int64_t j = 0; j < yp->count; ++j) {
    largest = fmax(largest, fabs(yp->w[j]) * fmax(fabs(yp->y[j]), fabs(ym->y[j])));
    if (yp->y[j] == ym->y[j]) continue;
    double term = yp->w[j] * (yp->y[j] - ym->y[j]);
    double t = sum + term;
    comp += fabs(sum) >= fabs(term) ? (sum - t) + term : (term - t) + sum;
    sum = t;
    mag += fabs(yp->w[j]) * fmax(fabs(yp->y[j]), fabs(ym->y[j]));
  }
  /* An effect below an output's rounding moves it by one ulp or not at all:
   * the quotient resolves nothing finer than the largest output's ulp. */
  *out_s = fmax(mag, largest);
  return sum + comp;
}

static uint64_t fd_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* (L(x + h e_k) - L(x - h e_k)) / 2h for element k of input x; *out_s is the
 * size of the terms that moved. */
static double fd_quotient(ty_conform_host_t *fwd, ty_conform_instance_t *inst,
                          ty_conform_value_t *x, int64_t k, double h, ty_fd_outputs_t *yp,
                          ty_fd_outputs_t *ym, double *out_s) {
  double x0 = x->values[k], xp = x0 + h, xm = x0 - h;
  x->values[k] = xp;
  TY_EXPECT_OK(ty_conform_host_set(fwd, x->name, x->values, x->count));
  fd_run(fwd, inst, yp);
  x->values[k] = xm;
  TY_EXPECT_OK(ty_conform_host_set(fwd, x->name, x->values, x->count));
  fd_run(fwd, inst, ym);
  x->values[k] = x0;
  TY_EXPECT_OK(ty_conform_host_set(fwd, x->name, x->values, x->count));
  return fd_difference(yp, ym, out_s) / (xp - xm);
}

/* Checks `picks` elements of one input's gradient; `canary` scales its
 * largest element by 1 + 1e-5 first. */
static void fd_check_input(ty_conform_host_t *fwd, ty_conform_instance_t *inst, uint32_t i,
                           double *grad, int64_t picks, uint64_t *rng, bool canary,
                           ty_fd_stats_t *st) {
  ty_conform_value_t *x = &inst->inputs[i];
  int64_t n = x->count;
  if (picks > n) picks = n;
  ty_fd_outputs_t yp, ym;
  fd_outputs_init(&yp, inst);
  fd_outputs_init(&ym, inst);
  if (canary) { /* the largest gradient element, so no floor can hide it */
    int64_t big = 0;
    for (int64_t e = 1; e < n; ++e) big = fabs(grad[e]) > fabs(grad[big]) ? e : big;
    grad[big] *= 1.0 + 1e-5;
  }
  for (int64_t p = 0; p < picks; ++p) {
    int64_t e = picks == n || p == 0 ? p : (int64_t)(fd_next(rng) % (uint64_t)n);
    double h = 1e-6 * fmax(1.0, fabs(x->values[e])), s, s2;
    double fd = fd_quotient(fwd, inst, x, e, h, &yp, &ym, &s);
    double floor_g = TY_FD_NOISE_K * DBL_EPSILON * s / (h * TY_FD_TOLERANCE);
    double err = fabs(grad[e] - fd), big = fmax(fabs(grad[e]), fabs(fd));
    if (err > TY_FD_TOLERANCE * fmax(big, floor_g)) {
      /* Where the forward itself cancels (gelu's 1 + tanh far left), L's
       * rounding exceeds the model above. Measure it: the quotients at h
       * and 2h differ by rounding only (their truncation errors, ~h^2, are
       * far smaller), so 4x their gap is a safe bound on the noise. */
      double noise = fabs(fd - fd_quotient(fwd, inst, x, e, 2 * h, &yp, &ym, &s2));
      if (4.0 * noise > TY_FD_TOLERANCE * floor_g) {
        floor_g = 4.0 * noise / TY_FD_TOLERANCE;
        st->noisy++;
      }
    }
    double ratio = err / (TY_FD_TOLERANCE * fmax(fmax(big, floor_g), DBL_MIN));
    st->checked++;
    st->floored += big < floor_g;
    if (ratio > st->worst) {
      st->worst = ratio;
      snprintf(st->where, sizeof(st->where), "%s[%lld]: autodiff %.12g, fd %.12g", x->name,
               (long long)e, grad[e], fd);
    }
  }
  fd_outputs_free(&yp);
  fd_outputs_free(&ym);
}

/* Whether every float input and output is f64: a rounding cast is
 * piecewise constant, so finite differences cannot see its gradient. */
static bool fd_all_f64(const ty_conform_instance_t *inst, const ty_conform_host_t *fwd) {
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    const ty_conform_value_t *x = &inst->inputs[i];
    if (x->present && ty_dtype_is_float(x->dtype) && x->dtype != TY_DTYPE_F64) return false;
  }
  for (uint32_t d = 0; d < inst->diff_count; ++d) {
    char name[16];
    int64_t count;
    ty_dtype_t dtype;
    snprintf(name, sizeof(name), "y%u", inst->diff_outputs[d]);
    TY_EXPECT_OK(ty_conform_host_desc(fwd, name, &count, &dtype));
    if (dtype != TY_DTYPE_F64) return false;
  }
  return true;
}

/* Returns the worst error ratio over the case (<= 1 passes), or -1 when the
 * case cannot be differentiated numerically. */
static double fd_check_case(const ty_conform_case_t *c, bool canary, double *out_rel) {
  ty_conform_instance_t inst;
  uint64_t seed = ty_conform_case_seed(ty_test_seed(), c, TY_DTYPE_F64, TY_CONFORM_BACKWARD);
  TY_EXPECT_OK(ty_conform_instance_init(c, TY_DTYPE_F64, seed, &inst));
  assert_true(inst.has_backward);
  ty_graph_t *gf, *gb;
  ty_conform_host_t *fwd, *bwd;
  TY_EXPECT_OK(ty_conform_instance_graph(&inst, TY_CONFORM_FORWARD, false, &gf));
  TY_EXPECT_OK(ty_conform_instance_graph(&inst, TY_CONFORM_BACKWARD, false, &gb));
  TY_EXPECT_OK(ty_conform_host_create(gf, &fwd));
  TY_EXPECT_OK(ty_conform_host_create(gb, &bwd));
  TY_EXPECT_OK(ty_conform_host_bind(fwd, &inst));
  TY_EXPECT_OK(ty_conform_host_bind(bwd, &inst));
  if (!fd_all_f64(&inst, fwd)) {
    printf("fd %-20s %-18s skipped: a value is not f64 (a rounding cast has no "
           "numerical derivative)\n",
           c->op, c->name);
    ty_conform_host_destroy(fwd);
    ty_conform_host_destroy(bwd);
    ty_graph_destroy(gf);
    ty_graph_destroy(gb);
    ty_conform_instance_deinit(&inst);
    return -1.0;
  }
  TY_EXPECT_OK(ty_conform_host_run(bwd));
  ty_fd_stats_t st = {0};
  double worst_rel = 0.0;
  struct timespec t0, t1;
  /* Budget: about TY_FD_CASE_SECONDS of forward runs per case, at least
   * TY_FD_MIN_ELEMENTS elements per input, all of them when they fit. */
  ty_fd_outputs_t probe;
  fd_outputs_init(&probe, &inst);
  fd_run(fwd, &inst, &probe);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  fd_run(fwd, &inst, &probe);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  fd_outputs_free(&probe);
  double run_s = fmax(1e-7, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  uint32_t float_inputs = 0;
  for (uint32_t i = 0; i < inst.input_count; ++i) {
    float_inputs += inst.inputs[i].present && ty_dtype_is_float(inst.inputs[i].dtype);
  }
  double fit = TY_FD_CASE_SECONDS / (2.0 * run_s * (float_inputs ? float_inputs : 1));
  int64_t picks = fit > TY_FD_MAX_ELEMENTS ? TY_FD_MAX_ELEMENTS
                  : fit < TY_FD_MIN_ELEMENTS ? TY_FD_MIN_ELEMENTS : (int64_t)fit;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t rng = seed;
  for (uint32_t i = 0; i < inst.input_count; ++i) {
    ty_conform_value_t *x = &inst.inputs[i];
    if (!x->present || !ty_dtype_is_float(x->dtype)) continue;
    char name[16];
    snprintf(name, sizeof(name), "dx%u", i);
    double *grad = malloc((size_t)(x->count ? x->count : 1) * sizeof(double));
    assert_non_null(grad);
    TY_EXPECT_OK(ty_conform_host_get(bwd, name, grad, x->count));
    ty_fd_stats_t one = {0};
    fd_check_input(fwd, &inst, i, grad, canary ? x->count : picks, &rng, canary, &one);
    if (one.worst > st.worst) {
      st.worst = one.worst;
      snprintf(st.where, sizeof(st.where), "%s", one.where);
    }
    st.checked += one.checked;
    st.floored += one.floored;
    st.noisy += one.noisy;
    worst_rel = fmax(worst_rel, one.worst * TY_FD_TOLERANCE);
    free(grad);
    if (canary) break;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (!canary) {
    printf("fd %-20s %-18s checked %5lld (%lld below the noise floor, %lld of them "
           "measured) in %.2f s, worst error %.2e of allowed 1e-6 at %s\n",
           c->op, c->name, (long long)st.checked, (long long)st.floored, (long long)st.noisy,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
           worst_rel, st.where);
  }
  ty_conform_host_destroy(fwd);
  ty_conform_host_destroy(bwd);
  ty_graph_destroy(gf);
  ty_graph_destroy(gb);
  ty_conform_instance_deinit(&inst);
  if (out_rel) *out_rel = worst_rel;
  return st.worst;
}

static void test_op(void **state) {
  const char *op = *state;
  uint32_t cases = 0;
  double worst = 0.0;
  for (uint32_t k = 0; k < ty_conform_case_count(); ++k) {
    const ty_conform_case_t *c = ty_conform_case_at(k);
    if (strcmp(c->op, op) != 0 || !ty_conform_case_has_direction(c, TY_DTYPE_F32,
                                                                 TY_CONFORM_BACKWARD)) {
      continue;
    }
    /* tp_reduce's max has a zero gradient by definition, not its derivative
     * (a constant shift, docs/ops.md "Collectives"); the conformance cases
     * check that zero on every backend. */
    if (!strcmp(op, "tp_reduce") && strstr(c->attrs, "max")) {
      printf("fd %-20s %-18s skipped: its gradient is zero by definition\n", op, c->name);
      continue;
    }
    double rel;
    double ratio = fd_check_case(c, false, &rel);
    if (ratio < 0) continue;
    worst = fmax(worst, rel);
    if (ratio > 1.0) fail_msg("%s/%s: finite differences disagree with autodiff", op, c->name);
    cases++;
  }
  if (cases == 0) {
    fail_msg("op %s has a gradient rule but no conform case with a backward in f64", op);
  }
  printf("fd %-20s worst relative error %.2e over %u case(s)\n", op, worst, cases);
}

/* The check must be able to fail: a gradient off by 1e-5 relative in one
 * element is caught. */
static void test_canary(void **state) {
  (void)state;
  for (uint32_t k = 0; k < ty_conform_case_count(); ++k) {
    const ty_conform_case_t *c = ty_conform_case_at(k);
    if (strcmp(c->op, "matmul") == 0) {
      assert_true(fd_check_case(c, true, NULL) > 1.0);
      return;
    }
  }
  fail_msg("no matmul case");
}

int main(void) {
  struct CMUnitTest tests[64];
  size_t n = 0;
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_canary);
  for (uint32_t i = 0; i < ty_op_count() && n < 64; ++i) {
    const ty_op_def_t *def = ty_op_at(i);
    if (!def->grad) continue;
    tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(test_op, (void *)def->name);
    tests[n].name = def->name;
    n++;
  }
  return _cmocka_run_group_tests("grad_fd_test", tests, n, NULL, NULL);
}
