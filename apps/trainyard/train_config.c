/* `trainyard train` options: one table drives parsing, printing, JSON and
 * help, so the four never disagree. */
#include "train_config.h"

#include "graph/compile_cache.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { TY_OPT_STRING, TY_OPT_INT, TY_OPT_FLOAT, TY_OPT_BOOL, TY_OPT_U64 } ty_opt_kind_t;

typedef struct {
  const char *name;
  ty_opt_kind_t kind;
  size_t offset;
  size_t size; /* strings: capacity */
  const char *help;
} ty_opt_t;

#define TY_S(field, help) {#field, TY_OPT_STRING, offsetof(ty_train_config_t, field), \
                           sizeof(((ty_train_config_t *)0)->field), help}
#define TY_I(field, help) {#field, TY_OPT_INT, offsetof(ty_train_config_t, field), 0, help}
#define TY_F(field, help) {#field, TY_OPT_FLOAT, offsetof(ty_train_config_t, field), 0, help}
#define TY_B(field, help) {#field, TY_OPT_BOOL, offsetof(ty_train_config_t, field), 0, help}
#define TY_U(field, help) {#field, TY_OPT_U64, offsetof(ty_train_config_t, field), 0, help}

static const ty_opt_t ty_opts[] = {
    TY_S(model, "Hugging Face model folder to fine-tune"),
    TY_S(preset, "model preset to train from scratch (gpt2-tiny, gpt2-124m, llama-tiny, "
                 "llama-60m); the vocabulary comes from the data"),
    TY_S(data, "dataset folder made by 'trainyard data prepare'"),
    TY_S(tokenizer, "tokenizer.json copied into checkpoints (default: the data's or model's)"),
    TY_S(out, "output folder: checkpoints, metrics.jsonl, TensorBoard events, summary.txt"),
    TY_S(backend, "device URI, e.g. cpu, cpu?threads=2; URI?fallback=cpu runs the nodes the "
                  "device refuses on cpu (a mixed run, for bring-up; never a benchmark)"),
    TY_S(dtype, "parameter and compute dtype: f32, bf16, f16, f64"),
    TY_I(batch_size, "sequences per micro-batch"),
    TY_I(seq_len, "tokens per sequence (0: the dataset's)"),
    TY_I(grad_accum, "micro-batches per optimizer step"),
    TY_I(epochs, "passes over the training data (when --max-steps is 0)"),
    TY_I(max_steps, "optimizer steps (0: --epochs decides)"),
    TY_S(optimizer, "adamw or sgd"),
    TY_F(lr, "peak learning rate"),
    TY_F(min_lr, "learning-rate floor of the decay"),
    TY_I(warmup_steps, "linear warmup steps"),
    TY_S(schedule, "decay after warmup: cosine, linear or constant"),
    TY_F(weight_decay, "decoupled weight decay (matrices only unless --decay-all)"),
    TY_F(beta1, "AdamW beta1"),
    TY_F(beta2, "AdamW beta2"),
    TY_F(eps, "AdamW epsilon"),
    TY_F(momentum, "SGD momentum"),
    TY_F(clip, "global gradient-norm clipping (0: off)"),
    TY_F(dropout, "dropout probability on embeddings and residual branches"),
    TY_B(decay_all, "apply weight decay to norms, biases and embeddings too"),
    TY_U(seed, "seed of initialization, data order and dropout"),
    TY_I(eval_every, "validation loss every N steps (0: only at the end)"),
    TY_I(eval_batches, "validation batches per evaluation (0: all)"),
    TY_I(save_every, "checkpoint every N steps (0: only at the end)"),
    TY_I(keep, "keep the last K checkpoints (0: all)"),
    TY_I(log_every, "print a step line every N steps"),
    TY_S(resume, "resume: 'latest' in --out, or a checkpoint folder"),
    TY_I(sample_tokens, "generate this many tokens from the trained model at the end"),
    TY_S(sample_prompt, "prompt of the final sample"),
    TY_S(artifact, "run the train step from this artifact ('trainyard compile') instead of "
                   "compiling"),
    TY_S(cache_dir, "on-disk compile cache ('none' for none; default $XDG_CACHE_HOME/trainyard "
                    "or ~/.cache/trainyard)"),
    TY_B(retry_failed, "compile again even if the cache holds a failure for this graph"),
    TY_S(dump_graph, "write the train step's graph as canonical text (P.txt) and Graphviz "
                     "dot (P.dot)"),
};
#define TY_OPT_COUNT (sizeof(ty_opts) / sizeof(ty_opts[0]))

