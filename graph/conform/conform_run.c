/* Running conformance cases: the host executor (the oracle: reference
 * kernels over the lowered graph, in process), a case on a backend through a
 * session with guard regions, the NMSE comparison, and expected-failure
 * lists. */
#include <float.h>
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/conform/conform_internal.h"
#include "graph/ir/lower.h"
#include "graph/runtime/session.h"
#include "graph/runtime/support_report.h"
#include "hal/dtype.h"
#include "ops/reference/ref_interp.h"

const char *ty_conform_direction_name(ty_conform_direction_t d) {
  return d == TY_CONFORM_BACKWARD ? "backward" : "forward";
}

const char *ty_conform_tier_name(ty_conform_tier_t t) {
  return t == TY_CONFORM_TIER_GRAPH ? "whole-graph" : "per-op";
}

/* The graph of a tier and direction, and the names it compares. */
static ty_status_t ty_conform_tier_graph(const ty_conform_instance_t *inst, ty_conform_tier_t tier,
                                         ty_conform_direction_t direction, bool oracle,
                                         ty_graph_t **out) {
  return tier == TY_CONFORM_TIER_GRAPH ? ty_conform_instance_graph_whole(inst, direction, oracle, out)
                                       : ty_conform_instance_graph(inst, direction, oracle, out);
}

const char *ty_conform_status_name(ty_conform_status_t s) {
  switch (s) {
    case TY_CONFORM_PASS: return "pass";
    case TY_CONFORM_FAIL: return "fail";
    case TY_CONFORM_UNSUPPORTED: return "unsupported";
    case TY_CONFORM_XFAIL: return "xfail";
    case TY_CONFORM_XPASS: return "xpass";
  }
  return "unknown";
}

double ty_conform_bound_value(const ty_conform_bound_t *b, ty_dtype_t dtype) {
  if (!b) return NAN;
  return dtype == TY_DTYPE_BF16 ? b->bf16 : dtype == TY_DTYPE_F16 ? b->f16 : b->f32;
}

static ty_status_t ty_conform_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "conform: out of memory");
}

/* ---- the host executor ---- */

struct ty_conform_host_t {
  ty_lowered_graph_t *lowered;
  const ty_abi_graph_t *abi;
  void **data;
  int64_t *counts;
};

ty_status_t ty_conform_host_create(const ty_graph_t *graph, ty_conform_host_t **out) {
  *out = NULL;
  ty_conform_host_t *h = calloc(1, sizeof(*h));
  if (!h) return ty_conform_oom();
  ty_status_t s = ty_graph_lower(graph, &h->lowered);
  if (s) {
    free(h);
    return s;
  }
  h->abi = ty_lowered_graph_abi(h->lowered);
  uint32_t n = h->abi->value_count;
  h->data = calloc(n ? n : 1, sizeof(void *));
  h->counts = calloc(n ? n : 1, sizeof(int64_t));
  if (!h->data || !h->counts) goto oom;
  for (uint32_t v = 0; v < n; ++v) {
    const ty_abi_value_t *val = &h->abi->values[v];
    int64_t count = 1;
    for (uint32_t r = 0; r < val->rank; ++r) count *= val->dims[r];
    size_t bytes = (size_t)count * ty_dtype_size(val->dtype);
    h->counts[v] = count;
    if (!(h->data[v] = calloc(1, bytes ? bytes : 1))) goto oom;
    if (val->role == TY_VALUE_CONSTANT && bytes) memcpy(h->data[v], val->const_data, bytes);
  }
  *out = h;
  return TY_OK;
oom:
  ty_conform_host_destroy(h);
  return ty_conform_oom();
}

void ty_conform_host_destroy(ty_conform_host_t *h) {
  if (!h) return;
  for (uint32_t v = 0; h->data && v < h->abi->value_count; ++v) free(h->data[v]);
  free(h->data);
  free(h->counts);
  ty_lowered_graph_destroy(h->lowered);
  free(h);
}

static uint32_t ty_conform_host_find(const ty_conform_host_t *h, const char *name) {
  for (uint32_t v = 0; v < h->abi->value_count; ++v) {
    if (strcmp(h->abi->values[v].name, name) == 0) return v;
  }
  return UINT32_MAX;
}

