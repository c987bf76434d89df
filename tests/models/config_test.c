/* config.json parsing: every family and RoPE form, transformers' defaults,
 * and a clear error naming the field for every bad input. */
#include <stdio.h>
#include <string.h>

#include "common/test_util.h"
#include "models/config.h"

static void test_gpt2(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,\"n_layer\":2,"
      "\"n_head\":2,\"n_positions\":64,\"n_inner\":null,\"activation_function\":"
      "\"gelu_new\",\"layer_norm_epsilon\":1e-05,\"bos_token_id\":95,"
      "\"eos_token_id\":95}",
      "gpt2/config.json", &c));
  assert_int_equal(c.arch, TY_ARCH_GPT2);
  assert_int_equal(c.hidden_size, 32);
  assert_int_equal(c.head_dim, 16);
  assert_int_equal(c.num_kv_heads, 2);
  assert_int_equal(c.intermediate_size, 128); /* n_inner null: 4 * n_embd */
  assert_true(c.tie_word_embeddings);         /* PretrainedConfig default */
  assert_true(c.qkv_bias && c.o_bias && c.mlp_bias);
  assert_int_equal(c.eos_token_id, 95);
}

static void test_llama_gqa_and_llama3_rope(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
      "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
      "\"num_key_value_heads\":2,\"rms_norm_eps\":1e-06,\"rope_theta\":500000.0,"
      "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"
      "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":16},"
      "\"tie_word_embeddings\":true,\"eos_token_id\":[7,8]}",
      "llama3/config.json", &c));
  assert_int_equal(c.arch, TY_ARCH_LLAMA);
  assert_int_equal(c.num_kv_heads, 2);
  assert_int_equal(c.head_dim, 8);
  assert_int_equal(c.rope_type, TY_ROPE_LLAMA3);
  assert_true(c.rope_theta == 500000.0 && c.rope_factor == 8.0);
  assert_int_equal(c.rope_original_max_positions, 16);
  assert_true(c.tie_word_embeddings);
  assert_false(c.qkv_bias || c.o_bias || c.mlp_bias);
  assert_int_equal(c.eos_token_id, 7); /* first of a list */
  assert_int_equal(c.max_positions, 2048); /* LlamaConfig default */
}

static void test_rope_parameters_form(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
      "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
      "\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":500000.0,"
      "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
      "\"original_max_position_embeddings\":16}}",
      "cfg", &c));
  assert_int_equal(c.rope_type, TY_ROPE_LLAMA3);
  assert_true(c.rope_theta == 500000.0);
  assert_int_equal(c.num_kv_heads, 4); /* default: no GQA */
  assert_false(c.tie_word_embeddings); /* LlamaConfig default */
}

static void test_qwen2_and_mistral(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"qwen2\",\"vocab_size\":96,\"hidden_size\":32,"
      "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
      "\"num_key_value_heads\":2,\"sliding_window\":4096,\"use_sliding_window\":false}",
      "qwen2", &c));
  assert_true(c.qkv_bias);
  assert_false(c.o_bias);
  assert_int_equal(c.sliding_window, 0); /* not used unless use_sliding_window */
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"mistral\",\"vocab_size\":96,\"hidden_size\":32,"
      "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
      "\"num_key_value_heads\":2,\"sliding_window\":4096}",
      "mistral", &c));
  assert_int_equal(c.sliding_window, 4096);
}

static void expect_bad(const char *json, ty_code_t code, const char *a, const char *b) {
  ty_model_config_t c;
  ty_status_t s = ty_model_config_parse(json, "bad/config.json", &c);
  assert_int_equal(ty_status_code(s), code);
  TY_EXPECT_CONTAINS(ty_status_message(s), "bad/config.json");
  if (a) TY_EXPECT_CONTAINS(ty_status_message(s), a);
  if (b) TY_EXPECT_CONTAINS(ty_status_message(s), b);
  ty_status_free(s);
}

