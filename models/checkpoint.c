/* Checkpoint <-> session state: name aliasing, strict accounting of every
 * tensor in the checkpoint against the parameter set config.json implies
 * (before any graph is built), float conversion to the graph's dtype, and
 * the refusal of NaN and infinite weights. */
#include "models/checkpoint.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"
#include "models/safetensors.h"

static bool ty_has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Buffers transformers saves in some checkpoints that are not parameters. */
static bool ty_is_ignored_buffer(const char *name) {
  return ty_has_suffix(name, ".attn.bias") || ty_has_suffix(name, ".attn.masked_bias") ||
         ty_has_suffix(name, "rotary_emb.inv_freq");
}

/* The checkpoint tensor holding parameter `name` (GPT-2 checkpoints saved
 * from GPT2Model lack the "transformer." prefix). */
static const ty_safetensors_tensor_t *ty_find_param_tensor(const ty_safetensors_set_t *set,
                                                           const char *name) {
  const ty_safetensors_tensor_t *t = ty_safetensors_set_find(set, name);
  if (!t && strncmp(name, "transformer.", 12) == 0) {
    t = ty_safetensors_set_find(set, name + 12);
  }
  return t;
}

static int ty_cmp_names(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool ty_sorted_has(const char **names, uint32_t count, const char *name) {
  return count && bsearch(&name, names, count, sizeof(*names), ty_cmp_names) != NULL;
}

/* A tensor of the checkpoint that no parameter claims. */
static ty_status_t ty_check_no_extra(const ty_model_config_t *c, const ty_safetensors_set_t *set,
                                     const ty_llm_param_t *specs, uint32_t count,
                                     const char *dir) {
  const char **names = malloc((count ? count : 1) * sizeof(*names));
  if (!names) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory checking %s", dir);
  for (uint32_t i = 0; i < count; ++i) names[i] = specs[i].name;
  qsort(names, count, sizeof(*names), ty_cmp_names);
  ty_status_t s = TY_OK;
  for (size_t i = 0; i < ty_safetensors_set_tensor_count(set) && !s; ++i) {
    const char *name = ty_safetensors_set_tensor_at(set, i)->name;
    char prefixed[TY_LLM_NAME_MAX + 16];
    snprintf(prefixed, sizeof(prefixed), "transformer.%s", name);
    if (ty_sorted_has(names, count, name) || ty_is_ignored_buffer(name)) continue;
    if (c->arch == TY_ARCH_GPT2 && ty_sorted_has(names, count, prefixed)) continue;
    if (c->tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) continue;
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "%s: checkpoint tensor '%s' is not a parameter of the %s model "
                       "config.json describes (%lld layers): does config.json match the "
                       "weights?",
                       dir, name, c->model_type, (long long)c->num_layers);
  }
  free(names);
  return s;
}

/* Every parameter present with its shape, and nothing else. Walks the
 * parameters in order and stops at the first missing one, so a config with
 * far more layers than the checkpoint fails at once. */
static ty_status_t ty_check_set(const ty_model_config_t *c, const ty_safetensors_set_t *set,
                                const char *dir) {
  uint32_t count = 0;
  TY_RETURN_IF_ERROR(ty_llm_param_count(c, &count, NULL));
  /* More parameters than checkpoint tensors: one of them is missing for
   * sure; find which without allocating for all of them. */
  size_t available = ty_safetensors_set_tensor_count(set);
  ty_llm_param_t *specs = count <= available ? calloc(count ? count : 1, sizeof(*specs)) : NULL;
  if (count <= available && !specs) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory checking %s", dir);
  }
  ty_status_t s = TY_OK;
  for (uint32_t i = 0; i < count && !s; ++i) {
    ty_llm_param_t p;
    ty_llm_param_spec(c, i, &p);
    const ty_safetensors_tensor_t *t = ty_find_param_tensor(set, p.name);
    if (!t) {
      s = ty_status_make(TY_CODE_NOT_FOUND,
                         "%s: the checkpoint has no tensor '%s', which the %s model config.json "
                         "describes (%lld layers, %u parameter tensors) needs; the checkpoint "
                         "holds %zu tensors: does config.json match the weights?",
                         dir, p.name, c->model_type, (long long)c->num_layers, count,
                         available);
      break;
    }
    bool same = t->rank == p.rank;
    for (uint32_t d = 0; d < p.rank && same; ++d) same = t->dims[d] == p.dims[d];
    if (!same) {
      char want[96], got[96];
      ty_tensor_desc_t wd, gd;
      ty_tensor_desc_init(t->dtype, p.rank, p.dims, NULL, &wd);
      ty_safetensors_tensor_desc(t, &gd);
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "%s: tensor '%s' is %s but config.json implies %s", dir, t->name,
                         ty_tensor_desc_format(&gd, got, sizeof(got)),
                         ty_tensor_desc_format(&wd, want, sizeof(want)));
    } else if (!ty_dtype_is_float(t->dtype) || t->is_bool) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "%s: tensor '%s' is %s, not a float dtype (a quantized checkpoint?)",
                         dir, t->name, ty_safetensors_dtype_string(t->dtype, t->is_bool));
    }
    if (specs) specs[i] = p;
  }
  if (!s) {
    s = specs ? ty_check_no_extra(c, set, specs, count, dir)
              : ty_status_make(TY_CODE_INTERNAL, "%s: parameters outnumber the tensors", dir);
  }
  free(specs);
  return s;
}

