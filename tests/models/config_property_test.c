/* Property test of config.json parsing: thousands of generated configs, each
 * a valid one of a random family with one kind of change, checked against an
 * oracle written here from transformers' rules rather than from the parser:
 *
 * - every enum-like field (model_type, the activation, torch_dtype / dtype,
 *   architectures, layer_types, the RoPE type of either form) set to a
 *   supported value, one transformers knows but Trainyard does not
 *   implement, an unknown string, a value of the wrong JSON type, or null;
 * - RoPE given as any mix of rope_theta, rope_scaling (older form, "type" or
 *   "rope_type") and rope_parameters (newer form), agreeing or not, with a
 *   valid or broken llama3 block;
 * - bos/eos ids inside, at the edge of and outside the vocabulary, alone or
 *   in lists, or of the wrong type;
 * - sliding windows from layer_types, Qwen2's use_sliding_window and
 *   max_window_layers, or Mistral's window.
 *
 * The code must match (OK, INVALID_ARGUMENT, UNIMPLEMENTED), an error must
 * name the file and the field, and an accepted config must have the values
 * the oracle expects and survive ty_model_config_dumps -> parse unchanged.
 * The seed is printed; TY_TEST_SEED=<seed> replays a run. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"
#include "models/config.h"
#include "models/presets.h"

#define ITERATIONS 6000

static ty_test_rng_t g_rng;

static uint64_t rnd(uint64_t n) { return ty_test_rng_next(&g_rng) % n; }
static bool coin(void) { return rnd(2) == 0; }

typedef struct {
  ty_code_t code;
  const char *needle; /* in the message when code != OK */
} expect_t;

/* The first failure the parser meets decides the message; the oracle keeps
 * the first one in parse order. */
static void expect(expect_t *e, ty_code_t code, const char *needle) {
  if (e->code == TY_CODE_OK) {
    e->code = code;
    e->needle = needle;
  }
}

static const char *g_families[] = {"gpt2", "llama", "mistral", "qwen2"};

/* A random wrong JSON type for a string field (never a string, never null). */
static json_t *wrong_type(void) {
  switch (rnd(5)) {
    case 0: return json_integer((json_int_t)rnd(100));
    case 1: return json_real(0.5);
    case 2: return json_true();
    case 3: return json_pack("{s:s}", "x", "y");
    default: return json_pack("[s]", "silu");
  }
}

static char g_unknown[32];
static const char *unknown_string(void) {
  static const char *const stems[] = {"silu_", "gelu2", "float33", "lama3", "sliding",
                                      "Bert", "", "Default"};
  snprintf(g_unknown, sizeof(g_unknown), "%s%s", stems[rnd(8)], coin() ? "" : "x");
  return g_unknown;
}

typedef struct {
  int family;                  /* index into g_families */
  int64_t vocab, layers;
  ty_model_config_t want;      /* fields the oracle predicts, when OK */
  bool check_rope, check_eos, check_window;
} oracle_t;

static json_t *base_config(oracle_t *o) {
  const char *type = g_families[o->family];
  o->vocab = 2 + (int64_t)rnd(300);
  o->layers = 1 + (int64_t)rnd(4);
  if (o->family == 0) {
    return json_pack("{s:s, s:I, s:i, s:I, s:i, s:i}", "model_type", type, "vocab_size",
                     (json_int_t)o->vocab, "n_embd", 16, "n_layer", (json_int_t)o->layers,
                     "n_head", 2, "n_positions", 32);
  }
  return json_pack("{s:s, s:I, s:i, s:i, s:I, s:i, s:i}", "model_type", type, "vocab_size",
                   (json_int_t)o->vocab, "hidden_size", 16, "intermediate_size", 24,
                   "num_hidden_layers", (json_int_t)o->layers, "num_attention_heads", 4,
                   "num_key_value_heads", 2);
}

/* ---- enum-like fields ---- */

typedef struct {
  const char *field;        /* key; "architectures", "layer_types" hold it in a list */
  bool llama_only, gpt2_only;
  const char *supported[3]; /* per family class: [0] gpt2, [1] llama family */
  const char *known;        /* known to transformers, not implemented */
} enum_field_t;

