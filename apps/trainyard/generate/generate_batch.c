/* `trainyard generate --input prompts.jsonl --output out.jsonl`: every line
 * a prompt, all of them through the batching engine (models/engine.h, the
 * one `serve` runs), the results in input order. For evaluations: each line
 * may set its own length, sampling, seed and stop strings. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_numerics.h"
#include "files/out_paths.h"
#include "generate.h"
#include "hal/device.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/engine.h"
#include "models/json_input.h"
#include "models/llm.h"
#include "models/text_stream.h"
#include "models/tokenizer.h"

typedef struct {
  size_t number;   /* the input line (1-based) */
  json_t *id;      /* the line's "id", echoed */
  int64_t *prompt, prompt_len, max_new;
  ty_sampling_t sampling;
  char *stop[4];
  size_t stop_count;
  ty_text_stream_t *text;
  char *content;   /* the text so far */
  size_t content_size;
  int64_t *ids, count;
  const char *finish;
  uint64_t sequence;
  bool live;
  ty_status_t error; /* from the text stream */
} ty_gen_line_t;

typedef struct {
  const ty_generate_batch_args_t *a;
  const ty_tokenizer_t *tok;
  ty_model_config_t config;
  ty_gen_line_t *lines;
  size_t count, done;
  int64_t tokens;
} ty_gen_batch_t;

static ty_status_t ty_gen_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

#define TY_LINE_ERROR(b, l, ...)                                                        \
  ty_status_annotate(ty_status_make(TY_CODE_INVALID_ARGUMENT, __VA_ARGS__), "%s:%zu", \
                     (b)->a->input, (l)->number)

static ty_status_t ty_gen_number(ty_gen_batch_t *b, ty_gen_line_t *l, json_t *v,
                                 const char *key, double lo, double hi, double *out) {
  if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi) {
    return TY_LINE_ERROR(b, l, "\"%s\" must be a number in [%g, %g]", key, lo, hi);
  }
  *out = json_number_value(v);
  return TY_OK;
}

/* The prompt of a line: "prompt" text or "prompt_ids". */
static ty_status_t ty_gen_prompt(ty_gen_batch_t *b, ty_gen_line_t *l, json_t *text,
                                 json_t *ids) {
  if (!text == !ids) {
    return TY_LINE_ERROR(b, l, "give exactly one of \"prompt\" and \"prompt_ids\"");
  }
  size_t n = 0;
  uint32_t *encoded = NULL;
  if (text) {
    if (!json_is_string(text)) return TY_LINE_ERROR(b, l, "\"prompt\" must be a string");
    if (!b->tok) {
      return TY_LINE_ERROR(b, l, "\"prompt\" needs %s/tokenizer.json; give \"prompt_ids\"",
                           b->a->model_dir);
    }
    TY_RETURN_IF_ERROR(ty_tokenizer_encode(b->tok, json_string_value(text),
                                           json_string_length(text), 0, &encoded, &n));
  } else {
    if (!json_is_array(ids)) return TY_LINE_ERROR(b, l, "\"prompt_ids\" must be a list of ids");
    n = json_array_size(ids);
  }
  l->prompt = malloc((n ? n : 1) * sizeof(int64_t));
  if (!l->prompt) {
    free(encoded);
    return ty_gen_oom();
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t v = text ? (int64_t)encoded[i] : -1;
    ty_status_t s = TY_OK;
    if (!text) {
      s = ty_status_annotate(ty_json_token_id(json_array_get(ids, i), b->config.vocab_size, &v),
                             "\"prompt_ids\"[%zu]", i);
    } else if (v >= b->config.vocab_size) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "\"prompt\" encodes to token %lld, past the "
                         "model's vocabulary of %lld (is tokenizer.json the model's?)",
                         (long long)v, (long long)b->config.vocab_size);
    }
    if (s) {
      free(encoded);
      return ty_status_annotate(s, "%s:%zu", b->a->input, l->number);
    }
    l->prompt[i] = v;
  }
  free(encoded);
  l->prompt_len = (int64_t)n;
  if (n == 0) return TY_LINE_ERROR(b, l, "the prompt is empty");
  return TY_OK;
}