ty_status_t ty_llm_check_weights(const ty_model_config_t *config, const char *dir) {
  ty_safetensors_set_t *set = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_open_dir(dir, &set));
  ty_status_t s = ty_check_set(config, set, dir);
  ty_safetensors_set_close(set);
  return s;
}

ty_status_t ty_llm_check_finite(const char *origin, const char *name, ty_dtype_t dtype,
                                const void *data, uint64_t count, const ty_dtype_t *source_dtype,
                                const void *source, const char *override_hint) {
  uint64_t index = 0;
  double value = 0;
  if (!ty_dtype_find_nonfinite(dtype, data, count, &index, &value)) return TY_OK;
  const char *what = isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf";
  char hint[256] = "";
  if (override_hint) snprintf(hint, sizeof(hint), "; %s", override_hint);
  /* Finite in the file but not in the graph's dtype: an overflow in the
   * conversion (f32 70000 in f16), which another --dtype avoids. */
  double original = value;
  if (source && source_dtype && *source_dtype != dtype &&
      !ty_safetensors_convert(*source_dtype, (const char *)source +
                                                 index * ty_dtype_size(*source_dtype),
                              TY_DTYPE_F64, &original, 1) &&
      isfinite(original)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: tensor '%s' holds %.9g at element %llu, which overflows %s; "
                          "load it in a wider dtype (--dtype f32 or bf16)%s",
                          origin, name, original, (unsigned long long)index,
                          ty_dtype_name(dtype), hint);
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "%s: tensor '%s' holds %s at element %llu (of %llu): the weights are "
                        "damaged or come from a diverged run%s",
                        origin, name, what, (unsigned long long)index,
                        (unsigned long long)count, hint);
}

ty_status_t ty_llm_load_weights_with(const ty_llm_t *model, ty_session_t *session,
                                     const char *dir, const ty_llm_load_options_t *options,
                                     ty_llm_load_report_t *out_report) {
  ty_llm_load_options_t defaults = {0};
  if (!options) options = &defaults;
  if (out_report) memset(out_report, 0, sizeof(*out_report));
  ty_safetensors_set_t *set = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_open_dir(dir, &set));
  ty_status_t s = ty_check_set(&model->config, set, dir);
  ty_dtype_t dtype = model->options.dtype;
  for (uint32_t i = 0; i < model->param_count && !s; ++i) {
    const ty_llm_param_t *p = &model->params[i];
    const ty_safetensors_tensor_t *t = ty_find_param_tensor(set, p->name);
    size_t bytes = (size_t)t->element_count * ty_dtype_size(dtype);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory loading '%s'", p->name);
      break;
    }
    s = ty_safetensors_tensor_read(t, dtype, buf, bytes);
    if (!s) {
      s = ty_llm_check_finite(dir, t->name, dtype, buf, t->element_count, &t->dtype, t->data,
                              options->allow_nonfinite ? NULL : options->nonfinite_hint);
      if (s && options->allow_nonfinite) {
        if (out_report && out_report->nonfinite_tensors++ == 0) {
          snprintf(out_report->first_nonfinite, sizeof(out_report->first_nonfinite), "%s",
                   ty_status_message(s));
        }
        ty_status_free(s);
        s = TY_OK;
      }
    }
    if (!s) s = ty_llm_bind_whole(model, session, p, dtype, buf);
    free(buf);
  }
  ty_safetensors_set_close(set);
  return s;
}

