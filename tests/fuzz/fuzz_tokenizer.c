/* Fuzz target: tokenizer.json loading, then encode and decode.
 *
 * Input: tokenizer.json text, optionally followed by a NUL byte and text to
 * encode (without one, a few built-in strings are encoded). Every load must
 * end in a tokenizer or a status with a message; every id encode returns
 * must decode. Built with libFuzzer under clang, or with replay_main.c. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hal/status.h"
#include "models/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ty_fuzz_check(int condition) {
  /* A broken invariant is a finding: stop where the fuzzer can see it. */
  if (!condition) __builtin_trap();
}

static void ty_fuzz_encode(const ty_tokenizer_t *tok, const char *text, size_t size) {
  for (uint32_t flags = 0; flags < 2; ++flags) {
    uint32_t *ids = NULL;
    size_t count = 0;
    ty_status_t s = ty_tokenizer_encode(tok, text, size, flags, &ids, &count);
    if (s) {
      ty_fuzz_check(ty_status_message(s)[0] != '\0');
      ty_status_free(s);
      continue;
    }
    for (uint32_t dflags = 0; dflags < 2; ++dflags) {
      char *out = NULL;
      size_t out_size = 0;
      s = ty_tokenizer_decode(tok, ids, count, dflags, &out, &out_size);
      ty_fuzz_check(s == TY_OK);
      ty_fuzz_check(out != NULL && out[out_size] == '\0');
      free(out);
    }
    for (size_t i = 0; i < count; ++i) {
      const char *token = NULL;
      size_t token_size = 0;
      ty_fuzz_check(ty_tokenizer_id_to_token(tok, ids[i], &token, &token_size));
    }
    free(ids);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t json_size = nul ? (size_t)(nul - data) : size;
  ty_tokenizer_t *tok = NULL;
  ty_status_t s = ty_tokenizer_load_json((const char *)data, json_size, "fuzz", &tok);
  if (s) {
    ty_fuzz_check(tok == NULL && ty_status_message(s)[0] != '\0');
    ty_status_free(s);
    return 0;
  }
  if (nul) {
    ty_fuzz_encode(tok, (const char *)nul + 1, size - json_size - 1);
  } else {
    static const char *const texts[] = {
        "",
        "Hello world",
        " leading and trailing  ",
        "it's 12345 <s> ok</s>\n\n\t",
        "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\xa6\x80",
        "\xe2\x96\x81x \xc2\x85y",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); ++i) {
      ty_fuzz_encode(tok, texts[i], strlen(texts[i]));
    }
  }
  ty_tokenizer_destroy(tok);
  return 0;
}
