/* OpenAI response objects: completions and chat completions, whole or as
 * server-sent-event chunks, with usage and logprobs; errors; the model
 * list. Built with jansson, dumped compact. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"

bool ty_srv_buf_append(ty_srv_buf_t *b, const char *data, size_t size) {
  if (b->size + size + 1 > b->capacity) {
    size_t cap = b->capacity ? b->capacity : 256;
    while (cap < b->size + size + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return false;
    b->data = p;
    b->capacity = cap;
  }
  if (size) memcpy(b->data + b->size, data, size);
  b->size += size;
  b->data[b->size] = '\0';
  return true;
}

void ty_srv_buf_free(ty_srv_buf_t *b) {
  free(b->data);
  memset(b, 0, sizeof(*b));
}

/* Dumps `value` (taking it) into out, as "data: ...\n\n" when `sse`. */
static bool ty_api_put(json_t *value, bool sse, ty_srv_buf_t *out) {
  if (!value) return false;
  char *text = json_dumps(value, JSON_COMPACT);
  json_decref(value);
  if (!text) return false;
  bool ok = (!sse || ty_srv_buf_append(out, "data: ", 6)) &&
            ty_srv_buf_append(out, text, strlen(text)) &&
            (!sse || ty_srv_buf_append(out, "\n\n", 2));
  free(text);
  return ok;
}

bool ty_srv_api_error_json(const ty_api_error_t *e, ty_srv_buf_t *out) {
  json_t *error = json_pack("{s:s, s:s, s:o, s:o}", "message", e->message, "type", e->type,
                            "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                            e->code ? json_string(e->code) : json_null());
  return ty_api_put(error ? json_pack("{s:o}", "error", error) : NULL, false, out);
}

bool ty_srv_api_stream_error(const ty_api_error_t *e, ty_srv_buf_t *out) {
  size_t before = out->size;
  bool ok = ty_srv_buf_append(out, "data: ", 6) && ty_srv_api_error_json(e, out) &&
            ty_srv_buf_append(out, "\n\ndata: [DONE]\n\n", 16);
  if (!ok) out->size = before;
  return ok;
}

bool ty_srv_api_models_json(const ty_server_t *s, const char *only, ty_srv_buf_t *out) {
  json_t *model = json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", s->options.model_name, "object",
                            "model", "created", (json_int_t)s->created, "owned_by", "trainyard",
                            "max_model_len", (json_int_t)s->context);
  if (only) return ty_api_put(model, false, out);
  return ty_api_put(model ? json_pack("{s:s, s:[o]}", "object", "list", "data", model) : NULL,
                    false, out);
}

/* The head every response object shares. */
static json_t *ty_api_object(const ty_srv_request_t *r, bool chunk) {
  const char *object = r->kind == TY_API_CHAT ? (chunk ? "chat.completion.chunk"
                                                       : "chat.completion")
                                              : "text_completion";
  return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created",
                   (json_int_t)r->created, "model", r->model);
}

static json_t *ty_api_usage(const ty_srv_request_t *r) {
  int64_t completion = 0;
  for (size_t i = 0; i < r->choice_count; ++i) completion += r->choices[i].tokens;
  return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)r->prompt_tokens,
                   "completion_tokens", (json_int_t)completion, "total_tokens",
                   (json_int_t)(r->prompt_tokens + completion));
}

/* A token's text on its own (as logprobs list it), valid UTF-8. */
static json_t *ty_api_token_text(const ty_server_t *s, int64_t id, json_t **out_bytes) {
  uint32_t one = (uint32_t)id;
  char *raw = NULL, *clean = NULL;
  size_t raw_size = 0, clean_size = 0;
  ty_status_t st = ty_tokenizer_decode(s->tokenizer, &one, 1, 0, &raw, &raw_size);
  if (!st) st = ty_utf8_sanitize(raw, raw_size, false, &clean, &clean_size, NULL);
  json_t *text = st ? json_string("") : json_stringn(clean, clean_size);
  if (out_bytes) {
    *out_bytes = json_array();
    for (size_t i = 0; !st && i < raw_size; ++i) {
      json_array_append_new(*out_bytes, json_integer((unsigned char)raw[i]));
    }
  }
  ty_status_free(st);
  free(raw);
  free(clean);
  return text;
}

/* Appends one token's logprobs to `lp` in the endpoint's layout (created
 * on first use). */
