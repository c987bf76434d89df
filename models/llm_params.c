/* The parameter set a config.json implies: names, shapes and weight decay of
 * every tensor, in the order ty_llm_build creates them. It is the one place
 * that knows the shapes, so the graph builder and the checkpoint check
 * (before any graph exists) cannot disagree. Counts are computed without
 * enumerating, with overflow checks, so an absurd layer count is refused
 * at once instead of being walked. */
#include <stdio.h>
#include <string.h>

#include "hal/dtype.h"

#include "models/llm.h"

/* Dimensions by what they measure. */
typedef enum {
  TY_D_NONE = 0,
  TY_D_V,  /* vocabulary */
  TY_D_C,  /* hidden width */
  TY_D_3C, /* GPT-2's fused q, k, v */
  TY_D_F,  /* MLP inner width */
  TY_D_P,  /* positions (GPT-2's learned table) */
  TY_D_Q,  /* query heads x head_dim */
  TY_D_KV, /* key/value heads x head_dim */
} ty_dim_t;

/* When a tensor exists. */
typedef enum {
  TY_IF_ALWAYS = 0,
  TY_IF_QKV_BIAS,
  TY_IF_O_BIAS,
  TY_IF_MLP_BIAS,
  TY_IF_UNTIED, /* a separate lm_head */
} ty_when_t;

typedef struct {
  const char *name; /* with "%lld" for the layer in per-layer tensors */
  uint8_t rank;
  ty_dim_t d0, d1;
  bool decay; /* matrices; not norms, biases or embeddings */
  ty_when_t when;
} ty_slot_t;

typedef struct {
  const ty_slot_t *slots;
  size_t count;
} ty_section_t;

#define TY_SECTION(a) {a, sizeof(a) / sizeof(a[0])}

