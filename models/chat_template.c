/* Chat templates (see chat_template.h): recognition of Hugging Face Jinja
 * templates by family, the JSON form, and the renderers. */
#include "models/chat_template.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/file.h"

typedef enum {
  TY_FAMILY_CHATML,
  TY_FAMILY_LLAMA2,
  TY_FAMILY_LLAMA3,
  TY_FAMILY_LLAMA31,
  TY_FAMILY_MISTRAL,
  TY_FAMILY_MISTRAL3,
  TY_FAMILY_CUSTOM,
} ty_family_t;

static const char *const ty_family_names[] = {"chatml",  "llama2",     "llama3", "llama3.1",
                                              "mistral", "mistral-v3", "custom"};

struct ty_chat_template_t {
  ty_family_t family;
  char *bos, *eos;
  char *default_system; /* chatml, custom: used when no system message leads */
  char *knowledge;      /* llama3.1: the "Cutting Knowledge Date: ...\n" line */
  char *date;           /* llama3.1: the date string, NULL for today's */
  /* custom */
  char *prefix, *system, *user, *assistant, *generation;
  char *stops[4];
  size_t stop_count;
};

static ty_status_t ty_ct_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory in a chat template");
}

void ty_chat_template_destroy(ty_chat_template_t *t) {
  if (!t) return;
  free(t->bos);
  free(t->eos);
  free(t->default_system);
  free(t->knowledge);
  free(t->date);
  free(t->prefix);
  free(t->system);
  free(t->user);
  free(t->assistant);
  free(t->generation);
  for (size_t i = 0; i < t->stop_count; ++i) free(t->stops[i]);
  free(t);
}

const char *ty_chat_template_family(const ty_chat_template_t *t) {
  return ty_family_names[t->family];
}

size_t ty_chat_template_stops(const ty_chat_template_t *t, const char *const **out_stops) {
  *out_stops = (const char *const *)t->stops;
  return t->stop_count;
}

/* ---- recognizing Jinja source ---- */

/* The source without whitespace outside string literals, with every
 * literal in single quotes and `message.role` / `.content` as
 * message['role'] / ['content'], so that formatting does not matter when
 * looking for an expression. Literal contents are kept as written (with
 * their backslash escapes). */
static char *ty_ct_canonical(const char *src, size_t n) {
  char *out = malloc(n * 2 + 1);
  if (!out) return NULL;
  size_t o = 0;
  char quote = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = src[i];
    if (quote) {
      if (c == '\\' && i + 1 < n) {
        out[o++] = c;
        out[o++] = src[++i];
        continue;
      }
      if (c == quote) {
        quote = 0;
        out[o++] = '\'';
        continue;
      }
      out[o++] = c;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
      out[o++] = '\'';
    } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
      out[o++] = c;
    }
  }
  out[o] = '\0';
  /* message.role -> message['role'] (the rest of the text only shrinks). */
  static const char *const from[] = {"message.role", "message.content"};
  static const char *const to[] = {"message['role']", "message['content']"};
  for (int k = 0; k < 2; ++k) {
    char *hit;
    while ((hit = strstr(out, from[k])) != NULL) {
      size_t fl = strlen(from[k]), tl = strlen(to[k]), rest = strlen(hit + fl);
      char *grown = malloc(strlen(out) + tl - fl + 1);
      if (!grown) {
        free(out);
        return NULL;
      }
      size_t head = (size_t)(hit - out);
      memcpy(grown, out, head);
      memcpy(grown + head, to[k], tl);
      memcpy(grown + head + tl, hit + fl, rest + 1);
      free(out);
      out = grown;
    }
  }
  return out;
}

/* Jinja string escapes of a literal's contents, undone. */
static char *ty_ct_unescape(const char *s, size_t n) {
  char *out = malloc(n + 1);
  if (!out) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == '\\' && i + 1 < n) {
      char e = s[++i];
      out[o++] = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
  return out;
}

/* The contents of the literal in canonical text `c` that starts with
 * `begin` (after its opening quote) and runs to the closing quote, minus
 * `drop_tail` bytes at its end; NULL when there is none. */
