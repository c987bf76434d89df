/* ChatML rendering with per-token loss weights (see chat.h). */
#include "models/chat.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define TY_CHAT_IM_START "<|im_start|>"
#define TY_CHAT_IM_END "<|im_end|>"

typedef struct ty_chat_out_t {
  uint32_t *tokens;
  uint8_t *weights;
  size_t count, capacity;
} ty_chat_out_t;

static ty_status_t ty_chat_append(ty_chat_out_t *out, const uint32_t *ids, size_t n,
                                  uint8_t weight) {
  if (out->count + n > out->capacity) {
    size_t capacity = out->capacity ? out->capacity : 256;
    while (capacity < out->count + n) capacity *= 2;
    uint32_t *tokens = realloc(out->tokens, capacity * sizeof(uint32_t));
    if (tokens) out->tokens = tokens;
    uint8_t *weights = tokens ? realloc(out->weights, capacity) : NULL;
    if (!weights) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory rendering chat");
    out->weights = weights;
    out->capacity = capacity;
  }
  if (n) {
    memcpy(out->tokens + out->count, ids, n * sizeof(uint32_t));
    memset(out->weights + out->count, weight, n);
  }
  out->count += n;
  return TY_OK;
}

static ty_status_t ty_chat_encode(const ty_tokenizer_t *tok, const char *text, size_t size,
                                  uint8_t weight, ty_chat_out_t *out) {
  uint32_t *ids = NULL;
  size_t n = 0;
  TY_RETURN_IF_ERROR(
      ty_tokenizer_encode(tok, text, size, TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS, &ids, &n));
  ty_status_t status = ty_chat_append(out, ids, n, weight);
  free(ids);
  return status;
}

/* The id a marker encodes to, when it is one token. */
static ty_status_t ty_chat_marker_id(const ty_tokenizer_t *tok, const char *marker,
                                     uint32_t *out_id) {
  uint32_t *ids = NULL;
  size_t n = 0;
  TY_RETURN_IF_ERROR(ty_tokenizer_encode(tok, marker, strlen(marker),
                                         TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS, &ids, &n));
  bool single = n == 1;
  if (single) *out_id = ids[0];
  free(ids);
  if (!single) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "the tokenizer has no token %s (it encodes to %zu tokens); ChatML "
                          "needs <|im_start|> and <|im_end|> as added tokens: train one with "
                          "'trainyard data train-tokenizer --special \"<|im_start|>\" --special "
                          "\"<|im_end|>\"' or use a tokenizer that has them (Qwen2)",
                          marker, n);
  }
  return TY_OK;
}

ty_status_t ty_chat_chatml_check(const ty_tokenizer_t *tok) {
  uint32_t id;
  TY_RETURN_IF_ERROR(ty_chat_marker_id(tok, TY_CHAT_IM_START, &id));
  return ty_chat_marker_id(tok, TY_CHAT_IM_END, &id);
}

ty_status_t ty_chat_chatml_render(const ty_tokenizer_t *tok, const ty_chat_message_t *messages,
                                  size_t count, uint32_t **out_tokens, uint8_t **out_weights,
                                  size_t *out_count) {
  uint32_t im_start = 0, im_end = 0;
  TY_RETURN_IF_ERROR(ty_chat_marker_id(tok, TY_CHAT_IM_START, &im_start));
  TY_RETURN_IF_ERROR(ty_chat_marker_id(tok, TY_CHAT_IM_END, &im_end));
  for (size_t i = 0; i < count; ++i) {
    const char *role = messages[i].role ? messages[i].role : "";
    if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 &&
        strcmp(role, "assistant") != 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "messages[%zu]: role \"%s\" is not system, user or assistant", i,
                            role);
    }
    const char *c = messages[i].content;
    size_t size = messages[i].content_size;
    if (size && (memmem(c, size, TY_CHAT_IM_START, strlen(TY_CHAT_IM_START)) ||
                 memmem(c, size, TY_CHAT_IM_END, strlen(TY_CHAT_IM_END)))) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "messages[%zu]: the content contains a ChatML marker (<|im_start|> or "
                            "<|im_end|>)",
                            i);
    }
  }
  ty_chat_out_t out = {0};
  ty_status_t status = TY_OK;
  for (size_t i = 0; i < count && !status; ++i) {
    const ty_chat_message_t *m = &messages[i];
    uint8_t w = strcmp(m->role, "assistant") == 0;
    size_t role_size = strlen(m->role);
    char header[16];
    memcpy(header, m->role, role_size);
    header[role_size] = '\n';
    status = ty_chat_append(&out, &im_start, 1, 0);
    if (!status) status = ty_chat_encode(tok, header, role_size + 1, 0, &out);
    if (!status) status = ty_chat_encode(tok, m->content, m->content_size, w, &out);
    if (status) status = ty_status_annotate(status, "messages[%zu]", i);
    if (!status) status = ty_chat_append(&out, &im_end, 1, w);
    if (!status) status = ty_chat_encode(tok, "\n", 1, 0, &out);
  }
  if (status) {
    free(out.tokens);
    free(out.weights);
    return status;
  }
  *out_tokens = out.tokens;
  *out_weights = out.weights;
  *out_count = out.count;
  return TY_OK;
}