ty_status_t ty_conform_host_desc(const ty_conform_host_t *h, const char *name,
                                 int64_t *out_count, ty_dtype_t *out_dtype) {
  uint32_t v = ty_conform_host_find(h, name);
  if (v == UINT32_MAX) {
    return ty_status_make(TY_CODE_NOT_FOUND, "conform host: no value named '%s'", name);
  }
  *out_count = h->counts[v];
  *out_dtype = h->abi->values[v].dtype;
  return TY_OK;
}

ty_status_t ty_conform_host_set(ty_conform_host_t *h, const char *name,
                                const double *values, int64_t count) {
  uint32_t v = ty_conform_host_find(h, name);
  if (v == UINT32_MAX || (h->abi->values[v].role != TY_VALUE_INPUT &&
                          h->abi->values[v].role != TY_VALUE_STATE)) {
    return ty_status_make(TY_CODE_NOT_FOUND, "conform host: no input or state named '%s'",
                          name);
  }
  if (count != h->counts[v]) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "conform host: '%s' has %lld elements, %lld given", name,
                          (long long)h->counts[v], (long long)count);
  }
  ty_conform_pack(h->abi->values[v].dtype, values, count, h->data[v]);
  return TY_OK;
}

ty_status_t ty_conform_host_bind(ty_conform_host_t *h, const ty_conform_instance_t *inst) {
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    const ty_conform_value_t *v = &inst->inputs[i];
    if (v->present) TY_RETURN_IF_ERROR(ty_conform_host_set(h, v->name, v->values, v->count));
  }
  for (uint32_t d = 0; d < inst->diff_count; ++d) {
    const ty_conform_value_t *v = &inst->seeds[d];
    if (ty_conform_host_find(h, v->name) == UINT32_MAX) continue; /* a forward graph */
    TY_RETURN_IF_ERROR(ty_conform_host_set(h, v->name, v->values, v->count));
  }
  return TY_OK;
}

ty_status_t ty_conform_host_run(ty_conform_host_t *h) {
  for (uint32_t n = 0; n < h->abi->node_count; ++n) {
    TY_RETURN_IF_ERROR(ty_ref_execute_node(h->abi, n, h->data));
  }
  for (uint32_t u = 0; u < h->abi->update_count; ++u) {
    const ty_abi_state_update_t *up = &h->abi->updates[u];
    const ty_abi_value_t *state = &h->abi->values[up->state];
    memcpy(h->data[up->state], h->data[up->value],
           (size_t)h->counts[up->state] * ty_dtype_size(state->dtype));
  }
  return TY_OK;
}

ty_status_t ty_conform_host_get(const ty_conform_host_t *h, const char *name,
                                double *out, int64_t count) {
  int64_t n;
  ty_dtype_t dtype;
  TY_RETURN_IF_ERROR(ty_conform_host_desc(h, name, &n, &dtype));
  if (n != count) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "conform host: '%s' has %lld elements, %lld asked", name,
                          (long long)n, (long long)count);
  }
  ty_conform_unpack(dtype, h->data[ty_conform_host_find(h, name)], count, out);
  return TY_OK;
}

/* ---- comparison ---- */

double ty_conform_nmse(const double *a, const double *b, int64_t n, int64_t *out_bad) {
  *out_bad = -1;
  double err = 0.0, ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (!isfinite(b[i]) || !isfinite(a[i])) {
      if (*out_bad < 0) *out_bad = i;
      continue;
    }
    double d = a[i] - b[i];
    err += d * d;
    ref += b[i] * b[i];
  }
  return err / (ref > DBL_MIN ? ref : DBL_MIN);
}

/* ---- expected failures ---- */

/* In-tree backends' lists. Every entry says why. */
static const struct {
  const char *backend;
  ty_conform_xfail_t entry;
} ty_conform_builtin[] = {
    {NULL, {{0}, {0}, {0}, {0}}},
};

void ty_conform_builtin_xfails(const char *backend, const ty_conform_xfail_t **out_list,
                               uint32_t *out_count) {
  *out_list = NULL;
  *out_count = 0;
  for (uint32_t i = 0; ty_conform_builtin[i].backend; ++i) {
    if (strcmp(ty_conform_builtin[i].backend, backend) != 0) continue;
    if (!*out_list) *out_list = &ty_conform_builtin[i].entry;
    ++*out_count; /* entries of one backend are adjacent */
  }
}

