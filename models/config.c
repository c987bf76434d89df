/* config.json parsing. Defaults follow transformers' config classes
 * (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config) for fields that
 * save_pretrained may omit; anything Trainyard cannot honour is refused by
 * name. */
#include "models/config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/llm.h"

const ty_file_kind_t ty_model_config_file_kind = {
    .what = "model config",
    .max_bytes = 16 * TY_MIB,
    .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT,
};

typedef struct {
  json_t *root;
  const char *origin;
} ty_cfg_t;

static ty_status_t ty_cfg_error(const ty_cfg_t *c, const char *field, const char *what) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: field '%s' %s", c->origin, field, what);
}

/* Integer field; `required` fails when absent; null counts as absent. */
static ty_status_t ty_cfg_int(const ty_cfg_t *c, const char *field, bool required,
                              int64_t dflt, int64_t min, int64_t *out) {
  json_t *v = json_object_get(c->root, field);
  if (!v || json_is_null(v)) {
    if (required) return ty_cfg_error(c, field, "is missing");
    *out = dflt;
    return TY_OK;
  }
  if (!json_is_integer(v)) return ty_cfg_error(c, field, "must be an integer");
  *out = (int64_t)json_integer_value(v);
  if (*out < min) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: field '%s' is %lld, must be >= %lld",
                          c->origin, field, (long long)*out, (long long)min);
  }
  return TY_OK;
}

static ty_status_t ty_cfg_number_in(const ty_cfg_t *c, json_t *obj, const char *field,
                                    bool required, double dflt, double *out) {
  json_t *v = json_object_get(obj, field);
  if (!v || json_is_null(v)) {
    if (required) return ty_cfg_error(c, field, "is missing");
    *out = dflt;
    return TY_OK;
  }
  if (!json_is_number(v)) return ty_cfg_error(c, field, "must be a number");
  *out = json_number_value(v);
  if (!(*out > 0)) return ty_cfg_error(c, field, "must be positive");
  return TY_OK;
}

static ty_status_t ty_cfg_bool(const ty_cfg_t *c, const char *field, bool dflt, bool *out) {
  json_t *v = json_object_get(c->root, field);
  if (!v || json_is_null(v)) {
    *out = dflt;
    return TY_OK;
  }
  if (!json_is_boolean(v)) return ty_cfg_error(c, field, "must be true or false");
  *out = json_is_true(v);
  return TY_OK;
}

static ty_status_t ty_cfg_string(const ty_cfg_t *c, const char *field, const char *dflt,
                                 char *out, size_t capacity) {
  json_t *v = json_object_get(c->root, field);
  const char *s = dflt;
  if (v && !json_is_null(v)) {
    if (!json_is_string(v)) return ty_cfg_error(c, field, "must be a string");
    s = json_string_value(v);
  }
  if (!s) return ty_cfg_error(c, field, "is missing");
  if (strlen(s) >= capacity) return ty_cfg_error(c, field, "is too long");
  memcpy(out, s, strlen(s) + 1);
  return TY_OK;
}

/* Fields that change the computation in ways Trainyard does not implement:
 * refusing them beats computing something else. */
static ty_status_t ty_cfg_refuse_true(const ty_cfg_t *c, const char *field, const char *why) {
  json_t *v = json_object_get(c->root, field);
  if (v && json_is_true(v)) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "%s: field '%s' is true: %s", c->origin,
                          field, why);
  }
  return TY_OK;
}

static ty_status_t ty_cfg_token_id(const ty_cfg_t *c, const char *field, int64_t *out) {
  json_t *v = json_object_get(c->root, field);
  *out = -1;
  if (!v || json_is_null(v)) return TY_OK;
  if (json_is_array(v)) v = json_array_size(v) ? json_array_get(v, 0) : NULL;
  if (v && json_is_integer(v)) *out = (int64_t)json_integer_value(v);
  return TY_OK;
}