void ty_train_config_defaults(ty_train_config_t *c) {
  memset(c, 0, sizeof(*c));
  snprintf(c->backend, sizeof(c->backend), "cpu");
  snprintf(c->dtype, sizeof(c->dtype), "f32");
  snprintf(c->out, sizeof(c->out), "out");
  snprintf(c->optimizer, sizeof(c->optimizer), "adamw");
  snprintf(c->schedule, sizeof(c->schedule), "cosine");
  c->batch_size = 8;
  c->grad_accum = 1;
  c->epochs = 1;
  c->lr = 3e-4;
  c->min_lr = 3e-5;
  c->warmup_steps = 0;
  c->weight_decay = 0.1;
  c->beta1 = 0.9;
  c->beta2 = 0.95;
  c->eps = 1e-8;
  c->momentum = 0.9;
  c->clip = 1.0;
  c->seed = 1337;
  c->eval_batches = 0;
  c->keep = 3;
  c->log_every = 1;
  ty_compile_cache_default_dir(c->cache_dir, sizeof(c->cache_dir));
}

static const ty_opt_t *ty_opt_find(const char *key) {
  char norm[64];
  size_t n = 0;
  for (const char *p = key; *p && n + 1 < sizeof(norm); ++p) norm[n++] = *p == '-' ? '_' : *p;
  norm[n] = '\0';
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    if (strcmp(ty_opts[i].name, norm) == 0) return &ty_opts[i];
  }
  return NULL;
}

bool ty_train_config_is_flag(const char *name) {
  const ty_opt_t *o = ty_opt_find(name);
  return o && o->kind == TY_OPT_BOOL;
}

ty_status_t ty_train_config_set(ty_train_config_t *c, const char *key, const char *value) {
  const ty_opt_t *o = ty_opt_find(key);
  if (!o) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "unknown option '%s'; see 'trainyard train --help'", key);
  }
  char *field = (char *)c + o->offset;
  char *end = NULL;
  errno = 0;
  switch (o->kind) {
    case TY_OPT_STRING:
      if (strlen(value) >= o->size) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: value too long", o->name);
      }
      if (o->offset == offsetof(ty_train_config_t, cache_dir) && !strcmp(value, "none")) {
        value = ""; /* no on-disk cache */
      }
      memcpy(field, value, strlen(value) + 1);
      return TY_OK;
    case TY_OPT_INT: {
      long long v = strtoll(value, &end, 10);
      if (errno || end == value || *end) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: '%s' is not an integer",
                              o->name, value);
      }
      *(int64_t *)field = v;
      return TY_OK;
    }
    case TY_OPT_U64: {
      unsigned long long v = strtoull(value, &end, 10);
      if (errno || end == value || *end || value[0] == '-') {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "option %s: '%s' is not a non-negative integer", o->name, value);
      }
      *(uint64_t *)field = v;
      return TY_OK;
    }
    case TY_OPT_FLOAT: {
      double v = strtod(value, &end);
      if (errno || end == value || *end || !isfinite(v)) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: '%s' is not a number",
                              o->name, value);
      }
      *(double *)field = v;
      return TY_OK;
    }
    case TY_OPT_BOOL:
      if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes")) {
        *(bool *)field = true;
      } else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no")) {
        *(bool *)field = false;
      } else {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT, "option %s: '%s' is not true or false",
                              o->name, value);
      }
      return TY_OK;
  }
  return TY_OK;
}

