/* Fuzz target of config.json parsing: any byte string is either refused
 * with a status naming the file, or parsed into a config every later stage
 * can trust: sizes positive and countable in 64 bits (the parameter set is
 * enumerable at both ends), heads dividing as the graphs need, RoPE and
 * token ids in range, and what Trainyard writes for it reads back the same.
 * Built with libFuzzer under clang, or with standalone_driver.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "models/config.h"
#include "models/llm.h"
#include "models/presets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TY_FUZZ_CHECK(cond) \
  do {                      \
    if (!(cond)) abort();   \
  } while (0)

static void ty_fuzz_check_config(const ty_model_config_t *c) {
  TY_FUZZ_CHECK(c->vocab_size >= 1 && c->hidden_size >= 1 && c->num_layers >= 1);
  TY_FUZZ_CHECK(c->num_heads >= 1 && c->num_kv_heads >= 1 && c->head_dim >= 1);
  TY_FUZZ_CHECK(c->num_heads % c->num_kv_heads == 0);
  TY_FUZZ_CHECK(c->intermediate_size >= 1 && c->max_positions >= 1 && c->norm_eps > 0);
  TY_FUZZ_CHECK(c->bos_token_id >= -1 && c->bos_token_id < c->vocab_size);
  TY_FUZZ_CHECK(c->eos_token_id >= -1 && c->eos_token_id < c->vocab_size);
  TY_FUZZ_CHECK(c->sliding_window >= 0);
  if (c->arch == TY_ARCH_GPT2) {
    TY_FUZZ_CHECK(c->hidden_size % c->num_heads == 0 && c->head_dim * c->num_heads == c->hidden_size);
  } else {
    TY_FUZZ_CHECK(c->head_dim % 2 == 0 && c->rope_theta > 0);
    if (c->rope_type == TY_ROPE_LLAMA3) {
      TY_FUZZ_CHECK(c->rope_factor > 0 && c->rope_low_freq_factor > 0);
      TY_FUZZ_CHECK(c->rope_high_freq_factor > c->rope_low_freq_factor);
      TY_FUZZ_CHECK(c->rope_original_max_positions >= 1);
    }
  }
  uint32_t tensors = 0;
  int64_t elements = 0;
  TY_FUZZ_CHECK(ty_llm_param_count(c, &tensors, &elements) == TY_OK);
  TY_FUZZ_CHECK(tensors >= 3 && elements >= tensors);
  ty_llm_param_t first, last;
  ty_llm_param_spec(c, 0, &first);
  ty_llm_param_spec(c, tensors - 1, &last);
  TY_FUZZ_CHECK(first.name[0] && last.name[0] && first.rank >= 1 && last.rank >= 1);
  TY_FUZZ_CHECK(first.dims[0] >= 1 && last.dims[0] >= 1);
}

static void ty_fuzz_round_trip(const ty_model_config_t *c) {
  char *text = ty_model_config_dumps(c);
  TY_FUZZ_CHECK(text != NULL);
  ty_model_config_t back;
  ty_status_t s = ty_model_config_parse(text, "written", &back);
  TY_FUZZ_CHECK(s == TY_OK);
  free(text);
  TY_FUZZ_CHECK(!strcmp(back.model_type, c->model_type) && back.arch == c->arch);
  TY_FUZZ_CHECK(back.vocab_size == c->vocab_size && back.hidden_size == c->hidden_size);
  TY_FUZZ_CHECK(back.num_layers == c->num_layers && back.num_heads == c->num_heads);
  TY_FUZZ_CHECK(back.num_kv_heads == c->num_kv_heads && back.head_dim == c->head_dim);
  TY_FUZZ_CHECK(back.intermediate_size == c->intermediate_size);
  TY_FUZZ_CHECK(back.max_positions == c->max_positions && back.norm_eps == c->norm_eps);
  TY_FUZZ_CHECK(back.tie_word_embeddings == c->tie_word_embeddings);
  TY_FUZZ_CHECK(back.qkv_bias == c->qkv_bias && back.o_bias == c->o_bias &&
                back.mlp_bias == c->mlp_bias);
  TY_FUZZ_CHECK(!strcmp(back.activation, c->activation));
  TY_FUZZ_CHECK(back.rope_type == c->rope_type && back.rope_theta == c->rope_theta);
  TY_FUZZ_CHECK(back.rope_factor == c->rope_factor &&
                back.rope_low_freq_factor == c->rope_low_freq_factor &&
                back.rope_high_freq_factor == c->rope_high_freq_factor &&
                back.rope_original_max_positions == c->rope_original_max_positions);
  TY_FUZZ_CHECK(back.sliding_window == c->sliding_window);
  TY_FUZZ_CHECK(back.bos_token_id == c->bos_token_id && back.eos_token_id == c->eos_token_id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ty_model_config_t c;
  ty_status_t s = ty_model_config_parse_text((const char *)data, size, "fuzz/config.json", &c);
  if (s) {
    ty_code_t code = ty_status_code(s);
    TY_FUZZ_CHECK(code == TY_CODE_INVALID_ARGUMENT || code == TY_CODE_UNIMPLEMENTED ||
                  code == TY_CODE_RESOURCE_EXHAUSTED);
    TY_FUZZ_CHECK(strstr(ty_status_message(s), "fuzz/config.json") != NULL ||
                  code == TY_CODE_RESOURCE_EXHAUSTED);
    ty_status_free(s);
    return 0;
  }
  ty_fuzz_check_config(&c);
  ty_fuzz_round_trip(&c);
  return 0;
}