static void test_bad_configs(void **state) {
  (void)state;
  expect_bad("{", TY_CODE_INVALID_ARGUMENT, "not valid JSON", NULL);
  expect_bad("[1]", TY_CODE_INVALID_ARGUMENT, "top level must be an object", NULL);
  expect_bad("{\"vocab_size\":3}", TY_CODE_INVALID_ARGUMENT, "'model_type'", "missing");
  expect_bad("{\"model_type\":\"bert\"}", TY_CODE_UNIMPLEMENTED, "model_type 'bert'",
             "supported: gpt2, llama, mistral, qwen2");
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_layer\":2,\"n_head\":2,"
             "\"n_positions\":64}",
             TY_CODE_INVALID_ARGUMENT, "'n_embd'", "is missing");
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":\"96\",\"n_embd\":32,\"n_layer\":2,"
             "\"n_head\":2,\"n_positions\":64}",
             TY_CODE_INVALID_ARGUMENT, "'vocab_size'", "must be an integer");
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,\"n_layer\":2,"
             "\"n_head\":3,\"n_positions\":64}",
             TY_CODE_INVALID_ARGUMENT, "'n_head'", "must divide n_embd");
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,\"n_layer\":2,"
             "\"n_head\":2,\"n_positions\":64,\"activation_function\":\"relu\"}",
             TY_CODE_UNIMPLEMENTED, "'activation_function'", "relu");
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,\"n_layer\":2,"
             "\"n_head\":2,\"n_positions\":64,\"scale_attn_by_inverse_layer_idx\":true}",
             TY_CODE_UNIMPLEMENTED, "'scale_attn_by_inverse_layer_idx'", NULL);
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}}",
             TY_CODE_UNIMPLEMENTED, "'rope_scaling.rope_type' is 'yarn'", "default, llama3");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":3}",
             TY_CODE_INVALID_ARGUMENT, "'num_key_value_heads'", "must divide");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}",
             TY_CODE_INVALID_ARGUMENT, "'rope_scaling.low_freq_factor'", "is missing");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"hidden_act\":\"gelu\"}",
             TY_CODE_UNIMPLEMENTED, "'hidden_act' is 'gelu'", "implemented: silu");
  expect_bad("{\"model_type\":\"llama\",\"model_type\":\"gpt2\"}", TY_CODE_INVALID_ARGUMENT,
             "not valid JSON", "duplicate");
}

#define LLAMA_BASE                                                                      \
  "\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":64," \
  "\"num_hidden_layers\":2,\"num_attention_heads\":4"
#define LLAMA3_SCALING                                                                  \
  "{\"rope_type\":\"llama3\",\"factor\":8.0,\"low_freq_factor\":1.0,"                   \
  "\"high_freq_factor\":4.0,\"original_max_position_embeddings\":16}"
#define LLAMA3_PARAMS                                                                   \
  "{\"rope_type\":\"llama3\",\"rope_theta\":500000.0,\"factor\":8.0,"                   \
  "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":16}"

/* Both RoPE forms are validated alike, and when both are given they must
 * agree: before, rope_scaling was not even read when rope_parameters was
 * there. */
static void test_rope_both_forms(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_OK(ty_model_config_parse("{" LLAMA_BASE ",\"rope_theta\":500000.0,\"rope_scaling\":"
                                     LLAMA3_SCALING ",\"rope_parameters\":" LLAMA3_PARAMS "}",
                                     "both", &c));
  assert_int_equal(c.rope_type, TY_ROPE_LLAMA3);
  assert_true(c.rope_theta == 500000.0 && c.rope_factor == 8.0);
  /* rope_theta beside rope_parameters without one of its own */
  TY_EXPECT_OK(ty_model_config_parse("{" LLAMA_BASE ",\"rope_theta\":123.0,\"rope_parameters\":"
                                     "{\"rope_type\":\"default\"}}", "theta", &c));
  assert_true(c.rope_theta == 123.0);
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":-8.0,"
             "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
             "\"original_max_position_embeddings\":16},\"rope_parameters\":" LLAMA3_PARAMS "}",
             TY_CODE_INVALID_ARGUMENT, "'rope_scaling.factor'", "positive");
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":" LLAMA3_SCALING ",\"rope_parameters\":"
             "{\"rope_type\":\"default\",\"rope_theta\":500000.0}}",
             TY_CODE_INVALID_ARGUMENT, "disagree on rope_type", "llama3 vs default");
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":4.0,"
             "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
             "\"original_max_position_embeddings\":16},\"rope_parameters\":" LLAMA3_PARAMS "}",
             TY_CODE_INVALID_ARGUMENT, "disagree on factor", "4 vs 8");
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0},"
             "\"rope_parameters\":" LLAMA3_PARAMS "}",
             TY_CODE_UNIMPLEMENTED, "'rope_scaling.rope_type' is 'yarn'", NULL);
  expect_bad("{" LLAMA_BASE ",\"rope_theta\":10000.0,\"rope_parameters\":" LLAMA3_PARAMS "}",
             TY_CODE_INVALID_ARGUMENT, "rope_theta is 10000", "rope_parameters.rope_theta is 500000");
  expect_bad("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
             "\"low_freq_factor\":4.0,\"high_freq_factor\":1.0,"
             "\"original_max_position_embeddings\":16}}",
             TY_CODE_INVALID_ARGUMENT, "'rope_parameters'", "high_freq_factor > low_freq_factor");
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":{\"type\":\"llama3\",\"rope_type\":\"default\"}}",
             TY_CODE_INVALID_ARGUMENT, "rope_type 'default' and type 'llama3'", NULL);
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":{\"factor\":8.0}}", TY_CODE_INVALID_ARGUMENT,
             "'rope_scaling'", "no rope_type");
  expect_bad("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"factor\":2.0}}",
             TY_CODE_INVALID_ARGUMENT, "'rope_parameters'", "rope_type 'default'");
  expect_bad("{" LLAMA_BASE ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0,"
             "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
             "\"original_max_position_embeddings\":16.5}}",
             TY_CODE_INVALID_ARGUMENT, "original_max_position_embeddings'", "integer");
  expect_bad("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"beta_fast\":32}}",
             TY_CODE_UNIMPLEMENTED, "'rope_parameters.beta_fast'", NULL);
  expect_bad("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"default\",\"fator\":2}}",
             TY_CODE_INVALID_ARGUMENT, "'rope_parameters.fator'", NULL);
  expect_bad("{" LLAMA_BASE ",\"rope_parameters\":{\"rope_type\":\"default\","
             "\"partial_rotary_factor\":0.5}}",
             TY_CODE_UNIMPLEMENTED, "partial_rotary_factor", NULL);
  expect_bad("{" LLAMA_BASE ",\"rope_parameters\":[1]}", TY_CODE_INVALID_ARGUMENT,
             "'rope_parameters'", "must be an object");
}

