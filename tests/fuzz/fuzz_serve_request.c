/* Fuzz target: the request parser of `trainyard serve` (serve_request.c).
 *
 * Input: one byte choosing the endpoint (even: /v1/completions, odd:
 * /v1/chat/completions), then the request body. Every body must end in a
 * complete, consistent request or in an OpenAI error with a message, a
 * status of 400 (or 500 for memory), and a param that names a field;
 * nothing may crash, leak or hang (malformed JSON, huge numbers, wrong
 * types, deep nesting, invalid UTF-8). Built with libFuzzer under clang, or
 * with standalone_driver.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ty_fuzz_check(int condition) {
  if (!condition) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0) return 0;
  ty_api_kind_t kind = data[0] % 2 ? TY_API_CHAT : TY_API_COMPLETIONS;
  ty_api_request_t r;
  ty_api_error_t e;
  memset(&e, 0, sizeof(e));
  if (!ty_api_request_parse((const char *)data + 1, size - 1, kind, &r, &e)) {
    ty_fuzz_check(e.status == 400 || e.status == 500);
    ty_fuzz_check(e.message[0] != '\0' && e.type != NULL);
    ty_fuzz_check(strlen(e.param) < sizeof(e.param));
    ty_api_request_free(&r);
    return 0;
  }
  ty_fuzz_check(r.kind == kind && r.model != NULL);
  ty_fuzz_check(r.n >= 1 && r.n <= TY_API_MAX_N && r.stop_count <= TY_API_MAX_STOP);
  ty_fuzz_check(r.temperature >= 0 && r.temperature <= 2 && r.top_p > 0 && r.top_p <= 1);
  ty_fuzz_check(r.top_k >= 0 && r.max_tokens != 0 && r.top_logprobs >= 0 && r.top_logprobs <= 20);
  ty_fuzz_check(!r.include_usage || r.stream);
  if (kind == TY_API_COMPLETIONS) {
    ty_fuzz_check(r.prompt_count >= 1 && r.prompt_count <= TY_API_MAX_PROMPTS);
    for (size_t i = 0; i < r.prompt_count; ++i) {
      const ty_api_prompt_t *p = &r.prompts[i];
      ty_fuzz_check((p->text != NULL) != (p->ids != NULL));
      ty_fuzz_check(p->text || p->id_count > 0);
      for (size_t k = 0; k < p->id_count; ++k) ty_fuzz_check(p->ids[k] >= 0);
    }
  } else {
    ty_fuzz_check(r.message_count >= 1 && r.prompt_count == 0);
    for (size_t i = 0; i < r.message_count; ++i) {
      ty_fuzz_check(r.messages[i].role && r.messages[i].content);
      ty_fuzz_check(strlen(r.messages[i].content) <= r.messages[i].content_size);
    }
  }
  for (size_t i = 0; i < r.stop_count; ++i) ty_fuzz_check(r.stop[i] && r.stop[i][0]);
  ty_api_request_free(&r);
  return 0;
}
