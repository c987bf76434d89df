/* Conformance cases made concrete: spec parsing, seeded input generation
 * (rounded to the storage dtype), derived inputs, the differentiable outputs,
 * and the forward/backward graphs for the backend and the oracle. */
#include <ctype.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir/autodiff.h"
#include "graph/conform/conform_internal.h"
#include "hal/dtype.h"
#include "hal/half.h"

/* ---- value conversion ---- */

void ty_conform_pack(ty_dtype_t dtype, const double *v, int64_t n, void *out) {
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case TY_DTYPE_F32: ((float *)out)[i] = (float)v[i]; break;
      case TY_DTYPE_F64: ((double *)out)[i] = v[i]; break;
      case TY_DTYPE_BF16: ((uint16_t *)out)[i] = ty_f64_to_bf16(v[i]); break;
      case TY_DTYPE_F16: ((uint16_t *)out)[i] = ty_f64_to_f16(v[i]); break;
      case TY_DTYPE_I32: ((int32_t *)out)[i] = (int32_t)v[i]; break;
      case TY_DTYPE_I64: ((int64_t *)out)[i] = (int64_t)v[i]; break;
      case TY_DTYPE_U8: ((uint8_t *)out)[i] = (uint8_t)v[i]; break;
      default: break;
    }
  }
}

void ty_conform_unpack(ty_dtype_t dtype, const void *data, int64_t n, double *out) {
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case TY_DTYPE_F32: out[i] = ((const float *)data)[i]; break;
      case TY_DTYPE_F64: out[i] = ((const double *)data)[i]; break;
      case TY_DTYPE_BF16: out[i] = ty_bf16_to_f64(((const uint16_t *)data)[i]); break;
      case TY_DTYPE_F16: out[i] = ty_f16_to_f64(((const uint16_t *)data)[i]); break;
      case TY_DTYPE_I32: out[i] = ((const int32_t *)data)[i]; break;
      case TY_DTYPE_I64: out[i] = (double)((const int64_t *)data)[i]; break;
      case TY_DTYPE_U8: out[i] = ((const uint8_t *)data)[i]; break;
      default: out[i] = NAN; break;
    }
  }
}

uint64_t ty_conform_hash_string(uint64_t h, const char *s) {
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return (h ^ 0xff) * 0x100000001b3ull; /* end marker: "ab"+"c" != "a"+"bc" */
}

/* Rounds values to what `dtype` can store. */
static ty_status_t ty_conform_round(ty_dtype_t dtype, double *v, int64_t n) {
  void *tmp = malloc((size_t)(n ? n : 1) * 8);
  if (!tmp) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "conform: out of memory");
  ty_conform_pack(dtype, v, n, tmp);
  ty_conform_unpack(dtype, tmp, n, v);
  free(tmp);
  return TY_OK;
}

/* ---- spec parsing ---- */

typedef enum {
  TY_GEN_DEFAULT, TY_GEN_UNIFORM, TY_GEN_AWAY, TY_GEN_IDS, TY_GEN_TGT,
  TY_GEN_SEQ, TY_GEN_VAL, TY_GEN_RNG, TY_GEN_LIST, TY_GEN_PERM,
} ty_gen_kind_t;

/* Most values a `list=` generator spells out. */
#define TY_GEN_LIST_MAX 48

typedef struct {
  ty_gen_kind_t kind;
  double a, b;
  uint32_t list_count; /* TY_GEN_LIST: the values, one per element */
  double list[TY_GEN_LIST_MAX];
} ty_gen_t;

#define TY_CASE_ERROR(inst, ...) ty_conform_case_error((inst)->test_case, __VA_ARGS__)

static ty_status_t ty_conform_case_error(const ty_conform_case_t *c, const char *fmt, ...)
    TY_PRINTF_ATTR(2, 3);
static ty_status_t ty_conform_case_error(const ty_conform_case_t *c, const char *fmt, ...) {
  char msg[256];
  va_list args;
  va_start(args, fmt);
  vsnprintf(msg, sizeof(msg), fmt, args);
  va_end(args);
  return ty_status_make(TY_CODE_INVALID_ARGUMENT, "conform case %s/%s: %s", c->op, c->name,
                        msg);
}