ty_status_t ty_llm_load_weights(const ty_llm_t *model, ty_session_t *session, const char *dir) {
  return ty_llm_load_weights_with(model, session, dir, NULL, NULL);
}

ty_status_t ty_llm_bind_whole(const ty_llm_t *model, ty_session_t *session,
                              const ty_llm_param_t *p, ty_dtype_t dtype, const void *full) {
  const size_t elem = ty_dtype_size(dtype),
               bytes = (size_t)ty_llm_param_part_count(p) * elem;
  if (model->options.tp_size <= 1 || p->tp_axis < 0) {
    return ty_session_bind(session, p->name, dtype, p->rank, p->dims, full, bytes);
  }
  void *part = malloc(bytes ? bytes : 1);
  if (!part) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for '%s'", p->name);
  ty_llm_tp_take_part(p, model->options.tp_size, model->options.tp_rank, elem, full, part);
  ty_status_t s = ty_session_bind(session, p->name, dtype, p->rank, p->dims, part, bytes);
  free(part);
  return s;
}

static ty_status_t ty_llm_write_tagged(const ty_llm_t *model, void *const *full, const char *dir,
                                       uint64_t max_shard_bytes, const ty_llm_weights_tag_t *tags,
                                       size_t tag_count) {
  ty_safetensors_writer_t *w = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_writer_create(&w));
  ty_dtype_t dtype = model->options.dtype;
  ty_status_t s = TY_OK;
  for (size_t i = 0; i < tag_count && !s; ++i) {
    s = ty_safetensors_writer_set_metadata(w, tags[i].key, tags[i].value);
  }
  for (uint32_t i = 0; i < model->param_count && !s; ++i) {
    const ty_llm_param_t *p = &model->params[i];
    const uint64_t bytes = (uint64_t)ty_llm_param_full_count(p) * ty_dtype_size(dtype);
    s = ty_safetensors_writer_add(w, p->name, dtype, p->rank, p->full_dims, full[i], bytes);
  }
  if (!s) s = ty_safetensors_writer_write_dir(w, dir, max_shard_bytes);
  ty_safetensors_writer_destroy(w);
  return s;
}

ty_status_t ty_llm_write_weights(const ty_llm_t *model, void *const *full, const char *dir,
                                 uint64_t max_shard_bytes) {
  return ty_llm_write_tagged(model, full, dir, max_shard_bytes, NULL, 0);
}

static ty_status_t ty_llm_save_tagged(const ty_llm_t *model, ty_session_t *session,
                                      const char *dir, uint64_t max_shard_bytes,
                                      const ty_llm_weights_tag_t *tags, size_t tag_count) {
  if (model->options.tp_size > 1) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "saving a tensor-parallel model: its session holds rank %d's parts "
                          "of %d; gather them into whole tensors first",
                          model->options.tp_rank, model->options.tp_size);
  }
  void **data = calloc(model->param_count ? model->param_count : 1, sizeof(void *));
  ty_status_t s = data ? TY_OK
                       : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory saving");
  ty_dtype_t dtype = model->options.dtype;
  for (uint32_t i = 0; i < model->param_count && !s; ++i) {
    const ty_llm_param_t *p = &model->params[i];
    size_t bytes = (size_t)ty_llm_param_part_count(p) * ty_dtype_size(dtype);
    data[i] = malloc(bytes ? bytes : 1);
    if (!data[i]) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory saving '%s'", p->name);
      break;
    }
    s = ty_session_read(session, p->name, data[i], bytes);
  }
  if (!s) s = ty_llm_write_tagged(model, data, dir, max_shard_bytes, tags, tag_count);
  for (uint32_t i = 0; data && i < model->param_count; ++i) free(data[i]);
  free(data);
  return s;
}

ty_status_t ty_llm_save_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *dir, uint64_t max_shard_bytes) {
  return ty_llm_save_tagged(model, session, dir, max_shard_bytes, NULL, 0);
}

ty_status_t ty_llm_save_weights_tagged(const ty_llm_t *model, ty_session_t *session,
                                       void *const *full, const char *dir,
                                       uint64_t max_shard_bytes,
                                       const ty_llm_weights_tag_t *tags, size_t tag_count) {
  return full ? ty_llm_write_tagged(model, full, dir, max_shard_bytes, tags, tag_count)
              : ty_llm_save_tagged(model, session, dir, max_shard_bytes, tags, tag_count);
}
