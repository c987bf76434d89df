/* OpenAI request bodies, parsed and checked (see serve_request.h). */
#include "serve/serve_request.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/json_input.h"

bool ty_api_fail(ty_api_error_t *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...) {
  e->status = status;
  e->type = type;
  e->code = code;
  snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
  va_list args;
  va_start(args, fmt);
  vsnprintf(e->message, sizeof(e->message), fmt, args);
  va_end(args);
  return false;
}

#define TY_BAD(e, param, ...) \
  ty_api_fail((e), 400, "invalid_request_error", NULL, (param), __VA_ARGS__)

void ty_api_request_free(ty_api_request_t *r) {
  free(r->model);
  for (size_t i = 0; i < r->prompt_count; ++i) {
    free(r->prompts[i].text);
    free(r->prompts[i].ids);
  }
  free(r->prompts);
  for (size_t i = 0; i < r->message_count; ++i) {
    free(r->messages[i].role);
    free(r->messages[i].content);
  }
  free(r->messages);
  for (size_t i = 0; i < r->stop_count; ++i) free(r->stop[i]);
  memset(r, 0, sizeof(*r));
}

static bool ty_oom(ty_api_error_t *e) {
  return ty_api_fail(e, 500, "server_error", NULL, NULL, "out of memory reading the request");
}

static char *ty_dup(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (out) {
    memcpy(out, s, n);
    out[n] = '\0';
  }
  return out;
}

/* ---- the fields ---- */

static bool ty_get_int(json_t *v, const char *name, int64_t lo, int64_t hi, int64_t *out,
                       ty_api_error_t *e) {
  if (!json_is_integer(v)) return TY_BAD(e, name, "'%s' must be an integer", name);
  int64_t x = json_integer_value(v);
  if (x < lo || x > hi) {
    return TY_BAD(e, name, "'%s' is %lld; it must be between %lld and %lld", name, (long long)x,
                  (long long)lo, (long long)hi);
  }
  *out = x;
  return true;
}

static bool ty_get_number(json_t *v, const char *name, double lo, double hi, bool lo_open,
                          double *out, ty_api_error_t *e) {
  if (!json_is_number(v)) return TY_BAD(e, name, "'%s' must be a number", name);
  double x = json_number_value(v);
  if (!isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
    return TY_BAD(e, name, "'%s' is %g; it must be in %s%g, %g]", name, x, lo_open ? "(" : "[",
                  lo, hi);
  }
  *out = x;
  return true;
}

static bool ty_get_bool(json_t *v, const char *name, bool *out, ty_api_error_t *e) {
  if (!json_is_boolean(v)) return TY_BAD(e, name, "'%s' must be true or false", name);
  *out = json_is_true(v);
  return true;
}

/* A token id list: integers in [0, 2^31). */
static bool ty_get_ids(json_t *list, const char *name, ty_api_prompt_t *p, ty_api_error_t *e) {
  size_t n = json_array_size(list);
  if (n == 0) return TY_BAD(e, name, "'%s' holds an empty list of token ids", name);
  p->ids = malloc(n * sizeof(int64_t));
  if (!p->ids) return ty_oom(e);
  for (size_t i = 0; i < n; ++i) {
    ty_status_t s = ty_json_token_id(json_array_get(list, i), 0, &p->ids[i]);
    if (s) {
      bool ok = TY_BAD(e, name, "'%s'[%zu]: %s", name, i, ty_status_message(s));
      ty_status_free(s);
      return ok;
    }
  }
  p->id_count = n;
  return true;
}

static bool ty_get_prompt_text(json_t *s, ty_api_prompt_t *p, ty_api_error_t *e) {
  p->text_size = json_string_length(s);
  p->text = ty_dup(json_string_value(s), p->text_size);
  return p->text ? true : ty_oom(e);
}