/* Copies the next whitespace-separated token of *p into buf. */
static bool ty_next_token(const char **p, char *buf, size_t capacity) {
  while (**p && isspace((unsigned char)**p)) ++*p;
  if (!**p) return false;
  size_t n = 0;
  while ((*p)[n] && !isspace((unsigned char)(*p)[n])) ++n;
  if (n >= capacity) n = capacity - 1;
  memcpy(buf, *p, n);
  buf[n] = '\0';
  *p += n;
  while (**p && !isspace((unsigned char)**p)) ++*p;
  return true;
}

/* "name=value": value an int list "[1,-2]", a string 'x', a float when it
 * has '.', 'e' or 'n', else an int. */
static ty_status_t ty_conform_attr_parse(const ty_conform_case_t *c, const char *item,
                                         ty_attrs_t *attrs) {
  const char *eq = strchr(item, '=');
  if (!eq || eq == item || (size_t)(eq - item) >= TY_ATTR_NAME_MAX) {
    return ty_conform_case_error(c, "bad attribute '%s'", item);
  }
  char name[TY_ATTR_NAME_MAX] = {0};
  memcpy(name, item, (size_t)(eq - item));
  const char *v = eq + 1;
  if (v[0] == '[') {
    int64_t values[TY_ATTR_LIST_MAX];
    uint32_t count = 0;
    const char *p = v + 1;
    while (*p && *p != ']') {
      char *end;
      if (count == TY_ATTR_LIST_MAX) return ty_conform_case_error(c, "list too long in '%s'", item);
      values[count++] = strtoll(p, &end, 10);
      if (end == p) return ty_conform_case_error(c, "bad list in '%s'", item);
      p = *end == ',' ? end + 1 : end;
    }
    return ty_attrs_set_ints(attrs, name, values, count);
  }
  if (v[0] == '\'') {
    char s[TY_ATTR_STRING_MAX] = {0};
    size_t n = strlen(v);
    if (n < 2 || v[n - 1] != '\'' || n - 2 >= sizeof(s)) {
      return ty_conform_case_error(c, "bad string in '%s'", item);
    }
    memcpy(s, v + 1, n - 2);
    return ty_attrs_set_string(attrs, name, s);
  }
  if (strpbrk(v, ".en")) return ty_attrs_set_float(attrs, name, strtod(v, NULL));
  return ty_attrs_set_int(attrs, name, strtoll(v, NULL, 10));
}

static ty_status_t ty_conform_gen_parse(const ty_conform_case_t *c, const char *g,
                                        ty_gen_t *out) {
  *out = (ty_gen_t){TY_GEN_DEFAULT, 0, 0, 0, {0}};
  if (!g) return TY_OK;
  char *end;
  if (strncmp(g, "list=", 5) == 0) {
    /* Structured index inputs (block tables, slots, positions): the case
     * spells every element out. */
    out->kind = TY_GEN_LIST;
    for (const char *p = g + 5;;) {
      if (out->list_count == TY_GEN_LIST_MAX) {
        return ty_conform_case_error(c, "generator '%s' has over %d values", g, TY_GEN_LIST_MAX);
      }
      out->list[out->list_count++] = strtod(p, &end);
      if (end == p) return ty_conform_case_error(c, "bad generator '%s' (list=a,b,...)", g);
      if (*end != ',') break;
      p = end + 1;
    }
  } else if (strncmp(g, "u=", 2) == 0) {
    out->kind = TY_GEN_UNIFORM;
    out->a = strtod(g + 2, &end);
    if (*end != ',') return ty_conform_case_error(c, "bad generator '%s' (u=a,b)", g);
    out->b = strtod(end + 1, &end);
  } else if (strcmp(g, "away") == 0) {
    out->kind = TY_GEN_AWAY;
    return TY_OK;
  } else if (strcmp(g, "rng") == 0) {
    out->kind = TY_GEN_RNG;
    return TY_OK;
  } else if (strncmp(g, "perm=", 5) == 0) {
    out->kind = TY_GEN_PERM;
    out->a = strtod(g + 5, &end);
    if (end == g + 5 || !(out->a > 0)) {
      return ty_conform_case_error(c, "bad generator '%s' (perm=step, step > 0)", g);
    }
  } else if (strncmp(g, "ids=", 4) == 0 || strncmp(g, "tgt=", 4) == 0 ||
             strncmp(g, "seq=", 4) == 0 || strncmp(g, "val=", 4) == 0) {
    out->kind = g[0] == 'i' ? TY_GEN_IDS : g[0] == 't' ? TY_GEN_TGT
                : g[0] == 's' ? TY_GEN_SEQ : TY_GEN_VAL;
    out->a = strtod(g + 4, &end);
  } else {
    return ty_conform_case_error(c, "unknown generator '%s'", g);
  }
  if (*end) return ty_conform_case_error(c, "bad generator '%s'", g);
  return TY_OK;
}