static char *ty_ct_literal_after(const char *c, const char *begin, size_t drop_tail) {
  char needle[128];
  snprintf(needle, sizeof(needle), "'%s", begin);
  const char *at = strstr(c, needle);
  if (!at) return NULL;
  const char *body = at + 1 + strlen(begin), *end = body;
  while (*end && *end != '\'') end += *end == '\\' && end[1] ? 2 : 1;
  if (!*end || (size_t)(end - body) < drop_tail) return NULL;
  return ty_ct_unescape(body, (size_t)(end - body) - drop_tail);
}

static bool ty_ct_has(const char *c, const char *expr) { return strstr(c, expr) != NULL; }

/* ChatML's default system prompt: a whole literal
 * '<|im_start|>system\n...<|im_end|>\n' (a literal that only opens the
 * header, followed by the conversation's own system message, is none). */
static ty_status_t ty_ct_default_system(const char *c, char **out) {
  static const char head[] = "'<|im_start|>system\\n", tail[] = "<|im_end|>\n";
  for (const char *at = strstr(c, head); at; at = strstr(at + 1, head)) {
    char *literal = ty_ct_literal_after(at, head + 1, 0);
    if (!literal) return ty_ct_oom();
    size_t n = strlen(literal), t = strlen(tail);
    if (n > t && strcmp(literal + n - t, tail) == 0) {
      literal[n - t] = '\0';
      *out = literal;
      return TY_OK;
    }
    free(literal);
  }
  return TY_OK;
}

static ty_status_t ty_ct_refuse(const char *origin, const char *what) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "%s: the chat template %s; Trainyard renders the chatml (Qwen2), "
                        "llama2, llama3 and mistral families only and will not guess at "
                        "another: give one with --chat-template FILE (the JSON form of "
                        "docs/formats.md, or a Jinja template of a known family)",
                        origin, what);
}

/* Picks the family and its settings from canonical Jinja text. */
static ty_status_t ty_ct_recognize(const char *c, const char *origin, ty_chat_template_t *t) {
  if (ty_ct_has(c, "reasoning_content") || ty_ct_has(c, "<think>")) {
    return ty_ct_refuse(origin, "is a reasoning model's (it hides <think> sections)");
  }
  if (ty_ct_has(c, "<|im_start|>") && ty_ct_has(c, "<|im_end|>")) {
    if (!ty_ct_has(c, "'<|im_start|>'+message['role']+'\\n'+message['content']+'<|im_end|>'") ||
        !ty_ct_has(c, "'<|im_start|>assistant\\n'")) {
      return ty_ct_refuse(origin, "uses the ChatML markers but not ChatML's message layout "
                                  "('<|im_start|>' + role + '\\n' + content + '<|im_end|>')");
    }
    t->family = TY_FAMILY_CHATML;
    return ty_ct_default_system(c, &t->default_system);
  }
  if (ty_ct_has(c, "<|start_header_id|>") && ty_ct_has(c, "<|eot_id|>")) {
    if (!ty_ct_has(c, "'<|start_header_id|>'+message['role']+'<|end_header_id|>\\n\\n'+"
                      "message['content']|trim+'<|eot_id|>'") ||
        !ty_ct_has(c, "'<|start_header_id|>assistant<|end_header_id|>\\n\\n'")) {
      return ty_ct_refuse(origin, "uses Llama 3's headers but not its message layout");
    }
    if (!ty_ct_has(c, "CuttingKnowledgeDate") && !ty_ct_has(c, "Cutting Knowledge Date")) {
      t->family = TY_FAMILY_LLAMA3;
      return TY_OK;
    }
    t->family = TY_FAMILY_LLAMA31;
    t->knowledge = ty_ct_literal_after(c, "Cutting Knowledge Date:", 0);
    char *full = t->knowledge ? malloc(strlen(t->knowledge) + 32) : NULL;
    if (!full) return t->knowledge ? ty_ct_oom() : ty_ct_refuse(origin, "has no knowledge date");
    sprintf(full, "Cutting Knowledge Date:%s", t->knowledge);
    free(t->knowledge);
    t->knowledge = full;
    if (!ty_ct_has(c, "strftime_now")) {
      const char *at = strstr(c, "setdate_string='");
      if (!at) return ty_ct_refuse(origin, "uses a date_string it does not set");
      t->date = ty_ct_literal_after(at, "", 0);
      if (!t->date) return ty_ct_oom();
    }
    return TY_OK;
  }
  if (ty_ct_has(c, "[INST]") && ty_ct_has(c, "<<SYS>>")) {
    if (!ty_ct_has(c, "bos_token+'[INST] '+content.strip()+' [/INST]'") ||
        !ty_ct_has(c, "'<<SYS>>\\n'+system_message+'\\n<</SYS>>\\n\\n'") ||
        !ty_ct_has(c, "' '+content.strip()+' '+eos_token")) {
      return ty_ct_refuse(origin, "uses Llama 2's [INST] and <<SYS>> markers but not its layout");
    }
    t->family = TY_FAMILY_LLAMA2;
    return TY_OK;
  }
  if (ty_ct_has(c, "[INST]") && ty_ct_has(c, "[/INST]")) {
    if (ty_ct_has(c, "'[INST] '+message['content']+' [/INST]'") &&
        ty_ct_has(c, "message['content']+eos_token") && !ty_ct_has(c, "system_message")) {
      t->family = TY_FAMILY_MISTRAL;
      return TY_OK;
    }
    if (ty_ct_has(c, "'[INST] '+message['content']+'[/INST]'") &&
        ty_ct_has(c, "'[INST] '+system_message+'\\n\\n'+message['content']+'[/INST]'") &&
        ty_ct_has(c, "' '+message['content']|trim+eos_token")) {
      t->family = TY_FAMILY_MISTRAL3;
      return TY_OK;
    }
    return ty_ct_refuse(origin, "uses Mistral's [INST] markers but neither the v0.1 nor the "
                                "v0.3 layout");
  }
  return ty_ct_refuse(origin, "belongs to no family Trainyard recognizes (no ChatML, Llama or "
                              "Mistral markers)");
}

