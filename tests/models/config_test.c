/* config.json parsing: every family and RoPE form, transformers' defaults,
 * and a clear error naming the field for every bad input. */
#include <string.h>

#include "common/test_util.h"
#include "models/config.h"

static void test_gpt2(void **state) {
  (void)state;
  ty_model_config_t c;
  TY_EXPECT_OK(ty_model_config_parse(
      "{\"model_type\":\"gpt2\",\"vocab_size\":96,\"n_embd\":32,\"n_layer\":2,"
      "\"n_head\":2,\"n_positions\":64,\"n_inner\":null,\"activation_function\":"
      "\"gelu_new\",\"layer_norm_epsilon\":1e-05,\"bos_token_id\":50256,"
      "\"eos_token_id\":50256}",
      "gpt2/config.json", &c));
  assert_int_equal(c.arch, TY_ARCH_GPT2);
  assert_int_equal(c.hidden_size, 32);
  assert_int_equal(c.head_dim, 16);
  assert_int_equal(c.num_kv_heads, 2);
  assert_int_equal(c.intermediate_size, 128); /* n_inner null: 4 * n_embd */
  assert_true(c.tie_word_embeddings);         /* PretrainedConfig default */
  assert_true(c.qkv_bias && c.o_bias && c.mlp_bias);
  assert_int_equal(c.eos_token_id, 50256);
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
             TY_CODE_UNIMPLEMENTED, "rope_type 'yarn'", "default, llama3");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":3}",
             TY_CODE_INVALID_ARGUMENT, "'num_key_value_heads'", "must divide");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}",
             TY_CODE_INVALID_ARGUMENT, "'low_freq_factor'", "is missing");
  expect_bad("{\"model_type\":\"llama\",\"vocab_size\":96,\"hidden_size\":32,"
             "\"intermediate_size\":64,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
             "\"hidden_act\":\"gelu\"}",
             TY_CODE_UNIMPLEMENTED, "'hidden_act'", "only silu");
  expect_bad("{\"model_type\":\"llama\",\"model_type\":\"gpt2\"}", TY_CODE_INVALID_ARGUMENT,
             "not valid JSON", "duplicate");
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
      cmocka_unit_test(test_impossible_sizes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
