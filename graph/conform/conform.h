/* The conformance kit: for every op of the set, small cases with random
 * inputs are run on a backend through a session and on the reference
 * kernels in f64 (the oracle), and compared by normalized mean squared error
 * against per-op, per-dtype bounds. `trainyard conform` drives it; the
 * finite-difference gradient tests reuse its cases and host executor.
 *
 * A case is one op with input shapes, attributes and input generators
 * (conform_cases.c). Instantiated for a dtype and a seed it yields rounded
 * input values and two graphs: the backend's (storage dtypes) and the
 * oracle's (every float value promoted to f64, except inputs the op's
 * schema pins to f32). Direction `forward` reads the op's outputs; direction
 * `backward` appends autodiff with a random upstream-gradient seed and reads
 * the input gradients.
 *
 * Nothing here prints; everything that can fail returns a status. The case
 * table is static and thread-safe to read; instances and hosts are not. */
#ifndef TY_GRAPH_CONFORM_H_
#define TY_GRAPH_CONFORM_H_

#include <stdbool.h>
#include <stdint.h>

#include "graph/ir/graph.h"
#include "hal/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_CONFORM_MAX_INPUTS 12
#define TY_CONFORM_MAX_OUTPUTS 8
#define TY_CONFORM_NAME_MAX 16

typedef enum ty_conform_direction_e {
  TY_CONFORM_FORWARD = 0,
  TY_CONFORM_BACKWARD = 1,
} ty_conform_direction_t;

typedef enum ty_conform_status_e {
  TY_CONFORM_PASS = 0,
  TY_CONFORM_FAIL = 1,        /* wrong result, NaN, guard hit, backend error */
  TY_CONFORM_UNSUPPORTED = 2, /* the backend's graph_supports said no */
  TY_CONFORM_XFAIL = 3,       /* failed, and the expected-failure list says so */
  TY_CONFORM_XPASS = 4,       /* listed as expected to fail but passed: a failure */
} ty_conform_status_t;

/* "forward"/"backward"; "pass", "fail", "unsupported", "xfail", "xpass". */
const char *ty_conform_direction_name(ty_conform_direction_t direction);
const char *ty_conform_status_name(ty_conform_status_t status);

/* An NMSE bound class: the largest normalized mean squared error accepted
 * per storage dtype, and why that much. Integer and f64 cases use `f32`. */
typedef struct ty_conform_bound_t {
  const char *name;
  double f32, bf16, f16;
  const char *why;
} ty_conform_bound_t;

double ty_conform_bound_value(const ty_conform_bound_t *bound, ty_dtype_t dtype);
uint32_t ty_conform_bound_count(void);
const ty_conform_bound_t *ty_conform_bound_at(uint32_t index);

/* One case of the table. Input specs are whitespace-separated tokens
 * `T[d0,d1,...][:generator]` or `-` (an absent optional input), where T is
 * `F` (the case's dtype), `S` (the statistics dtype: f32, f64 for f64),
 * `P` (pinned f32: optimizer state, hyperparameters; never promoted) or a
 * dtype name. Generators (floats default to uniform [-1, 1), ints to
 * [-50, 50]): `u=a,b` uniform in [a, b) (ints: [a, b]); `away` |x| in
 * [0.5, 1.5) with a random sign; `ids=V` ids in [0, V) with a repeat;
 * `tgt=V` targets in [0, V) with some ignored (-1, -100); `seq=a` a, a+1,
 * ...; `val=x` every element x; `rng` a dropout (seed, step) pair;
 * `list=a,b,...` the elements spelled out (block tables, slots, positions,
 * params rows); `perm=s` each row of the last dimension (n long) a random
 * permutation of (j - n/2) * s, j = 0..n-1 (distinct, well-separated
 * logits, exact in bf16 and f16 for a power-of-two s and n <= 256).
 * `derive` ("op i,j | o>k ...") replaces input k by output o of `op` (with
 * the case's attributes) applied to inputs i, j, ... in f64, for backward
 * ops that consume a forward op's saved outputs. `updates` ("o>k ...")
 * makes input k a STATE that output o updates in place. */