static const enum_field_t g_enums[] = {
    {"model_type", false, false, {"gpt2", "llama"}, NULL},
    {"activation_function", false, true, {"gelu_new", "gelu_new"}, "relu"},
    {"hidden_act", true, false, {"silu", "silu"}, "gelu"},
    {"torch_dtype", false, false, {"bfloat16", "float32"}, "int8"},
    {"dtype", false, false, {"float16", "float64"}, "float8_e4m3fn"},
    {"architectures", false, false, {"GPT2LMHeadModel", NULL}, NULL},
    {"layer_types", true, false, {"full_attention", "full_attention"}, "chunked_attention"},
    {"rope_scaling", true, false, {"default", "default"}, "yarn"},
    {"rope_parameters", true, false, {"default", "default"}, "longrope"},
};

static void mutate_enum(json_t *root, oracle_t *o, expect_t *e) {
  const enum_field_t *f;
  do {
    f = &g_enums[rnd(sizeof(g_enums) / sizeof(g_enums[0]))];
  } while ((f->llama_only && o->family == 0) || (f->gpt2_only && o->family != 0));
  bool gpt2 = o->family == 0;
  static const char *const arch[] = {"GPT2LMHeadModel", "LlamaForCausalLM",
                                     "MistralForCausalLM", "Qwen2ForCausalLM"};
  const char *supported = !strcmp(f->field, "architectures") ? arch[o->family]
                          : !strcmp(f->field, "model_type")  ? g_families[o->family]
                                                             : f->supported[gpt2 ? 0 : 1];
  const char *known = f->known;
  if (!strcmp(f->field, "architectures")) {
    static const char *const heads[] = {"GPT2DoubleHeadsModel", "LlamaForSequenceClassification",
                                        "MistralForTokenClassification",
                                        "Qwen2ForQuestionAnswering"};
    known = heads[o->family];
  }
  json_t *value = NULL;
  int kind = (int)rnd(5); /* 0 supported, 1 known, 2 unknown, 3 wrong type, 4 null */
  if (kind == 1 && !known) kind = 0;
  switch (kind) {
    case 0: value = json_string(supported); break;
    case 1: value = json_string(known); break;
    case 2: value = json_string(unknown_string()); break;
    case 3: value = wrong_type(); break;
    default: value = json_null(); break;
  }
  bool in_list = !strcmp(f->field, "architectures") || !strcmp(f->field, "layer_types");
  bool rope = !strncmp(f->field, "rope_", 5);
  const char *needle = f->field;
  if (in_list) {
    json_t *list = json_array();
    int64_t n = !strcmp(f->field, "layer_types") ? o->layers : 1;
    int64_t at = (int64_t)rnd((uint64_t)n);
    for (int64_t i = 0; i < n; ++i) {
      json_array_append_new(list, i == at ? json_incref(value) : json_string(supported));
    }
    json_decref(value);
    json_object_set_new(root, f->field, list);
  } else if (rope) {
    json_object_set_new(root, f->field, json_pack("{s:o}", coin() ? "rope_type" : "type", value));
  } else {
    json_object_set_new(root, f->field, value);
  }
  if (kind == 0) return;
  if (!strcmp(f->field, "model_type")) {
    /* transformers knows hundreds: any other string is not implemented. */
    expect(e, kind <= 2 ? TY_CODE_UNIMPLEMENTED : TY_CODE_INVALID_ARGUMENT, "model_type");
  } else if (kind == 4 && !in_list) {
    return; /* null: the default */
  } else if (kind == 1) {
    expect(e, TY_CODE_UNIMPLEMENTED, needle);
  } else {
    expect(e, TY_CODE_INVALID_ARGUMENT, needle);
  }
}

/* ---- RoPE forms ---- */

typedef struct {
  int state; /* 0 absent, 1 null, 2 default, 3 llama3 */
  double factor, low, high;
  int64_t orig;
  bool has_theta;
  double theta;
  bool broken;
} rope_form_t;

