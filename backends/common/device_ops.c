/* The op builders' shared pieces (device_ops.h): kernel arguments through
 * the backend's one hook, the argument lists of kernels both devices
 * declare alike, and the decoders of an op's shapes and attributes. */
#include "backends/common/device_ops.h"

#include <stdlib.h>
#include <string.h>

static void ty_dev_arg_put(ty_dev_build_t *b, void *cmd, ty_dev_arg_t a) {
  if (!cmd || b->status) return;
  b->arg(b, cmd, &a);
}

void ty_dev_arg_ref(ty_dev_build_t *b, void *cmd, ty_dev_ref_t ref) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_REF, .ref = ref});
}
void ty_dev_arg_err(ty_dev_build_t *b, void *cmd) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_ERR, .i = (int32_t)b->n});
}
void ty_dev_arg_i32(ty_dev_build_t *b, void *cmd, int32_t v) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_I32, .i = v});
}
void ty_dev_arg_u32(ty_dev_build_t *b, void *cmd, uint32_t v) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_U32, .i = v});
}
void ty_dev_arg_i64(ty_dev_build_t *b, void *cmd, int64_t v) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_I64, .i = v});
}
void ty_dev_arg_u64(ty_dev_build_t *b, void *cmd, uint64_t v) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_U64, .i = (int64_t)v});
}
/* f32 travels as a double, which holds every float exactly. */
void ty_dev_arg_f32(ty_dev_build_t *b, void *cmd, float v) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_F32, .f = v});
}
void ty_dev_arg_f64(ty_dev_build_t *b, void *cmd, double v) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_F64, .f = v});
}
void ty_dev_arg_dims8(ty_dev_build_t *b, void *cmd, const int64_t v[8]) {
  ty_dev_arg_put(b, cmd, (ty_dev_arg_t){.kind = TY_DEV_ARG_DIMS8, .dims8 = v});
}

void ty_dev_arg_in(ty_dev_build_t *b, void *cmd, uint32_t i) {
  ty_dev_arg_ref(b, cmd, ty_dev_in(b, i));
  ty_dev_arg_i32(b, cmd, ty_dev_dt(ty_dev_vin(b, i)));
}

void ty_dev_arg_out(ty_dev_build_t *b, void *cmd, uint32_t o) {
  ty_dev_arg_ref(b, cmd, ty_dev_out(b, o));
  ty_dev_arg_i32(b, cmd, ty_dev_dt(ty_dev_vout(b, o)));
}

/* ---- argument lists ---- */

void ty_dev_args_binary(ty_dev_build_t *b, void *cmd, int op, int64_t n, const ty_op_bcast_t *p) {
  ty_dev_arg_in(b, cmd, 0);
  ty_dev_arg_in(b, cmd, 1);
  ty_dev_arg_out(b, cmd, 0);
  ty_dev_arg_i32(b, cmd, op);
  ty_dev_arg_i64(b, cmd, n);
  ty_dev_arg_i32(b, cmd, p->rank);
  ty_dev_arg_dims8(b, cmd, p->dims);
  ty_dev_arg_dims8(b, cmd, p->stride[0]);
  ty_dev_arg_dims8(b, cmd, p->stride[1]);
}

void ty_dev_args_embedding(ty_dev_build_t *b, void *cmd) {
  const ty_dev_embedding_t e = ty_dev_embedding_of(b);
  ty_dev_arg_in(b, cmd, 0);
  ty_dev_arg_in(b, cmd, 1);
  ty_dev_arg_out(b, cmd, 0);
  ty_dev_arg_i64(b, cmd, e.N);
  ty_dev_arg_i64(b, cmd, e.V);
  ty_dev_arg_i64(b, cmd, e.D);
  ty_dev_arg_err(b, cmd);
}

/* The penalised logits, then the weights, per row. */
ty_dev_ref_t ty_dev_sample_work(ty_dev_build_t *b) {
  const ty_abi_value_t *logits = ty_dev_vin(b, 0);
  return ty_dev_scratch(b, (uint64_t)(logits->dims[0] * logits->dims[1]) * sizeof(float));
}

