/* config.json parsing. Defaults follow transformers' config classes
 * (GPT2Config, LlamaConfig, MistralConfig, Qwen2Config) for fields that
 * save_pretrained may omit; anything Trainyard cannot honour is refused by
 * name, and so is any enum-like field whose value is unknown or of the
 * wrong type: such a field never falls back to a default. RoPE and sliding
 * windows are in config_attention.c. */
#include "models/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "hal/file.h"
#include "models/config_internal.h"
#include "models/json_input.h"
#include "models/llm.h"

const ty_file_kind_t ty_model_config_file_kind = {
    .what = "model config",
    .max_bytes = 16 * TY_MIB,
    .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT,
    .skip_bom = true,
};

ty_status_t ty_cfg_error(const ty_cfg_t *c, const char *field, const char *what) {
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

ty_status_t ty_cfg_positive(const ty_cfg_t *c, json_t *obj, const char *key, const char *field,
                            bool required, double dflt, double *out) {
  json_t *v = json_object_get(obj, key);
  if (!v || json_is_null(v)) {
    if (required) return ty_cfg_error(c, field, "is missing");
    *out = dflt;
    return TY_OK;
  }
  if (!json_is_number(v)) return ty_cfg_error(c, field, "must be a number");
  *out = json_number_value(v);
  if (!(*out > 0) || !(*out < 1e300)) return ty_cfg_error(c, field, "must be a positive number");
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

/* "a, b, c" of a NULL-terminated list, into `out`. */
static void ty_cfg_join(const char *const *list, char *out, size_t capacity) {
  size_t n = 0;
  out[0] = '\0';
  for (size_t i = 0; list && list[i] && n < capacity; ++i) {
    int w = snprintf(out + n, capacity - n, "%s%s", i ? ", " : "", list[i]);
    if (w < 0) break;
    n += (size_t)w;
  }
}

static bool ty_cfg_in(const char *const *list, const char *s) {
  for (size_t i = 0; list && list[i]; ++i) {
    if (!strcmp(list[i], s)) return true;
  }
  return false;
}

ty_status_t ty_cfg_enum_value(const ty_cfg_t *c, json_t *v, const char *field, const char *dflt,
                              const char *const *supported, const char *const *known,
                              const char **out) {
  *out = dflt;
  if (!v || json_is_null(v)) {
    return dflt ? TY_OK : ty_cfg_error(c, field, "is missing");
  }
  if (!json_is_string(v)) return ty_cfg_error(c, field, "must be a string");
  const char *s = json_string_value(v);
  if (strlen(s) != json_string_length(v)) return ty_cfg_error(c, field, "holds a NUL character");
  char names[256];
  ty_cfg_join(supported, names, sizeof(names));
  if (ty_cfg_in(supported, s)) {
    *out = s;
    return TY_OK;
  }
  if (ty_cfg_in(known, s)) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "%s: field '%s' is '%.100s'; implemented: %s",
                          c->origin, field, s, names);
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "%s: field '%s' is '%.100s', which transformers does not know "
                        "(implemented: %s)",
                        c->origin, field, s, names);
}

ty_status_t ty_cfg_enum(const ty_cfg_t *c, json_t *obj, const char *key, const char *field,
                        const char *dflt, const char *const *supported,
                        const char *const *known, const char **out) {
  return ty_cfg_enum_value(c, json_object_get(obj, key), field, dflt, supported, known, out);
}

static ty_status_t ty_cfg_copy(const ty_cfg_t *c, const char *field, const char *value, char *out,
                               size_t capacity) {
  if (strlen(value) >= capacity) return ty_cfg_error(c, field, "is too long");
  memcpy(out, value, strlen(value) + 1);
  return TY_OK;
}

/* Fields that change the computation in ways Trainyard does not implement:
 * refusing them beats computing something else. */
static ty_status_t ty_cfg_refuse_true(const ty_cfg_t *c, const char *field, const char *why) {
  bool on = false;
  TY_RETURN_IF_ERROR(ty_cfg_bool(c, field, false, &on));
  if (on) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "%s: field '%s' is true: %s", c->origin,
                          field, why);
  }
  return TY_OK;
}

/* bos_token_id / eos_token_id: an id or a list of ids (the first is kept),
 * each inside the vocabulary; -1 when absent. */
