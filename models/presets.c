/* Presets, config.json writing and weight initialization. */
#include "models/presets.h"

#include "hal/file.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal/dtype.h"
#include "hal/half.h"
#include "models/checkpoint.h"

typedef struct {
  const char *name;
  ty_model_arch_t arch;
  int64_t layers, hidden, heads, kv_heads, intermediate, positions;
  /* Llama-3 shape: rope_theta 500000 with llama3 scaling of this factor
   * (8192 original positions); 0: plain RoPE (theta 10000) */
  double llama3_factor;
  bool tied; /* Llama-3 shapes: embeddings tied to the head */
} ty_preset_t;

/* gpt2-350m is GPT-2 medium's shape; llama-1b Llama-3.2-1B's (GQA 32/8);
 * llama-7b Llama-2-7B's; llama-8b Llama-3.1-8B's (GQA 32/8, untied, 128K
 * positions). Benchmarks and memory tests use the big ones with random
 * weights. */
static const ty_preset_t ty_presets[] = {
    {"gpt2-tiny", TY_ARCH_GPT2, 4, 128, 4, 4, 512, 512, 0, false},
    {"gpt2-124m", TY_ARCH_GPT2, 12, 768, 12, 12, 3072, 1024, 0, false},
    {"gpt2-350m", TY_ARCH_GPT2, 24, 1024, 16, 16, 4096, 1024, 0, false},
    {"llama-tiny", TY_ARCH_LLAMA, 4, 128, 4, 2, 352, 512, 0, false},
    {"llama-60m", TY_ARCH_LLAMA, 8, 512, 8, 4, 1376, 1024, 0, false},
    {"llama-1b", TY_ARCH_LLAMA, 16, 2048, 32, 8, 8192, 131072, 32.0, true},
    {"llama-7b", TY_ARCH_LLAMA, 32, 4096, 32, 32, 11008, 4096, 0, false},
    {"llama-8b", TY_ARCH_LLAMA, 32, 4096, 32, 8, 14336, 131072, 8.0, false},
};

const char *ty_model_preset_names(void) {
  return "gpt2-tiny, gpt2-124m, gpt2-350m, llama-tiny, llama-60m, llama-1b, llama-7b, "
         "llama-8b";
}

ty_status_t ty_model_preset(const char *name, int64_t vocab, int64_t bos, int64_t eos,
                            ty_model_config_t *c) {
  memset(c, 0, sizeof(*c));
  const ty_preset_t *p = NULL;
  for (size_t i = 0; i < sizeof(ty_presets) / sizeof(ty_presets[0]); ++i) {
    if (strcmp(ty_presets[i].name, name) == 0) p = &ty_presets[i];
  }
  if (!p) {
    return ty_status_make(TY_CODE_NOT_FOUND, "no model preset '%s' (presets: %s)", name,
                          ty_model_preset_names());
  }
  if (vocab < 2) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "preset %s: vocabulary size %lld < 2", name,
                          (long long)vocab);
  }
  const int64_t ids[2] = {bos, eos};
  for (int i = 0; i < 2; ++i) {
    if (ids[i] < -1 || ids[i] >= vocab) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "preset %s: %s id %lld is outside the vocabulary of %lld tokens",
                            name, i ? "end-of-text" : "beginning-of-text", (long long)ids[i],
                            (long long)vocab);
    }
  }
  bool gpt2 = p->arch == TY_ARCH_GPT2;
  snprintf(c->model_type, sizeof(c->model_type), "%s", gpt2 ? "gpt2" : "llama");
  c->arch = p->arch;
  c->vocab_size = vocab;
  c->hidden_size = p->hidden;
  c->num_layers = p->layers;
  c->num_heads = p->heads;
  c->num_kv_heads = p->kv_heads;
  c->head_dim = p->hidden / p->heads;
  c->intermediate_size = p->intermediate;
  c->max_positions = p->positions;
  c->norm_eps = gpt2 ? 1e-5 : 1e-6;
  c->tie_word_embeddings = gpt2;
  c->qkv_bias = c->o_bias = c->mlp_bias = gpt2;
  snprintf(c->activation, sizeof(c->activation), "%s", gpt2 ? "gelu_new" : "silu");
  c->rope_theta = 10000.0;
  c->rope_type = TY_ROPE_DEFAULT;
  if (p->llama3_factor > 0) {
    c->tie_word_embeddings = p->tied;
    c->norm_eps = 1e-5;
    c->rope_theta = 500000.0;
    c->rope_type = TY_ROPE_LLAMA3;
    c->rope_factor = p->llama3_factor;
    c->rope_low_freq_factor = 1.0;
    c->rope_high_freq_factor = 4.0;
    c->rope_original_max_positions = 8192;
  }
  c->bos_token_id = bos;
  c->eos_token_id = eos;
  return TY_OK;
}

