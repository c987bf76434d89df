/* Token ids and chat messages read from JSON (json_input.h). */
#include "models/json_input.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ty_json_brief(const json_t *value, char *out, size_t capacity) {
  if (capacity == 0) return;
  char *text = value ? json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
  const char *shown = value ? (text ? text : "(a JSON value)") : "nothing";
  size_t n = strlen(shown);
  if (n < capacity) {
    memcpy(out, shown, n + 1);
  } else if (capacity > 4) {
    memcpy(out, shown, capacity - 4);
    memcpy(out + capacity - 4, "...", 4);
  } else {
    out[0] = '\0';
  }
  free(text);
}

ty_status_t ty_json_token_id(const json_t *value, int64_t limit, int64_t *out_id) {
  int64_t end = limit > 0 ? limit : INT64_C(1) << 31;
  if (json_is_integer(value) && json_integer_value(value) >= 0 &&
      json_integer_value(value) < end) {
    *out_id = (int64_t)json_integer_value(value);
    return TY_OK;
  }
  if (!value) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "missing: a token id (an integer from 0 to "
                          "%lld) is required", (long long)(end - 1));
  }
  char shown[48];
  ty_json_brief(value, shown, sizeof(shown));
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "%s is not a token id (an integer from 0 to %lld%s)", shown,
                        (long long)(end - 1), limit > 0 ? ", the vocabulary's last" : "");
}

static ty_status_t ty_json_message_string(const json_t *message, const char *key, bool required,
                                          const json_t **out) {
  *out = json_object_get(message, key);
  if (!*out && !required) return TY_OK;
  if (json_is_string(*out)) return TY_OK;
  char shown[48];
  ty_json_brief(*out, shown, sizeof(shown));
  return ty_status_make(TY_CODE_INVALID_ARGUMENT, "\"%s\" must be a string, not %s", key,
                        shown);
}

ty_status_t ty_json_chat_message(const json_t *value, ty_chat_message_t *out) {
  memset(out, 0, sizeof(*out));
  if (!json_is_object(value)) {
    char shown[48];
    ty_json_brief(value, shown, sizeof(shown));
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "a message is {\"role\": text, \"content\": "
                          "text}, not %s", shown);
  }
  const json_t *role, *content, *name;
  TY_RETURN_IF_ERROR(ty_json_message_string(value, "role", true, &role));
  TY_RETURN_IF_ERROR(ty_json_message_string(value, "content", true, &content));
  /* OpenAI's participant name: no template here renders it, but a number
   * or an object there is a mistake in the file, not something to skip. */
  TY_RETURN_IF_ERROR(ty_json_message_string(value, "name", false, &name));
  *out = (ty_chat_message_t){json_string_value(role), json_string_value(content),
                             json_string_length(content)};
  return TY_OK;
}