typedef struct ty_conform_case_t {
  const char *op;
  const char *name; /* unique within the op */
  const char *inputs;
  const char *attrs; /* "name=value ...", as in tests/ops */
  const char *derive;
  const char *updates;
  uint32_t dtypes; /* TY_DTYPE_BIT() of each dtype the case runs in */
  const ty_conform_bound_t *bound;
  /* NULL when the case has no backward direction (ops without a gradient,
   * integer cases). */
  const ty_conform_bound_t *bwd_bound;
} ty_conform_case_t;

uint32_t ty_conform_case_count(void);
const ty_conform_case_t *ty_conform_case_at(uint32_t index);

/* One input (or gradient seed) of an instance. */
typedef struct ty_conform_value_t {
  char name[TY_CONFORM_NAME_MAX]; /* "x<i>" for inputs, "dy<j>" for seeds */
  bool present;                    /* false for an absent optional input */
  bool state;                      /* updated in place (STATE value) */
  char kind;                       /* 'F', 'S', 'P' or 0 for a named dtype */
  ty_dtype_t dtype;                /* in the backend's graph */
  ty_dtype_t oracle_dtype;         /* in the oracle's graph */
  uint32_t rank;
  int64_t dims[TY_TENSOR_MAX_RANK];
  int64_t count;
  double *values; /* `count` values, already rounded to `dtype` */
} ty_conform_value_t;

/* A case instantiated for one dtype and seed. */
typedef struct ty_conform_instance_t {
  const ty_conform_case_t *test_case;
  ty_dtype_t dtype;
  uint64_t seed;
  ty_attrs_t attrs;
  uint32_t input_count;
  ty_conform_value_t inputs[TY_CONFORM_MAX_INPUTS];
  uint32_t output_count;                     /* outputs of the op */
  uint32_t update_of[TY_CONFORM_MAX_OUTPUTS]; /* input updated, or UINT32_MAX */
  /* Outputs that carry a gradient (float, not saved-for-backward), with a
   * random upstream-gradient seed each; empty when the op has no gradient. */
  uint32_t diff_count;
  uint32_t diff_outputs[TY_CONFORM_MAX_OUTPUTS];
  ty_conform_value_t seeds[TY_CONFORM_MAX_OUTPUTS];
  bool has_backward;
} ty_conform_instance_t;

/* Parses the case, draws its inputs (seeded), rounds them to `dtype`'s
 * storage, applies `derive`, and finds the differentiable outputs. `dtype`
 * may be any dtype of the case's mask, or f64 (the finite-difference
 * checks). INVALID_ARGUMENT naming the case for a malformed spec. Call
 * ty_conform_instance_deinit even on error. */
ty_status_t ty_conform_instance_init(const ty_conform_case_t *test_case,
                                    ty_dtype_t dtype, uint64_t seed,
                                    ty_conform_instance_t *out);
void ty_conform_instance_deinit(ty_conform_instance_t *instance);

/* Builds the graph of one direction: inputs x<i> (and seeds dy<j> when
 * backward), outputs y<j> (forward; in-place cases update their states
 * instead) or dx<i> (backward: the gradient of every float input). With
 * `oracle`, float values are promoted to f64 (pinned ones stay f32). The
 * caller owns the graph. */
ty_status_t ty_conform_instance_graph(const ty_conform_instance_t *instance,
                                      ty_conform_direction_t direction,
                                      bool oracle, ty_graph_t **out_graph);

/* Names of the values a direction compares, in order: y<j> / x<k> (states
 * after an in-place update) or dx<i>. Returns how many (at most
 * TY_CONFORM_MAX_INPUTS + TY_CONFORM_MAX_OUTPUTS). */