static json_t *rope_json(const rope_form_t *f, bool legacy) {
  if (f->state == 1) return json_null();
  json_t *o = json_object();
  json_object_set_new(o, legacy && coin() ? "type" : "rope_type",
                      json_string(f->state == 3 ? "llama3" : "default"));
  if (f->has_theta) json_object_set_new(o, "rope_theta", json_real(f->theta));
  if (f->state == 3) {
    json_object_set_new(o, "factor", json_real(f->factor));
    json_object_set_new(o, "low_freq_factor", json_real(f->low));
    json_object_set_new(o, "high_freq_factor", json_real(f->high));
    json_object_set_new(o, "original_max_position_embeddings", json_integer(f->orig));
  }
  return o;
}

static void random_form(rope_form_t *f, bool allow_theta) {
  memset(f, 0, sizeof(*f));
  f->state = (int)rnd(4);
  static const double factors[] = {2.0, 8.0};
  f->factor = factors[rnd(2)];
  f->low = 1.0;
  f->high = coin() ? 4.0 : 2.0;
  f->orig = coin() ? 16 : 32;
  if (f->state == 3 && rnd(5) == 0) {
    f->broken = true;
    if (coin()) f->high = f->low; /* high must exceed low */
    else f->factor = -f->factor;  /* factors are positive */
  }
  if (allow_theta && f->state >= 2 && coin()) {
    f->has_theta = true;
    f->theta = coin() ? 10000.0 : 500000.0;
  }
}

static void mutate_rope(json_t *root, oracle_t *o, expect_t *e) {
  rope_form_t legacy, params;
  random_form(&legacy, false);
  random_form(&params, true);
  bool top = coin();
  double top_theta = coin() ? 10000.0 : 500000.0;
  if (top) json_object_set_new(root, "rope_theta", json_real(top_theta));
  if (legacy.state) json_object_set_new(root, "rope_scaling", rope_json(&legacy, true));
  if (params.state) json_object_set_new(root, "rope_parameters", rope_json(&params, false));
  /* The oracle, in the parser's order: each form alone, then rope_theta
   * wherever it is given, then the two forms against each other. */
  if (legacy.broken) expect(e, TY_CODE_INVALID_ARGUMENT, "'rope_scaling");
  if (params.broken) expect(e, TY_CODE_INVALID_ARGUMENT, "'rope_parameters");
  if (top && params.has_theta && top_theta != params.theta) {
    expect(e, TY_CODE_INVALID_ARGUMENT, "rope_theta");
  }
  bool both = legacy.state >= 2 && params.state >= 2;
  if (both && (legacy.state != params.state ||
               (legacy.state == 3 && (legacy.factor != params.factor ||
                                      legacy.high != params.high || legacy.orig != params.orig)))) {
    expect(e, TY_CODE_INVALID_ARGUMENT, "disagree");
  }
  const rope_form_t *used = params.state >= 2 ? &params : &legacy;
  o->want.rope_theta = params.has_theta ? params.theta : top ? top_theta : 10000.0;
  o->want.rope_type = used->state == 3 ? TY_ROPE_LLAMA3 : TY_ROPE_DEFAULT;
  o->want.rope_factor = used->state == 3 ? used->factor : 0;
  o->want.rope_high_freq_factor = used->state == 3 ? used->high : 0;
  o->want.rope_original_max_positions = used->state == 3 ? used->orig : 0;
  o->check_rope = true;
}

/* ---- token ids ---- */

static json_t *random_id(const oracle_t *o, bool *bad) {
  int64_t v = (int64_t)rnd((uint64_t)o->vocab + 4) - 2; /* -2 .. vocab+1 */
  if (v < 0 || v >= o->vocab) *bad = true;
  return json_integer(v);
}