static const ty_slot_t ty_gpt2_head[] = {
    {"transformer.wte.weight", 2, TY_D_V, TY_D_C, false, TY_IF_ALWAYS},
    {"transformer.wpe.weight", 2, TY_D_P, TY_D_C, false, TY_IF_ALWAYS},
};
static const ty_slot_t ty_gpt2_layer[] = {
    {"transformer.h.%lld.ln_1.weight", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.ln_1.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.attn.c_attn.weight", 2, TY_D_C, TY_D_3C, true, TY_IF_ALWAYS},
    {"transformer.h.%lld.attn.c_attn.bias", 1, TY_D_3C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.attn.c_proj.weight", 2, TY_D_C, TY_D_C, true, TY_IF_ALWAYS},
    {"transformer.h.%lld.attn.c_proj.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.ln_2.weight", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.ln_2.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.mlp.c_fc.weight", 2, TY_D_C, TY_D_F, true, TY_IF_ALWAYS},
    {"transformer.h.%lld.mlp.c_fc.bias", 1, TY_D_F, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.h.%lld.mlp.c_proj.weight", 2, TY_D_F, TY_D_C, true, TY_IF_ALWAYS},
    {"transformer.h.%lld.mlp.c_proj.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
};
static const ty_slot_t ty_gpt2_tail[] = {
    {"transformer.ln_f.weight", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"transformer.ln_f.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"lm_head.weight", 2, TY_D_V, TY_D_C, true, TY_IF_UNTIED},
};

static const ty_slot_t ty_llama_head[] = {
    {"model.embed_tokens.weight", 2, TY_D_V, TY_D_C, false, TY_IF_ALWAYS},
};
static const ty_slot_t ty_llama_layer[] = {
    {"model.layers.%lld.input_layernorm.weight", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"model.layers.%lld.self_attn.q_proj.weight", 2, TY_D_Q, TY_D_C, true, TY_IF_ALWAYS},
    {"model.layers.%lld.self_attn.q_proj.bias", 1, TY_D_Q, TY_D_NONE, false, TY_IF_QKV_BIAS},
    {"model.layers.%lld.self_attn.k_proj.weight", 2, TY_D_KV, TY_D_C, true, TY_IF_ALWAYS},
    {"model.layers.%lld.self_attn.k_proj.bias", 1, TY_D_KV, TY_D_NONE, false, TY_IF_QKV_BIAS},
    {"model.layers.%lld.self_attn.v_proj.weight", 2, TY_D_KV, TY_D_C, true, TY_IF_ALWAYS},
    {"model.layers.%lld.self_attn.v_proj.bias", 1, TY_D_KV, TY_D_NONE, false, TY_IF_QKV_BIAS},
    {"model.layers.%lld.self_attn.o_proj.weight", 2, TY_D_C, TY_D_Q, true, TY_IF_ALWAYS},
    {"model.layers.%lld.self_attn.o_proj.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_O_BIAS},
    {"model.layers.%lld.post_attention_layernorm.weight", 1, TY_D_C, TY_D_NONE, false,
     TY_IF_ALWAYS},
    {"model.layers.%lld.mlp.gate_proj.weight", 2, TY_D_F, TY_D_C, true, TY_IF_ALWAYS},
    {"model.layers.%lld.mlp.gate_proj.bias", 1, TY_D_F, TY_D_NONE, false, TY_IF_MLP_BIAS},
    {"model.layers.%lld.mlp.up_proj.weight", 2, TY_D_F, TY_D_C, true, TY_IF_ALWAYS},
    {"model.layers.%lld.mlp.up_proj.bias", 1, TY_D_F, TY_D_NONE, false, TY_IF_MLP_BIAS},
    {"model.layers.%lld.mlp.down_proj.weight", 2, TY_D_C, TY_D_F, true, TY_IF_ALWAYS},
    {"model.layers.%lld.mlp.down_proj.bias", 1, TY_D_C, TY_D_NONE, false, TY_IF_MLP_BIAS},
};
static const ty_slot_t ty_llama_tail[] = {
    {"model.norm.weight", 1, TY_D_C, TY_D_NONE, false, TY_IF_ALWAYS},
    {"lm_head.weight", 2, TY_D_V, TY_D_C, true, TY_IF_UNTIED},
};

/* head, layer, tail */
static void ty_sections(const ty_model_config_t *c, ty_section_t out[3]) {
  if (c->arch == TY_ARCH_GPT2) {
    out[0] = (ty_section_t)TY_SECTION(ty_gpt2_head);
    out[1] = (ty_section_t)TY_SECTION(ty_gpt2_layer);
    out[2] = (ty_section_t)TY_SECTION(ty_gpt2_tail);
  } else {
    out[0] = (ty_section_t)TY_SECTION(ty_llama_head);
    out[1] = (ty_section_t)TY_SECTION(ty_llama_layer);
    out[2] = (ty_section_t)TY_SECTION(ty_llama_tail);
  }
}

static bool ty_slot_present(const ty_model_config_t *c, const ty_slot_t *s) {
  switch (s->when) {
    case TY_IF_ALWAYS: return true;
    case TY_IF_QKV_BIAS: return c->qkv_bias;
    case TY_IF_O_BIAS: return c->o_bias;
    case TY_IF_MLP_BIAS: return c->mlp_bias;
    case TY_IF_UNTIED: return !c->tie_word_embeddings;
  }
  return false;
}

/* false when the product overflows int64. */
static bool ty_dim_value(const ty_model_config_t *c, ty_dim_t d, int64_t *out) {
  switch (d) {
    case TY_D_NONE: *out = 1; return true;
    case TY_D_V: *out = c->vocab_size; return true;
    case TY_D_C: *out = c->hidden_size; return true;
    case TY_D_3C: return !__builtin_mul_overflow(c->hidden_size, (int64_t)3, out);
    case TY_D_F: *out = c->intermediate_size; return true;
    case TY_D_P: *out = c->max_positions; return true;
    case TY_D_Q: return !__builtin_mul_overflow(c->num_heads, c->head_dim, out);
    case TY_D_KV: return !__builtin_mul_overflow(c->num_kv_heads, c->head_dim, out);
  }
  return false;
}

static ty_status_t ty_too_large(const ty_model_config_t *c, const char *what) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "the %s sizes (%lld layers, width %lld, %lld heads of %lld, MLP width "
                        "%lld, vocabulary %lld) give %s beyond 64-bit arithmetic: no such "
                        "model can exist",
                        c->model_type, (long long)c->num_layers, (long long)c->hidden_size,
                        (long long)c->num_heads, (long long)c->head_dim,
                        (long long)c->intermediate_size, (long long)c->vocab_size, what);
}

ty_status_t ty_llm_param_count(const ty_model_config_t *c, uint32_t *out_tensors,
                               int64_t *out_elements) {
  ty_section_t sec[3];
  ty_sections(c, sec);
  int64_t tensors[3] = {0, 0, 0}, elements[3] = {0, 0, 0};
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < sec[s].count; ++i) {
      const ty_slot_t *slot = &sec[s].slots[i];
      if (!ty_slot_present(c, slot)) continue;
      int64_t d0, d1, n;
      if (!ty_dim_value(c, slot->d0, &d0) || !ty_dim_value(c, slot->d1, &d1) ||
          __builtin_mul_overflow(d0, d1, &n) || __builtin_add_overflow(elements[s], n, &elements[s])) {
        return ty_too_large(c, "tensors");
      }
      tensors[s]++;
    }
  }
  /* The layers' share, then the whole: every sum and product checked, and
   * the bytes of the widest dtype (f64) must fit too. */
  int64_t layer_tensors, layer_elements, total_tensors, total_elements, bytes;
  if (__builtin_mul_overflow(tensors[1], c->num_layers, &layer_tensors) ||
      __builtin_mul_overflow(elements[1], c->num_layers, &layer_elements) ||
      __builtin_add_overflow(layer_tensors, tensors[0] + tensors[2], &total_tensors) ||
      __builtin_add_overflow(layer_elements, elements[0], &total_elements) ||
      __builtin_add_overflow(total_elements, elements[2], &total_elements) ||
      __builtin_mul_overflow(total_elements, (int64_t)8, &bytes)) {
    return ty_too_large(c, "a parameter count");
  }
  if (total_tensors > (int64_t)UINT32_MAX || c->num_layers > INT32_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "the %s config has %lld layers (%lld parameter tensors), more than "
                          "Trainyard indexes; no real model comes near",
                          c->model_type, (long long)c->num_layers, (long long)total_tensors);
  }
  if (out_tensors) *out_tensors = (uint32_t)total_tensors;
  if (out_elements) *out_elements = total_elements;
  return TY_OK;
}

void ty_llm_param_spec(const ty_model_config_t *c, uint32_t index, ty_llm_param_t *out) {
  memset(out, 0, sizeof(*out));
  out->value = TY_VALUE_NONE;
  ty_section_t sec[3];
  ty_sections(c, sec);
  /* Present slots of each section, so an index maps to (section, layer, slot). */
  uint32_t present[3] = {0, 0, 0};
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < sec[s].count; ++i) present[s] += ty_slot_present(c, &sec[s].slots[i]);
  }
  int s = 0;
  long long layer = 0;
  uint64_t at = index;
  if (at < present[0]) {
    s = 0;
  } else if ((at -= present[0]) < (uint64_t)present[1] * (uint64_t)c->num_layers) {
    s = 1;
    layer = (long long)(at / present[1]);
    at %= present[1];
  } else {
    s = 2;
    at -= (uint64_t)present[1] * (uint64_t)c->num_layers;
  }
  for (size_t i = 0; i < sec[s].count; ++i) {
    const ty_slot_t *slot = &sec[s].slots[i];
    if (!ty_slot_present(c, slot) || at-- != 0) continue;
    if (s == 1) {
      snprintf(out->name, sizeof(out->name), slot->name, layer);
    } else {
      snprintf(out->name, sizeof(out->name), "%s", slot->name);
    }
    out->rank = slot->rank;
    /* ty_llm_param_count checked these products already. */
    ty_dim_value(c, slot->d0, &out->dims[0]);
    if (slot->rank == 2) ty_dim_value(c, slot->d1, &out->dims[1]);
    out->decay = slot->decay;
    return;
  }
}

ty_status_t ty_llm_check_memory(const ty_model_config_t *c, ty_dtype_t dtype,
                                uint64_t extra_bytes_per_param, uint64_t memory_bytes,
                                const char *device) {
  if (memory_bytes == 0) return TY_OK; /* the device did not say */
  int64_t elements = 0;
  TY_RETURN_IF_ERROR(ty_llm_param_count(c, NULL, &elements));
  uint64_t per = ty_dtype_size(dtype) + extra_bytes_per_param, need = 0;
  bool over = __builtin_mul_overflow((uint64_t)elements, per, &need) || need > memory_bytes;
  if (!over) return TY_OK;
  double gib = 1024.0 * 1024.0 * 1024.0;
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                        "the %s model of config.json has %lld parameters: they need at least "
                        "%.4g GiB (%llu bytes each: %s weights%s), more than the %.4g GiB of "
                        "device %s",
                        c->model_type, (long long)elements, (double)elements * (double)per / gib,
                        (unsigned long long)per, ty_dtype_name(dtype),
                        extra_bytes_per_param ? " plus gradients and optimizer state" : "",
                        (double)memory_bytes / gib, device);
}