/* Enum-like fields: a wrong type or an unknown value is an error, never the
 * default; a value transformers knows but Trainyard does not implement is
 * UNIMPLEMENTED. */
static void test_enum_like_fields(void **state) {
  (void)state;
  ty_model_config_t c;
  const char *type_cases[][4] = {
      /* field JSON, code-name, needle, needle */
      {",\"hidden_act\":7", "INVALID", "'hidden_act'", "must be a string"},
      {",\"hidden_act\":null", "OK", NULL, NULL},
      {",\"hidden_act\":\"silu_\"", "INVALID", "'silu_'", "transformers does not know"},
      {",\"hidden_act\":\"relu\"", "UNIMPLEMENTED", "'hidden_act' is 'relu'", "silu"},
      {",\"hidden_act\":\"swish\"", "OK", NULL, NULL},
      {",\"rope_scaling\":{\"rope_type\":3}", "INVALID", "'rope_scaling.rope_type'", "string"},
      {",\"rope_scaling\":{\"rope_type\":\"lama3\"}", "INVALID", "'lama3'", "does not know"},
      {",\"rope_parameters\":{\"rope_type\":\"dynamic\"}", "UNIMPLEMENTED", "'dynamic'", NULL},
      {",\"torch_dtype\":\"float99\"", "INVALID", "'torch_dtype'", "'float99'"},
      {",\"torch_dtype\":16", "INVALID", "'torch_dtype'", "must be a string"},
      {",\"dtype\":\"int8\"", "UNIMPLEMENTED", "'dtype' is 'int8'", NULL},
      {",\"dtype\":\"bfloat16\",\"torch_dtype\":\"float32\"", "INVALID", "disagree", NULL},
      {",\"dtype\":\"bfloat16\",\"torch_dtype\":\"bfloat16\"", "OK", NULL, NULL},
      {",\"architectures\":[\"LlamaForSequenceClassification\"]", "UNIMPLEMENTED",
       "LlamaForSequenceClassification", "causal language models"},
      {",\"architectures\":[\"GPT2LMHeadModel\"]", "INVALID", "not a llama model", NULL},
      {",\"architectures\":\"LlamaForCausalLM\"", "INVALID", "'architectures'", "list"},
      {",\"architectures\":[\"LLaMAForCausalLM\"]", "OK", NULL, NULL},
      {",\"layer_types\":[\"full_attention\"]", "INVALID", "'layer_types'", "one entry per layer"},
      {",\"layer_types\":[\"full_attention\",\"ful_attention\"]", "INVALID", "'layer_types[1]'",
       "does not know"},
      {",\"layer_types\":[\"full_attention\",\"chunked_attention\"]", "UNIMPLEMENTED",
       "'layer_types[1]'", NULL},
      {",\"layer_types\":[\"full_attention\",\"sliding_attention\"],\"sliding_window\":8",
       "UNIMPLEMENTED", "some layers use a sliding window", NULL},
      {",\"layer_types\":[\"sliding_attention\",\"sliding_attention\"]", "INVALID",
       "'sliding_window'", "must be > 0"},
      {",\"attention_bias\":\"no\"", "INVALID", "'attention_bias'", "true or false"},
      {",\"pad_token_id\":\"0\"", "INVALID", "'pad_token_id'", NULL},
  };
  for (size_t i = 0; i < sizeof(type_cases) / sizeof(type_cases[0]); ++i) {
    char json[1024];
    snprintf(json, sizeof(json), "{" LLAMA_BASE "%s}", type_cases[i][0]);
    ty_status_t s = ty_model_config_parse(json, "enum/config.json", &c);
    const char *want = type_cases[i][1];
    ty_code_t code = !strcmp(want, "OK")              ? TY_CODE_OK
                     : !strcmp(want, "UNIMPLEMENTED") ? TY_CODE_UNIMPLEMENTED
                                                      : TY_CODE_INVALID_ARGUMENT;
    if (ty_status_code(s) != code) print_error("case %zu: %s\n", i, json);
    if (code == TY_CODE_OK) {
      TY_EXPECT_OK(s);
      continue;
    }
    assert_int_equal(ty_status_code(s), code);
    TY_EXPECT_CONTAINS(ty_status_message(s), "enum/config.json");
    TY_EXPECT_CONTAINS(ty_status_message(s), type_cases[i][2]);
    if (type_cases[i][3]) TY_EXPECT_CONTAINS(ty_status_message(s), type_cases[i][3]);
    ty_status_free(s);
  }
  const char *gpt2 = "\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,\"n_layer\":2,"
                     "\"n_head\":2,\"n_positions\":64";
  char json[512];
  snprintf(json, sizeof(json), "{%s,\"activation_function\":1}", gpt2);
  expect_bad(json, TY_CODE_INVALID_ARGUMENT, "'activation_function'", "must be a string");
  snprintf(json, sizeof(json), "{%s,\"activation_function\":\"gelu_neww\"}", gpt2);
  expect_bad(json, TY_CODE_INVALID_ARGUMENT, "'gelu_neww'", "does not know");
  snprintf(json, sizeof(json), "{%s,\"add_cross_attention\":1}", gpt2);
  expect_bad(json, TY_CODE_INVALID_ARGUMENT, "'add_cross_attention'", "true or false");
  expect_bad("{\"model_type\":5}", TY_CODE_INVALID_ARGUMENT, "'model_type'", "not a string");
}