static ty_status_t ty_gen_parse_line(ty_gen_batch_t *b, ty_gen_line_t *l, const char *text,
                                     size_t size) {
  json_error_t error;
  json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &error);
  if (!json_is_object(root)) {
    json_decref(root);
    return TY_LINE_ERROR(b, l, "not a JSON object%s%s", root ? "" : ": ", root ? "" : error.text);
  }
  static const char *const keys[] = {"id", "prompt", "prompt_ids", "max_new_tokens",
                                     "temperature", "top_k", "top_p", "seed", "stop", NULL};
  const char *key;
  json_t *v;
  ty_status_t s = TY_OK;
  json_object_foreach(root, key, v) {
    bool known = false;
    for (int i = 0; keys[i] && !known; ++i) known = !strcmp(keys[i], key);
    if (!known && !s) {
      s = TY_LINE_ERROR(b, l, "unknown key \"%s\" (the keys are id, prompt, prompt_ids, "
                        "max_new_tokens, temperature, top_k, top_p, seed and stop)", key);
    }
  }
  if (!s) {
    s = ty_gen_prompt(b, l, json_object_get(root, "prompt"), json_object_get(root, "prompt_ids"));
  }
  l->id = json_incref(json_object_get(root, "id"));
  l->max_new = b->a->max_new;
  l->sampling = b->a->sampling;
  l->sampling.seed = b->a->sampling.seed + (uint64_t)(l - b->lines); /* --seed + index */
  json_object_foreach(root, key, v) {
    double x = 0;
    if (s) break;
    if (!strcmp(key, "max_new_tokens")) {
      if (!json_is_integer(v) || json_integer_value(v) < 1) {
        s = TY_LINE_ERROR(b, l, "\"max_new_tokens\" must be an integer >= 1");
      } else {
        l->max_new = json_integer_value(v);
      }
    } else if (!strcmp(key, "temperature")) {
      s = ty_gen_number(b, l, v, key, 0, 100, &x);
      l->sampling.greedy = x == 0;
      if (x > 0) l->sampling.temperature = x;
    } else if (!strcmp(key, "top_k")) {
      s = ty_gen_number(b, l, v, key, 0, 1e9, &x);
      if (!s && !json_is_integer(v)) s = TY_LINE_ERROR(b, l, "\"top_k\" must be an integer");
      l->sampling.top_k = (int64_t)x;
      l->sampling.greedy = false;
    } else if (!strcmp(key, "top_p")) {
      s = ty_gen_number(b, l, v, key, 1e-12, 1, &x);
      l->sampling.top_p = x;
      l->sampling.greedy = false;
    } else if (!strcmp(key, "seed")) {
      if (!json_is_integer(v)) s = TY_LINE_ERROR(b, l, "\"seed\" must be an integer");
      l->sampling.seed = (uint64_t)json_integer_value(v);
    } else if (!strcmp(key, "stop")) {
      if (!json_is_array(v) || json_array_size(v) > 4) {
        s = TY_LINE_ERROR(b, l, "\"stop\" must be a list of at most 4 strings");
      }
      for (size_t i = 0; !s && i < json_array_size(v); ++i) {
        json_t *item = json_array_get(v, i);
        if (!json_is_string(item) || !json_string_length(item)) {
          s = TY_LINE_ERROR(b, l, "\"stop\" entry %zu must be a non-empty string", i);
        } else if (!(l->stop[l->stop_count++] = strdup(json_string_value(item)))) {
          s = ty_gen_oom();
        }
      }
      if (!s && l->stop_count && !b->tok) {
        s = TY_LINE_ERROR(b, l, "\"stop\" needs %s/tokenizer.json", b->a->model_dir);
      }
    }
  }
  if (!s && l->max_new < 1) {
    s = TY_LINE_ERROR(b, l, "no \"max_new_tokens\" and no --max-new-tokens");
  }
  if (!s && l->prompt_len + l->max_new > b->config.max_positions) {
    s = TY_LINE_ERROR(b, l, "a prompt of %lld tokens + %lld new tokens exceeds the model's %lld "
                      "positions", (long long)l->prompt_len, (long long)l->max_new,
                      (long long)b->config.max_positions);
  }
  if (!s && b->tok) {
    s = ty_text_stream_create(b->tok, TY_TOKENIZER_DECODE_SKIP_SPECIAL,
                              (const char *const *)l->stop, l->stop_count, &l->text);
  }
  if (!s && !(l->ids = malloc((size_t)l->max_new * sizeof(int64_t)))) s = ty_gen_oom();
  json_decref(root);
  return s;
}