static void mutate_ids(json_t *root, oracle_t *o, expect_t *e) {
  o->want.bos_token_id = o->want.eos_token_id = -1;
  const char *fields[2] = {"bos_token_id", "eos_token_id"};
  int64_t *outs[2] = {&o->want.bos_token_id, &o->want.eos_token_id};
  for (int k = 0; k < 2; ++k) {
    bool bad = false, typed = false;
    json_t *v = NULL;
    switch (rnd(5)) {
      case 0: break; /* absent */
      case 1: v = json_null(); break;
      case 2: v = random_id(o, &bad); break;
      case 3: {
        v = json_array();
        uint64_t n = rnd(4);
        for (uint64_t i = 0; i < n; ++i) json_array_append_new(v, random_id(o, &bad));
        if (rnd(6) == 0) {
          json_array_append_new(v, json_string("2"));
          typed = true;
        }
        break;
      }
      default:
        v = json_string("2");
        typed = true;
        break;
    }
    if (v) json_object_set_new(root, fields[k], v);
    if (bad || typed) expect(e, TY_CODE_INVALID_ARGUMENT, fields[k]);
    json_t *first = json_is_array(v) ? json_array_get(v, 0) : v;
    if (json_is_integer(first)) *outs[k] = (int64_t)json_integer_value(first);
  }
  o->check_eos = true;
}

/* ---- sliding windows ---- */

static void mutate_window(json_t *root, oracle_t *o, expect_t *e) {
  bool qwen2 = o->family == 3;
  int64_t window = rnd(3) == 0 ? 0 : 8;
  if (coin()) json_object_set_new(root, "sliding_window", window ? json_integer(window) : json_null());
  else window = 0;
  /* Which layers slide, by the family's own fields. */
  int64_t first = window > 0 ? 0 : o->layers; /* llama, mistral: all or none */
  if (qwen2) {
    bool use = coin();
    int64_t mwl = (int64_t)rnd((uint64_t)o->layers + 2);
    json_object_set_new(root, "use_sliding_window", json_boolean(use));
    if (coin()) json_object_set_new(root, "max_window_layers", json_integer(mwl));
    else mwl = 28;
    first = use ? mwl : o->layers;
  }
  if (first > o->layers) first = o->layers;
  int64_t sliding = o->layers - first;
  if (coin()) { /* layer_types, which transformers follows when given */
    json_t *types = json_array();
    int pattern = (int)rnd(4);
    int64_t n = pattern == 3 ? o->layers + 1 : o->layers;
    sliding = 0;
    for (int64_t i = 0; i < n; ++i) {
      bool s = pattern == 1 || (pattern == 2 && i == 0);
      sliding += s;
      json_array_append_new(types, json_string(s ? "sliding_attention" : "full_attention"));
    }
    json_object_set_new(root, "layer_types", types);
    if (pattern == 3) {
      expect(e, TY_CODE_INVALID_ARGUMENT, "layer_types");
      return;
    }
  }
  if (sliding > 0 && sliding < o->layers) {
    expect(e, TY_CODE_UNIMPLEMENTED, "sliding window");
  } else if (sliding == o->layers && window <= 0) {
    expect(e, TY_CODE_INVALID_ARGUMENT, "sliding_window");
  }
  o->want.sliding_window = sliding == o->layers ? window : 0;
  o->check_window = true;
}

static void assert_same_config(const ty_model_config_t *a, const ty_model_config_t *b) {
  assert_string_equal(a->model_type, b->model_type);
  assert_int_equal(a->arch, b->arch);
  assert_int_equal(a->vocab_size, b->vocab_size);
  assert_int_equal(a->hidden_size, b->hidden_size);
  assert_int_equal(a->num_layers, b->num_layers);
  assert_int_equal(a->num_heads, b->num_heads);
  assert_int_equal(a->num_kv_heads, b->num_kv_heads);
  assert_int_equal(a->head_dim, b->head_dim);
  assert_int_equal(a->intermediate_size, b->intermediate_size);
  assert_int_equal(a->max_positions, b->max_positions);
  assert_true(a->norm_eps == b->norm_eps);
  assert_int_equal(a->tie_word_embeddings, b->tie_word_embeddings);
  assert_int_equal(a->qkv_bias, b->qkv_bias);
  assert_int_equal(a->o_bias, b->o_bias);
  assert_int_equal(a->mlp_bias, b->mlp_bias);
  assert_string_equal(a->activation, b->activation);
  assert_true(a->rope_theta == b->rope_theta);
  assert_int_equal(a->rope_type, b->rope_type);
  assert_true(a->rope_factor == b->rope_factor);
  assert_true(a->rope_low_freq_factor == b->rope_low_freq_factor);
  assert_true(a->rope_high_freq_factor == b->rope_high_freq_factor);
  assert_int_equal(a->rope_original_max_positions, b->rope_original_max_positions);
  assert_int_equal(a->sliding_window, b->sliding_window);
  assert_int_equal(a->bos_token_id, b->bos_token_id);
  assert_int_equal(a->eos_token_id, b->eos_token_id);
}

