/* Evaluation sets: the JSONL lines of `eval --data` and `train --eval-data`
 * read, checked and tokenized (see eval.h; docs/formats.md has the format). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "hal/file.h"
#include "models/chat_template.h"
#include "models/json_input.h"

/* Thousands of labelled prompts are a few MiB; a GiB is past any set that
 * could be scored, so a wrong file (a dataset shard) fails at once. */
static const ty_file_kind_t ty_eval_file_kind = {
    .what = "evaluation set", .max_bytes = 1 * TY_GIB, .limit_env = "TRAINYARD_MAX_INPUT_BYTES",
    .text = true, .bad_code = TY_CODE_INVALID_ARGUMENT, .skip_bom = true};

typedef struct {
  const char *path;
  const ty_model_config_t *config;
  const ty_eval_set_options_t *o;
} ty_eval_reader_t;

static ty_status_t ty_eval_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

#define TY_EVAL_BAD(r, item, ...)                                                       \
  ty_status_annotate(ty_status_make(TY_CODE_INVALID_ARGUMENT, __VA_ARGS__), "%s:%zu", \
                     (r)->path, (item)->line)

/* Text (`text`) or ids (`ids`) of one field pair ("prompt"/"prompt_ids"),
 * as ids of the model's vocabulary. `where` names the ids list in messages
 * ("\"prompt_ids\"", "\"choice_ids\"[2]"). */
static ty_status_t ty_eval_tokens(const ty_eval_reader_t *r, const ty_eval_item_t *item,
                                  const char *name, const char *where, json_t *text, json_t *ids,
                                  int64_t **out, int64_t *out_len, char **out_text) {
  uint32_t *encoded = NULL;
  size_t n = 0;
  if (text) {
    if (!json_is_string(text)) return TY_EVAL_BAD(r, item, "\"%s\" must be a string", name);
    if (!r->o->tokenizer) {
      return TY_EVAL_BAD(r, item, "\"%s\" is text, and %s has no tokenizer.json to encode it; "
                         "give \"%s_ids\"", name, r->o->model_dir, name);
    }
    TY_RETURN_IF_ERROR(ty_tokenizer_encode(r->o->tokenizer, json_string_value(text),
                                           json_string_length(text), 0, &encoded, &n));
    if (out_text && !(*out_text = strdup(json_string_value(text)))) {
      free(encoded);
      return ty_eval_oom();
    }
  } else {
    if (!json_is_array(ids)) return TY_EVAL_BAD(r, item, "%s must be a list of token ids", where);
    n = json_array_size(ids);
  }
  if (n == 0) {
    free(encoded);
    return TY_EVAL_BAD(r, item, "\"%s\" is empty (encodes to no tokens)", name);
  }
  int64_t *v = malloc(n * sizeof(int64_t));
  if (!v) {
    free(encoded);
    return ty_eval_oom();
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t x = text ? (int64_t)encoded[i] : -1;
    ty_status_t s = TY_OK;
    if (!text) {
      s = ty_json_token_id(json_array_get(ids, i), r->config->vocab_size, &x);
      s = ty_status_annotate(s, "%s[%zu]", where, i);
    } else if (x >= r->config->vocab_size) {
      s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "\"%s\" encodes to token %lld, past the "
                         "model's vocabulary of %lld (is tokenizer.json the model's?)", name,
                         (long long)x, (long long)r->config->vocab_size);
    }
    if (s) {
      free(encoded);
      free(v);
      return ty_status_annotate(s, "%s:%zu", r->path, item->line);
    }
    v[i] = x;
  }
  free(encoded);
  *out = v;
  *out_len = (int64_t)n;
  return TY_OK;
}

static ty_status_t ty_eval_alloc_conts(ty_eval_item_t *item, size_t count) {
  item->cont_count = count;
  item->cont = calloc(count, sizeof(*item->cont));
  item->cont_len = calloc(count, sizeof(*item->cont_len));
  item->cont_text = calloc(count, sizeof(*item->cont_text));
  item->logprob = calloc(count, sizeof(*item->logprob));
  return item->cont && item->cont_len && item->cont_text && item->logprob ? TY_OK : ty_eval_oom();
}

/* "messages": the conversation up to the last assistant turn is the prompt
 * (rendered with the model's chat template), that turn the completion. */