void ty_dev_args_sample_with(ty_dev_build_t *b, void *cmd, ty_dev_ref_t work) {
  const ty_abi_value_t *logits = ty_dev_vin(b, 0), *hist = ty_dev_vin(b, 3);
  const int64_t N = logits->dims[0], V = logits->dims[1];
  const int64_t L = hist ? hist->dims[1] : 0;
  /* The history's counts per row. */
  const ty_dev_ref_t counts =
      L > 0 ? ty_dev_scratch(b, (uint64_t)(N * V) * sizeof(int32_t)) : ty_dev_none();
  ty_dev_arg_in(b, cmd, 0);
  ty_dev_arg_ref(b, cmd, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, cmd, ty_dev_in(b, 2));
  ty_dev_arg_ref(b, cmd, L > 0 ? ty_dev_in(b, 3) : ty_dev_none());
  ty_dev_arg_i64(b, cmd, L);
  ty_dev_arg_i64(b, cmd, V);
  ty_dev_arg_ref(b, cmd, work);
  ty_dev_arg_ref(b, cmd, counts);
  ty_dev_arg_ref(b, cmd, ty_dev_out(b, 0));
  ty_dev_arg_ref(b, cmd, ty_dev_out(b, 1));
  ty_dev_arg_err(b, cmd);
}

void ty_dev_args_sample(ty_dev_build_t *b, void *cmd) {
  ty_dev_args_sample_with(b, cmd, ty_dev_sample_work(b));
}

void ty_dev_args_top_logprobs(ty_dev_build_t *b, void *cmd) {
  ty_dev_arg_in(b, cmd, 0);
  ty_dev_arg_i64(b, cmd, ty_dev_vin(b, 0)->dims[1]);
  ty_dev_arg_i32(b, cmd, (int32_t)ty_dev_vout(b, 0)->dims[1]);
  ty_dev_arg_ref(b, cmd, ty_dev_out(b, 0));
  ty_dev_arg_ref(b, cmd, ty_dev_out(b, 1));
}

void ty_dev_args_kv_write(ty_dev_build_t *b, void *cmd) {
  const ty_abi_value_t *cache = ty_dev_vin(b, 0), *fresh = ty_dev_vin(b, 1);
  ty_dev_arg_ref(b, cmd, ty_dev_in(b, 1));
  ty_dev_arg_ref(b, cmd, ty_dev_out(b, 0));
  ty_dev_arg_in(b, cmd, 2);
  ty_dev_arg_i32(b, cmd, (int32_t)ty_desc_dtype_size(ty_dev_vout(b, 0)->dtype));
  ty_dev_arg_i64(b, cmd, cache->dims[1]);
  ty_dev_arg_i64(b, cmd, fresh->dims[1]);
  ty_dev_arg_i64(b, cmd, fresh->dims[2] * fresh->dims[3]);
  ty_dev_arg_i64(b, cmd, ty_dev_numel(fresh));
  ty_dev_arg_err(b, cmd);
}

void ty_dev_args_cast(ty_dev_build_t *b, void *cmd) {
  ty_dev_arg_in(b, cmd, 0);
  ty_dev_arg_out(b, cmd, 0);
  ty_dev_arg_i64(b, cmd, ty_dev_numel(ty_dev_vout(b, 0)));
  ty_dev_arg_err(b, cmd);
}

/* ---- decoders ---- */

void ty_dev_args_strided_copy(ty_dev_build_t *b, void *cmd, ty_dev_ref_t x, ty_dev_ref_t y,
                              size_t esize, int vec, int64_t n, int rank, const int64_t dims[8],
                              const int64_t xs[8], const int64_t ys[8]) {
  ty_dev_arg_ref(b, cmd, x);
  ty_dev_arg_ref(b, cmd, y);
  ty_dev_arg_i32(b, cmd, (int32_t)esize);
  if (vec > 0) ty_dev_arg_i32(b, cmd, vec);
  ty_dev_arg_i64(b, cmd, n);
  ty_dev_arg_i32(b, cmd, rank);
  ty_dev_arg_dims8(b, cmd, dims);
  ty_dev_arg_dims8(b, cmd, xs);
  ty_dev_arg_dims8(b, cmd, ys);
}

int64_t ty_dev_rows(const ty_abi_value_t *v, int64_t *out_C) {
  *out_C = v->rank ? v->dims[v->rank - 1] : 1;
  return *out_C ? ty_dev_numel(v) / *out_C : 0;
}

int ty_dev_binary_op(const ty_dev_build_t *b) {
  static const char *const names[] = {"add", "sub", "mul", "div"};
  int op = 0;
  while (op < 3 && strcmp(names[op], b->node->op) != 0) ++op;
  return op;
}

ty_dev_embedding_t ty_dev_embedding_of(const ty_dev_build_t *b) {
  const bool backward = strcmp(b->node->op, "embedding_backward") == 0;
  const ty_abi_value_t *table = backward ? ty_dev_vout(b, 0) : ty_dev_vin(b, 0);
  return (ty_dev_embedding_t){ty_dev_numel(ty_dev_vin(b, 1)), table->dims[0], table->dims[1]};
}