/* ---- the JSON form ---- */

static ty_status_t ty_ct_json_string(json_t *root, const char *key, const char *origin,
                                     bool needs_content, char **out) {
  json_t *v = json_object_get(root, key);
  if (!v) return TY_OK;
  if (!json_is_string(v)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: \"%s\" must be a string", origin, key);
  }
  if (needs_content && !strstr(json_string_value(v), "{content}")) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: \"%s\" must contain {content} where the message goes", origin,
                          key);
  }
  *out = strdup(json_string_value(v));
  return *out ? TY_OK : ty_ct_oom();
}

static ty_status_t ty_ct_parse_json(json_t *root, const char *origin, ty_chat_template_t *t) {
  static const char *const keys[] = {"prefix", "system", "user", "assistant",
                                     "generation_prompt", "default_system", "stop", NULL};
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    bool known = false;
    for (int i = 0; keys[i] && !known; ++i) known = strcmp(keys[i], key) == 0;
    if (!known) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s: unknown key \"%s\" (the keys are prefix, system, user, "
                            "assistant, generation_prompt, default_system and stop)",
                            origin, key);
    }
  }
  t->family = TY_FAMILY_CUSTOM;
  TY_RETURN_IF_ERROR(ty_ct_json_string(root, "prefix", origin, false, &t->prefix));
  TY_RETURN_IF_ERROR(ty_ct_json_string(root, "system", origin, true, &t->system));
  TY_RETURN_IF_ERROR(ty_ct_json_string(root, "user", origin, true, &t->user));
  TY_RETURN_IF_ERROR(ty_ct_json_string(root, "assistant", origin, true, &t->assistant));
  TY_RETURN_IF_ERROR(ty_ct_json_string(root, "generation_prompt", origin, false, &t->generation));
  TY_RETURN_IF_ERROR(ty_ct_json_string(root, "default_system", origin, false, &t->default_system));
  if (!t->user || !t->assistant) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: \"user\" and \"assistant\" are required", origin);
  }
  json_t *stop = json_object_get(root, "stop");
  if (stop && (!json_is_array(stop) || json_array_size(stop) > 4)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: \"stop\" must be a list of at most 4 strings", origin);
  }
  for (size_t i = 0; stop && i < json_array_size(stop); ++i) {
    json_t *s = json_array_get(stop, i);
    if (!json_is_string(s) || !json_string_length(s)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "%s: \"stop\" entry %zu must be a non-empty string", origin, i);
    }
    if (!(t->stops[t->stop_count] = strdup(json_string_value(s)))) return ty_ct_oom();
    t->stop_count++;
  }
  return TY_OK;
}