static ty_status_t ty_cfg_token_id(const ty_cfg_t *c, const char *field, int64_t vocab,
                                   int64_t *out) {
  json_t *v = json_object_get(c->root, field);
  *out = -1;
  if (!v || json_is_null(v)) return TY_OK;
  bool list = json_is_array(v);
  size_t count = list ? json_array_size(v) : 1;
  for (size_t i = 0; i < count; ++i) {
    int64_t value = -1;
    ty_status_t s = ty_json_token_id(list ? json_array_get(v, i) : v, vocab, &value);
    if (s && list) return ty_status_annotate(s, "%s: field '%s'[%zu]", c->origin, field, i);
    if (s) return ty_status_annotate(s, "%s: field '%s'", c->origin, field);
    if (i == 0) *out = value;
  }
  return TY_OK;
}

/* torch_dtype (dtype since transformers 4.56): the dtype the weights were
 * saved in. Only read to refuse what cannot be a float model. */
static ty_status_t ty_cfg_dtype(const ty_cfg_t *c) {
  static const char *const floats[] = {"float32", "float16", "bfloat16", "float64",
                                       "float",   "half",    "double",   NULL};
  static const char *const others[] = {
      "int8",          "uint8",         "int16",           "int32",           "int64",
      "uint16",        "uint32",        "uint64",          "bool",            "complex64",
      "complex128",    "float8_e4m3fn", "float8_e5m2",     "float8_e4m3fnuz", "float8_e5m2fnuz",
      "float8_e8m0fnu", "float4_e2m1fn_x2", NULL};
  const char *a = NULL, *b = NULL;
  TY_RETURN_IF_ERROR(ty_cfg_enum(c, c->root, "torch_dtype", "torch_dtype", "", floats, others, &a));
  TY_RETURN_IF_ERROR(ty_cfg_enum(c, c->root, "dtype", "dtype", "", floats, others, &b));
  if (*a && *b && strcmp(a, b) != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: fields 'torch_dtype' ('%s') and "
                          "'dtype' ('%s') disagree", c->origin, a, b);
  }
  return TY_OK;
}

/* architectures: the model classes the checkpoint was saved from. A causal
 * LM (or its bare base model) of the config's own family. */
static ty_status_t ty_cfg_architectures(const ty_cfg_t *c, const char *model_type) {
  json_t *v = json_object_get(c->root, "architectures");
  if (!v || json_is_null(v)) return TY_OK;
  if (!json_is_array(v)) return ty_cfg_error(c, "architectures", "must be a list of strings");
  const char *family = !strcmp(model_type, "gpt2")      ? "GPT2"
                       : !strcmp(model_type, "mistral") ? "Mistral"
                       : !strcmp(model_type, "qwen2")   ? "Qwen2"
                                                        : "Llama";
  size_t i;
  json_t *entry;
  json_array_foreach(v, i, entry) {
    if (!json_is_string(entry)) return ty_cfg_error(c, "architectures", "must be a list of strings");
    const char *name = json_string_value(entry);
    size_t n = strlen(family);
    if (strncasecmp(name, family, n) != 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s: field 'architectures' lists '%.100s', which is not a %s model "
                            "(model_type)",
                            c->origin, name, model_type);
    }
    const char *rest = name + n;
    if (strcasecmp(rest, "ForCausalLM") != 0 && strcasecmp(rest, "LMHeadModel") != 0 &&
        strcasecmp(rest, "Model") != 0) {
      return ty_status_make(TY_CODE_UNIMPLEMENTED,
                            "%s: field 'architectures' lists '%.100s'; Trainyard runs causal "
                            "language models (%s%s)",
                            c->origin, name, family,
                            !strcmp(family, "GPT2") ? "LMHeadModel" : "ForCausalLM");
    }
  }
  return TY_OK;
}

/* transformers' activations (ACT2CLS) that Trainyard does not implement. */
static const char *const ty_other_activations[] = {
    "gelu",       "gelu_10", "gelu_fast", "gelu_python", "gelu_accurate", "laplace",
    "leaky_relu", "linear",  "mish",      "quick_gelu",  "relu",          "relu2",
    "relu6",      "sigmoid", "tanh",      "prelu",       "xielu",         "silu",
    "swish",      "gelu_new", "gelu_pytorch_tanh", NULL};

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
  TY_RETURN_IF_ERROR(ty_cfg_positive(c, c->root, "layer_norm_epsilon", "layer_norm_epsilon",
                                     false, 1e-5, &m->norm_eps));
  static const char *const tanh_gelu[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
  const char *act = NULL;
  TY_RETURN_IF_ERROR(ty_cfg_enum(c, c->root, "activation_function", "activation_function",
                                 "gelu_new", tanh_gelu, ty_other_activations, &act));
  TY_RETURN_IF_ERROR(ty_cfg_copy(c, "activation_function", act, m->activation,
                                 sizeof(m->activation)));
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
  json_t *head_dim = json_object_get(c->root, "head_dim");
  if (m->hidden_size % m->num_heads != 0 && (!head_dim || json_is_null(head_dim))) {
    return ty_cfg_error(c, "num_attention_heads", "must divide hidden_size (or give head_dim)");
  }
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "head_dim", false, m->hidden_size / m->num_heads, 2,
                                &m->head_dim));
  if (m->head_dim % 2 != 0) return ty_cfg_error(c, "head_dim", "must be even for RoPE");
  TY_RETURN_IF_ERROR(ty_cfg_int(c, "max_position_embeddings", false, 2048, 1,
                                &m->max_positions));
  TY_RETURN_IF_ERROR(ty_cfg_positive(c, c->root, "rms_norm_eps", "rms_norm_eps", false, 1e-6,
                                     &m->norm_eps));
  /* transformers maps "swish" to the same SiLU. */
  static const char *const silu[] = {"silu", "swish", NULL};
  const char *act = NULL;
  TY_RETURN_IF_ERROR(ty_cfg_enum(c, c->root, "hidden_act", "hidden_act", "silu", silu,
                                 ty_other_activations, &act));
  TY_RETURN_IF_ERROR(ty_cfg_copy(c, "hidden_act", act, m->activation, sizeof(m->activation)));
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
  return ty_cfg_sliding_window(c, m);
}

