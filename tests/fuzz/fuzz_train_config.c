/* Fuzz target of `trainyard train --config` files: any byte string is
 * either refused with a status naming the file (and, for a bad line, the
 * line), or read into a configuration whose JSON copy (train_config.json,
 * trainer_state.json) reads back to the same JSON. Built with libFuzzer
 * under clang, or with standalone_driver.c. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TY_FUZZ_CHECK(cond) \
  do {                      \
    if (!(cond)) abort();   \
  } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ty_train_config_t c;
  ty_train_config_defaults(&c);
  ty_status_t s = ty_train_config_load_text(&c, (const char *)data, size, "fuzz.cfg");
  if (s) {
    TY_FUZZ_CHECK(ty_status_code(s) == TY_CODE_INVALID_ARGUMENT ||
                  ty_status_code(s) == TY_CODE_RESOURCE_EXHAUSTED);
    TY_FUZZ_CHECK(strstr(ty_status_message(s), "fuzz.cfg") != NULL ||
                  ty_status_code(s) == TY_CODE_RESOURCE_EXHAUSTED);
    ty_status_free(s);
    return 0;
  }
  /* Cross-field checks may refuse it; they must say why. */
  s = ty_train_config_validate(&c);
  TY_FUZZ_CHECK(!s || ty_status_message(s)[0] != '\0');
  ty_status_free(s);
  json_t *j = ty_train_config_to_json(&c);
  TY_FUZZ_CHECK(j != NULL);
  ty_train_config_t back;
  ty_train_config_defaults(&back);
  s = ty_train_config_from_json(&back, j);
  TY_FUZZ_CHECK(s == TY_OK);
  json_t *again = ty_train_config_to_json(&back);
  TY_FUZZ_CHECK(again != NULL && json_equal(j, again));
  json_decref(j);
  json_decref(again);
  return 0;
}