static ty_status_t ty_ct_add_stop(ty_chat_template_t *t, const char *stop) {
  if (!stop || !stop[0] || t->stop_count == 4) return TY_OK;
  for (size_t i = 0; i < t->stop_count; ++i) {
    if (!strcmp(t->stops[i], stop)) return TY_OK;
  }
  if (!(t->stops[t->stop_count] = strdup(stop))) return ty_ct_oom();
  t->stop_count++;
  return TY_OK;
}

ty_status_t ty_chat_template_parse(const char *source, size_t size, const char *origin,
                                   const char *bos_token, const char *eos_token,
                                   ty_chat_template_t **out_template) {
  *out_template = NULL;
  ty_chat_template_t *t = calloc(1, sizeof(*t));
  if (!t) return ty_ct_oom();
  t->bos = strdup(bos_token ? bos_token : "");
  t->eos = strdup(eos_token ? eos_token : "");
  ty_status_t s = t->bos && t->eos ? TY_OK : ty_ct_oom();
  json_error_t error;
  json_t *root = s ? NULL : json_loadb(source, size, 0, &error);
  if (!s && json_is_object(root)) {
    s = ty_ct_parse_json(root, origin, t);
  } else if (!s) {
    char *canonical = ty_ct_canonical(source, size);
    s = canonical ? ty_ct_recognize(canonical, origin, t) : ty_ct_oom();
    free(canonical);
    static const char *const turn_end[] = {"<|im_end|>", NULL, "<|eot_id|>", "<|eot_id|>",
                                           NULL, NULL};
    if (!s && turn_end[t->family]) s = ty_ct_add_stop(t, turn_end[t->family]);
    if (!s) s = ty_ct_add_stop(t, t->eos);
  }
  json_decref(root);
  if (s) {
    ty_chat_template_destroy(t);
    return s;
  }
  *out_template = t;
  return TY_OK;
}

/* A token setting of tokenizer_config.json: "<s>" or {"content": "<s>"}. */
static const char *ty_ct_token(json_t *config, const char *key) {
  json_t *v = json_object_get(config, key);
  if (json_is_object(v)) v = json_object_get(v, "content");
  return json_is_string(v) ? json_string_value(v) : NULL;
}

/* tokenizer_config.json: a few hundred KiB with a large vocabulary's added
 * tokens; --chat-template: a Jinja template or its JSON form. */
static const ty_file_kind_t ty_tokenizer_config_kind = {
    .what = "tokenizer config", .max_bytes = 64 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS, .skip_bom = true};
static const ty_file_kind_t ty_chat_template_file_kind = {
    .what = "--chat-template file", .max_bytes = 4 * TY_MIB, .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT, .skip_bom = true};

/* A --chat-template file is the JSON form when its name ends in .json or
 * its text opens as a JSON object does ('{' then '"' or '}', where Jinja
 * opens with "{%", "{{" or "{#"): such a file that does not parse is a JSON
 * error, never a Jinja template to recognize. An empty file is neither. */
static ty_status_t ty_ct_check_file(const char *path, const char *text, size_t size) {
  size_t i = 0;
  while (i < size && strchr(" \t\r\n", text[i])) ++i;
  if (i == size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--chat-template %s is empty (give a Jinja "
                          "template or the JSON form of docs/formats.md)", path);
  }
  size_t j = i + 1;
  while (j < size && strchr(" \t\r\n", text[j])) ++j;
  size_t len = strlen(path);
  bool json_name = len >= 5 && !strcmp(path + len - 5, ".json");
  bool json_text = text[i] == '{' && (j == size || text[j] == '"' || text[j] == '}');
  if (!json_name && !json_text) return TY_OK;
  json_error_t error;
  json_t *root = json_loadb(text, size, 0, &error);
  bool object = json_is_object(root);
  json_decref(root);
  if (!root) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--chat-template %s is not valid JSON "
                          "(line %d, column %d: %s)", path, error.line, error.column,
                          error.text);
  }
  if (!object) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--chat-template %s: the JSON form is an "
                          "object {\"user\": ..., \"assistant\": ...}, not another JSON value",
                          path);
  }
  return TY_OK;
}