/* Backend and oracle dtypes of a spec kind for the case dtype. */
static void ty_conform_kind_dtypes(char kind, ty_dtype_t named, ty_dtype_t dtype,
                                   ty_dtype_t *backend, ty_dtype_t *oracle) {
  switch (kind) {
    case 'F': *backend = dtype; break;
    case 'S': *backend = dtype == TY_DTYPE_F64 ? TY_DTYPE_F64 : TY_DTYPE_F32; break;
    case 'P': *backend = TY_DTYPE_F32; break;
    default: *backend = named; break;
  }
  *oracle = kind != 'P' && ty_dtype_is_float(*backend) ? TY_DTYPE_F64 : *backend;
}

static ty_status_t ty_conform_input_parse(ty_conform_instance_t *inst, uint32_t index,
                                          const char *token, ty_gen_t *gen) {
  ty_conform_value_t *v = &inst->inputs[index];
  snprintf(v->name, sizeof(v->name), "x%u", index);
  *gen = (ty_gen_t){TY_GEN_DEFAULT, 0, 0, 0, {0}};
  if (strcmp(token, "-") == 0) return TY_OK;
  const char *bracket = strchr(token, '[');
  const char *close = bracket ? strchr(bracket, ']') : NULL;
  if (!bracket || !close || bracket == token || bracket - token >= 8) {
    return TY_CASE_ERROR(inst, "bad input spec '%s'", token);
  }
  char type[8] = {0};
  memcpy(type, token, (size_t)(bracket - token));
  ty_dtype_t named = TY_DTYPE_INVALID;
  if (strcmp(type, "F") == 0 || strcmp(type, "S") == 0 || strcmp(type, "P") == 0) {
    v->kind = type[0];
  } else {
    ty_status_t s = ty_dtype_parse(type, &named);
    if (s) {
      ty_status_free(s);
      return TY_CASE_ERROR(inst, "bad dtype in input spec '%s'", token);
    }
  }
  ty_conform_kind_dtypes(v->kind, named, inst->dtype, &v->dtype, &v->oracle_dtype);
  v->count = 1;
  for (const char *p = bracket + 1; *p != ']';) {
    char *end;
    if (v->rank == TY_TENSOR_MAX_RANK) return TY_CASE_ERROR(inst, "rank too high in '%s'", token);
    int64_t d = strtoll(p, &end, 10);
    if (end == p || d < 0) return TY_CASE_ERROR(inst, "bad dimension in '%s'", token);
    v->dims[v->rank++] = d;
    v->count *= d;
    p = *end == ',' ? end + 1 : end;
  }
  v->present = true;
  if (close[1] == ':') {
    TY_RETURN_IF_ERROR(ty_conform_gen_parse(inst->test_case, close + 2, gen));
    if (gen->kind == TY_GEN_LIST && (int64_t)gen->list_count != v->count) {
      return TY_CASE_ERROR(inst, "'%s' lists %u values for %lld elements", token,
                           gen->list_count, (long long)v->count);
    }
    return TY_OK;
  }
  if (close[1]) return TY_CASE_ERROR(inst, "bad input spec '%s'", token);
  return TY_OK;
}

/* ---- generation ---- */