uint32_t ty_conform_instance_results(const ty_conform_instance_t *instance,
                                     ty_conform_direction_t direction,
                                     char names[][TY_CONFORM_NAME_MAX]);

/* ---- the whole-graph tier (conform_whole.c), for devices that run whole
 * train steps and inference graphs only ----
 *
 * The case's op wrapped in a one-node graph such a device accepts: forward,
 * an inference graph whose operands are resident parameters; backward, a
 * train step (the differentiated operands are parameters, dx<i> their
 * gradients, and an SGD update with lr 0.5 writes them back); optimizer
 * updates and clipping take their gradient operands from a forward product
 * whose gradient is exactly the case's values. Same inputs and seeds as the
 * per-op tier; the results are the per-op tier's, plus the updated
 * parameters x<i> and the forward outputs y<j> in the backward direction. */
ty_status_t ty_conform_instance_graph_whole(const ty_conform_instance_t *instance,
                                            ty_conform_direction_t direction, bool oracle,
                                            ty_graph_t **out_graph);
uint32_t ty_conform_instance_results_whole(const ty_conform_instance_t *instance,
                                           ty_conform_direction_t direction,
                                           char names[][TY_CONFORM_NAME_MAX]);

/* ---- the host executor: a lowered graph run node by node with the
 * reference kernels on host memory (ty_ref_execute_node), never through a
 * plugin. Values cross as f64 arrays, converted to and from each value's
 * dtype. ---- */
typedef struct ty_conform_host_t ty_conform_host_t;

ty_status_t ty_conform_host_create(const ty_graph_t *graph, ty_conform_host_t **out);
void ty_conform_host_destroy(ty_conform_host_t *host);
/* NOT_FOUND for an unknown input or state name; INVALID_ARGUMENT for a
 * count that is not the value's element count. */
ty_status_t ty_conform_host_set(ty_conform_host_t *host, const char *name,
                                const double *values, int64_t count);
/* Sets every present input of `instance`, and its seeds when the graph has
 * them. */
ty_status_t ty_conform_host_bind(ty_conform_host_t *host,
                                 const ty_conform_instance_t *instance);
/* Runs every node, then applies state updates. */
ty_status_t ty_conform_host_run(ty_conform_host_t *host);
/* Element count and dtype of a named value (NOT_FOUND otherwise). */
ty_status_t ty_conform_host_desc(const ty_conform_host_t *host, const char *name,
                                 int64_t *out_count, ty_dtype_t *out_dtype);
ty_status_t ty_conform_host_get(const ty_conform_host_t *host, const char *name,
                                double *out_values, int64_t count);

/* ---- expected failures ---- */

/* One entry: `pattern` is an fnmatch glob matched against the op name and
 * against "op/case"; dtype and direction are names or "*". */
typedef struct ty_conform_xfail_t {
  char pattern[64];
  char dtype[8];
  char direction[12];
  char reason[200];
} ty_conform_xfail_t;

/* The built-in list for a backend name (may be empty). Static storage. */
void ty_conform_builtin_xfails(const char *backend, const ty_conform_xfail_t **out_list,
                               uint32_t *out_count);
/* Parses a list file: one entry a line, "PATTERN DTYPE DIRECTION REASON...",
 * '#' comments and blank lines ignored. INVALID_ARGUMENT naming the line.
 * The caller frees *out_list. */
ty_status_t ty_conform_xfails_parse(const char *text, ty_conform_xfail_t **out_list,
                                    uint32_t *out_count);
/* The first entry matching, or NULL. */
const ty_conform_xfail_t *ty_conform_xfail_find(const ty_conform_xfail_t *list,
                                                uint32_t count, const char *op,
                                                const char *case_name, ty_dtype_t dtype,
                                                ty_conform_direction_t direction);

/* ---- running a case on a device ---- */

/* Which graphs a run builds: the op alone (per-op), or the op wrapped in a
 * one-node train step or inference graph (whole-graph). */