ty_status_t ty_chat_template_load(const char *dir, const char *template_file,
                                  ty_chat_template_t **out_template) {
  *out_template = NULL;
  char path[4096];
  snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
  bool exists = false;
  TY_RETURN_IF_ERROR(ty_file_probe(path, &exists));
  if (!exists && template_file == NULL) {
    return ty_status_make(TY_CODE_NOT_FOUND, "%s has no tokenizer_config.json with a "
                          "chat_template; give one with --chat-template FILE", dir);
  }
  json_t *config = NULL;
  if (exists) {
    char *data = NULL;
    size_t size = 0;
    TY_RETURN_IF_ERROR(ty_file_read(path, &ty_tokenizer_config_kind, &data, &size));
    json_error_t error;
    config = json_loadb(data, size, JSON_DECODE_ANY, &error);
    free(data);
    if (!config) {
      return ty_status_make(TY_CODE_DATA_LOSS, "%s: not JSON: %s (line %d)", path, error.text,
                            error.line);
    }
  }
  ty_status_t s = TY_OK;
  if (config && !json_is_object(config)) {
    json_decref(config);
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: not a JSON object", path);
  }
  const char *bos = ty_ct_token(config, "bos_token"), *eos = ty_ct_token(config, "eos_token");
  if (template_file) {
    char *text = NULL;
    size_t n = 0;
    s = ty_file_read(template_file, &ty_chat_template_file_kind, &text, &n);
    if (!s) s = ty_ct_check_file(template_file, text, n);
    if (!s) s = ty_chat_template_parse(text, n, template_file, bos, eos, out_template);
    free(text);
    json_decref(config);
    return s;
  }
  json_t *tmpl = json_object_get(config, "chat_template");
  if (json_is_array(tmpl)) {
    json_t *entry, *found = NULL;
    size_t i;
    json_array_foreach(tmpl, i, entry) {
      const char *name = json_string_value(json_object_get(entry, "name"));
      if (name && !strcmp(name, "default")) found = json_object_get(entry, "template");
    }
    tmpl = found;
  }
  if (!tmpl) {
    s = ty_status_make(TY_CODE_NOT_FOUND, "%s has no chat_template; give one with "
                       "--chat-template FILE", path);
  } else if (!json_is_string(tmpl)) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: chat_template must be a string or a "
                       "list of {name, template} with a \"default\" entry", path);
  } else {
    s = ty_chat_template_parse(json_string_value(tmpl), json_string_length(tmpl), path, bos,
                               eos, out_template);
  }
  json_decref(config);
  return s;
}

/* ---- rendering ---- */

typedef struct {
  char *data;
  size_t size, capacity;
  bool failed;
} ty_ct_buf_t;

static void ty_ct_put(ty_ct_buf_t *b, const char *s, size_t n) {
  if (b->failed) return;
  if (b->size + n + 1 > b->capacity) {
    size_t cap = b->capacity ? b->capacity * 2 : 256;
    while (cap < b->size + n + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
      b->failed = true;
      return;
    }
    b->data = p;
    b->capacity = cap;
  }
  memcpy(b->data + b->size, s, n);
  b->size += n;
  b->data[b->size] = '\0';
}

static void ty_ct_puts(ty_ct_buf_t *b, const char *s) { ty_ct_put(b, s, strlen(s)); }

/* The length of the Python whitespace character at s (str.strip()'s set),
 * or 0. */
