/* The OpenAI request bodies `trainyard serve` takes (/v1/completions and
 * /v1/chat/completions), parsed and checked field by field before any work:
 * a request that passes is complete and consistent; one that fails gets the
 * OpenAI error (HTTP status, type, the field at fault in `param`, a message
 * that names it and the cause).
 *
 * Only JSON (jansson) and this file: the request parser is a fuzz target of
 * its own (tests/fuzz/fuzz_serve_request.c). Nothing here needs the model:
 * the model name, token ids against the vocabulary and the context are
 * checked by the server afterwards.
 *
 * Ownership: ty_api_request_free releases what parse filled in (also after
 * a failed parse). Threads: no shared state. */
#ifndef TY_APPS_TRAINYARD_SERVE_REQUEST_H_
#define TY_APPS_TRAINYARD_SERVE_REQUEST_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TY_API_MAX_STOP 4
#define TY_API_MAX_N 16
#define TY_API_MAX_PROMPTS 64

typedef enum { TY_API_COMPLETIONS = 0, TY_API_CHAT = 1 } ty_api_kind_t;

/* An OpenAI error: {"error": {"message", "type", "param", "code"}}. */
typedef struct ty_api_error_t {
  int status;         /* HTTP status */
  const char *type;   /* "invalid_request_error", "server_error", ... (static) */
  const char *code;   /* NULL, or "context_length_exceeded", ... (static) */
  char param[64];     /* the field at fault, "" for none */
  char message[512];
} ty_api_error_t;

/* Fills *e; returns false (for `return ty_api_fail(...)`). */
bool ty_api_fail(ty_api_error_t *e, int status, const char *type, const char *code,
                 const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

typedef struct ty_api_prompt_t {
  char *text; /* a text prompt (UTF-8, NUL-terminated), or NULL */
  size_t text_size;
  int64_t *ids; /* a prompt of token ids, or NULL */
  size_t id_count;
} ty_api_prompt_t;

typedef struct ty_api_message_t {
  char *role, *content; /* NUL-terminated; content may hold NUL bytes */
  size_t content_size;
} ty_api_message_t;

typedef struct ty_api_request_t {
  ty_api_kind_t kind;
  char *model;
  ty_api_prompt_t *prompts; /* completions: 1..TY_API_MAX_PROMPTS */
  size_t prompt_count;
  ty_api_message_t *messages; /* chat: >= 1 */
  size_t message_count;
  int64_t max_tokens;   /* -1: not given */
  double temperature;   /* 0..2; 0 is greedy */
  double top_p;         /* (0, 1] */
  int64_t top_k;        /* 0: all (-1 is accepted as all too) */
  double min_p;              /* [0, 1); 0: off (vLLM's extension) */
  double presence_penalty;   /* [-2, 2] (OpenAI's range); 0: off */
  double frequency_penalty;  /* [-2, 2]; 0: off */
  double repetition_penalty; /* > 0; 1: off (vLLM's extension) */
  bool has_seed;
  uint64_t seed;
  char *stop[TY_API_MAX_STOP];
  size_t stop_count;
  int64_t n;            /* choices per prompt, 1..TY_API_MAX_N */
  bool stream, include_usage;
  bool logprobs;        /* report the chosen tokens' log-probabilities */
  int32_t top_logprobs; /* and this many alternatives (completions: logprobs N) */
  bool return_token_ids; /* vLLM's extension: each choice lists its token ids */
  bool ignore_eos;       /* vLLM's extension: the EOS token does not stop */
} ty_api_request_t;

/* Parses `size` bytes of request body for endpoint `kind`. true: *out is
 * complete. false: *error says why (400 for JSON that does not parse, a
 * missing, unknown or unsupported field, a value of the wrong type or out
 * of range, naming the field in param). */
bool ty_api_request_parse(const char *body, size_t size, ty_api_kind_t kind,
                          ty_api_request_t *out, ty_api_error_t *error);
void ty_api_request_free(ty_api_request_t *request);

#ifdef __cplusplus
}
#endif

#endif /* TY_APPS_TRAINYARD_SERVE_REQUEST_H_ */