static void ty_conform_generate(const ty_gen_t *gen, ty_conform_value_t *v, uint64_t *rng) {
  bool is_float = ty_dtype_is_float(v->dtype);
  double *x = v->values;
  for (int64_t i = 0; i < v->count; ++i) {
    double u = ty_conform_uniform(rng);
    switch (gen->kind) {
      case TY_GEN_DEFAULT: x[i] = is_float ? 2.0 * u - 1.0 : floor(101.0 * u) - 50.0; break;
      case TY_GEN_UNIFORM:
        x[i] = is_float ? gen->a + (gen->b - gen->a) * u
                        : gen->a + floor((gen->b - gen->a + 1.0) * u);
        break;
      case TY_GEN_AWAY: x[i] = (0.5 + u) * (ty_conform_mix(rng) & 1 ? -1.0 : 1.0); break;
      case TY_GEN_IDS: x[i] = floor(gen->a * u); break;
      case TY_GEN_TGT:
        x[i] = ty_conform_mix(rng) % 5 == 0 ? ((i & 1) ? -100.0 : -1.0) : floor(gen->a * u);
        break;
      case TY_GEN_SEQ: x[i] = gen->a + (double)i; break;
      case TY_GEN_VAL: x[i] = gen->a; break;
      case TY_GEN_LIST: x[i] = gen->list[i]; break;
      case TY_GEN_PERM: x[i] = 0.0; break; /* below, row by row */
      case TY_GEN_RNG:
        x[i] = i == 0 ? (double)(ty_conform_mix(rng) >> 12) : floor(1000.0 * u);
        break;
    }
  }
  /* Well-separated values (logits a token choice must agree on): each row
   * of the last dimension (n long) a random permutation of (j - n/2) * a. */
  const int64_t row = v->rank ? v->dims[v->rank - 1] : 1;
  for (int64_t r = 0; gen->kind == TY_GEN_PERM && row > 0 && r + row <= v->count; r += row) {
    for (int64_t j = 0; j < row; ++j) x[r + j] = (double)(j - row / 2) * gen->a;
    for (int64_t j = row - 1; j > 0; --j) {
      const int64_t o = (int64_t)(ty_conform_mix(rng) % (uint64_t)(j + 1));
      const double t = x[r + j];
      x[r + j] = x[r + o];
      x[r + o] = t;
    }
  }
  /* Repeated ids must add up in scatter-adds; targets need one ignored and
   * one counted entry whatever the draw. */
  if (gen->kind == TY_GEN_IDS && v->count >= 2) x[v->count - 1] = x[0];
  if (gen->kind == TY_GEN_TGT && v->count >= 2) {
    x[0] = -1.0;
    if (x[v->count - 1] < 0) x[v->count - 1] = floor(gen->a / 2);
  }
}

/* ---- building graphs ---- */

/* Adds the case's inputs (those in `state_mask` as STATE values) and its op
 * node to g. */
ty_status_t ty_conform_add_op_states(const ty_conform_instance_t *inst, ty_graph_t *g,
                                     bool oracle, uint32_t state_mask, ty_value_id_t *in_ids,
                                     ty_value_id_t *out_ids) {
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    const ty_conform_value_t *v = &inst->inputs[i];
    in_ids[i] = TY_VALUE_NONE;
    if (!v->present) continue;
    ty_dtype_t dtype = oracle ? v->oracle_dtype : v->dtype;
    TY_RETURN_IF_ERROR((state_mask >> i) & 1u
                           ? ty_graph_add_state(g, v->name, dtype, v->rank, v->dims, &in_ids[i])
                           : ty_graph_add_input(g, v->name, dtype, v->rank, v->dims, &in_ids[i]));
  }
  return ty_graph_add_node(g, inst->test_case->op, in_ids, inst->input_count, &inst->attrs,
                           out_ids, inst->output_count);
}

/* Adds the case's inputs and its op node to g; with `with_states`, inputs
 * the op updates in place are STATE values. */
static ty_status_t ty_conform_add_op(const ty_conform_instance_t *inst, ty_graph_t *g,
                                     bool oracle, bool with_states, ty_value_id_t *in_ids,
                                     ty_value_id_t *out_ids) {
  uint32_t mask = 0;
  for (uint32_t i = 0; with_states && i < inst->input_count; ++i) {
    if (inst->inputs[i].state) mask |= 1u << i;
  }
  return ty_conform_add_op_states(inst, g, oracle, mask, in_ids, out_ids);
}

bool ty_conform_wrt(const ty_conform_instance_t *inst, uint32_t i) {
  return inst->inputs[i].present && ty_dtype_is_float(inst->inputs[i].dtype);
}

/* Appends the backward part: seeds dy<j> and the summed gradients dx<i>.
 * `seeded` false uses ones as the seed (to probe differentiability). */
