/* Checkpoint <-> session state: name aliasing, strict accounting of every
 * tensor in the checkpoint, and float conversion to the graph's dtype. */
#include "models/checkpoint.h"

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

/* True when checkpoint tensor `ckpt_name` is one of the model's parameters. */
static bool ty_is_param_name(const ty_llm_t *model, const char *ckpt_name) {
  if (ty_llm_find_param(model, ckpt_name)) return true;
  char prefixed[TY_LLM_NAME_MAX + 16];
  snprintf(prefixed, sizeof(prefixed), "transformer.%s", ckpt_name);
  return model->config.arch == TY_ARCH_GPT2 && ty_llm_find_param(model, prefixed);
}

static ty_status_t ty_check_every_tensor_is_used(const ty_llm_t *model,
                                                 const ty_safetensors_set_t *set,
                                                 const char *dir) {
  for (size_t i = 0; i < ty_safetensors_set_tensor_count(set); ++i) {
    const char *name = ty_safetensors_set_tensor_at(set, i)->name;
    if (ty_is_param_name(model, name) || ty_is_ignored_buffer(name)) continue;
    if (model->config.tie_word_embeddings && strcmp(name, "lm_head.weight") == 0) continue;
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: checkpoint tensor '%s' is not a parameter of the %s graph "
                          "built from config.json (does config.json match the weights?)",
                          dir, name, model->config.model_type);
  }
  return TY_OK;
}

ty_status_t ty_llm_load_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *dir) {
  ty_safetensors_set_t *set = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_open_dir(dir, &set));
  ty_status_t s = ty_check_every_tensor_is_used(model, set, dir);
  ty_dtype_t dtype = model->options.dtype;
  for (uint32_t i = 0; i < model->param_count && !s; ++i) {
    const ty_llm_param_t *p = &model->params[i];
    const ty_safetensors_tensor_t *t = ty_find_param_tensor(set, p->name);
    if (!t) {
      s = ty_status_make(TY_CODE_NOT_FOUND, "%s: the checkpoint has no tensor '%s'", dir,
                         p->name);
      break;
    }
    bool same = t->rank == p->rank;
    for (uint32_t d = 0; d < p->rank && same; ++d) same = t->dims[d] == p->dims[d];
    if (!same) {
      char want[96], got[96];
      ty_tensor_desc_t wd, gd;
      ty_tensor_desc_init(dtype, p->rank, p->dims, NULL, &wd);
      ty_safetensors_tensor_desc(t, &gd);
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                         "%s: tensor '%s' is %s but config.json implies %s", dir, t->name,
                         ty_tensor_desc_format(&gd, got, sizeof(got)),
                         ty_tensor_desc_format(&wd, want, sizeof(want)));
      break;
    }
    size_t bytes = (size_t)t->element_count * ty_dtype_size(dtype);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory loading '%s'", p->name);
      break;
    }
    s = ty_safetensors_tensor_read(t, dtype, buf, bytes);
    if (!s) s = ty_session_bind(session, p->name, dtype, p->rank, p->dims, buf, bytes);
    free(buf);
  }
  ty_safetensors_set_close(set);
  return s;
}

ty_status_t ty_llm_save_weights(const ty_llm_t *model, ty_session_t *session,
                                const char *dir, uint64_t max_shard_bytes) {
  ty_safetensors_writer_t *w = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_writer_create(&w));
  void **data = calloc(model->param_count ? model->param_count : 1, sizeof(void *));
  ty_status_t s = data ? TY_OK
                       : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory saving");
  ty_dtype_t dtype = model->options.dtype;
  for (uint32_t i = 0; i < model->param_count && !s; ++i) {
    const ty_llm_param_t *p = &model->params[i];
    uint64_t count = 1;
    for (uint32_t d = 0; d < p->rank; ++d) count *= (uint64_t)p->dims[d];
    size_t bytes = (size_t)count * ty_dtype_size(dtype);
    data[i] = malloc(bytes ? bytes : 1);
    if (!data[i]) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory saving '%s'", p->name);
      break;
    }
    s = ty_session_read(session, p->name, data[i], bytes);
    if (!s) s = ty_safetensors_writer_add(w, p->name, dtype, p->rank, p->dims, data[i], bytes);
  }
  if (!s) s = ty_safetensors_writer_write_dir(w, dir, max_shard_bytes);
  ty_safetensors_writer_destroy(w);
  for (uint32_t i = 0; data && i < model->param_count; ++i) free(data[i]);
  free(data);
  return s;
}