void ty_dev_reduce_axes(const ty_dev_build_t *b, bool red[8]) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  const ty_abi_attr_t *a = ty_desc_node_attr(b->node, "axes");
  const uint32_t count = a && a->kind == TY_ATTR_INTS ? a->count : 0;
  for (uint32_t d = 0; d < 8; ++d) red[d] = count == 0 && d < x->rank;
  for (uint32_t k = 0; k < count; ++k) {
    int64_t ax = a->ints[k] < 0 ? a->ints[k] + (int64_t)x->rank : a->ints[k];
    if (ax >= 0 && ax < (int64_t)x->rank) red[ax] = true;
  }
}

void ty_dev_reduce_plan(const ty_dev_build_t *b, const bool red[8], int64_t pad_dim,
                        ty_dev_reduce_plan_t *out) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  int64_t xs[8];
  ty_op_strides(x->rank, x->dims, xs);
  out->krank = out->rrank = 0;
  for (int d = 0; d < 8; ++d) {
    out->kdims[d] = out->rdims[d] = pad_dim;
    out->kstr[d] = out->rstr[d] = 0;
  }
  for (uint32_t d = 0; d < x->rank; ++d) {
    if (x->dims[d] == 1) continue;
    int64_t *dims = red[d] ? out->rdims : out->kdims, *str = red[d] ? out->rstr : out->kstr;
    int *r = red[d] ? &out->rrank : &out->krank;
    if (*r > 0 && str[*r - 1] == xs[d] * x->dims[d]) {
      dims[*r - 1] *= x->dims[d];
      str[*r - 1] = xs[d];
    } else {
      dims[*r] = x->dims[d];
      str[(*r)++] = xs[d];
    }
  }
}

void ty_dev_args_reduce_plan(ty_dev_build_t *b, void *cmd, const ty_dev_reduce_plan_t *p) {
  ty_dev_arg_i32(b, cmd, p->krank);
  ty_dev_arg_dims8(b, cmd, p->kdims);
  ty_dev_arg_dims8(b, cmd, p->kstr);
  ty_dev_arg_i32(b, cmd, p->rrank);
  ty_dev_arg_dims8(b, cmd, p->rdims);
  ty_dev_arg_dims8(b, cmd, p->rstr);
}

uint64_t ty_dev_chunk_count(const ty_dev_build_t *b, uint32_t first, uint32_t count,
                            uint64_t chunk) {
  uint64_t chunks = 0;
  for (uint32_t i = first; i < first + count; ++i) {
    chunks += ((uint64_t)ty_dev_numel(ty_dev_vin(b, i)) + chunk - 1) / chunk;
  }
  return chunks;
}

ty_dev_clip_t ty_dev_clip_partials(ty_dev_build_t *b, uint64_t chunk, size_t esize,
                                   ty_dev_sumsq_fn sumsq) {
  const uint32_t count = b->node->input_count - 1;
  ty_dev_clip_t clip;
  clip.slots = ty_dev_chunk_count(b, 1, count, chunk);
  clip.partial = ty_dev_scratch(b, (clip.slots ? clip.slots : 1) * esize);
  clip.coef = ty_dev_scratch(b, esize);
  uint64_t slot = 0;
  for (uint32_t i = 1; i <= count && !b->status; ++i) {
    const int64_t n = ty_dev_numel(ty_dev_vin(b, i));
    if (n > 0) slot += sumsq(b, i, n, clip.partial, slot);
  }
  return clip;
}

void ty_dev_args_clip_finish(ty_dev_build_t *b, void *cmd, const ty_dev_clip_t *clip) {
  ty_dev_arg_ref(b, cmd, clip->partial);
  ty_dev_arg_i64(b, cmd, (int64_t)clip->slots);
  ty_dev_arg_in(b, cmd, 0);
  ty_dev_arg_out(b, cmd, 0);
  ty_dev_arg_ref(b, cmd, clip->coef);
}

ty_dev_norm_bwd_t ty_dev_norm_bwd_of(const ty_dev_build_t *b) {
  ty_dev_norm_bwd_t nb;
  nb.rms = strcmp(b->node->op, "rmsnorm_backward") == 0;
  const uint32_t r = nb.rms ? 3 : 4; /* rstd's input */
  nb.mean = nb.rms ? ty_dev_none() : ty_dev_in(b, 3);
  nb.dtm = nb.rms ? 0 : ty_dev_dt(ty_dev_vin(b, 3));
  nb.rstd = ty_dev_in(b, r);
  nb.dtr = ty_dev_dt(ty_dev_vin(b, r));
  nb.has_dbeta = !nb.rms && b->node->output_count > 2;
  nb.dbeta = nb.has_dbeta ? ty_dev_out(b, 2) : ty_dev_none();
  nb.dtdb = nb.has_dbeta ? ty_dev_dt(ty_dev_vout(b, 2)) : 0;
  return nb;
}

