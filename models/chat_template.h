/* Chat templates: the conversation text a chat model was trained on, built
 * from OpenAI-style messages, for `trainyard serve`'s /v1/chat/completions
 * (and any command that prompts a chat model).
 *
 * Hugging Face keeps the template as Jinja source (`chat_template` in
 * tokenizer_config.json). Rather than interpret Jinja, the families
 * Trainyard runs are recognized from their source and rendered by code:
 *
 *   chatml   <|im_start|>role\ncontent<|im_end|>\n ... (Qwen2, Qwen2.5 and
 *            other ChatML models; a default system prompt written in the
 *            template is used when the conversation has none)
 *   llama2   <s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] answer </s>
 *   llama3   <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
 *            (Llama 3.0; and 3.1 / 3.2 with their system block and date)
 *   mistral  <s>[INST] user [/INST]answer</s> (v0.1/v0.2 spacing) or
 *            <s>[INST] user[/INST] answer</s> (v0.3 spacing, the system
 *            message put before the last user message)
 *
 * A template that is none of these, or one of them with constructs the
 * renderer does not reproduce, is refused at load with a message naming
 * what was found; `--chat-template FILE` then gives a template in a small
 * JSON form (docs/formats.md, "Chat templates") or a Jinja file of a known
 * family. The renderers are checked against Jinja2 rendering the real
 * templates (tests/models/test_chat_template.py).
 *
 * Ownership: a template owns its strings; rendered text belongs to the
 * caller (free). Threads: a loaded template is immutable; render may be
 * called from several threads. Errors: INVALID_ARGUMENT naming the file and
 * the cause (unknown family, missing markers, bad JSON form) at load;
 * INVALID_ARGUMENT naming the message at render (a role the family has no
 * place for, roles that do not alternate where the template demands it). */
#ifndef TY_MODELS_CHAT_TEMPLATE_H_
#define TY_MODELS_CHAT_TEMPLATE_H_

#include <stdbool.h>
#include <stddef.h>

#include "hal/status.h"
#include "models/chat.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_chat_template_t ty_chat_template_t;

/* The template of model folder `dir`: `template_file` when not NULL (JSON
 * form or Jinja source), else tokenizer_config.json's chat_template (a
 * string, or a list of {name, template} whose "default" entry is used).
 * bos_token / eos_token come from tokenizer_config.json when it has them.
 * NOT_FOUND when the folder has no template and none is given (the caller
 * decides whether chat is needed); INVALID_ARGUMENT as above. */
ty_status_t ty_chat_template_load(const char *dir, const char *template_file,
                                  ty_chat_template_t **out_template);

/* The same from text in memory: `source` (Jinja or the JSON form),
 * `origin` names it in messages; bos/eos may be NULL (then "" where the
 * template uses them). */
ty_status_t ty_chat_template_parse(const char *source, size_t size, const char *origin,
                                   const char *bos_token, const char *eos_token,
                                   ty_chat_template_t **out_template);

void ty_chat_template_destroy(ty_chat_template_t *chat_template);

/* "chatml", "llama2", "llama3", "llama3.1", "mistral", "mistral-v3",
 * "custom" (static storage). */
const char *ty_chat_template_family(const ty_chat_template_t *chat_template);

/* The conversation as text, ending with the assistant's header when
 * add_generation_prompt is set (the families whose template has no such
 * header end where the answer starts anyway). Encode it without the
 * tokenizer's own BOS/EOS: the template writes them. */
ty_status_t ty_chat_template_render(const ty_chat_template_t *chat_template,
                                    const ty_chat_message_t *messages, size_t count,
                                    bool add_generation_prompt, char **out_text,
                                    size_t *out_size);

/* The text that ends an assistant turn ("<|im_end|>", "<|eot_id|>", the
 * EOS token, or the JSON form's "stop" list): generation stops there.
 * Returns how many (<= 4) and points *out at them (owned by the template). */
size_t ty_chat_template_stops(const ty_chat_template_t *chat_template,
                              const char *const **out_stops);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_CHAT_TEMPLATE_H_ */