static ty_status_t ty_eval_messages(const ty_eval_reader_t *r, ty_eval_item_t *item,
                                    json_t *messages) {
  size_t n = json_is_array(messages) ? json_array_size(messages) : 0;
  if (n < 2) {
    return TY_EVAL_BAD(r, item, "\"messages\" must be a list of at least two messages, the "
                       "last one the assistant's expected answer");
  }
  if (!r->o->chat_template) {
    return TY_EVAL_BAD(r, item, "\"messages\" needs a chat template, and %s has none "
                       "(tokenizer_config.json chat_template)", r->o->model_dir);
  }
  ty_chat_message_t *m = calloc(n, sizeof(*m));
  if (!m) return ty_eval_oom();
  ty_status_t s = TY_OK;
  for (size_t i = 0; i < n && !s; ++i) {
    s = ty_json_chat_message(json_array_get(messages, i), &m[i]);
    if (s) s = ty_status_annotate(ty_status_annotate(s, "messages[%zu]", i), "%s:%zu", r->path,
                                  item->line);
  }
  if (!s && strcmp(m[n - 1].role, "assistant")) {
    s = TY_EVAL_BAD(r, item, "the last message is the \"%s\"'s; it must be the assistant's "
                    "expected answer", m[n - 1].role);
  }
  char *text = NULL;
  size_t size = 0;
  if (!s) s = ty_chat_template_render(r->o->chat_template, m, n - 1, true, &text, &size);
  if (s) s = ty_status_annotate(s, "%s:%zu", r->path, item->line);
  json_t *prompt = s ? NULL : json_stringn(text, size);
  if (!s && !prompt) s = TY_EVAL_BAD(r, item, "the rendered prompt is not UTF-8 text");
  free(text);
  if (!s) s = ty_eval_tokens(r, item, "prompt", NULL, prompt, NULL, &item->prompt,
                             &item->prompt_len, NULL);
  json_decref(prompt);
  json_t *answer = s ? NULL : json_object_get(json_array_get(messages, n - 1), "content");
  if (!s) s = ty_eval_alloc_conts(item, 1);
  if (!s) s = ty_eval_tokens(r, item, "completion", NULL, answer, NULL, &item->cont[0],
                             &item->cont_len[0], &item->cont_text[0]);
  free(m);
  return s;
}

/* "choices" (texts) or "choice_ids" (lists of ids), and "answer" (index). */
static ty_status_t ty_eval_choices(const ty_eval_reader_t *r, ty_eval_item_t *item,
                                   json_t *texts, json_t *ids, json_t *answer) {
  if (texts && ids) return TY_EVAL_BAD(r, item, "give one of \"choices\" and \"choice_ids\"");
  json_t *list = texts ? texts : ids;
  const char *name = texts ? "choices" : "choice_ids";
  if (!json_is_array(list) || json_array_size(list) < 2) {
    return TY_EVAL_BAD(r, item, "\"%s\" must be a list of at least two choices", name);
  }
  size_t n = json_array_size(list);
  if (!json_is_integer(answer) || json_integer_value(answer) < 0 ||
      (size_t)json_integer_value(answer) >= n) {
    return TY_EVAL_BAD(r, item, "\"answer\" must be the index (0..%zu) of the right choice",
                       n - 1);
  }
  item->answer = (size_t)json_integer_value(answer);
  TY_RETURN_IF_ERROR(ty_eval_alloc_conts(item, n));
  for (size_t i = 0; i < n; ++i) {
    json_t *v = json_array_get(list, i);
    char where[48];
    snprintf(where, sizeof(where), "\"choice_ids\"[%zu]", i);
    TY_RETURN_IF_ERROR(ty_eval_tokens(r, item, texts ? "choices" : "choice", where,
                                      texts ? v : NULL, texts ? NULL : v, &item->cont[i],
                                      &item->cont_len[i], texts ? &item->cont_text[i] : NULL));
  }
  /* Two equal choices score equally, so which of them "answer" names would
   * decide the line (the first of a tie is the pick). */
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = i + 1; k < n; ++k) {
      if (ty_eval_same_ids(item->cont[i], item->cont_len[i], item->cont[k], item->cont_len[k])) {
        return TY_EVAL_BAD(r, item, "\"%s\"[%zu] and [%zu] are the same choice%s%s%s: a tie "
                           "that \"answer\" would break; give each choice once", name, i, k,
                           texts ? " (" : "", texts ? item->cont_text[i] : "", texts ? ")" : "");
      }
    }
  }
  return TY_OK;
}

static ty_status_t ty_eval_parse_line(const ty_eval_reader_t *r, ty_eval_item_t *item,
                                      const char *text, size_t size) {
  json_error_t error;
  json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &error);
  if (!json_is_object(root)) {
    json_decref(root);
    return TY_EVAL_BAD(r, item, "not a JSON object%s%s", root ? "" : ": ", root ? "" : error.text);
  }
  static const char *const keys[] = {"id", "prompt", "prompt_ids", "completion",
                                     "completion_ids", "messages", "choices", "choice_ids",
                                     "answer", NULL};
  const char *key;
  json_t *v;
  ty_status_t s = TY_OK;
  json_object_foreach(root, key, v) {
    bool known = false;
    for (int i = 0; keys[i] && !known; ++i) known = !strcmp(keys[i], key);
    if (!known && !s) {
      s = TY_EVAL_BAD(r, item, "unknown key \"%s\" (the keys are id, prompt, prompt_ids, "
                      "completion, completion_ids, messages, choices, choice_ids and answer)",
                      key);
    }
  }
