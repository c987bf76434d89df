/* Chat templates: a conversation rendered into token ids with a loss weight
 * per token, for supervised fine-tuning. The one template is ChatML:
 *
 *   <|im_start|>role\ncontent<|im_end|>\n      (per message)
 *
 * Weights are 1 on what the assistant says (its content and the
 * <|im_end|> that ends it) and 0 on everything else: system and user
 * messages, every role header, and the newline after each <|im_end|>.
 * Each part is encoded on its own (no BOS/EOS from the post-processor), so a
 * token never straddles a weight boundary. <|im_start|> and <|im_end|> must
 * be added tokens of the tokenizer (each encodes to one id); they are never
 * spelled out as text. Content that contains either marker is refused, so a
 * message cannot forge a turn.
 *
 * Ownership: the arrays returned belong to the caller (free()). Threads: as
 * thread-safe as the tokenizer (safe). Errors: INVALID_ARGUMENT naming the
 * message for an unknown role, a marker inside content or text that is not
 * UTF-8; FAILED_PRECONDITION when the tokenizer lacks the markers. */
#ifndef TY_MODELS_CHAT_H_
#define TY_MODELS_CHAT_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_chat_message_t {
  const char *role; /* "system", "user" or "assistant" (NUL-terminated) */
  const char *content;
  size_t content_size;
} ty_chat_message_t;

/* Checks that the tokenizer has <|im_start|> and <|im_end|> as single
 * tokens. */
ty_status_t ty_chat_chatml_check(const ty_tokenizer_t *tokenizer);

/* Renders `count` messages. On success *out_tokens and *out_weights hold
 * *out_count entries each (malloc'ed; NULL when the count is 0). */
ty_status_t ty_chat_chatml_render(const ty_tokenizer_t *tokenizer,
                                  const ty_chat_message_t *messages, size_t count,
                                  uint32_t **out_tokens, uint8_t **out_weights,
                                  size_t *out_count);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_CHAT_H_ */