ty_status_t ty_model_config_parse_text(const char *text, size_t size, const char *origin,
                                       ty_model_config_t *out) {
  memset(out, 0, sizeof(*out));
  TY_RETURN_IF_ERROR(ty_file_check_text(text, size, origin, &ty_model_config_file_kind));
  size_t bom = ty_text_bom_size(text, size); /* as ty_file_read skips it */
  json_error_t err;
  json_t *root = json_loadb(text + bom, size - bom, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: not valid JSON (line %d: %s)", origin,
                          err.line, err.text);
  }
  ty_cfg_t c = {root, origin};
  ty_status_t s = TY_OK;
  static const char *const families[] = {"gpt2", "llama", "mistral", "qwen2", NULL};
  json_t *type = json_object_get(root, "model_type");
  if (!json_is_object(root)) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: the top level must be an object", origin);
  } else if (!type || !json_is_string(type)) {
    s = ty_cfg_error(&c, "model_type", "is missing or not a string");
  } else if (!ty_cfg_in(families, json_string_value(type))) {
    /* transformers knows hundreds of model types: any other is one
     * Trainyard does not implement. */
    s = ty_status_make(TY_CODE_UNIMPLEMENTED,
                       "%s: model_type '%.100s' is not supported (supported: gpt2, llama, "
                       "mistral, qwen2)",
                       origin, json_string_value(type));
  } else {
    s = ty_cfg_copy(&c, "model_type", json_string_value(type), out->model_type,
                    sizeof(out->model_type));
  }
  if (!s) s = strcmp(out->model_type, "gpt2") == 0 ? ty_cfg_gpt2(&c, out) : ty_cfg_llama(&c, out);
  if (!s) s = ty_cfg_architectures(&c, out->model_type);
  if (!s) s = ty_cfg_dtype(&c);
  if (!s) s = ty_cfg_token_id(&c, "bos_token_id", out->vocab_size, &out->bos_token_id);
  if (!s) s = ty_cfg_token_id(&c, "eos_token_id", out->vocab_size, &out->eos_token_id);
  if (!s) {
    json_t *pad = json_object_get(root, "pad_token_id");
    if (pad && !json_is_null(pad) && !json_is_integer(pad)) {
      s = ty_cfg_error(&c, "pad_token_id", "must be a token id or null");
    }
  }
  /* Sizes no model could have are refused here, before anything walks them. */
  if (!s) s = ty_status_annotate(ty_llm_param_count(out, NULL, NULL), "%s", origin);
  json_decref(root);
  return s;
}

ty_status_t ty_model_config_parse(const char *json_text, const char *origin,
                                  ty_model_config_t *out) {
  return ty_model_config_parse_text(json_text, strlen(json_text), origin, out);
}

ty_status_t ty_model_config_load(const char *dir, ty_model_config_t *out) {
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/config.json", dir);
  if (n < 0 || (size_t)n >= sizeof(path)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "model folder path too long: %s", dir);
  }
  struct stat st;
  if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s is a file, not a model folder (a Hugging Face model folder holds "
                          "config.json and model.safetensors)",
                          dir);
  }
  char *text = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read(path, &ty_model_config_file_kind, &text, &size);
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
    return ty_status_annotate(s, "%s is not a model folder (a Hugging Face model folder holds "
                                 "config.json and model.safetensors)",
                              dir);
  }
  if (!s && size == 0) s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s is empty", path);
  if (!s) s = ty_model_config_parse_text(text, size, path, out);
  free(text);
  return s;
}