/* prompt: a string, a list of strings, a list of ids, a list of id lists. */
static bool ty_parse_prompt(json_t *v, ty_api_request_t *r, ty_api_error_t *e) {
  if (!v) return TY_BAD(e, "prompt", "'prompt' is required");
  size_t count = 1;
  bool many = json_is_array(v) && json_array_size(v) > 0 &&
              (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)));
  if (!json_is_string(v) && !json_is_array(v)) {
    return TY_BAD(e, "prompt", "'prompt' must be a string, a list of strings, a list of token "
                               "ids or a list of such lists");
  }
  if (json_is_array(v) && json_array_size(v) == 0) {
    return TY_BAD(e, "prompt", "'prompt' is an empty list");
  }
  if (many) count = json_array_size(v);
  if (count > TY_API_MAX_PROMPTS) {
    return TY_BAD(e, "prompt", "'prompt' holds %zu prompts; at most %d are taken at once", count,
                  TY_API_MAX_PROMPTS);
  }
  r->prompts = calloc(count, sizeof(*r->prompts));
  if (!r->prompts) return ty_oom(e);
  r->prompt_count = count;
  if (json_is_string(v)) return ty_get_prompt_text(v, &r->prompts[0], e);
  if (!many) return ty_get_ids(v, "prompt", &r->prompts[0], e);
  bool strings = json_is_string(json_array_get(v, 0));
  for (size_t i = 0; i < count; ++i) {
    json_t *item = json_array_get(v, i);
    if (strings ? !json_is_string(item) : !json_is_array(item)) {
      return TY_BAD(e, "prompt", "'prompt' entry %zu must be a %s like the first", i,
                    strings ? "string" : "list of token ids");
    }
    if (strings ? !ty_get_prompt_text(item, &r->prompts[i], e)
                : !ty_get_ids(item, "prompt", &r->prompts[i], e)) {
      return false;
    }
  }
  return true;
}

/* content: a string, or a list of {"type": "text", "text": ...} parts. */
static bool ty_parse_content(json_t *v, size_t index, ty_api_message_t *m, ty_api_error_t *e) {
  if (json_is_string(v)) {
    m->content_size = json_string_length(v);
    m->content = ty_dup(json_string_value(v), m->content_size);
    return m->content ? true : ty_oom(e);
  }
  if (!json_is_array(v)) {
    return TY_BAD(e, "messages", "messages[%zu].content must be a string or a list of text "
                                 "parts", index);
  }
  size_t total = 0, i;
  json_t *part;
  json_array_foreach(v, i, part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    json_t *text = json_object_get(part, "text");
    if (!json_is_object(part) || !type || strcmp(type, "text") != 0 || !json_is_string(text) ||
        json_object_size(part) != 2) {
      return TY_BAD(e, "messages", "messages[%zu].content[%zu] must be {\"type\": \"text\", "
                                   "\"text\": \"...\"} (only text parts are supported)",
                    index, i);
    }
    total += json_string_length(text);
  }
  m->content = malloc(total + 1);
  if (!m->content) return ty_oom(e);
  json_array_foreach(v, i, part) {
    json_t *text = json_object_get(part, "text");
    memcpy(m->content + m->content_size, json_string_value(text), json_string_length(text));
    m->content_size += json_string_length(text);
  }
  m->content[m->content_size] = '\0';
  return true;
}

static bool ty_parse_messages(json_t *v, ty_api_request_t *r, ty_api_error_t *e) {
  if (!v) return TY_BAD(e, "messages", "'messages' is required");
  if (!json_is_array(v) || json_array_size(v) == 0) {
    return TY_BAD(e, "messages", "'messages' must be a non-empty list of messages");
  }
  size_t n = json_array_size(v);
  r->messages = calloc(n, sizeof(*r->messages));
  if (!r->messages) return ty_oom(e);
  r->message_count = n;
  for (size_t i = 0; i < n; ++i) {
    json_t *m = json_array_get(v, i), *role = json_object_get(m, "role");
    if (!json_is_object(m)) return TY_BAD(e, "messages", "messages[%zu] must be an object", i);
    const char *key;
    json_t *value;
    json_object_foreach(m, key, value) {
      if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name")) {
        return TY_BAD(e, "messages", "messages[%zu].%s is not supported (a message has role, "
                                     "content and name)", i, key);
      }
    }
    if (!json_is_string(role)) {
      return TY_BAD(e, "messages", "messages[%zu].role must be a string", i);
    }
    json_t *participant = json_object_get(m, "name");
    if (participant && !json_is_string(participant)) {
      char shown[48];
      ty_json_brief(participant, shown, sizeof(shown));
      return TY_BAD(e, "messages", "messages[%zu].name must be a string, not %s", i, shown);
    }
    const char *name = json_string_value(role);
    /* OpenAI's newer name for the system message. */
    r->messages[i].role = strdup(strcmp(name, "developer") == 0 ? "system" : name);
    if (!r->messages[i].role) return ty_oom(e);
    json_t *content = json_object_get(m, "content");
    if (!content) return TY_BAD(e, "messages", "messages[%zu].content is required", i);
    if (!ty_parse_content(content, i, &r->messages[i], e)) return false;
  }
  return true;
}