ty_status_t ty_conform_add_backward(const ty_conform_instance_t *inst, ty_graph_t *g,
                                           bool oracle, const ty_value_id_t *in_ids,
                                           const ty_value_id_t *out_ids, const uint32_t *diff,
                                           uint32_t diff_count, bool seeded,
                                           ty_value_id_t *grads) {
  ty_value_id_t wrt[TY_CONFORM_MAX_INPUTS], part[TY_CONFORM_MAX_INPUTS];
  uint32_t wrt_count = 0;
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    if (ty_conform_wrt(inst, i)) wrt[wrt_count++] = in_ids[i];
  }
  for (uint32_t d = 0; d < diff_count; ++d) {
    ty_value_id_t y = out_ids[diff[d]], seed = TY_VALUE_NONE;
    if (seeded) {
      /* The seed takes y's dtype in this graph: promoted in the oracle's,
       * except where the op fixes it (a cast's target). */
      const ty_conform_value_t *sv = &inst->seeds[d];
      ty_dtype_t dtype = oracle ? ty_graph_value(g, y)->desc.dtype : sv->dtype;
      TY_RETURN_IF_ERROR(ty_graph_add_input(g, sv->name, dtype, sv->rank, sv->dims, &seed));
    }
    TY_RETURN_IF_ERROR(ty_graph_autodiff(g, y, seed, wrt, wrt_count, part));
    for (uint32_t k = 0; k < wrt_count; ++k) {
      if (d == 0) {
        grads[k] = part[k];
      } else {
        ty_value_id_t sum_in[2] = {grads[k], part[k]};
        TY_RETURN_IF_ERROR(ty_graph_add_node1(g, "add", sum_in, 2, NULL, &grads[k]));
      }
    }
  }
  return TY_OK;
}

ty_status_t ty_conform_instance_graph(const ty_conform_instance_t *inst,
                                      ty_conform_direction_t direction, bool oracle,
                                      ty_graph_t **out_graph) {
  *out_graph = NULL;
  if (direction == TY_CONFORM_BACKWARD && !inst->has_backward) {
    return TY_CASE_ERROR(inst, "has no backward direction");
  }
  ty_graph_t *g;
  TY_RETURN_IF_ERROR(ty_graph_create(&g));
  ty_value_id_t in_ids[TY_CONFORM_MAX_INPUTS], out_ids[TY_CONFORM_MAX_OUTPUTS];
  ty_value_id_t grads[TY_CONFORM_MAX_INPUTS];
  bool forward = direction == TY_CONFORM_FORWARD;
  ty_status_t s = ty_conform_add_op(inst, g, oracle, forward, in_ids, out_ids);
  char name[TY_CONFORM_NAME_MAX];
  if (!s && forward) {
    for (uint32_t j = 0; j < inst->output_count && !s; ++j) {
      uint32_t k = inst->update_of[j];
      if (k != UINT32_MAX) {
        s = ty_graph_set_state_update(g, in_ids[k], out_ids[j]);
      } else {
        snprintf(name, sizeof(name), "y%u", j);
        s = ty_graph_set_output(g, out_ids[j], name);
      }
    }
  } else if (!s) {
    s = ty_conform_add_backward(inst, g, oracle, in_ids, out_ids, inst->diff_outputs,
                                inst->diff_count, true, grads);
    for (uint32_t i = 0, k = 0; i < inst->input_count && !s; ++i) {
      if (!ty_conform_wrt(inst, i)) continue;
      ty_value_id_t grad = grads[k++];
      /* A gradient that is the seed itself (add) or another gradient
       * already named gets its own value: an exact reshape to its shape. */
      const ty_graph_value_t *gv = ty_graph_value(g, grad);
      if (gv->role != TY_VALUE_INTERMEDIATE || gv->desc.name[0]) {
        ty_attrs_t shape = TY_ATTRS_EMPTY;
        s = ty_attrs_set_ints(&shape, "shape", gv->desc.dims, gv->desc.rank);
        if (!s) s = ty_graph_add_node1(g, "reshape", &grad, 1, &shape, &grad);
      }
      snprintf(name, sizeof(name), "dx%u", i);
      if (!s) s = ty_graph_set_output(g, grad, name);
    }
  }
  if (s) {
    ty_graph_destroy(g);
    return ty_status_annotate(s, "building conform case %s/%s", inst->test_case->op,
                              inst->test_case->name);
  }
  *out_graph = g;
  return TY_OK;
}

