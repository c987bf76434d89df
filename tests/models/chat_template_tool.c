/* Driver of tests/models/test_chat_template.py: reads one JSON object
 * {"template": "...", "bos": "...", "eos": "...", "messages": [{"role",
 * "content"}], "add_generation_prompt": bool} from stdin, renders it with
 * models/chat_template and prints {"family", "text", "stops"} or {"error"}.
 * Exit 0 either way; 2 for input this tool cannot read. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/chat_template.h"

int main(void) {
  json_error_t error;
  json_t *in = json_loadf(stdin, 0, &error);
  if (!json_is_object(in)) {
    fprintf(stderr, "chat_template_tool: stdin: %s\n", error.text);
    return 2;
  }
  json_t *tmpl = json_object_get(in, "template"), *msgs = json_object_get(in, "messages");
  json_t *out = json_object();
  ty_chat_template_t *t = NULL;
  ty_status_t s = ty_chat_template_parse(json_string_value(tmpl), json_string_length(tmpl),
                                         "test", json_string_value(json_object_get(in, "bos")),
                                         json_string_value(json_object_get(in, "eos")), &t);
  size_t count = json_array_size(msgs);
  ty_chat_message_t *m = calloc(count ? count : 1, sizeof(*m));
  for (size_t i = 0; i < count; ++i) {
    json_t *msg = json_array_get(msgs, i);
    m[i].role = json_string_value(json_object_get(msg, "role"));
    m[i].content = json_string_value(json_object_get(msg, "content"));
    m[i].content_size = json_string_length(json_object_get(msg, "content"));
  }
  char *text = NULL;
  size_t size = 0;
  if (!s) {
    json_object_set_new(out, "family", json_string(ty_chat_template_family(t)));
    const char *const *stops;
    size_t n = ty_chat_template_stops(t, &stops);
    json_t *list = json_array();
    for (size_t i = 0; i < n; ++i) json_array_append_new(list, json_string(stops[i]));
    json_object_set_new(out, "stops", list);
    s = ty_chat_template_render(t, m, count,
                                json_is_true(json_object_get(in, "add_generation_prompt")),
                                &text, &size);
  }
  if (s) {
    json_object_set_new(out, "error", json_string(ty_status_message(s)));
    ty_status_free(s);
  } else {
    json_object_set_new(out, "text", json_stringn(text, size));
  }
  char *dump = json_dumps(out, JSON_ENSURE_ASCII);
  puts(dump);
  free(dump);
  free(text);
  free(m);
  json_decref(out);
  json_decref(in);
  ty_chat_template_destroy(t);
  return 0;
}