static bool ty_parse_stop(json_t *v, ty_api_request_t *r, ty_api_error_t *e) {
  if (json_is_null(v)) return true;
  json_t *one[1] = {v};
  size_t n = json_is_string(v) ? 1 : json_array_size(v);
  if (!json_is_string(v) && !json_is_array(v)) {
    return TY_BAD(e, "stop", "'stop' must be a string or a list of strings");
  }
  if (n > TY_API_MAX_STOP) {
    return TY_BAD(e, "stop", "'stop' holds %zu strings; at most %d are allowed", n,
                  TY_API_MAX_STOP);
  }
  for (size_t i = 0; i < n; ++i) {
    json_t *s = json_is_string(v) ? one[0] : json_array_get(v, i);
    if (!json_is_string(s) || json_string_length(s) == 0) {
      return TY_BAD(e, "stop", "'stop' entry %zu must be a non-empty string", i);
    }
    r->stop[i] = ty_dup(json_string_value(s), json_string_length(s));
    if (!r->stop[i]) return ty_oom(e);
    r->stop_count = i + 1;
  }
  return true;
}

/* Fields a client may send with their default value only. */
static bool ty_default_only(const char *key, json_t *v, ty_api_error_t *e) {
  bool fine = json_is_null(v);
  if (!strcmp(key, "logit_bias")) {
    fine = fine || (json_is_object(v) && json_object_size(v) == 0);
  } else if (!strcmp(key, "echo") || !strcmp(key, "parallel_tool_calls")) {
    fine = fine || json_is_false(v);
  } else if (!strcmp(key, "best_of")) {
    fine = fine || (json_is_integer(v) && json_integer_value(v) == 1);
  } else if (!strcmp(key, "tools") || !strcmp(key, "functions")) {
    fine = fine || (json_is_array(v) && json_array_size(v) == 0);
  } else if (!strcmp(key, "response_format")) {
    const char *type = json_string_value(json_object_get(v, "type"));
    fine = fine || (json_is_object(v) && type && !strcmp(type, "text"));
  } else if (!strcmp(key, "tool_choice") || !strcmp(key, "function_call")) {
    fine = fine || (json_is_string(v) && !strcmp(json_string_value(v), "none"));
  }
  if (!fine) {
    return TY_BAD(e, key, "'%s' is not supported by this server (only its default value is "
                          "accepted)", key);
  }
  return true;
}

static const char *const ty_common_keys[] = {
    "model", "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "n", "stream",
    "stream_options", "logprobs", "user", "presence_penalty", "frequency_penalty", "logit_bias",
    "return_token_ids", "ignore_eos", "repetition_penalty", "min_p", NULL};
static const char *const ty_completion_keys[] = {"prompt", "echo", "best_of", "suffix", NULL};
static const char *const ty_chat_keys[] = {
    "messages", "top_logprobs", "max_completion_tokens", "tools", "tool_choice", "functions",
    "function_call", "parallel_tool_calls", "response_format", NULL};

static bool ty_known(const char *const *keys, const char *key) {
  for (size_t i = 0; keys[i]; ++i) {
    if (!strcmp(keys[i], key)) return true;
  }
  return false;
}