static ty_status_t ty_cfg_gpt2(const ty_cfg_t *c, ty_model_config_t *m) {
  m->arch = TY_ARCH_GPT2;
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "vocab_size", true, 0, 1, &m->vocab_size));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "n_embd", true, 0, 1, &m->hidden_size));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "n_layer", true, 0, 1, &m->num_layers));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "n_head", true, 0, 1, &m->num_heads));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "n_positions", true, 0, 1, &m->max_positions));
  int64_t inner = 0;
  if (__builtin_mul_overflow(m->hidden_size, (int64_t)4, &inner)) {
    return ty_cfg_error(c, "n_embd", "is too large (4 * n_embd, the MLP width, overflows)");
  }
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "n_inner", false, inner, 1, &m->intermediate_size));
  if (m->hidden_size % m->num_heads != 0) {
    return ty_cfg_error(c, "n_head", "must divide n_embd");
  }
  m->num_kv_heads = m->num_heads;
  m->head_dim = m->hidden_size / m->num_heads;
  TY_RETURN_IF_ERROR(ty_cfg_number_in(c, c->root, "layer_norm_epsilon", false, 1e-5,
                                      &m->norm_eps));
  TY_RETURN_IF_ERROR(ty_cfg_string(c, "activation_function", "gelu_new", m->activation,
                                   sizeof(m->activation)));
  if (strcmp(m->activation, "gelu_new") != 0 && strcmp(m->activation, "gelu_pytorch_tanh") != 0) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: field 'activation_function' is '%s'; only the tanh "
                          "approximation (gelu_new, gelu_pytorch_tanh) is implemented",
                          c->origin, m->activation);
  }
  bool scale = true;
  TY_RETURN_IF_ERROR(ty_cfg_bool(c, "scale_attn_weights", true, &scale));
  if (!scale) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: field 'scale_attn_weights' is false; unscaled attention "
                          "is not implemented", c->origin);
  }
  TY_RETURN_IF_ERROR(ty_cfg_refuse_true(c, "scale_attn_by_inverse_layer_idx",
                                        "per-layer attention scaling is not implemented"));
  TY_RETURN_IF_ERROR(ty_cfg_refuse_true(c, "add_cross_attention",
                                        "cross-attention is not implemented"));
  TY_RETURN_IF_ERROR(ty_cfg_bool(c, "tie_word_embeddings", true, &m->tie_word_embeddings));
  m->qkv_bias = m->o_bias = m->mlp_bias = true;
  return TY_OK;
}

/* rope_theta + rope_scaling (older form) or rope_parameters (newer form). */
static ty_status_t ty_cfg_rope(const ty_cfg_t *c, ty_model_config_t *m) {
  json_t *params = json_object_get(c->root, "rope_parameters");
  json_t *scaling = NULL;
  const char *field = "rope_scaling";
  if (params && !json_is_null(params)) {
    if (!json_is_object(params)) return ty_cfg_error(c, "rope_parameters", "must be an object");
    field = "rope_parameters";
    scaling = params;
    TY_RETURN_IF_ERROR(ty_cfg_number_in(c, params, "rope_theta", false, 10000.0, &m->rope_theta));
  } else {
    TY_RETURN_IF_ERROR(ty_cfg_number_in(c, c->root, "rope_theta", false, 10000.0, &m->rope_theta));
    scaling = json_object_get(c->root, "rope_scaling");
    if (scaling && json_is_null(scaling)) scaling = NULL;
    if (scaling && !json_is_object(scaling)) return ty_cfg_error(c, "rope_scaling", "must be an object or null");
  }
  m->rope_type = TY_ROPE_DEFAULT;
  if (!scaling) return TY_OK;
  json_t *type = json_object_get(scaling, "rope_type");
  if (!type) type = json_object_get(scaling, "type");
  const char *t = type && json_is_string(type) ? json_string_value(type) : "default";
  if (strcmp(t, "default") == 0) return TY_OK;
  if (strcmp(t, "llama3") != 0) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: field '%s' has rope_type '%s'; implemented: default, llama3",
                          c->origin, field, t);
  }
  m->rope_type = TY_ROPE_LLAMA3;
  double orig = 0;
  TY_RETURN_IF_ERROR(ty_cfg_number_in(c, scaling, "factor", true, 0, &m->rope_factor));
  TY_RETURN_IF_ERROR(ty_cfg_number_in(c, scaling, "low_freq_factor", true, 0,
                                      &m->rope_low_freq_factor));
  TY_RETURN_IF_ERROR(ty_cfg_number_in(c, scaling, "high_freq_factor", true, 0,
                                      &m->rope_high_freq_factor));
  TY_RETURN_IF_ERROR(ty_cfg_number_in(c, scaling, "original_max_position_embeddings", true, 0,
                                      &orig));
  m->rope_original_max_positions = (int64_t)orig;
  if (!(m->rope_high_freq_factor > m->rope_low_freq_factor)) {
    return ty_cfg_error(c, field, "needs high_freq_factor > low_freq_factor");
  }
  return TY_OK;
}