uint32_t ty_conform_instance_results(const ty_conform_instance_t *inst,
                                     ty_conform_direction_t direction,
                                     char names[][TY_CONFORM_NAME_MAX]) {
  uint32_t n = 0;
  if (direction == TY_CONFORM_FORWARD) {
    for (uint32_t j = 0; j < inst->output_count; ++j) {
      if (inst->update_of[j] != UINT32_MAX) {
        snprintf(names[n++], TY_CONFORM_NAME_MAX, "x%u", inst->update_of[j]);
      } else {
        snprintf(names[n++], TY_CONFORM_NAME_MAX, "y%u", j);
      }
    }
  } else if (inst->has_backward) {
    for (uint32_t i = 0; i < inst->input_count; ++i) {
      if (ty_conform_wrt(inst, i)) snprintf(names[n++], TY_CONFORM_NAME_MAX, "dx%u", i);
    }
  }
  return n;
}

/* ---- instances ---- */

/* "o>k o>k": output o updates input k in place. */
static ty_status_t ty_conform_updates_parse(ty_conform_instance_t *inst) {
  for (uint32_t j = 0; j < TY_CONFORM_MAX_OUTPUTS; ++j) inst->update_of[j] = UINT32_MAX;
  const char *p = inst->test_case->updates;
  char tok[32];
  while (p && ty_next_token(&p, tok, sizeof(tok))) {
    unsigned o, k;
    if (sscanf(tok, "%u>%u", &o, &k) != 2 || o >= inst->output_count ||
        k >= inst->input_count || !inst->inputs[k].present) {
      return TY_CASE_ERROR(inst, "bad update '%s'", tok);
    }
    inst->update_of[o] = k;
    inst->inputs[k].state = true;
  }
  return TY_OK;
}

/* How many outputs `op` makes for these inputs (at most
 * TY_CONFORM_MAX_OUTPUTS), and their descriptors when `out_descs` is not
 * NULL (capacity TY_CONFORM_MAX_OUTPUTS). */
static ty_status_t ty_conform_output_count(const char *op, const ty_tensor_desc_t *const *ins,
                                           uint32_t n, const ty_attrs_t *attrs,
                                           ty_tensor_desc_t *out_descs, uint32_t *out_count) {
  ty_tensor_desc_t *outs = calloc(TY_OP_MAX_OUTPUTS, sizeof(*outs));
  if (!outs) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "conform: out of memory");
  ty_status_t s = ty_op_infer(op, ins, n, attrs, outs, out_count);
  if (!s && *out_count > TY_CONFORM_MAX_OUTPUTS) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "conform: %s makes %u outputs, more than %d",
                       op, *out_count, TY_CONFORM_MAX_OUTPUTS);
  }
  if (!s && out_descs) memcpy(out_descs, outs, *out_count * sizeof(*outs));
  free(outs);
  return s;
}