ty_status_t ty_train_config_load_file(ty_train_config_t *c, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    return ty_status_make(TY_CODE_NOT_FOUND, "cannot open config file %s: %s", path,
                          strerror(errno));
  }
  char line[2048];
  int number = 0;
  ty_status_t s = TY_OK;
  while (!s && fgets(line, sizeof(line), f)) {
    ++number;
    char *p = line;
    while (*p == ' ' || *p == '\t') ++p;
    p[strcspn(p, "\r\n")] = '\0';
    if (!*p || *p == '#') continue;
    char *eq = strchr(p, '=');
    if (!eq) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%d: expected key=value, got '%s'", path,
                         number, p);
      break;
    }
    char *key_end = eq;
    while (key_end > p && (key_end[-1] == ' ' || key_end[-1] == '\t')) --key_end;
    *key_end = '\0';
    char *value = eq + 1;
    while (*value == ' ' || *value == '\t') ++value;
    char *vend = value + strlen(value);
    while (vend > value && (vend[-1] == ' ' || vend[-1] == '\t')) *--vend = '\0';
    s = ty_status_annotate(ty_train_config_set(c, p, value), "%s:%d", path, number);
  }
  fclose(f);
  return s;
}

ty_status_t ty_train_config_validate(const ty_train_config_t *c) {
#define TY_BAD(...) return ty_status_make(TY_CODE_INVALID_ARGUMENT, __VA_ARGS__)
  if (!c->model[0] == !c->preset[0]) TY_BAD("give exactly one of --model and --preset");
  if (!c->data[0]) TY_BAD("--data is required (a folder made by 'trainyard data prepare')");
  if (!c->out[0]) TY_BAD("--out must not be empty");
  if (c->batch_size < 1) TY_BAD("--batch-size must be >= 1");
  if (c->seq_len < 0) TY_BAD("--seq-len must be >= 0");
  if (c->grad_accum < 1) TY_BAD("--grad-accum must be >= 1");
  if (c->epochs < 1 && c->max_steps < 1) TY_BAD("give --epochs >= 1 or --max-steps >= 1");
  if (c->max_steps < 0) TY_BAD("--max-steps must be >= 0");
  if (!(c->lr > 0)) TY_BAD("--lr must be > 0");
  if (c->min_lr < 0 || c->min_lr > c->lr) TY_BAD("--min-lr must lie in [0, --lr]");
  if (c->warmup_steps < 0) TY_BAD("--warmup-steps must be >= 0");
  if (strcmp(c->schedule, "cosine") && strcmp(c->schedule, "linear") &&
      strcmp(c->schedule, "constant")) {
    TY_BAD("--schedule must be cosine, linear or constant, not '%s'", c->schedule);
  }
  if (strcmp(c->optimizer, "adamw") && strcmp(c->optimizer, "sgd")) {
    TY_BAD("--optimizer must be adamw or sgd, not '%s'", c->optimizer);
  }
  if (c->weight_decay < 0) TY_BAD("--weight-decay must be >= 0");
  if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1)) {
    TY_BAD("--beta1 and --beta2 must lie in [0, 1)");
  }
  if (!(c->eps > 0)) TY_BAD("--eps must be > 0");
  if (c->clip < 0) TY_BAD("--clip must be >= 0");
  if (!(c->dropout >= 0 && c->dropout < 1)) TY_BAD("--dropout must lie in [0, 1)");
  if (c->eval_every < 0 || c->save_every < 0 || c->keep < 0 || c->eval_batches < 0) {
    TY_BAD("--eval-every, --eval-batches, --save-every and --keep must be >= 0");
  }
  if (c->log_every < 1) TY_BAD("--log-every must be >= 1");
  if (c->sample_tokens < 0) TY_BAD("--sample-tokens must be >= 0");
#undef TY_BAD
  return TY_OK;
}