/* Which layers use the window: layer_types, else Qwen2's use_sliding_window
 * with max_window_layers (transformers' rule), else Mistral's window. */
static void test_sliding_windows(void **state) {
  (void)state;
  ty_model_config_t c;
  const char *qwen2 = "\"model_type\":\"qwen2\",\"vocab_size\":96,\"hidden_size\":32,"
                      "\"intermediate_size\":64,\"num_hidden_layers\":4,"
                      "\"num_attention_heads\":4,\"sliding_window\":16";
  char json[512];
  snprintf(json, sizeof(json), "{%s,\"use_sliding_window\":true,\"max_window_layers\":0}", qwen2);
  TY_EXPECT_OK(ty_model_config_parse(json, "q", &c));
  assert_int_equal(c.sliding_window, 16);
  snprintf(json, sizeof(json), "{%s,\"use_sliding_window\":true,\"max_window_layers\":4}", qwen2);
  TY_EXPECT_OK(ty_model_config_parse(json, "q", &c));
  assert_int_equal(c.sliding_window, 0); /* no layer reaches max_window_layers */
  snprintf(json, sizeof(json), "{%s,\"use_sliding_window\":true,\"max_window_layers\":2}", qwen2);
  expect_bad(json, TY_CODE_UNIMPLEMENTED, "some layers use a sliding window", NULL);
  snprintf(json, sizeof(json), "{%s,\"use_sliding_window\":true}", qwen2);
  TY_EXPECT_OK(ty_model_config_parse(json, "q", &c)); /* default 28 >= 4 layers */
  assert_int_equal(c.sliding_window, 0);
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"mistral\",\"vocab_size\":96,\"hidden_size\":32,\"intermediate_size\":64,"
      "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"sliding_window\":4096,"
      "\"layer_types\":[\"full_attention\",\"full_attention\"]}",
      "m", &c));
  assert_int_equal(c.sliding_window, 0); /* layer_types is what transformers follows */
}