/* --input: JSON lines of prompts, for evaluations (thousands of prompts). */
static const ty_file_kind_t ty_prompts_file_kind = {
    .what = "--input file", .max_bytes = 1 * TY_GIB, .limit_env = "TRAINYARD_MAX_INPUT_BYTES",
    .text = true, .bad_code = TY_CODE_INVALID_ARGUMENT, .skip_bom = true};

static ty_status_t ty_gen_read(ty_gen_batch_t *b) {
  char *data = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(b->a->input, &ty_prompts_file_kind, &data, &size));
  size_t capacity = 1;
  for (size_t i = 0; i < size; ++i) capacity += data[i] == '\n';
  b->lines = calloc(capacity, sizeof(*b->lines));
  ty_status_t s = b->lines ? TY_OK : ty_gen_oom();
  size_t number = 0;
  for (char *line = data; !s && line < data + size;) {
    char *end = memchr(line, '\n', (size_t)(data + size - line));
    if (!end) end = data + size;
    number++;
    size_t n = (size_t)(end - line);
    bool blank = true;
    for (size_t i = 0; i < n && blank; ++i) blank = strchr(" \t\r", line[i]) != NULL;
    if (!blank) {
      ty_gen_line_t *l = &b->lines[b->count++];
      l->number = number;
      s = ty_gen_parse_line(b, l, line, n);
    }
    line = end + 1;
  }
  free(data);
  if (!s && b->count == 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "--input %s holds no prompt lines", b->a->input);
  }
  return s;
}

static void ty_gen_text(ty_gen_line_t *l, const char *text, size_t size) {
  if (l->error || !size) return;
  char *grown = realloc(l->content, l->content_size + size + 1);
  if (!grown) {
    l->error = ty_gen_oom();
    return;
  }
  memcpy(grown + l->content_size, text, size);
  l->content = grown;
  l->content_size += size;
  l->content[l->content_size] = '\0';
}

static void ty_gen_on_token(void *context, const ty_engine_token_t *t) {
  ty_gen_batch_t *b = context;
  ty_gen_line_t *l = t->user;
  if (l->finish) return;
  l->ids[l->count++] = t->id;
  b->tokens++;
  bool eos = t->finish == TY_ENGINE_STOP, stopped = false;
  const char *text;
  size_t size;
  if (l->text && !eos && !l->error) {
    l->error = ty_text_stream_push(l->text, (uint32_t)t->id, &text, &size, &stopped);
    if (!l->error) ty_gen_text(l, text, size);
  }
  if (t->finish) l->live = false;
  if (stopped || t->finish) {
    l->finish = stopped || eos ? "stop" : "length";
    if (l->text && !stopped && !l->error) {
      l->error = ty_text_stream_finish(l->text, &text, &size);
      if (!l->error) ty_gen_text(l, text, size);
    }
    b->done++;
  }
}

/* One result line. */
static ty_status_t ty_gen_result(const ty_gen_batch_t *b, size_t index, char **out) {
  const ty_gen_line_t *l = &b->lines[index];
  json_t *ids = json_array();
  for (int64_t i = 0; i < l->count; ++i) json_array_append_new(ids, json_integer(l->ids[i]));
  json_t *root = json_pack("{s:I}", "index", (json_int_t)index);
  if (l->id) json_object_set(root, "id", l->id);
  json_object_set_new(root, "prompt_tokens", json_integer(l->prompt_len));
  json_object_set_new(root, "ids", ids);
  if (l->text) {
    json_object_set_new(root, "text", json_stringn(l->content ? l->content : "", l->content_size));
  }
  json_object_set_new(root, "finish_reason", json_string(l->finish));
  *out = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
  json_decref(root);
  return *out ? TY_OK : ty_gen_oom();
}