static void ty_opt_format(const ty_train_config_t *c, const ty_opt_t *o, char *buf, size_t cap) {
  const char *field = (const char *)c + o->offset;
  switch (o->kind) {
    case TY_OPT_STRING: snprintf(buf, cap, "%s", field); break;
    case TY_OPT_INT: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)field); break;
    case TY_OPT_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case TY_OPT_FLOAT: snprintf(buf, cap, "%.17g", *(const double *)field); break;
    case TY_OPT_BOOL: snprintf(buf, cap, "%s", *(const bool *)field ? "true" : "false"); break;
  }
}

void ty_train_config_print(const ty_train_config_t *c, FILE *out) {
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    char value[TY_CFG_PATH_MAX];
    ty_opt_format(c, &ty_opts[i], value, sizeof(value));
    if (ty_opts[i].kind == TY_OPT_FLOAT) {
      snprintf(value, sizeof(value), "%g", *(const double *)((const char *)c + ty_opts[i].offset));
    }
    fprintf(out, "  %-14s %s\n", ty_opts[i].name, value[0] ? value : "-");
  }
}

json_t *ty_train_config_to_json(const ty_train_config_t *c) {
  json_t *j = json_object();
  for (size_t i = 0; i < TY_OPT_COUNT && j; ++i) {
    const ty_opt_t *o = &ty_opts[i];
    const char *field = (const char *)c + o->offset;
    json_t *v = NULL;
    switch (o->kind) {
      case TY_OPT_STRING: v = json_string(field); break;
      case TY_OPT_INT: v = json_integer(*(const int64_t *)field); break;
      case TY_OPT_U64: {
        char text[32];
        snprintf(text, sizeof(text), "%llu", (unsigned long long)*(const uint64_t *)field);
        v = json_string(text); /* JSON integers are signed 64-bit in jansson */
        break;
      }
      case TY_OPT_FLOAT: v = json_real(*(const double *)field); break;
      case TY_OPT_BOOL: v = json_boolean(*(const bool *)field); break;
    }
    json_object_set_new(j, o->name, v);
  }
  return j;
}

ty_status_t ty_train_config_from_json(ty_train_config_t *c, const json_t *object) {
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    const ty_opt_t *o = &ty_opts[i];
    json_t *v = json_object_get(object, o->name);
    if (!v) continue;
    char *field = (char *)c + o->offset;
    switch (o->kind) {
      case TY_OPT_STRING:
        if (json_is_string(v) && strlen(json_string_value(v)) < o->size) {
          memcpy(field, json_string_value(v), strlen(json_string_value(v)) + 1);
        }
        break;
      case TY_OPT_INT: *(int64_t *)field = (int64_t)json_integer_value(v); break;
      case TY_OPT_U64:
        if (json_is_string(v)) *(uint64_t *)field = strtoull(json_string_value(v), NULL, 10);
        break;
      case TY_OPT_FLOAT: *(double *)field = json_number_value(v); break;
      case TY_OPT_BOOL: *(bool *)field = json_is_true(v); break;
    }
  }
  return TY_OK;
}

void ty_train_config_help(FILE *out) {
  ty_train_config_t d;
  ty_train_config_defaults(&d);
  for (size_t i = 0; i < TY_OPT_COUNT; ++i) {
    const ty_opt_t *o = &ty_opts[i];
    char flag[64], dflt[TY_CFG_PATH_MAX];
    snprintf(flag, sizeof(flag), "--%s", o->name);
    for (char *p = flag; *p; ++p) *p = *p == '_' ? '-' : *p;
    ty_opt_format(&d, o, dflt, sizeof(dflt));
    if (o->kind == TY_OPT_FLOAT) snprintf(dflt, sizeof(dflt), "%g", *(const double *)((const char *)&d + o->offset));
    fprintf(out, "  %-18s %s%s%s%s\n", flag, o->help, dflt[0] && o->kind != TY_OPT_BOOL ? " [" : "",
            dflt[0] && o->kind != TY_OPT_BOOL ? dflt : "", dflt[0] && o->kind != TY_OPT_BOOL ? "]" : "");
  }
}