static json_t *ty_config_json(const ty_model_config_t *c) {
  json_t *j = json_object();
  bool gpt2 = c->arch == TY_ARCH_GPT2;
  json_object_set_new(j, "model_type", json_string(c->model_type));
  const char *arch = gpt2 ? "GPT2LMHeadModel"
                     : strcmp(c->model_type, "mistral") == 0 ? "MistralForCausalLM"
                     : strcmp(c->model_type, "qwen2") == 0   ? "Qwen2ForCausalLM"
                                                             : "LlamaForCausalLM";
  json_object_set_new(j, "architectures", json_pack("[s]", arch));
  json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
  json_object_set_new(j, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
  if (c->bos_token_id >= 0) json_object_set_new(j, "bos_token_id", json_integer(c->bos_token_id));
  if (c->eos_token_id >= 0) json_object_set_new(j, "eos_token_id", json_integer(c->eos_token_id));
  if (gpt2) {
    json_object_set_new(j, "n_embd", json_integer(c->hidden_size));
    json_object_set_new(j, "n_layer", json_integer(c->num_layers));
    json_object_set_new(j, "n_head", json_integer(c->num_heads));
    json_object_set_new(j, "n_positions", json_integer(c->max_positions));
    json_object_set_new(j, "n_inner", json_integer(c->intermediate_size));
    json_object_set_new(j, "activation_function", json_string(c->activation));
    json_object_set_new(j, "layer_norm_epsilon", json_real(c->norm_eps));
    json_object_set_new(j, "scale_attn_weights", json_true());
  } else {
    json_object_set_new(j, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(j, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(j, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(j, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(j, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(j, "head_dim", json_integer(c->head_dim));
    json_object_set_new(j, "max_position_embeddings", json_integer(c->max_positions));
    json_object_set_new(j, "rms_norm_eps", json_real(c->norm_eps));
    json_object_set_new(j, "hidden_act", json_string(c->activation));
    json_object_set_new(j, "attention_bias", json_boolean(c->qkv_bias));
    json_object_set_new(j, "mlp_bias", json_boolean(c->mlp_bias));
    /* Both RoPE forms, so older and newer transformers read it alike. */
    json_object_set_new(j, "rope_theta", json_real(c->rope_theta));
    json_t *params = json_object();
    json_object_set_new(params, "rope_theta", json_real(c->rope_theta));
    if (c->rope_type == TY_ROPE_LLAMA3) {
      json_t *scaling = json_pack("{s:s,s:f,s:f,s:f,s:I}", "rope_type", "llama3", "factor",
                                  c->rope_factor, "low_freq_factor", c->rope_low_freq_factor,
                                  "high_freq_factor", c->rope_high_freq_factor,
                                  "original_max_position_embeddings",
                                  (json_int_t)c->rope_original_max_positions);
      json_object_update(params, scaling);
      json_object_set_new(j, "rope_scaling", scaling);
      json_object_set_new(params, "rope_type", json_string("llama3"));
    } else {
      json_object_set_new(params, "rope_type", json_string("default"));
    }
    json_object_set_new(j, "rope_parameters", params);
    if (c->sliding_window > 0) {
      json_object_set_new(j, "sliding_window", json_integer(c->sliding_window));
      if (strcmp(c->model_type, "qwen2") == 0) {
        /* Qwen2 windows no layer unless told so, and then only from
         * max_window_layers on. */
        json_object_set_new(j, "use_sliding_window", json_true());
        json_object_set_new(j, "max_window_layers", json_integer(0));
      }
    }
  }
  json_object_set_new(j, "torch_dtype", json_string("float32"));
  return j;
}

char *ty_model_config_dumps(const ty_model_config_t *c) {
  json_t *j = ty_config_json(c);
  char *text = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
  json_decref(j);
  return text;
}

ty_status_t ty_model_config_write(const ty_model_config_t *c, const char *path) {
  char *text = ty_model_config_dumps(c);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing %s", path);
  size_t n = strlen(text);
  char *line = realloc(text, n + 2);
  ty_status_t s = line ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (line) {
    text = line;
    memcpy(text + n, "\n", 2);
    s = ty_file_write_atomic(path, text, n + 1);
  }
  free(text);
  return s;
}

/* splitmix64 seeded per parameter, Box-Muller normals. */
static uint64_t ty_mix(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double ty_normal(uint64_t *state) {
  double u1 = ((double)(ty_mix(state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(ty_mix(state) >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static uint64_t ty_name_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static bool ty_ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

int64_t ty_llm_parameter_count(const ty_llm_t *m) {
  int64_t total = 0;
  for (uint32_t i = 0; i < m->param_count; ++i) {
    int64_t n = 1;
    for (uint32_t d = 0; d < m->params[i].rank; ++d) n *= m->params[i].dims[d];
    total += n;
  }
  return total;
}

ty_status_t ty_llm_init_weights(const ty_llm_t *m, ty_session_t *session, uint64_t seed) {
  const ty_model_config_t *c = &m->config;
  ty_dtype_t dtype = m->options.dtype;
  double std = 0.02, proj_std = 0.02 / sqrt(2.0 * (double)c->num_layers);
  for (uint32_t i = 0; i < m->param_count; ++i) {
    const ty_llm_param_t *p = &m->params[i];
    /* The whole tensor, whatever part of it this rank keeps (tensor
     * parallel): the same seed gives the same model for any split. */
    int64_t n = ty_llm_param_full_count(p);
    size_t bytes = (size_t)n * ty_dtype_size(dtype);
    void *data = malloc(bytes ? bytes : 1);
    if (!data) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory initializing %s", p->name);
    bool norm = strstr(p->name, "ln_") || strstr(p->name, "layernorm") ||
                strstr(p->name, "norm.weight") || strstr(p->name, ".ln_f.");
    bool bias = ty_ends_with(p->name, ".bias");
    bool residual = c->arch == TY_ARCH_GPT2 && ty_ends_with(p->name, "c_proj.weight");
    uint64_t state = seed ^ ty_name_hash(p->name);
    for (int64_t k = 0; k < n; ++k) {
      double v = bias ? 0.0 : norm ? 1.0 : ty_normal(&state) * (residual ? proj_std : std);
      switch (dtype) {
        case TY_DTYPE_F32: ((float *)data)[k] = (float)v; break;
        case TY_DTYPE_F64: ((double *)data)[k] = v; break;
        case TY_DTYPE_BF16: ((uint16_t *)data)[k] = ty_f64_to_bf16(v); break;
        case TY_DTYPE_F16: ((uint16_t *)data)[k] = ty_f64_to_f16(v); break;
        default: break;
      }
    }
    ty_status_t s = ty_llm_bind_whole(m, session, p, dtype, data);
    free(data);
    TY_RETURN_IF_ERROR(s);
  }
  return TY_OK;
}