static double ty_gen_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs every line through the engine, as many at once as it has slots. */
static ty_status_t ty_gen_run(ty_gen_batch_t *b, ty_engine_t *e) {
  size_t next = 0;
  double t0 = ty_gen_now(), shown = t0;
  while (b->done < b->count) {
    while (next < b->count && ty_engine_free_slots(e) > 0) {
      ty_gen_line_t *l = &b->lines[next++];
      ty_engine_request_t q = {.prompt = l->prompt, .prompt_len = l->prompt_len,
                               .max_new = l->max_new, .sampling = l->sampling, .user = l};
      if (b->a->stop_at_eos) q.stop_ids[q.stop_id_count++] = b->config.eos_token_id;
      ty_status_t s = ty_engine_add(e, &q, &l->sequence);
      if (s) return ty_status_annotate(s, "%s:%zu", b->a->input, l->number);
      l->live = true;
    }
    TY_RETURN_IF_ERROR(ty_engine_step(e, ty_gen_on_token, b));
    for (size_t i = 0; i < next; ++i) {
      ty_gen_line_t *l = &b->lines[i];
      if (l->error) {
        ty_status_t err = l->error;
        l->error = TY_OK;
        return ty_status_annotate(err, "%s:%zu", b->a->input, l->number);
      }
      if (l->finish && l->live) {
        ty_engine_cancel(e, l->sequence); /* a stop string: the slot is free now */
        l->live = false;
      }
    }
    double now = ty_gen_now();
    if (now - shown > 5) {
      fprintf(stderr, "trainyard generate: %zu/%zu prompts done, %lld tokens, %.1f tok/s\n",
              b->done, b->count, (long long)b->tokens, (double)b->tokens / (now - t0));
      shown = now;
    }
  }
  return TY_OK;
}