ty_status_t ty_conform_xfails_parse(const char *text, ty_conform_xfail_t **out_list,
                                    uint32_t *out_count) {
  *out_list = NULL;
  *out_count = 0;
  uint32_t capacity = 0, line_no = 0;
  ty_conform_xfail_t *list = NULL;
  for (const char *line = text; line && *line;) {
    const char *eol = strchr(line, '\n');
    size_t len = eol ? (size_t)(eol - line) : strlen(line);
    char buf[512];
    ++line_no;
    if (len >= sizeof(buf)) len = sizeof(buf) - 1;
    memcpy(buf, line, len);
    buf[len] = '\0';
    line = eol ? eol + 1 : NULL;
    char *hash = strchr(buf, '#');
    if (hash) *hash = '\0';
    ty_conform_xfail_t e;
    memset(&e, 0, sizeof(e));
    int reason_at = 0;
    int fields = sscanf(buf, "%63s %7s %11s %n", e.pattern, e.dtype, e.direction, &reason_at);
    if (fields <= 0) continue; /* blank or comment */
    ty_dtype_t dtype;
    ty_status_t s = TY_OK;
    if (fields < 3 || reason_at == 0 || !buf[reason_at]) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "expected-failure list, line %u: expected 'PATTERN DTYPE "
                         "DIRECTION REASON' (every entry needs a reason)",
                         line_no);
    } else if (strcmp(e.dtype, "*") != 0 && (s = ty_dtype_parse(e.dtype, &dtype))) {
      s = ty_status_annotate(s, "expected-failure list, line %u", line_no);
    } else if (strcmp(e.direction, "*") && strcmp(e.direction, "forward") &&
               strcmp(e.direction, "backward")) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "expected-failure list, line %u: direction '%s' is not "
                         "forward, backward or *",
                         line_no, e.direction);
    }
    if (s) {
      free(list);
      return s;
    }
    snprintf(e.reason, sizeof(e.reason), "%s", buf + reason_at);
    for (size_t n = strlen(e.reason); n && (e.reason[n - 1] == ' ' || e.reason[n - 1] == '\r');) {
      e.reason[--n] = '\0';
    }
    if (*out_count == capacity) {
      capacity = capacity ? capacity * 2 : 8;
      ty_conform_xfail_t *grown = realloc(list, capacity * sizeof(*list));
      if (!grown) {
        free(list);
        return ty_conform_oom();
      }
      list = grown;
    }
    list[(*out_count)++] = e;
  }
  *out_list = list;
  return TY_OK;
}

const ty_conform_xfail_t *ty_conform_xfail_find(const ty_conform_xfail_t *list,
                                                uint32_t count, const char *op,
                                                const char *case_name, ty_dtype_t dtype,
                                                ty_conform_direction_t direction) {
  char full[96];
  snprintf(full, sizeof(full), "%s/%s", op, case_name);
  for (uint32_t i = 0; i < count; ++i) {
    const ty_conform_xfail_t *e = &list[i];
    if (fnmatch(e->pattern, op, 0) != 0 && fnmatch(e->pattern, full, 0) != 0) continue;
    if (strcmp(e->dtype, "*") != 0 && strcmp(e->dtype, ty_dtype_name(dtype)) != 0) continue;
    if (strcmp(e->direction, "*") != 0 &&
        strcmp(e->direction, ty_conform_direction_name(direction)) != 0) {
      continue;
    }
    return e;
  }
  return NULL;
}

/* ---- running a case ---- */

uint64_t ty_conform_case_seed(uint64_t run_seed, const ty_conform_case_t *c, ty_dtype_t dtype,
                              ty_conform_direction_t direction) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = ty_conform_hash_string(h, c->op);
  h = ty_conform_hash_string(h, c->name);
  h = ty_conform_hash_string(h, ty_dtype_name(dtype));
  h = ty_conform_hash_string(h, ty_conform_direction_name(direction));
  uint64_t state = run_seed ^ h;
  return ty_conform_mix(&state);
}

bool ty_conform_case_has_direction(const ty_conform_case_t *c, ty_dtype_t dtype,
                                   ty_conform_direction_t direction) {
  if (!(c->dtypes & TY_DTYPE_BIT(dtype))) return false;
  if (direction == TY_CONFORM_FORWARD) return true;
  const ty_op_def_t *def = ty_op_lookup(c->op);
  return c->bwd_bound && def && def->grad && ty_dtype_is_float(dtype);
}