static void ty_api_add_logprob(const ty_server_t *s, const ty_srv_request_t *r,
                               ty_srv_choice_t *c, const ty_engine_token_t *t, json_t **lp) {
  if (r->kind == TY_API_CHAT) {
    if (!*lp) *lp = json_pack("{s:[]}", "content");
    json_t *bytes, *top = json_array();
    json_t *entry = json_pack("{s:o, s:f}", "token", ty_api_token_text(s, t->id, &bytes),
                              "logprob", t->logprob);
    json_object_set_new(entry, "bytes", bytes);
    for (int32_t i = 0; i < t->top_count; ++i) {
      json_t *alt_bytes;
      json_t *alt_text = ty_api_token_text(s, t->top_ids[i], &alt_bytes);
      json_t *alt = json_pack("{s:o, s:f}", "token", alt_text, "logprob", t->top_logprobs[i]);
      json_object_set_new(alt, "bytes", alt_bytes);
      json_array_append_new(top, alt);
    }
    json_object_set_new(entry, "top_logprobs", top);
    json_array_append_new(json_object_get(*lp, "content"), entry);
    return;
  }
  if (!*lp) {
    *lp = json_pack("{s:[], s:[], s:o, s:[]}", "tokens", "token_logprobs", "top_logprobs",
                    r->engine.top_logprobs > 0 ? json_array() : json_null(), "text_offset");
  }
  json_t *text = ty_api_token_text(s, t->id, NULL);
  size_t length = json_string_length(text);
  json_array_append_new(json_object_get(*lp, "tokens"), text);
  json_array_append_new(json_object_get(*lp, "token_logprobs"), json_real(t->logprob));
  json_array_append_new(json_object_get(*lp, "text_offset"),
                        json_integer((json_int_t)c->text_offset));
  c->text_offset += length;
  if (r->engine.top_logprobs > 0) {
    json_t *top = json_object();
    for (int32_t i = 0; i < t->top_count; ++i) {
      json_t *alt = ty_api_token_text(s, t->top_ids[i], NULL);
      json_object_set_new(top, json_string_value(alt), json_real(t->top_logprobs[i]));
      json_decref(alt);
    }
    json_array_append_new(json_object_get(*lp, "top_logprobs"), top);
  }
}

/* A streaming chunk for one choice. */
static json_t *ty_api_chunk(const ty_srv_request_t *r, ty_srv_choice_t *c, const char *text,
                            size_t size, json_t *logprobs, const char *finish) {
  json_t *choice;
  if (r->kind == TY_API_CHAT) {
    json_t *delta = json_object();
    if (!c->role_sent) {
      json_object_set_new(delta, "role", json_string("assistant"));
      c->role_sent = true;
    }
    if (size || !finish) json_object_set_new(delta, "content", json_stringn(text, size));
    choice = json_pack("{s:I, s:o}", "index", (json_int_t)c->index, "delta", delta);
  } else {
    choice = json_pack("{s:s%, s:I}", "text", text, size, "index", (json_int_t)c->index);
  }
  json_object_set_new(choice, "logprobs", logprobs ? logprobs : json_null());
  json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
  json_t *chunk = ty_api_object(r, true);
  json_object_set_new(chunk, "choices", json_pack("[o]", choice));
  return chunk;
}

/* A streamed token chunk without log-probabilities, written around the
 * request's chunk head: the bytes ty_api_chunk + ty_api_put give (the same
 * keys in the same order, jansson's encoding of the text), without
 * building ~10 JSON values per token; at 64 streams that building was a
 * fifth of an H100 decode step, on the scheduler's thread. `id` < 0: no
 * token_ids. */