static bool ty_parse_fields(json_t *root, ty_api_kind_t kind, ty_api_request_t *r,
                            ty_api_error_t *e) {
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    bool known = ty_known(ty_common_keys, key) ||
                 ty_known(kind == TY_API_CHAT ? ty_chat_keys : ty_completion_keys, key);
    if (!known) return TY_BAD(e, key, "Unrecognized request argument supplied: %s", key);
  }
  json_t *model = json_object_get(root, "model");
  if (!json_is_string(model)) return TY_BAD(e, "model", "'model' is required (a string)");
  if (!(r->model = strdup(json_string_value(model)))) return ty_oom(e);
  if (kind == TY_API_COMPLETIONS) {
    if (!ty_parse_prompt(json_object_get(root, "prompt"), r, e)) return false;
    json_t *suffix = json_object_get(root, "suffix");
    if (suffix && !json_is_null(suffix)) {
      return TY_BAD(e, "suffix", "'suffix' is not supported by this server");
    }
  } else if (!ty_parse_messages(json_object_get(root, "messages"), r, e)) {
    return false;
  }
  json_object_foreach(root, key, v) {
    if (json_is_null(v) && strcmp(key, "model") && strcmp(key, "prompt") &&
        strcmp(key, "messages")) {
      continue; /* null: the default */
    }
    if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens")) {
      int64_t m;
      if (!ty_get_int(v, key, 1, INT32_MAX, &m, e)) return false;
      if (r->max_tokens >= 0 && r->max_tokens != m) {
        return TY_BAD(e, key, "'max_tokens' and 'max_completion_tokens' differ");
      }
      r->max_tokens = m;
    } else if (!strcmp(key, "temperature")) {
      if (!ty_get_number(v, key, 0, 2, false, &r->temperature, e)) return false;
    } else if (!strcmp(key, "top_p")) {
      if (!ty_get_number(v, key, 0, 1, true, &r->top_p, e)) return false;
    } else if (!strcmp(key, "presence_penalty")) {
      if (!ty_get_number(v, key, -2, 2, false, &r->presence_penalty, e)) return false;
    } else if (!strcmp(key, "frequency_penalty")) {
      if (!ty_get_number(v, key, -2, 2, false, &r->frequency_penalty, e)) return false;
    } else if (!strcmp(key, "repetition_penalty")) {
      /* vLLM's extension: > 0, 1 is off; the cap only keeps it finite. */
      if (!ty_get_number(v, key, 0, 1e6, true, &r->repetition_penalty, e)) return false;
    } else if (!strcmp(key, "min_p")) {
      /* vLLM's extension: [0, 1); 1 would keep only exact ties of the top token. */
      if (!json_is_number(v)) return TY_BAD(e, key, "'min_p' must be a number");
      r->min_p = json_number_value(v);
      if (!(r->min_p >= 0 && r->min_p < 1)) {
        return TY_BAD(e, key, "'min_p' is %g; it must be in [0, 1)", r->min_p);
      }
    } else if (!strcmp(key, "top_k")) {
      if (!ty_get_int(v, key, -1, INT32_MAX, &r->top_k, e)) return false;
      if (r->top_k < 0) r->top_k = 0;
    } else if (!strcmp(key, "seed")) {
      if (!json_is_integer(v)) return TY_BAD(e, key, "'seed' must be an integer");
      r->seed = (uint64_t)json_integer_value(v);
      r->has_seed = true;
    } else if (!strcmp(key, "stop")) {
      if (!ty_parse_stop(v, r, e)) return false;
    } else if (!strcmp(key, "n")) {
      if (!ty_get_int(v, key, 1, TY_API_MAX_N, &r->n, e)) return false;
    } else if (!strcmp(key, "stream")) {
      if (!ty_get_bool(v, key, &r->stream, e)) return false;
    } else if (!strcmp(key, "stream_options")) {
      json_t *usage = json_object_get(v, "include_usage");
      if (!json_is_object(v) || json_object_size(v) != (usage ? 1u : 0u)) {
        return TY_BAD(e, key, "'stream_options' must be {\"include_usage\": true|false}");
      }
      if (usage && !ty_get_bool(usage, "stream_options.include_usage", &r->include_usage, e)) {
        return false;
      }
    } else if (!strcmp(key, "logprobs")) {
      if (kind == TY_API_CHAT) {
        if (!ty_get_bool(v, key, &r->logprobs, e)) return false;
      } else {
        int64_t k;
        if (!ty_get_int(v, key, 0, 5, &k, e)) return false;
        r->logprobs = true;
        r->top_logprobs = (int32_t)k;
      }
    } else if (!strcmp(key, "top_logprobs")) {
      int64_t k;
      if (!ty_get_int(v, key, 0, 20, &k, e)) return false;
      r->top_logprobs = (int32_t)k;
    } else if (!strcmp(key, "return_token_ids")) {
      if (!ty_get_bool(v, key, &r->return_token_ids, e)) return false;
    } else if (!strcmp(key, "ignore_eos")) {
      if (!ty_get_bool(v, key, &r->ignore_eos, e)) return false;
    } else if (!strcmp(key, "user")) {
      if (!json_is_string(v)) return TY_BAD(e, key, "'user' must be a string");
    } else if (strcmp(key, "model") && strcmp(key, "prompt") && strcmp(key, "messages") &&
               strcmp(key, "suffix")) {
      if (!ty_default_only(key, v, e)) return false;
    }
  }
  if (kind == TY_API_CHAT && r->top_logprobs > 0 && !r->logprobs) {
    return TY_BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  json_t *options = json_object_get(root, "stream_options");
  if (options && !json_is_null(options) && !r->stream) {
    return TY_BAD(e, "stream_options", "'stream_options' is only allowed with 'stream': true");
  }
  return true;
}

bool ty_api_request_parse(const char *body, size_t size, ty_api_kind_t kind,
                          ty_api_request_t *r, ty_api_error_t *e) {
  memset(r, 0, sizeof(*r));
  r->kind = kind;
  r->max_tokens = -1;
  r->temperature = 1.0;
  r->top_p = 1.0;
  r->repetition_penalty = 1.0;
  r->n = 1;
  json_error_t error;
  json_t *root = json_loadb(body, size, JSON_REJECT_DUPLICATES, &error);
  if (!root) {
    return TY_BAD(e, NULL, "the request body is not valid JSON: %s (line %d, column %d)",
                  error.text, error.line, error.column);
  }
  bool ok = json_is_object(root) ? ty_parse_fields(root, kind, r, e)
                                 : TY_BAD(e, NULL, "the request body must be a JSON object");
  json_decref(root);
  return ok;
}