/* "op i,j | o>k ...": input k := output o of op(inputs i, j, ...), in f64. */
static ty_status_t ty_conform_derive(ty_conform_instance_t *inst) {
  const char *spec = inst->test_case->derive;
  if (!spec) return TY_OK;
  char op[32], list[64], tok[32];
  const char *p = spec;
  if (!ty_next_token(&p, op, sizeof(op)) || !ty_next_token(&p, list, sizeof(list)) ||
      !ty_next_token(&p, tok, sizeof(tok)) || strcmp(tok, "|") != 0) {
    return TY_CASE_ERROR(inst, "bad derive '%s'", spec);
  }
  ty_graph_t *g = NULL;
  ty_conform_host_t *host = NULL;
  ty_status_t s = ty_graph_create(&g);
  ty_value_id_t ins[TY_CONFORM_MAX_INPUTS], outs[TY_CONFORM_MAX_OUTPUTS];
  uint32_t src[TY_CONFORM_MAX_INPUTS], n = 0;
  for (char *q = list; !s && *q;) {
    char *end;
    unsigned long i = strtoul(q, &end, 10);
    if (end == q || i >= inst->input_count || !inst->inputs[i].present ||
        n == TY_CONFORM_MAX_INPUTS) {
      s = TY_CASE_ERROR(inst, "bad derive inputs '%s'", list);
      break;
    }
    const ty_conform_value_t *v = &inst->inputs[i];
    src[n] = (uint32_t)i;
    s = ty_graph_add_input(g, v->name, v->oracle_dtype, v->rank, v->dims, &ins[n++]);
    q = *end == ',' ? end + 1 : end;
  }
  uint32_t out_count = 0;
  if (!s) {
    const ty_tensor_desc_t *descs[TY_CONFORM_MAX_INPUTS];
    for (uint32_t k = 0; k < n; ++k) descs[k] = &ty_graph_value(g, ins[k])->desc;
    s = ty_conform_output_count(op, descs, n, &inst->attrs, NULL, &out_count);
  }
  if (!s) s = ty_graph_add_node(g, op, ins, n, &inst->attrs, outs, out_count);
  char name[TY_CONFORM_NAME_MAX];
  for (uint32_t o = 0; o < out_count && !s; ++o) {
    snprintf(name, sizeof(name), "o%u", o);
    s = ty_graph_set_output(g, outs[o], name);
  }
  if (!s) s = ty_conform_host_create(g, &host);
  for (uint32_t k = 0; k < n && !s; ++k) {
    const ty_conform_value_t *v = &inst->inputs[src[k]];
    s = ty_conform_host_set(host, v->name, v->values, v->count);
  }
  if (!s) s = ty_conform_host_run(host);
  while (!s && ty_next_token(&p, tok, sizeof(tok))) {
    unsigned o, k;
    if (sscanf(tok, "%u>%u", &o, &k) != 2 || o >= out_count || k >= inst->input_count ||
        !inst->inputs[k].present) {
      s = TY_CASE_ERROR(inst, "bad derive output '%s'", tok);
      break;
    }
    ty_conform_value_t *v = &inst->inputs[k];
    snprintf(name, sizeof(name), "o%u", o);
    s = ty_conform_host_get(host, name, v->values, v->count);
    if (!s) s = ty_conform_round(v->dtype, v->values, v->count);
  }
  ty_conform_host_destroy(host);
  ty_graph_destroy(g);
  return s ? ty_status_annotate(s, "deriving inputs of %s/%s", inst->test_case->op,
                                inst->test_case->name)
           : TY_OK;
}

/* Which float outputs take a gradient: autodiff from each alone (with a
 * ones seed) must succeed; saved statistics make the rule refuse. */
static ty_status_t ty_conform_find_diff(ty_conform_instance_t *inst,
                                        const ty_tensor_desc_t *outputs) {
  const ty_op_def_t *def = ty_op_lookup(inst->test_case->op);
  bool any_wrt = false;
  for (uint32_t i = 0; i < inst->input_count; ++i) any_wrt |= ty_conform_wrt(inst, i);
  if (!def || !def->grad || !any_wrt) return TY_OK;
  for (uint32_t j = 0; j < inst->output_count; ++j) {
    if (!ty_dtype_is_float(outputs[j].dtype)) continue;
    ty_graph_t *g;
    TY_RETURN_IF_ERROR(ty_graph_create(&g));
    ty_value_id_t in_ids[TY_CONFORM_MAX_INPUTS], out_ids[TY_CONFORM_MAX_OUTPUTS];
    ty_value_id_t grads[TY_CONFORM_MAX_INPUTS];
    ty_status_t s = ty_conform_add_op(inst, g, false, false, in_ids, out_ids);
    if (!s) {
      ty_status_t t = ty_conform_add_backward(inst, g, false, in_ids, out_ids, &j, 1, false,
                                              grads);
      if (!t) inst->diff_outputs[inst->diff_count++] = j;
      ty_status_free(t);
    }
    ty_graph_destroy(g);
    TY_RETURN_IF_ERROR(s);
  }
  return TY_OK;
}

