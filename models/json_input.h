/* JSON values users hand in, read with one rule and one message for every
 * reader: token ids (eval sets, generate and forward inputs, data ids lines,
 * tokenize --decode, config.json's special ids, tokenizer.json's ids) and
 * chat messages (eval sets, chat data lines).
 *
 * Errors name the value as JSON text ("1.5", "-2", "\"x\""); the caller
 * annotates them with where the value sits (file, line, field, index), so
 * that every message names the field, the index and the value.
 *
 * Thread-safety: every function may be called from several threads. */
#ifndef TY_MODELS_JSON_INPUT_H_
#define TY_MODELS_JSON_INPUT_H_

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "models/chat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* `value` as compact JSON text, cut to `capacity` (with "..." when cut);
 * "nothing" for NULL. For messages. */
void ty_json_brief(const json_t *value, char *out, size_t capacity);

/* A token id: a JSON integer in [0, limit), or in [0, 2^31) when limit <= 0
 * (the vocabulary is checked later). Anything else (a fraction, a string,
 * a negative number, an id past the limit) is INVALID_ARGUMENT
 * "<value> is not a token id (an integer from 0 to <limit - 1>)"; a NULL
 * value (a missing key) is "missing: a token id ... is required". */
ty_status_t ty_json_token_id(const json_t *value, int64_t limit, int64_t *out_id) TY_MUST_USE;

/* One chat message {"role": text, "content": text, "name": text (optional)}
 * into *out, which points into `value` (valid while it lives). Other keys
 * are left to the caller. A missing or non-string role or content, or a
 * name that is not a string, is INVALID_ARGUMENT naming the key and the
 * value given ("\"name\" must be a string, not 7"). The name is checked
 * only: the templates render role and content. */
ty_status_t ty_json_chat_message(const json_t *value, ty_chat_message_t *out) TY_MUST_USE;

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_JSON_INPUT_H_ */