static ty_status_t ty_cfg_llama(const ty_cfg_t *c, ty_model_config_t *m) {
  m->arch = TY_ARCH_LLAMA;
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "vocab_size", true, 0, 1, &m->vocab_size));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "hidden_size", true, 0, 1, &m->hidden_size));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "intermediate_size", true, 0, 1, &m->intermediate_size));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "num_hidden_layers", true, 0, 1, &m->num_layers));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "num_attention_heads", true, 0, 1, &m->num_heads));
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "num_key_value_heads", false, m->num_heads, 1,
                                &m->num_kv_heads));
  if (m->num_heads % m->num_kv_heads != 0) {
    return ty_cfg_error(c, "num_key_value_heads", "must divide num_attention_heads");
  }
  if (m->hidden_size % m->num_heads != 0 && !json_object_get(c->root, "head_dim")) {
    return ty_cfg_error(c, "num_attention_heads", "must divide hidden_size (or give head_dim)");
  }
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "head_dim", false, m->hidden_size / m->num_heads, 2,
                                &m->head_dim));
  if (m->head_dim % 2 != 0) return ty_cfg_error(c, "head_dim", "must be even for RoPE");
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "max_position_embeddings", false, 2048, 1,
                                &m->max_positions));
  TY_RETURN_IF_ERROR(ty_cfg_number_in(c, c->root, "rms_norm_eps", false, 1e-6, &m->norm_eps));
  TY_RETURN_IF_ERROR(ty_cfg_string(c, "hidden_act", "silu", m->activation, sizeof(m->activation)));
  if (strcmp(m->activation, "silu") != 0) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: field 'hidden_act' is '%s'; only silu is implemented",
                          c->origin, m->activation);
  }
  bool qwen2 = strcmp(m->model_type, "qwen2") == 0;
  TY_RETURN_IF_ERROR(ty_cfg_bool(c, "tie_word_embeddings", false, &m->tie_word_embeddings));
  if (qwen2) {
    m->qkv_bias = true; /* Qwen2 always has q/k/v bias and no o_proj bias */
    m->o_bias = false;
    m->mlp_bias = false;
  } else {
    bool attention_bias = false;
    TY_RETURN_IF_ERROR(ty_cfg_bool(c, "attention_bias", false, &attention_bias));
    m->qkv_bias = m->o_bias = attention_bias;
    TY_RETURN_IF_ERROR(ty_cfg_bool(c, "mlp_bias", false, &m->mlp_bias));
  }
  TY_RETURN_IF_ERROR(ty_cfg_rope(c, m));
  /* Sliding windows: mistral always, qwen2 only with use_sliding_window. */
  m->sliding_window = 0;
  bool use_window = !qwen2;
  if (qwen2) TY_RETURN_IF_ERROR(ty_cfg_bool(c, "use_sliding_window", false, &use_window));
  if (use_window) {
    TY_RETURN_IF_ERROR(ty_cfg_int(c, "sliding_window", false, 0, 0, &m->sliding_window));
  }
  return TY_OK;
}

ty_status_t ty_model_config_parse(const char *json_text, const char *origin,
                                  ty_model_config_t *out) {
  memset(out, 0, sizeof(*out));
  json_error_t err;
  json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: not valid JSON (line %d: %s)", origin,
                          err.line, err.text);
  }
  ty_cfg_t c = {root, origin};
  ty_status_t s = TY_OK;
  if (!json_is_object(root)) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: the top level must be an object", origin);
    goto done;
  }
  json_t *type = json_object_get(root, "model_type");
  if (!type || !json_is_string(type)) {
    s = ty_cfg_error(&c, "model_type", "is missing or not a string");
    goto done;
  }
  s = ty_cfg_string(&c, "model_type", NULL, out->model_type, sizeof(out->model_type));
  if (s) goto done;
  if (strcmp(out->model_type, "gpt2") == 0) {
    s = ty_cfg_gpt2(&c, out);
  } else if (strcmp(out->model_type, "llama") == 0 || strcmp(out->model_type, "mistral") == 0 ||
             strcmp(out->model_type, "qwen2") == 0) {
    s = ty_cfg_llama(&c, out);
  } else {
    s = ty_status_make(TY_CODE_UNIMPLEMENTED,
                       "%s: model_type '%s' is not supported (supported: gpt2, llama, "
                       "mistral, qwen2)",
                       origin, out->model_type);
  }
  if (!s) s = ty_cfg_token_id(&c, "bos_token_id", &out->bos_token_id);
  if (!s) s = ty_cfg_token_id(&c, "eos_token_id", &out->eos_token_id);
  /* Sizes no model could have are refused here, before anything walks them. */
  if (!s) s = ty_status_annotate(ty_llm_param_count(out, NULL, NULL), "%s", origin);
done:
  json_decref(root);
  return s;
}

ty_status_t ty_model_config_load(const char *dir, ty_model_config_t *out) {
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/config.json", dir);
  if (n < 0 || (size_t)n >= sizeof(path)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "model folder path too long: %s", dir);
  }
  char *text = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read(path, &ty_model_config_file_kind, &text, &size);
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
    ty_status_t found = ty_status_make(TY_CODE_NOT_FOUND,
                                       "%s (a Hugging Face model folder holds config.json and "
                                       "model.safetensors)",
                                       ty_status_message(s));
    ty_status_free(s);
    s = found;
  }
  if (!s && size == 0) s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s is empty", path);
  if (!s) s = ty_model_config_parse(text, path, out);
  free(text);
  return s;
}