/* bos/eos ids must lie inside the vocabulary, in every form. */
static void test_token_ids(void **state) {
  (void)state;
  ty_model_config_t c;
  const char *bad[][2] = {
      /* The field, the index in a list, and the value, whatever is wrong. */
      {",\"eos_token_id\":96", "'eos_token_id': 96 is not a token id (an integer from 0 to 95"},
      {",\"eos_token_id\":[2,96]", "'eos_token_id'[1]: 96 is not a token id"},
      {",\"eos_token_id\":-1", "'eos_token_id': -1 is not a token id"},
      {",\"bos_token_id\":1000", "'bos_token_id': 1000 is not a token id"},
      {",\"eos_token_id\":\"2\"", "'eos_token_id': \"2\" is not a token id"},
      {",\"eos_token_id\":[2,\"x\"]", "'eos_token_id'[1]: \"x\" is not a token id"},
      {",\"eos_token_id\":[2,1.5]", "'eos_token_id'[1]: 1.5 is not a token id"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    char json[512];
    snprintf(json, sizeof(json), "{" LLAMA_BASE "%s}", bad[i][0]);
    expect_bad(json, TY_CODE_INVALID_ARGUMENT, bad[i][1], NULL);
  }
  TY_EXPECT_OK(ty_model_config_parse("{" LLAMA_BASE ",\"eos_token_id\":[]}", "ok", &c));
  assert_int_equal(c.eos_token_id, -1);
  TY_EXPECT_OK(ty_model_config_parse("{" LLAMA_BASE ",\"eos_token_id\":[95,0]}", "ok", &c));
  assert_int_equal(c.eos_token_id, 95);
}

/* Sizes no model could have are refused at parse time, by arithmetic, not
 * by walking them. */
static void test_impossible_sizes(void **state) {
  (void)state;
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":9223372036854775807,"
             "\"num_attention_heads\":4}",
             TY_CODE_INVALID_ARGUMENT, "9223372036854775807 layers", "64-bit");
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,"
             "\"n_layer\":9223372036854775807,\"n_head\":2,\"n_positions\":64}",
             TY_CODE_INVALID_ARGUMENT, "64-bit", NULL);
  expect_bad("{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":4611686018427387904,"
             "\"n_layer\":2,\"n_head\":2,\"n_positions\":64}",
             TY_CODE_INVALID_ARGUMENT, "'n_embd'", "overflows");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":1099511627776,\"hidden_size\":"
             "1073741824,\"intermediate_size\":64,\"num_hidden_layers\":1,"
             "\"num_attention_heads\":4}",
             TY_CODE_INVALID_ARGUMENT, "64-bit", NULL);
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":2,\"hidden_size\":2,"
             "\"intermediate_size\":1,\"num_hidden_layers\":2147483648,"
             "\"num_attention_heads\":1}",
             TY_CODE_INVALID_ARGUMENT, "more than Trainyard indexes", NULL);
}

/* A NUL byte in config.json is an error at its offset, not the end of the
 * text (a valid JSON prefix followed by anything used to pass). */
static void test_nul_byte(void **state) {
  (void)state;
  static const char text[] = "{\"model_type\":\"llama\"}\0garbage";
  ty_model_config_t c;
  TY_EXPECT_STATUS(ty_model_config_parse_text(text, sizeof(text) - 1, "nul/config.json", &c),
                   TY_CODE_INVALID_ARGUMENT, "NUL byte at offset 22");
}

static void test_load_missing_folder(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_STATUS(ty_model_config_load("/nonexistent-trainyard-model", &c), TY_CODE_NOT_FOUND,
                   "config.json");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gpt2),
      cmocka_unit_test(test_llama_gqa_and_llama3_rope),
      cmocka_unit_test(test_rope_parameters_form),
      cmocka_unit_test(test_qwen2_and_mistral),
      cmocka_unit_test(test_bad_configs),
      cmocka_unit_test(test_load_missing_folder),
      cmocka_unit_test(test_rope_both_forms),
      cmocka_unit_test(test_enum_like_fields),
      cmocka_unit_test(test_sliding_windows),
      cmocka_unit_test(test_token_ids),
      cmocka_unit_test(test_impossible_sizes),
      cmocka_unit_test(test_nul_byte),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