static size_t ty_ct_space(const unsigned char *s, size_t n) {
  if (n >= 1 && ((s[0] >= 0x09 && s[0] <= 0x0D) || (s[0] >= 0x1C && s[0] <= 0x20))) return 1;
  if (n >= 2 && s[0] == 0xC2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
  if (n >= 3 && s[0] == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3; /* U+1680 */
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 &&
      (s[2] <= 0x8A || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF)) {
    return 3; /* U+2000..200A, 2028, 2029, 202F */
  }
  if (n >= 3 && s[0] == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3; /* U+205F */
  if (n >= 3 && s[0] == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
  return 0;
}

/* content.strip() / | trim. */
static void ty_ct_put_trimmed(ty_ct_buf_t *b, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t begin = 0, end = n, k;
  while (begin < end && (k = ty_ct_space(u + begin, end - begin)) > 0) begin += k;
  for (;;) {
    size_t step = 0;
    for (size_t w = 1; w <= 3 && w <= end - begin && !step; ++w) {
      if (ty_ct_space(u + end - w, w) == w) step = w;
    }
    if (!step) break;
    end -= step;
  }
  ty_ct_put(b, s + begin, end - begin);
}

/* A custom part: `pattern` with {content} replaced. */
static void ty_ct_put_pattern(ty_ct_buf_t *b, const char *pattern, const char *content,
                              size_t size) {
  const char *at = strstr(pattern, "{content}");
  ty_ct_put(b, pattern, (size_t)(at - pattern));
  ty_ct_put(b, content, size);
  ty_ct_puts(b, at + strlen("{content}"));
}

static ty_status_t ty_ct_role_error(size_t i, const char *role, const char *family,
                                    const char *why) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT, "messages[%zu]: role '%s': %s (%s template)",
                        i, role, why, family);
}

static bool ty_ct_is(const ty_chat_message_t *m, const char *role) {
  return strcmp(m->role, role) == 0;
}

/* Llama 2 and Mistral: after an optional leading system message, user and
 * assistant alternate, starting with the user. */
static ty_status_t ty_ct_alternate(const ty_chat_template_t *t, const ty_chat_message_t *m,
                                   size_t count, size_t first) {
  for (size_t i = first; i < count; ++i) {
    bool user = ty_ct_is(&m[i], "user");
    if (!user && !ty_ct_is(&m[i], "assistant")) {
      return ty_ct_role_error(i, m[i].role, ty_family_names[t->family],
                              "only user and assistant turns may follow a leading system "
                              "message");
    }
    if (user != ((i - first) % 2 == 0)) {
      return ty_ct_role_error(i, m[i].role, ty_family_names[t->family],
                              "conversation roles must alternate user/assistant/user/...");
    }
  }
  return TY_OK;
}

static void ty_ct_today(char *out, size_t size) {
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm); /* transformers' strftime_now: local time */
  strftime(out, size, "%d %b %Y", &tm);
}