#define TY_CONFORM_MAX_RESULTS (2 * TY_CONFORM_MAX_INPUTS + TY_CONFORM_MAX_OUTPUTS)

typedef struct {
  uint32_t count;
  char names[TY_CONFORM_MAX_RESULTS][TY_CONFORM_NAME_MAX];
  double *values[TY_CONFORM_MAX_RESULTS];
  int64_t counts[TY_CONFORM_MAX_RESULTS];
  double floor_bound[TY_CONFORM_MAX_RESULTS]; /* a value's class bound is at least this */
} ty_conform_values_t;

static void ty_conform_values_free(ty_conform_values_t *v) {
  for (uint32_t k = 0; k < v->count; ++k) free(v->values[k]);
}

/* The oracle (the promoted graph on the host executor) or, without
 * `promote`, the reference kernels on the backend's own graph. */
static ty_status_t ty_conform_oracle(const ty_conform_instance_t *inst, ty_conform_tier_t tier,
                                     ty_conform_direction_t direction, bool promote,
                                     ty_conform_values_t *out) {
  ty_graph_t *g = NULL;
  ty_conform_host_t *host = NULL;
  ty_status_t s = ty_conform_tier_graph(inst, tier, direction, promote, &g);
  if (!s) s = ty_conform_host_create(g, &host);
  if (!s) s = ty_conform_host_bind(host, inst);
  if (!s) s = ty_conform_host_run(host);
  for (uint32_t k = 0; k < out->count && !s; ++k) {
    ty_dtype_t dtype;
    s = ty_conform_host_desc(host, out->names[k], &out->counts[k], &dtype);
    if (!s && !(out->values[k] = malloc((size_t)(out->counts[k] ? out->counts[k] : 1) *
                                        sizeof(double)))) {
      s = ty_conform_oom();
    }
    if (!s) s = ty_conform_host_get(host, out->names[k], out->values[k], out->counts[k]);
  }
  ty_conform_host_destroy(host);
  ty_graph_destroy(g);
  return s ? ty_status_annotate(s, "the oracle of %s/%s", inst->test_case->op,
                                inst->test_case->name)
           : TY_OK;
}

static void ty_conform_fail(ty_conform_result_t *r, ty_conform_status_t status,
                            const char *what, ty_status_t s) {
  r->status = status;
  snprintf(r->reason, sizeof(r->reason), "%s%s%s: %s", what, *what ? ": " : "",
           ty_code_name(ty_status_code(s)), ty_status_message(s));
  ty_status_free(s);
}

/* Binds, runs and reads the backend; a failure sets r and returns false. */
static bool ty_conform_backend(ty_session_t *session, const ty_conform_instance_t *inst,
                               ty_conform_values_t *out, ty_conform_result_t *r,
                               ty_status_t *kit_error) {
  ty_status_t s = TY_OK;
  for (uint32_t i = 0; i < inst->input_count + inst->diff_count && !s; ++i) {
    bool seed = i >= inst->input_count;
    const ty_conform_value_t *v =
        seed ? &inst->seeds[i - inst->input_count] : &inst->inputs[i];
    if (!v->present || (seed && r->direction == TY_CONFORM_FORWARD)) continue;
    size_t bytes = (size_t)v->count * ty_dtype_size(v->dtype);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) {
      *kit_error = ty_conform_oom();
      return false;
    }
    ty_conform_pack(v->dtype, v->values, v->count, data);
    s = ty_session_bind(session, v->name, v->dtype, v->rank, v->dims, data, bytes);
    free(data);
  }
  if (s) {
    ty_conform_fail(r, TY_CONFORM_FAIL, "bind", s);
    return false;
  }
  if ((s = ty_session_run(session))) {
    ty_conform_fail(r, TY_CONFORM_FAIL, "run", s);
    return false;
  }
  if ((s = ty_session_check_guards(session))) {
    ty_conform_fail(r, TY_CONFORM_FAIL, "guard bytes", s);
    return false;
  }
  for (uint32_t k = 0; k < out->count && !s; ++k) {
    ty_tensor_desc_t desc;
    s = ty_session_value_desc(session, out->names[k], &desc);
    if (s) break;
    out->counts[k] = ty_tensor_desc_element_count(&desc);
    size_t bytes = (size_t)out->counts[k] * ty_dtype_size(desc.dtype);
    void *data = malloc(bytes ? bytes : 1);
    out->values[k] = malloc((size_t)(out->counts[k] ? out->counts[k] : 1) * sizeof(double));
    if (!data || !out->values[k]) {
      free(data);
      *kit_error = ty_conform_oom();
      return false;
    }
    s = ty_session_read(session, out->names[k], data, bytes);
    if (!s) ty_conform_unpack(desc.dtype, data, out->counts[k], out->values[k]);
    free(data);
  }
  if (s) {
    ty_conform_fail(r, TY_CONFORM_FAIL, "read", s);
    return false;
  }
  return true;
}