#define TY_GET(k) json_object_get(root, k)
  item->id = json_incref(TY_GET("id"));
  bool has_choices = TY_GET("choices") || TY_GET("choice_ids");
  bool has_completion = TY_GET("completion") || TY_GET("completion_ids");
  bool has_prompt = TY_GET("prompt") || TY_GET("prompt_ids");
  if (s) {
  } else if (TY_GET("messages")) {
    if (has_prompt || has_completion || has_choices || TY_GET("answer")) {
      s = TY_EVAL_BAD(r, item, "a \"messages\" line holds the conversation alone (no prompt, "
                      "completion, choices or answer)");
    } else {
      s = ty_eval_messages(r, item, TY_GET("messages"));
    }
  } else if (TY_GET("prompt") && TY_GET("prompt_ids")) {
    s = TY_EVAL_BAD(r, item, "give one of \"prompt\" and \"prompt_ids\"");
  } else if (!has_prompt) {
    s = TY_EVAL_BAD(r, item, "no \"prompt\" (or \"prompt_ids\", or \"messages\")");
  } else if (has_choices && !r->o->choices) {
    s = TY_EVAL_BAD(r, item, "a multiple-choice line: score it with %s",
                    strcmp(r->o->option, "--data") ? "--eval-choices" : "--choices");
  } else if (has_choices && has_completion) {
    s = TY_EVAL_BAD(r, item, "give \"choices\" with \"answer\", or a \"completion\", not both");
  } else if (!has_choices && TY_GET("answer")) {
    s = TY_EVAL_BAD(r, item, "\"answer\" needs \"choices\"");
  } else if (!has_choices && !has_completion) {
    s = TY_EVAL_BAD(r, item, "no \"completion\" (or \"completion_ids\") to expect");
  } else if (TY_GET("completion") && TY_GET("completion_ids")) {
    s = TY_EVAL_BAD(r, item, "give one of \"completion\" and \"completion_ids\"");
  } else {
    s = ty_eval_tokens(r, item, "prompt", "\"prompt_ids\"", TY_GET("prompt"),
                       TY_GET("prompt_ids"), &item->prompt, &item->prompt_len, NULL);
    if (!s && has_choices) {
      s = ty_eval_choices(r, item, TY_GET("choices"), TY_GET("choice_ids"), TY_GET("answer"));
    } else if (!s) {
      s = ty_eval_alloc_conts(item, 1);
      if (!s) s = ty_eval_tokens(r, item, "completion", "\"completion_ids\"",
                                 TY_GET("completion"), TY_GET("completion_ids"), &item->cont[0],
                                 &item->cont_len[0],
                                 TY_GET("completion") ? &item->cont_text[0] : NULL);
    }
  }
#undef TY_GET
  for (size_t i = 0; !s && i < item->cont_count; ++i) {
    if (item->prompt_len + item->cont_len[i] > r->config->max_positions) {
      s = TY_EVAL_BAD(r, item, "a prompt of %lld tokens + %lld expected tokens exceeds the "
                      "model's %lld positions", (long long)item->prompt_len,
                      (long long)item->cont_len[i], (long long)r->config->max_positions);
    }
  }
  json_decref(root);
  return s;
}

static void ty_eval_item_free_conts(ty_eval_item_t *item) {
  for (size_t k = 0; k < item->cont_count; ++k) {
    free(item->cont[k]);
    free(item->cont_text[k]);
  }
  free(item->cont);
  free(item->cont_len);
  free(item->cont_text);
  free(item->logprob);
  item->cont = NULL;
  item->cont_len = NULL;
  item->cont_text = NULL;
  item->logprob = NULL;
  item->cont_count = 0;
}

bool ty_eval_same_ids(const int64_t *a, int64_t na, const int64_t *b, int64_t nb) {
  return na == nb && !memcmp(a, b, (size_t)na * sizeof(int64_t));
}

/* --choices on completion lines: the file's distinct completions are every
 * line's choices (a classification set such as positive / negative). */