void ty_dev_args_norm_stats(ty_dev_build_t *b, void *cmd, const ty_dev_norm_bwd_t *nb) {
  ty_dev_arg_ref(b, cmd, nb->mean);
  ty_dev_arg_i32(b, cmd, nb->dtm);
  ty_dev_arg_ref(b, cmd, nb->rstd);
  ty_dev_arg_i32(b, cmd, nb->dtr);
}

void ty_dev_args_norm_dbeta(ty_dev_build_t *b, void *cmd, const ty_dev_norm_bwd_t *nb) {
  ty_dev_arg_ref(b, cmd, nb->dbeta);
  ty_dev_arg_i32(b, cmd, nb->dtdb);
}

ty_dev_ref_t ty_dev_rope_freq_table(ty_dev_build_t *b, const double *inv, int64_t half) {
  float *table = malloc((size_t)(half > 0 ? half : 1) * 2 * sizeof(float));
  if (!table) {
    ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    return ty_dev_none();
  }
  for (int64_t j = 0; j < half; ++j) {
    const float hi = (float)inv[j];
    table[2 * j] = hi;
    table[2 * j + 1] = (float)(inv[j] - (double)hi);
  }
  ty_dev_ref_t freq = ty_dev_aux(b, table, (uint64_t)half * 2 * sizeof(float));
  free(table);
  return freq;
}

ty_dev_rope_t ty_dev_rope_of(const ty_dev_build_t *b) {
  const ty_abi_value_t *x = ty_dev_vin(b, 0);
  ty_dev_rope_t r = {.backward = strcmp(b->node->op, "rope_backward") == 0};
  r.T = x->dims[1];
  r.H = x->dims[2];
  r.D = x->dims[3];
  r.pairs = ty_dev_numel(x) / 2;
  return r;
}

void ty_dev_args_rope_tail(ty_dev_build_t *b, void *cmd, ty_dev_ref_t freq,
                           const ty_dev_rope_t *rope) {
  ty_dev_arg_in(b, cmd, 1);
  ty_dev_arg_ref(b, cmd, freq);
  ty_dev_arg_i64(b, cmd, rope->T);
  ty_dev_arg_i64(b, cmd, rope->H);
  ty_dev_arg_i64(b, cmd, rope->D);
  ty_dev_arg_f32(b, cmd, rope->backward ? -1.0f : 1.0f);
  ty_dev_arg_i64(b, cmd, rope->pairs);
}

bool ty_dev_dropout_p(ty_dev_build_t *b, double *out_p) {
  const double p = ty_desc_node_attr_float(b->node, "p", 0.0);
  *out_p = p;
  if (ty_desc_node_attr_int(b->node, "seq_len", 0) > 0) {
    ty_dev_fail(b, TY_CODE_UNIMPLEMENTED,
                "attribute 'seq_len' (dropout numbered as in the whole sequence, for context "
                "parallel) is not supported on this backend yet; run --cp on cpu");
    return false;
  }
  if (p >= 0.0 && p < 1.0) return true;
  ty_dev_fail(b, TY_CODE_INVALID_ARGUMENT, "probability %g is outside [0, 1)", p);
  return false;
}

ty_dev_matmul_t ty_dev_matmul_of(const ty_dev_build_t *b) {
  const ty_abi_value_t *a = ty_dev_vin(b, 0), *c = ty_dev_vout(b, 0);
  ty_dev_matmul_t m;
  m.ta = ty_desc_node_attr_int(b->node, "trans_a", 0) != 0;
  m.tb = ty_desc_node_attr_int(b->node, "trans_b", 0) != 0;
  m.M = c->dims[c->rank - 2];
  m.N = c->dims[c->rank - 1];
  m.K = m.ta ? a->dims[a->rank - 2] : a->dims[a->rank - 1];
  return m;
}

/* ---- command lists ---- */

void *ty_dev_push(ty_dev_build_t *b, void **items, uint32_t *count, uint32_t *cap, size_t size) {
  if (b->status) return NULL;
  if (*count == *cap) {
    const uint32_t grown_cap = *cap ? *cap * 2 : 64;
    void *grown = realloc(*items, (size_t)grown_cap * size);
    if (!grown) {
      ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return NULL;
    }
    *items = grown;
    *cap = grown_cap;
  }
  unsigned char *item = (unsigned char *)*items + (size_t)(*count)++ * size;
  memset(item, 0, size);
  return item;
}