/* Compares every value of the backend (got) with the oracle (want), each
 * held to max(class bound, 10 x the reference's NMSE in the storage dtypes);
 * sets status, nmse, bound, ref_nmse, worst and reason. */
/* The largest |a - b| of a value, and where (-1: none). */
static void ty_conform_max_abs(const double *a, const double *b, int64_t n,
                               ty_conform_result_t *r) {
  r->max_abs = n ? 0.0 : NAN;
  r->max_abs_index = -1;
  for (int64_t i = 0; i < n; ++i) {
    double d = isfinite(a[i]) && isfinite(b[i]) ? fabs(a[i] - b[i]) : INFINITY;
    if (r->max_abs_index < 0 || d > r->max_abs) {
      r->max_abs = d;
      r->max_abs_index = i;
      r->max_abs_got = a[i];
      r->max_abs_want = b[i];
      if (isinf(d)) break; /* the first non-finite element is the one to name */
    }
  }
}

static void ty_conform_compare(const ty_conform_values_t *got, const ty_conform_values_t *want,
                               const ty_conform_values_t *ref, ty_conform_result_t *r) {
  const double class_bound = r->bound;
  double worst_ratio = -1.0;
  uint32_t over = 0;
  r->status = TY_CONFORM_PASS;
  for (uint32_t k = 0; k < got->count; ++k) {
    int64_t bad, ref_bad;
    double e = ty_conform_nmse(got->values[k], want->values[k], got->counts[k], &bad);
    double re = ty_conform_nmse(ref->values[k], want->values[k], got->counts[k], &ref_bad);
    if (bad >= 0) {
      r->status = TY_CONFORM_FAIL;
      r->nmse = INFINITY;
      r->ref_nmse = re;
      snprintf(r->worst, sizeof(r->worst), "%s", got->names[k]);
      ty_conform_max_abs(got->values[k], want->values[k], got->counts[k], r);
      double a = got->values[k][bad], b = want->values[k][bad];
      if (!isfinite(b)) {
        snprintf(r->reason, sizeof(r->reason),
                 "the oracle's %s[%lld] is not finite (%g): the case's inputs are bad",
                 got->names[k], (long long)bad, b);
      } else {
        snprintf(r->reason, sizeof(r->reason), "%s[%lld] is %s where the oracle has %.9g",
                 got->names[k], (long long)bad, isnan(a) ? "NaN" : a > 0 ? "+Inf" : "-Inf",
                 b);
      }
      return;
    }
    double b = class_bound > got->floor_bound[k] ? class_bound : got->floor_bound[k];
    if (ref_bad < 0 && 10.0 * re > b) b = 10.0 * re;
    double ratio = e <= b ? (b > 0 ? e / b : 0.0) : (b > 0 ? e / b : INFINITY);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      r->nmse = e;
      r->bound = b;
      r->ref_nmse = re;
      snprintf(r->worst, sizeof(r->worst), "%s", got->names[k]);
      ty_conform_max_abs(got->values[k], want->values[k], got->counts[k], r);
    }
    over += !(e <= b);
  }
  if (over) {
    r->status = TY_CONFORM_FAIL;
    snprintf(r->reason, sizeof(r->reason),
             "%s: NMSE %.3e > bound %.1e (the reference in the same dtypes: %.1e); largest "
             "error %.3g at %s[%lld]: %.9g where the oracle has %.9g%s",
             r->worst, r->nmse, r->bound, r->ref_nmse, r->max_abs, r->worst,
             (long long)r->max_abs_index, r->max_abs_got, r->max_abs_want,
             over > 1 ? "; other outputs too" : "");
  }
}