static ty_status_t ty_eval_labels(ty_eval_set_t *set, const char *option) {
  ty_eval_item_t **labels = calloc(set->count, sizeof(*labels));
  size_t n = 0;
  if (!labels) return ty_eval_oom();
  for (size_t i = 0; i < set->count; ++i) {
    ty_eval_item_t *it = &set->items[i];
    if (it->cont_count != 1) continue;
    bool seen = false;
    for (size_t k = 0; k < n && !seen; ++k) {
      seen = ty_eval_same_ids(labels[k]->cont[0], labels[k]->cont_len[0], it->cont[0],
                          it->cont_len[0]);
    }
    if (!seen) labels[n++] = it;
  }
  ty_status_t s = TY_OK;
  if (n == 1) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s %s: --choices scores each line's completion "
                       "against the file's other completions, and every line expects the same "
                       "one; give lines \"choices\" and \"answer\"", option, set->path);
  }
  /* Copies first: the labels point into the items being rewritten. */
  ty_eval_item_t copy = {0};
  if (!s && n > 1) s = ty_eval_alloc_conts(&copy, n);
  for (size_t k = 0; !s && k < n; ++k) {
    copy.cont_len[k] = labels[k]->cont_len[0];
    copy.cont[k] = malloc((size_t)copy.cont_len[k] * sizeof(int64_t));
    if (!copy.cont[k]) s = ty_eval_oom();
    if (!s) memcpy(copy.cont[k], labels[k]->cont[0], (size_t)copy.cont_len[k] * sizeof(int64_t));
    if (!s && labels[k]->cont_text[0] && !(copy.cont_text[k] = strdup(labels[k]->cont_text[0]))) {
      s = ty_eval_oom();
    }
  }
  for (size_t i = 0; !s && n > 1 && i < set->count; ++i) {
    ty_eval_item_t *it = &set->items[i];
    if (it->cont_count != 1) continue;
    size_t answer = 0;
    while (!ty_eval_same_ids(copy.cont[answer], copy.cont_len[answer], it->cont[0], it->cont_len[0])) {
      answer++;
    }
    ty_eval_item_free_conts(it);
    s = ty_eval_alloc_conts(it, n);
    it->answer = answer;
    for (size_t k = 0; !s && k < n; ++k) {
      it->cont_len[k] = copy.cont_len[k];
      it->cont[k] = malloc((size_t)copy.cont_len[k] * sizeof(int64_t));
      if (!it->cont[k]) s = ty_eval_oom();
      if (!s) memcpy(it->cont[k], copy.cont[k], (size_t)copy.cont_len[k] * sizeof(int64_t));
      if (!s && copy.cont_text[k] && !(it->cont_text[k] = strdup(copy.cont_text[k]))) {
        s = ty_eval_oom();
      }
    }
  }
  ty_eval_item_free_conts(&copy);
  free(labels);
  return s;
}

ty_status_t ty_eval_set_load(const char *path, const ty_model_config_t *config,
                             const ty_eval_set_options_t *options, ty_eval_set_t **out_set) {
  *out_set = NULL;
  char *data = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read(path, &ty_eval_file_kind, &data, &size);
  if (s) return ty_status_annotate(s, "%s", options->option);
  ty_eval_set_t *set = calloc(1, sizeof(*set));
  size_t capacity = 1;
  for (size_t i = 0; i < size; ++i) capacity += data[i] == '\n';
  if (set) set->items = calloc(capacity, sizeof(*set->items));
  if (set) set->path = strdup(path);
  if (!set || !set->items || !set->path) s = ty_eval_oom();
  ty_eval_reader_t r = {path, config, options};
  size_t number = 0;
  for (char *line = data; !s && line < data + size;) {
    char *end = memchr(line, '\n', (size_t)(data + size - line));
    if (!end) end = data + size;
    number++;
    size_t n = (size_t)(end - line);
    bool blank = true;
    for (size_t i = 0; i < n && blank; ++i) blank = strchr(" \t\r", line[i]) != NULL;
    if (!blank) {
      ty_eval_item_t *item = &set->items[set->count++];
      item->line = number;
      s = ty_eval_parse_line(&r, item, line, n);
    }
    line = end + 1;
  }
  free(data);
  if (!s && set->count == 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s %s holds no evaluation lines",
                       options->option, path);
  }
  if (!s && options->choices) s = ty_eval_labels(set, options->option);
  if (s) {
    ty_eval_set_destroy(set);
    return s;
  }
  set->choices = options->choices;
  set->generate = !options->choices;
  for (size_t i = 0; i < set->count; ++i) {
    for (size_t k = 0; k < set->items[i].cont_count; ++k) {
      int64_t n = set->items[i].prompt_len + set->items[i].cont_len[k];
      if (n > set->max_row) set->max_row = n;
    }
  }
  *out_set = set;
  return TY_OK;
}

void ty_eval_set_destroy(ty_eval_set_t *set) {
  if (!set) return;
  for (size_t i = 0; set->items && i < set->count; ++i) {
    ty_eval_item_t *it = &set->items[i];
    json_decref(it->id);
    free(it->prompt);
    ty_eval_item_free_conts(it);
    free(it->generated);
    free(it->generated_text);
  }
  free(set->items);
  free(set->path);
  free(set);
}