/* A random upstream gradient for differentiable output j. */
static ty_status_t ty_conform_make_seed(ty_conform_instance_t *inst, uint32_t d,
                                        const ty_tensor_desc_t *y, uint64_t *rng) {
  ty_conform_value_t *v = &inst->seeds[d];
  snprintf(v->name, sizeof(v->name), "dy%u", inst->diff_outputs[d]);
  v->present = true;
  v->kind = 'F';
  v->dtype = y->dtype;
  v->oracle_dtype = TY_DTYPE_F64;
  v->rank = y->rank;
  v->count = 1;
  for (uint32_t r = 0; r < y->rank; ++r) {
    v->dims[r] = y->dims[r];
    v->count *= y->dims[r];
  }
  v->values = malloc((size_t)(v->count ? v->count : 1) * sizeof(double));
  if (!v->values) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "conform: out of memory");
  ty_gen_t gen = {TY_GEN_DEFAULT, 0, 0, 0, {0}};
  ty_conform_generate(&gen, v, rng);
  return ty_conform_round(v->dtype, v->values, v->count);
}

ty_status_t ty_conform_instance_init(const ty_conform_case_t *c, ty_dtype_t dtype,
                                    uint64_t seed, ty_conform_instance_t *inst) {
  memset(inst, 0, sizeof(*inst));
  inst->test_case = c;
  inst->dtype = dtype;
  inst->seed = seed;
  for (uint32_t j = 0; j < TY_CONFORM_MAX_OUTPUTS; ++j) inst->update_of[j] = UINT32_MAX;
  if (!ty_op_lookup(c->op)) return TY_CASE_ERROR(inst, "unknown op");
  char tok[160];
  const char *p = c->attrs;
  while (p && ty_next_token(&p, tok, sizeof(tok))) {
    TY_RETURN_IF_ERROR(ty_conform_attr_parse(c, tok, &inst->attrs));
  }
  ty_gen_t gens[TY_CONFORM_MAX_INPUTS];
  p = c->inputs;
  while (ty_next_token(&p, tok, sizeof(tok))) {
    if (inst->input_count == TY_CONFORM_MAX_INPUTS) return TY_CASE_ERROR(inst, "too many inputs");
    TY_RETURN_IF_ERROR(ty_conform_input_parse(inst, inst->input_count, tok,
                                              &gens[inst->input_count]));
    inst->input_count++;
  }
  uint64_t rng = seed;
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    ty_conform_value_t *v = &inst->inputs[i];
    if (!v->present) continue;
    v->values = malloc((size_t)(v->count ? v->count : 1) * sizeof(double));
    if (!v->values) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "conform: out of memory");
    ty_conform_generate(&gens[i], v, &rng);
    TY_RETURN_IF_ERROR(ty_conform_round(v->dtype, v->values, v->count));
  }
  /* The op's outputs in the backend graph, by inference. */
  ty_tensor_desc_t in_descs[TY_CONFORM_MAX_INPUTS];
  const ty_tensor_desc_t *in_ptrs[TY_CONFORM_MAX_INPUTS];
  for (uint32_t i = 0; i < inst->input_count; ++i) {
    const ty_conform_value_t *v = &inst->inputs[i];
    in_ptrs[i] = NULL;
    if (!v->present) continue;
    TY_RETURN_IF_ERROR(ty_tensor_desc_init(v->dtype, v->rank, v->dims, NULL, &in_descs[i]));
    in_ptrs[i] = &in_descs[i];
  }
  ty_tensor_desc_t outs[TY_CONFORM_MAX_OUTPUTS];
  ty_status_t s = ty_conform_output_count(c->op, in_ptrs, inst->input_count, &inst->attrs,
                                          outs, &inst->output_count);
  if (!s) s = ty_conform_updates_parse(inst);
  if (!s) s = ty_conform_derive(inst);
  if (!s) s = ty_conform_find_diff(inst, outs);
  for (uint32_t d = 0; d < inst->diff_count && !s; ++d) {
    s = ty_conform_make_seed(inst, d, &outs[inst->diff_outputs[d]], &rng);
  }
  inst->has_backward = !s && inst->diff_count > 0;
  return s ? ty_status_annotate(s, "conform case %s/%s (%s)", c->op, c->name,
                                ty_dtype_name(dtype))
           : TY_OK;
}

void ty_conform_instance_deinit(ty_conform_instance_t *inst) {
  for (uint32_t i = 0; i < TY_CONFORM_MAX_INPUTS; ++i) free(inst->inputs[i].values);
  for (uint32_t j = 0; j < TY_CONFORM_MAX_OUTPUTS; ++j) free(inst->seeds[j].values);
  memset(inst, 0, sizeof(*inst));
}