static void ty_conform_apply_xfail(const ty_conform_options_t *o, ty_conform_result_t *r) {
  const ty_conform_xfail_t *e =
      ty_conform_xfail_find(o->xfails, o->xfail_count, r->test_case->op, r->test_case->name,
                            r->dtype, r->direction);
  if (!e || r->status == TY_CONFORM_UNSUPPORTED) return;
  char detail[sizeof(r->reason)];
  snprintf(detail, sizeof(detail), "%s", r->reason);
  if (r->status == TY_CONFORM_FAIL) {
    r->status = TY_CONFORM_XFAIL;
    snprintf(r->reason, sizeof(r->reason), "expected failure (%.199s): %.280s", e->reason, detail);
  } else {
    r->status = TY_CONFORM_XPASS;
    snprintf(r->reason, sizeof(r->reason),
             "listed as an expected failure (%s) but passed: take it off the list",
             e->reason);
  }
}

/* The op's operand shapes, from its node in the forward graph. */
static ty_status_t ty_conform_op_shapes(const ty_conform_instance_t *inst,
                                        ty_conform_result_t *r) {
  ty_graph_t *g = NULL;
  ty_lowered_graph_t *lowered = NULL;
  ty_status_t s = ty_conform_instance_graph(inst, TY_CONFORM_FORWARD, false, &g);
  if (!s) s = ty_graph_lower(g, &lowered);
  if (!s) {
    const ty_abi_graph_t *abi = ty_lowered_graph_abi(lowered);
    for (uint32_t n = 0; n < abi->node_count; ++n) {
      if (strcmp(abi->nodes[n].op, inst->test_case->op) != 0) continue;
      ty_support_node_shapes(abi, &abi->nodes[n], r->shapes, sizeof(r->shapes));
      break;
    }
  }
  ty_lowered_graph_destroy(lowered);
  ty_graph_destroy(g);
  return s;
}

/* Asks the backend about the case's graph first, so an unsupported case's
 * reason is the plugin's own verdict for each node it refuses ("op (dtype):
 * reason"), not a session error. *out_refused when it refused any; a backend
 * without graph entries is left to the session, which says so. */
static ty_status_t ty_conform_refusal(ty_device_t *device, const ty_graph_t *g,
                                      ty_conform_result_t *r, bool *out_refused) {
  *out_refused = false;
  ty_lowered_graph_t *lowered = NULL;
  TY_RETURN_IF_ERROR(ty_graph_lower(g, &lowered));
  ty_support_report_t *report = NULL;
  ty_status_t s = ty_support_report_create(device, ty_lowered_graph_abi(lowered), &report);
  if (s && ty_status_code(s) == TY_CODE_UNIMPLEMENTED) {
    ty_status_free(s); /* no graph entries: the session's error says it */
    s = TY_OK;
  } else if (!s && report->unsupported_nodes) {
    *out_refused = true;
    r->status = TY_CONFORM_UNSUPPORTED;
    size_t used = 0;
    for (uint32_t k = 0; k < report->group_count; ++k) {
      const ty_support_group_t *grp = &report->groups[k];
      if (grp->supported || used >= sizeof(r->reason)) continue;
      int n = snprintf(r->reason + used, sizeof(r->reason) - used, "%s%s (%s)%s%s",
                       used ? "; " : "", grp->op, ty_dtype_name(grp->dtype),
                       grp->reason[0] ? ": " : "", grp->reason[0] ? grp->reason : "");
      if (n > 0) used += (size_t)n;
    }
  } else if (s) {
    /* The check itself failed: a backend error, reported as the case's. */
    ty_conform_fail(r, TY_CONFORM_FAIL, "graph_supports", s);
    *out_refused = true;
    s = TY_OK;
  }
  ty_support_report_destroy(report);
  ty_lowered_graph_destroy(lowered);
  return s;
}