typedef enum ty_conform_tier_e {
  TY_CONFORM_TIER_OP = 0,
  TY_CONFORM_TIER_GRAPH = 1,
} ty_conform_tier_t;

/* "per-op", "whole-graph" */
const char *ty_conform_tier_name(ty_conform_tier_t tier);

typedef struct ty_conform_options_t {
  uint64_t seed;        /* the run's seed; each case derives its own */
  ty_conform_tier_t tier;
  uint64_t guard_bytes; /* guard regions around every tensor (0: 256) */
  const ty_conform_xfail_t *xfails;
  uint32_t xfail_count;
} ty_conform_options_t;

typedef struct ty_conform_result_t {
  const ty_conform_case_t *test_case;
  ty_conform_tier_t tier;
  ty_dtype_t dtype;
  ty_conform_direction_t direction;
  ty_conform_status_t status;
  /* For the value with the highest nmse/bound ratio: its NMSE (NAN when
   * nothing was compared), the bound it was held to, and the NMSE of the
   * reference kernels running the backend's graph in the same storage
   * dtypes. The bound is the case's class bound, raised to 10x that
   * reference NMSE where rounding in the storage dtype alone exceeds it
   * (an ill-conditioned output, e.g. a gradient summed from rounded
   * products that cancel): a backend need not beat the reference computing
   * in its own dtypes, but may not be much worse. */
  double nmse;
  double bound;
  double ref_nmse;
  char worst[TY_CONFORM_NAME_MAX]; /* the value with the worst NMSE */
  /* In that value: the largest |backend - oracle| (INFINITY at a NaN or
   * Inf, NAN when nothing was compared), its flat row-major index (-1 when
   * none), and the two values there. */
  double max_abs;
  int64_t max_abs_index;
  double max_abs_got, max_abs_want;
  /* The op's operand shapes, "[8,32] [32,16] -> [8,16]" ("-" for an absent
   * optional input); the attributes are the case's (test_case->attrs). */
  char shapes[192];
  uint64_t seed;                   /* the case's own seed */
  char reason[512];                /* why fail / unsupported / xfail */
} ty_conform_result_t;

/* The seed of one case of a run: a hash of the run's seed, op, case, dtype
 * and direction, so filtering with --ops never changes a case's inputs. */
uint64_t ty_conform_case_seed(uint64_t run_seed, const ty_conform_case_t *test_case,
                              ty_dtype_t dtype, ty_conform_direction_t direction);

/* Whether the case has that direction in that dtype. */
bool ty_conform_case_has_direction(const ty_conform_case_t *test_case, ty_dtype_t dtype,
                                   ty_conform_direction_t direction);

/* Runs one case on `device` and on the oracle and fills *out. Backend
 * errors (unsupported graphs, compile or run errors, results out of bounds,
 * NaN, guard hits) are results, not errors; the returned status reports
 * only a failure of the kit itself (out of memory, an oracle error). */
ty_status_t ty_conform_run_case(ty_device_t *device, const ty_conform_case_t *test_case,
                                ty_dtype_t dtype, ty_conform_direction_t direction,
                                const ty_conform_options_t *options,
                                ty_conform_result_t *out);

/* Dense storage of `count` values of `dtype` from f64 (rounding to nearest
 * even for floats; ints are converted exactly within their range), and the
 * reverse: storage bytes widened to f64. Thread-safe. */
void ty_conform_pack(ty_dtype_t dtype, const double *values, int64_t count, void *out);
void ty_conform_unpack(ty_dtype_t dtype, const void *data, int64_t count, double *out);

/* NMSE = Σ(a-b)² / max(Σb², DBL_MIN) of backend values `a` against oracle
 * values `b`. Sets *out_bad to the first index where `a` is NaN or infinite
 * while `b` is finite (or where `b` is not finite), or -1. */
double ty_conform_nmse(const double *a, const double *b, int64_t count,
                       int64_t *out_bad);

#ifdef __cplusplus
}
#endif

#endif /* TY_GRAPH_CONFORM_H_ */