static void test_generated_configs(void **state) {
  (void)state;
  ty_test_rng_init(&g_rng, ty_test_seed());
  unsigned counts[3] = {0, 0, 0}; /* OK, INVALID_ARGUMENT, UNIMPLEMENTED */
  for (int it = 0; it < ITERATIONS; ++it) {
    oracle_t o;
    memset(&o, 0, sizeof(o));
    o.family = (int)rnd(4);
    json_t *root = base_config(&o);
    expect_t e = {TY_CODE_OK, NULL};
    int scenario = (int)rnd(4);
    if (o.family == 0 && (scenario == 1 || scenario == 3)) scenario = 0; /* no RoPE, no windows */
    switch (scenario) {
      case 0: mutate_enum(root, &o, &e); break;
      case 1: mutate_rope(root, &o, &e); break;
      case 2: mutate_ids(root, &o, &e); break;
      default: mutate_window(root, &o, &e); break;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    assert_non_null(text);
    ty_model_config_t c;
    ty_status_t s = ty_model_config_parse(text, "gen/config.json", &c);
    if (ty_status_code(s) != e.code || (s && !strstr(ty_status_message(s), e.needle))) {
      print_error("iteration %d, scenario %d: expected %s naming '%s', got %s: %s\n  %s\n", it,
                  scenario, ty_code_name(e.code), e.needle ? e.needle : "",
                  ty_code_name(ty_status_code(s)), s ? ty_status_message(s) : "", text);
      fail();
    }
    counts[e.code == TY_CODE_OK ? 0 : e.code == TY_CODE_INVALID_ARGUMENT ? 1 : 2]++;
    if (s) {
      TY_EXPECT_CONTAINS(ty_status_message(s), "gen/config.json");
      ty_status_free(s);
      free(text);
      continue;
    }
    if (o.check_rope) {
      assert_true(c.rope_theta == o.want.rope_theta);
      assert_int_equal(c.rope_type, o.want.rope_type);
      assert_true(c.rope_factor == o.want.rope_factor);
      assert_true(c.rope_high_freq_factor == o.want.rope_high_freq_factor);
      assert_int_equal(c.rope_original_max_positions, o.want.rope_original_max_positions);
    }
    if (o.check_eos) {
      assert_int_equal(c.bos_token_id, o.want.bos_token_id);
      assert_int_equal(c.eos_token_id, o.want.eos_token_id);
    }
    if (o.check_window) assert_int_equal(c.sliding_window, o.want.sliding_window);
    /* What Trainyard writes, it reads back the same. */
    char *written = ty_model_config_dumps(&c);
    assert_non_null(written);
    ty_model_config_t back;
    s = ty_model_config_parse(written, "written/config.json", &back);
    if (s) print_error("%s\n%s\n", ty_status_message(s), written);
    TY_EXPECT_OK(s);
    assert_same_config(&c, &back);
    free(written);
    free(text);
  }
  /* The generator reaches every outcome often. */
  print_message("%u accepted, %u INVALID_ARGUMENT, %u UNIMPLEMENTED\n", counts[0], counts[1],
                counts[2]);
  for (int k = 0; k < 3; ++k) assert_true(counts[k] > ITERATIONS / 20);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_generated_configs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