ty_status_t ty_conform_run_case(ty_device_t *device, const ty_conform_case_t *c,
                                ty_dtype_t dtype, ty_conform_direction_t direction,
                                const ty_conform_options_t *options,
                                ty_conform_result_t *r) {
  memset(r, 0, sizeof(*r));
  r->test_case = c;
  r->tier = options->tier;
  r->dtype = dtype;
  r->direction = direction;
  r->nmse = NAN;
  r->ref_nmse = NAN;
  r->max_abs = NAN;
  r->max_abs_index = -1;
  r->bound = ty_conform_bound_value(
      direction == TY_CONFORM_BACKWARD ? c->bwd_bound : c->bound, dtype);
  r->seed = ty_conform_case_seed(options->seed, c, dtype, direction);
  ty_conform_instance_t inst;
  ty_conform_values_t got = {0}, want = {0}, ref = {0};
  ty_graph_t *g = NULL;
  ty_session_t *session = NULL;
  ty_status_t kit = ty_conform_instance_init(c, dtype, r->seed, &inst);
  if (!kit && direction == TY_CONFORM_BACKWARD && !inst.has_backward) {
    kit = ty_status_make(TY_CODE_INTERNAL, "conform case %s/%s has no differentiable output",
                         c->op, c->name);
  }
  if (!kit) {
    got.count = want.count = ref.count =
        options->tier == TY_CONFORM_TIER_GRAPH
            ? ty_conform_instance_results_whole(&inst, direction, got.names)
            : ty_conform_instance_results(&inst, direction, got.names);
    memcpy(want.names, got.names, sizeof(got.names));
    memcpy(ref.names, got.names, sizeof(got.names));
    /* A train step's updated parameters x<i> = x - lr * dx are rounded
     * to the storage dtype: held to at least the elementwise bound; its
     * forward outputs y<j> to at least the forward bound. */
    for (uint32_t k = 0; options->tier == TY_CONFORM_TIER_GRAPH &&
                         direction == TY_CONFORM_BACKWARD && k < got.count; ++k) {
      if (got.names[k][0] == 'y') got.floor_bound[k] = ty_conform_bound_value(c->bound, dtype);
      if (got.names[k][0] != 'x') continue;
      for (uint32_t b = 0; b < ty_conform_bound_count(); ++b) {
        if (!strcmp(ty_conform_bound_at(b)->name, "elementwise")) {
          got.floor_bound[k] = ty_conform_bound_value(ty_conform_bound_at(b), dtype);
        }
      }
    }
    kit = ty_conform_tier_graph(&inst, options->tier, direction, false, &g);
    if (!kit) kit = ty_conform_op_shapes(&inst, r);
  }
  bool refused = false;
  if (!kit) kit = ty_conform_refusal(device, g, r, &refused);
  if (!kit && !refused) {
    /* Guards seeded per case (and so per run of the kit), a pattern per
     * buffer; and the plugin's own guard mode between the values it keeps
     * (debug.guards, ABI 1.9). */
    ty_session_options_t so = {.guard_bytes = options->guard_bytes ? options->guard_bytes : 256,
                               .guard_seed = r->seed,
                               .debug_guards = true};
    ty_status_t s = ty_session_create(device, g, &so, &session);
    ty_code_t code = ty_status_code(s);
    if (code == TY_CODE_FAILED_PRECONDITION || code == TY_CODE_UNIMPLEMENTED) {
      ty_conform_fail(r, TY_CONFORM_UNSUPPORTED, "", s);
    } else if (s) {
      ty_conform_fail(r, TY_CONFORM_FAIL, "compile", s);
    } else if (ty_conform_backend(session, &inst, &got, r, &kit)) {
      kit = ty_conform_oracle(&inst, options->tier, direction, true, &want);
      if (!kit) kit = ty_conform_oracle(&inst, options->tier, direction, false, &ref);
      for (uint32_t k = 0; k < got.count && !kit; ++k) {
        if (got.counts[k] != want.counts[k] || ref.counts[k] != want.counts[k]) {
          kit = ty_status_make(TY_CODE_INTERNAL, "conform: %s has %lld elements, oracle %lld",
                               got.names[k], (long long)got.counts[k],
                               (long long)want.counts[k]);
        }
      }
      if (!kit) ty_conform_compare(&got, &want, &ref, r);
    }
  }
  ty_session_destroy(session);
  ty_graph_destroy(g);
  ty_conform_values_free(&got);
  ty_conform_values_free(&want);
  ty_conform_values_free(&ref);
  ty_conform_instance_deinit(&inst);
  if (kit) return kit;
  ty_conform_apply_xfail(options, r);
  return TY_OK;
}