static ty_status_t ty_ct_render(const ty_chat_template_t *t, const ty_chat_message_t *m,
                                size_t count, bool gen, ty_ct_buf_t *b) {
  bool has_system = count > 0 && ty_ct_is(&m[0], "system");
  for (size_t i = 0; i < count; ++i) {
    if (!ty_ct_is(&m[i], "system") && !ty_ct_is(&m[i], "user") &&
        !ty_ct_is(&m[i], "assistant")) {
      return ty_ct_role_error(i, m[i].role, ty_family_names[t->family],
                              "the roles are system, user and assistant");
    }
  }
  switch (t->family) {
    case TY_FAMILY_CHATML:
      if (!has_system && t->default_system) {
        ty_ct_puts(b, "<|im_start|>system\n");
        ty_ct_puts(b, t->default_system);
        ty_ct_puts(b, "<|im_end|>\n");
      }
      for (size_t i = 0; i < count; ++i) {
        ty_ct_puts(b, "<|im_start|>");
        ty_ct_puts(b, m[i].role);
        ty_ct_puts(b, "\n");
        ty_ct_put(b, m[i].content, m[i].content_size);
        ty_ct_puts(b, "<|im_end|>\n");
      }
      if (gen) ty_ct_puts(b, "<|im_start|>assistant\n");
      return TY_OK;
    case TY_FAMILY_LLAMA3:
    case TY_FAMILY_LLAMA31: {
      size_t first = 0;
      ty_ct_puts(b, t->bos);
      if (t->family == TY_FAMILY_LLAMA31) {
        char today[64];
        if (!t->date) ty_ct_today(today, sizeof(today));
        ty_ct_puts(b, "<|start_header_id|>system<|end_header_id|>\n\n");
        ty_ct_puts(b, t->knowledge);
        ty_ct_puts(b, "Today Date: ");
        ty_ct_puts(b, t->date ? t->date : today);
        ty_ct_puts(b, "\n\n");
        if (has_system) ty_ct_put_trimmed(b, m[0].content, m[0].content_size);
        ty_ct_puts(b, "<|eot_id|>");
        first = has_system ? 1 : 0;
      }
      for (size_t i = first; i < count; ++i) {
        ty_ct_puts(b, "<|start_header_id|>");
        ty_ct_puts(b, m[i].role);
        ty_ct_puts(b, "<|end_header_id|>\n\n");
        ty_ct_put_trimmed(b, m[i].content, m[i].content_size);
        ty_ct_puts(b, "<|eot_id|>");
      }
      if (gen) ty_ct_puts(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
      return TY_OK;
    }
    case TY_FAMILY_LLAMA2: {
      size_t first = has_system ? 1 : 0;
      TY_RETURN_IF_ERROR(ty_ct_alternate(t, m, count, first));
      for (size_t i = first; i < count; ++i) {
        if (ty_ct_is(&m[i], "user")) {
          ty_ct_buf_t content = {0};
          if (i == first && has_system) {
            ty_ct_puts(&content, "<<SYS>>\n");
            ty_ct_put(&content, m[0].content, m[0].content_size);
            ty_ct_puts(&content, "\n<</SYS>>\n\n");
          }
          ty_ct_put(&content, m[i].content, m[i].content_size);
          ty_ct_puts(b, t->bos);
          ty_ct_puts(b, "[INST] ");
          if (content.failed) b->failed = true;
          ty_ct_put_trimmed(b, content.data ? content.data : "", content.size);
          ty_ct_puts(b, " [/INST]");
          free(content.data);
        } else {
          ty_ct_puts(b, " ");
          ty_ct_put_trimmed(b, m[i].content, m[i].content_size);
          ty_ct_puts(b, " ");
          ty_ct_puts(b, t->eos);
        }
      }
      return TY_OK;
    }
    case TY_FAMILY_MISTRAL:
      if (has_system) {
        return ty_ct_role_error(0, "system", "mistral", "this template has no system message");
      }
      TY_RETURN_IF_ERROR(ty_ct_alternate(t, m, count, 0));
      ty_ct_puts(b, t->bos);
      for (size_t i = 0; i < count; ++i) {
        if (ty_ct_is(&m[i], "user")) {
          ty_ct_puts(b, "[INST] ");
          ty_ct_put(b, m[i].content, m[i].content_size);
          ty_ct_puts(b, " [/INST]");
        } else {
          ty_ct_put(b, m[i].content, m[i].content_size);
          ty_ct_puts(b, t->eos);
        }
      }
      return TY_OK;
    case TY_FAMILY_MISTRAL3: {
      size_t first = has_system ? 1 : 0;
      TY_RETURN_IF_ERROR(ty_ct_alternate(t, m, count, first));
      ty_ct_puts(b, t->bos);
      for (size_t i = first; i < count; ++i) {
        if (ty_ct_is(&m[i], "user")) {
          ty_ct_puts(b, "[INST] ");
          /* The system message goes with the last message, if a user's. */
          if (has_system && i + 1 == count) {
            ty_ct_put(b, m[0].content, m[0].content_size);
            ty_ct_puts(b, "\n\n");
          }
          ty_ct_put(b, m[i].content, m[i].content_size);
          ty_ct_puts(b, "[/INST]");
        } else {
          ty_ct_puts(b, " ");
          ty_ct_put_trimmed(b, m[i].content, m[i].content_size);
          ty_ct_puts(b, t->eos);
        }
      }
      return TY_OK;
    }
    case TY_FAMILY_CUSTOM:
      if (t->prefix) ty_ct_puts(b, t->prefix);
      if (!has_system && t->default_system && t->system) {
        ty_ct_put_pattern(b, t->system, t->default_system, strlen(t->default_system));
      }
      for (size_t i = 0; i < count; ++i) {
        const char *pattern = ty_ct_is(&m[i], "system") ? t->system
                              : ty_ct_is(&m[i], "user") ? t->user
                                                        : t->assistant;
        if (!pattern) {
          return ty_ct_role_error(i, m[i].role, "custom", "the template has no \"system\" part");
        }
        ty_ct_put_pattern(b, pattern, m[i].content, m[i].content_size);
      }
      if (gen && t->generation) ty_ct_puts(b, t->generation);
      return TY_OK;
  }
  return TY_OK;
}

ty_status_t ty_chat_template_render(const ty_chat_template_t *t,
                                    const ty_chat_message_t *messages, size_t count,
                                    bool add_generation_prompt, char **out_text,
                                    size_t *out_size) {
  *out_text = NULL;
  *out_size = 0;
  ty_ct_buf_t b = {0};
  ty_ct_put(&b, "", 0);
  ty_status_t s = ty_ct_render(t, messages, count, add_generation_prompt, &b);
  if (!s && b.failed) s = ty_ct_oom();
  if (s) {
    free(b.data);
    return s;
  }
  *out_text = b.data;
  *out_size = b.size;
  return TY_OK;
}