static bool ty_api_token_chunk(ty_srv_request_t *r, const ty_srv_choice_t *c,
                               const char *text, size_t size, int64_t id, ty_srv_buf_t *out) {
  if (!r->chunk_head.size) {
    json_t *head = ty_api_object(r, true);
    char *dumped = head ? json_dumps(head, JSON_COMPACT) : NULL;
    json_decref(head);
    size_t n = dumped ? strlen(dumped) : 0;
    bool ok = n >= 2 && dumped[n - 1] == '}' && ty_srv_buf_append(&r->chunk_head, dumped, n - 1);
    free(dumped);
    if (!ok) return false;
  }
  json_t *string = json_stringn(text, size); /* NULL for text that is not UTF-8 */
  char *encoded = string ? json_dumps(string, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(string);
  if (!encoded) return false;
  char index[64], tail[96];
  snprintf(index, sizeof(index), "%u", c->index);
  if (id >= 0) {
    snprintf(tail, sizeof(tail), ",\"logprobs\":null,\"finish_reason\":null,\"token_ids\":[%lld]}]}",
             (long long)id);
  } else {
    snprintf(tail, sizeof(tail), ",\"logprobs\":null,\"finish_reason\":null}]}");
  }
  const size_t before = out->size;
  bool ok = ty_srv_buf_append(out, "data: ", 6) &&
            ty_srv_buf_append(out, r->chunk_head.data, r->chunk_head.size) &&
            ty_srv_buf_append(out, ",\"choices\":[{", 13);
  if (r->kind == TY_API_CHAT) {
    ok = ok && ty_srv_buf_append(out, "\"index\":", 8) &&
         ty_srv_buf_append(out, index, strlen(index)) &&
         ty_srv_buf_append(out, ",\"delta\":{\"content\":", 20) &&
         ty_srv_buf_append(out, encoded, strlen(encoded)) && ty_srv_buf_append(out, "}", 1);
  } else {
    ok = ok && ty_srv_buf_append(out, "\"text\":", 7) &&
         ty_srv_buf_append(out, encoded, strlen(encoded)) &&
         ty_srv_buf_append(out, ",\"index\":", 9) &&
         ty_srv_buf_append(out, index, strlen(index));
  }
  ok = ok && ty_srv_buf_append(out, tail, strlen(tail)) && ty_srv_buf_append(out, "\n\n", 2);
  free(encoded);
  if (!ok) out->size = before;
  return ok;
}

bool ty_srv_api_token(const ty_server_t *s, ty_srv_choice_t *c, const char *text, size_t size,
                      const ty_engine_token_t *t, ty_srv_buf_t *out) {
  const ty_srv_request_t *r = c->request;
  bool with_logprob = t && r->engine.logprobs, ids = t && r->return_token_ids;
  if (!r->stream) {
    if (with_logprob) ty_api_add_logprob(s, r, c, t, (json_t **)&c->logprobs);
    if (ids) {
      if (!c->token_ids) c->token_ids = json_array();
      json_array_append_new(c->token_ids, json_integer((json_int_t)t->id));
    }
    return ty_srv_buf_append(&c->content, text, size);
  }
  json_t *lp = NULL;
  if (with_logprob) ty_api_add_logprob(s, r, c, t, &lp);
  /* Nothing to say yet (text held back as a possible stop string). */
  if (!size && !lp && !ids && (r->kind != TY_API_CHAT || c->role_sent)) return true;
  /* TRAINYARD_SERVE_JSON_CHUNKS=1 builds every chunk as JSON values (the
   * tests compare the two paths' bytes). */
  static int json_chunks = -1;
  if (json_chunks < 0) json_chunks = getenv("TRAINYARD_SERVE_JSON_CHUNKS") != NULL;
  if (!lp && (r->kind != TY_API_CHAT || c->role_sent) && !json_chunks) {
    return ty_api_token_chunk(c->request, c, text, size, ids ? t->id : -1, out);
  }
  json_t *chunk = ty_api_chunk(r, c, text, size, lp, NULL);
  if (chunk && ids) {
    json_object_set_new(json_array_get(json_object_get(chunk, "choices"), 0), "token_ids",
                        json_pack("[I]", (json_int_t)t->id));
  }
  return ty_api_put(chunk, true, out);
}

bool ty_srv_api_choice_end(const ty_server_t *s, ty_srv_choice_t *c, ty_srv_buf_t *out) {
  (void)s;
  const ty_srv_request_t *r = c->request;
  if (!r->stream) return true;
  json_t *chunk = ty_api_chunk(r, c, "", 0, NULL, c->finish);
  /* The usage comes with the last choice's last chunk, unless the client
   * asked for OpenAI's separate usage chunk (stream_options). */
  if (chunk && r->done_choices + 1 == r->choice_count && !r->include_usage) {
    json_object_set_new(chunk, "usage", ty_api_usage(r));
  }
  return ty_api_put(chunk, true, out);
}

bool ty_srv_api_finish(const ty_server_t *s, ty_srv_request_t *r, ty_srv_buf_t *out) {
  (void)s;
  if (r->stream) {
    if (r->include_usage) {
      json_t *chunk = ty_api_object(r, true);
      json_object_set_new(chunk, "choices", json_array());
      json_object_set_new(chunk, "usage", ty_api_usage(r));
      if (!ty_api_put(chunk, true, out)) return false;
    }
    return ty_srv_buf_append(out, "data: [DONE]\n\n", 14);
  }
  json_t *body = ty_api_object(r, false), *choices = json_array();
  for (size_t i = 0; i < r->choice_count; ++i) {
    ty_srv_choice_t *c = &r->choices[i];
    json_t *lp = c->logprobs ? json_incref((json_t *)c->logprobs) : json_null();
    json_t *text = json_stringn(c->content.data ? c->content.data : "", c->content.size);
    json_t *choice =
        r->kind == TY_API_CHAT
            ? json_pack("{s:I, s:{s:s, s:o}, s:o, s:s}", "index", (json_int_t)c->index,
                        "message", "role", "assistant", "content", text, "logprobs", lp,
                        "finish_reason", c->finish)
            : json_pack("{s:o, s:I, s:o, s:s}", "text", text, "index", (json_int_t)c->index,
                        "logprobs", lp, "finish_reason", c->finish);
    if (choice && r->return_token_ids) {
      json_object_set_new(choice, "token_ids",
                          c->token_ids ? json_incref((json_t *)c->token_ids) : json_array());
    }
    if (!choice) {
      json_decref(choices);
      json_decref(body);
      return false;
    }
    json_array_append_new(choices, choice);
  }
  json_object_set_new(body, "choices", choices);
  json_object_set_new(body, "usage", ty_api_usage(r));
  return ty_api_put(body, false, out);
}