ty_status_t ty_generate_batch(ty_app_t *app, const ty_generate_batch_args_t *a) {
  ty_gen_batch_t b = {.a = a};
  ty_tokenizer_t *tok = NULL;
  ty_registry_t *registry = NULL;
  ty_device_t *device = NULL;
  ty_engine_t *engine = NULL;
  char path[4096];
  /* The results may not overwrite the model or the prompts. */
  const ty_path_arg_t inputs[] = {{"--model", a->model_dir}, {"--input", a->input}};
  const ty_out_path_t results = {.option = "--output", .path = a->output, .what = "results file"};
  ty_status_t s = ty_out_path_check(&results, inputs, sizeof(inputs) / sizeof(inputs[0]));
  if (!s) s = ty_model_config_load(a->model_dir, &b.config);
  /* The checkpoint against the config before any graph is built. */
  if (!s) s = ty_llm_check_weights(&b.config, a->model_dir);
  bool exists = false;
  snprintf(path, sizeof(path), "%s/tokenizer.json", a->model_dir);
  if (!s) s = ty_file_probe(path, &exists);
  if (!s && exists) s = ty_tokenizer_load_file(path, &tok);
  b.tok = tok;
  if (!s && a->stop_at_eos && b.config.eos_token_id < 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "--stop-at-eos: %s/config.json has no "
                       "eos_token_id", a->model_dir);
  }
  if (!s) s = ty_gen_read(&b);
  /* The context: what the longest line needs, unless --ctx says. */
  int64_t need = 2;
  for (size_t i = 0; !s && i < b.count; ++i) {
    int64_t n = b.lines[i].prompt_len + b.lines[i].max_new;
    need = n > need ? n : need;
    if (a->ctx && n > a->ctx) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%zu: a prompt of %lld tokens + %lld new "
                         "tokens exceeds --ctx %lld", a->input, b.lines[i].number,
                         (long long)b.lines[i].prompt_len, (long long)b.lines[i].max_new,
                         (long long)a->ctx);
    }
  }
  int64_t ctx = a->ctx ? a->ctx : need;
  if (!s) s = ty_app_registry_create(app, &registry);
  if (!s) s = ty_app_device_open("generate", registry, a->backend, &device, NULL);
  if (!s) {
    s = ty_llm_check_memory(&b.config, a->dtype, 0, ty_device_info(device)->memory_bytes,
                            ty_device_label(device));
  }
  if (!s) {
    int64_t chunk = a->chunk ? a->chunk : 64;
    ty_engine_options_t o = {.dtype = a->dtype, .compute_dtype = a->compute_dtype,
                             .max_batch = a->max_batch, .context = ctx,
                             .prefill_chunk = chunk < ctx ? chunk : ctx,
                             .check_numerics = a->check_numerics,
                             .deterministic = a->deterministic, .speculate = a->speculate,
                             .overlap = true};
    /* At most every slot's context: more could never be spent in a step. */
    int64_t most = ctx * a->max_batch;
    o.prefill_budget = a->prefill_budget < most ? a->prefill_budget : most;
    s = ty_engine_create(device, &b.config, &o, &engine);
    if (!s && a->deterministic) ty_app_note_deterministic("generate", device);
  }
  if (!s) {
    ty_llm_load_options_t load = ty_app_load_options(a->allow_nonfinite);
    ty_llm_load_report_t report;
    s = ty_engine_load_weights(engine, a->model_dir, &load, &report);
    if (!s) ty_app_warn_nonfinite("generate", a->model_dir, &report);
  }
  double t0 = ty_gen_now();
  if (!s) s = ty_gen_run(&b, engine);
  uint32_t nodes = 0;
  const ty_numerics_finding_t *finding =
      s && engine ? ty_engine_numerics_finding(engine, &nodes) : NULL;
  if (finding) {
    ty_status_free(s);
    ty_check_numerics_print(stderr, "generate", &b.config, finding, nodes, "generation");
    s = ty_check_numerics_status(&b.config, finding, "generation");
  }
  double seconds = ty_gen_now() - t0;
  /* The results, in input order, written at once (atomically). */
  char *out = NULL;
  size_t out_size = 0;
  for (size_t i = 0; !s && i < b.count; ++i) {
    char *line = NULL;
    s = ty_gen_result(&b, i, &line);
    size_t n = line ? strlen(line) : 0;
    char *grown = s ? NULL : realloc(out, out_size + n + 2);
    if (!s && !grown) s = ty_gen_oom();
    if (!s) {
      memcpy(grown + out_size, line, n);
      grown[out_size + n] = '\n';
      out = grown;
      out_size += n + 1;
    }
    free(line);
  }
  if (!s) s = ty_file_write_atomic(a->output, out ? out : "", out_size);
  if (!s) {
    int64_t chunk = a->chunk ? a->chunk : 64;
    fprintf(stderr, "trainyard generate: %zu prompts, %lld new tokens in %.2f s (%.1f tok/s, "
            "%lld slots of %lld tokens, prefill chunk %lld, on %s) -> %s\n", b.count,
            (long long)b.tokens, seconds, seconds > 0 ? (double)b.tokens / seconds : 0.0,
            (long long)a->max_batch, (long long)ctx, (long long)(chunk < ctx ? chunk : ctx),
            ty_device_label(device), a->output);
    ty_engine_stats_t st = ty_engine_stats(engine);
    if (st.steps > 0) {
      /* Where a step's time went: the device's work shows in "run"; the
       * rest keeps the device idle between steps. */
      double per = 1e3 / (double)st.steps;
      fprintf(stderr, "trainyard generate: %llu engine steps, %.3f ms each: run %.3f (%s), "
              "read back %.3f, host %.3f\n",
              (unsigned long long)st.steps, st.step_seconds * per, st.run_seconds * per,
              st.overlapped ? "the wait for the run in flight, its reads included"
                            : "inputs, the graph, the wait",
              st.read_seconds * per,
              (st.step_seconds - st.run_seconds - st.read_seconds) * per);
    }
    if (a->speculate > 0) {
      fprintf(stderr, "trainyard generate: speculative decoding: %llu of %llu drafted tokens "
              "accepted in %llu steps\n", (unsigned long long)st.draft_accepted,
              (unsigned long long)st.draft_tokens, (unsigned long long)st.steps);
    }
  }
  free(out);
  for (size_t i = 0; b.lines && i < b.count; ++i) {
    ty_gen_line_t *l = &b.lines[i];
    json_decref(l->id);
    free(l->prompt);
    for (size_t k = 0; k < l->stop_count; ++k) free(l->stop[k]);
    ty_text_stream_destroy(l->text);
    free(l->content);
    free(l->ids);
    ty_status_free(l->error);
  }
  free(b.lines);
  ty_engine_destroy(engine);
  ty_device_close(device);
  ty_registry_destroy(registry);
  ty_tokenizer_destroy(tok);
  return s;
}
