/* Parsing the components around the model in tokenizer.json: normalizer,
 * pre_tokenizer, post_processor and decoder. Sequences are flattened into
 * one list per component; anything this tokenizer cannot run exactly is
 * refused with UNIMPLEMENTED naming the component, never ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/json_input.h"
#include "models/tokenizer_internal.h"

/* Sequences inside sequences are legal; deeper than this is not a real file. */
#define TY_TOK_MAX_DEPTH 8

/* The GPT-2 pattern that HF's ByteLevel pre-tokenizer has built in (the JSON
 * only says use_regex: true). */
static const char ty_tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static ty_status_t ty_tok_grow_array(void **data, size_t count, size_t element_size) {
  /* Arrays here grow by one; they hold a handful of components. */
  void *grown = realloc(*data, (count + 1) * element_size);
  if (!grown) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a pipeline component");
  }
  *data = grown;
  memset((char *)grown + count * element_size, 0, element_size);
  return TY_OK;
}

static ty_status_t ty_tok_depth_check(int depth, const char *path) {
  if (depth > TY_TOK_MAX_DEPTH) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: Sequence nested deeper than %d", path,
                          TY_TOK_MAX_DEPTH);
  }
  return TY_OK;
}

/* {"String": "..."} or {"Regex": "..."}. */
static ty_status_t ty_tok_load_pattern(const json_t *owner, const char *path, ty_tok_regex_t *out) {
  const json_t *pattern = json_object_get(owner, "pattern");
  char where[160];
  snprintf(where, sizeof(where), "%s.pattern", path);
  if (!json_is_object(pattern)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: missing or not {\"String\": ...} or {\"Regex\": ...}", where);
  }
  const json_t *string = json_object_get(pattern, "String");
  const json_t *regex = json_object_get(pattern, "Regex");
  const json_t *chosen = json_is_string(string) ? string : json_is_string(regex) ? regex : NULL;
  if (!chosen) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: expected {\"String\": \"...\"} or {\"Regex\": \"...\"}", where);
  }
  snprintf(where, sizeof(where), "%s.pattern.%s", path, chosen == string ? "String" : "Regex");
  return ty_tok_regex_compile(json_string_value(chosen), json_string_length(chosen),
                              chosen == string, where, out);
}

/* One character such as "▁" (Metaspace replacement, Strip content). */
static ty_status_t ty_tok_load_char(const json_t *owner, const char *key, const char *path,
                                    char out[4], size_t *out_size) {
  const char *text;
  size_t size;
  TY_RETURN_IF_ERROR(ty_tok_json_string(owner, key, path, true, &text, &size));
  size_t bad;
  if (size == 0 || size > 4 || ty_tok_utf8_len((unsigned char)text[0]) != size ||
      !ty_tok_utf8_valid(text, size, &bad)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.%s: expected one character, got \"%s\"",
                          path, key, text);
  }
  memcpy(out, text, size);
  *out_size = size;
  return TY_OK;
}

/* prepend_scheme, or the older add_prefix_space. */
static ty_status_t ty_tok_load_prepend(const json_t *owner, const char *path,
                                       ty_tok_prepend_t *out) {
  const char *scheme;
  TY_RETURN_IF_ERROR(ty_tok_json_string(owner, "prepend_scheme", path, false, &scheme, NULL));
  if (!scheme) {
    bool add_prefix_space;
    TY_RETURN_IF_ERROR(ty_tok_json_bool(owner, "add_prefix_space", path, true, &add_prefix_space));
    *out = add_prefix_space ? TY_TOK_PREPEND_ALWAYS : TY_TOK_PREPEND_NEVER;
    return TY_OK;
  }
  if (strcmp(scheme, "always") == 0) {
    *out = TY_TOK_PREPEND_ALWAYS;
  } else if (strcmp(scheme, "first") == 0) {
    *out = TY_TOK_PREPEND_FIRST;
  } else if (strcmp(scheme, "never") == 0) {
    *out = TY_TOK_PREPEND_NEVER;
  } else {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s.prepend_scheme: '%s' is not always, first or never", path, scheme);
  }
  return TY_OK;
}

static ty_status_t ty_tok_copy_text(const char *text, size_t size, char **out, size_t *out_size) {
  *out = malloc(size + 1);
  if (!*out) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a component");
  memcpy(*out, text, size);
  (*out)[size] = '\0';
  *out_size = size;
  return TY_OK;
}

/* The items of a Sequence: `key` is "normalizers", "pretokenizers", ... */
typedef ty_status_t (*ty_tok_component_fn_t)(ty_tokenizer_t *tok, const json_t *json,
                                             const char *path, int depth);

static ty_status_t ty_tok_load_sequence(ty_tokenizer_t *tok, const json_t *json, const char *key,
                                        const char *path, int depth, ty_tok_component_fn_t load) {
  const json_t *items = json_object_get(json, key);
  if (!json_is_array(items)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.%s: missing or not an array", path, key);
  }
  size_t i;
  const json_t *item;
  json_array_foreach(items, i, item) {
    char item_path[160];
    snprintf(item_path, sizeof(item_path), "%s.%s[%zu]", path, key, i);
    TY_RETURN_IF_ERROR(load(tok, item, item_path, depth + 1));
  }
  return TY_OK;
}

/* ---- normalizer ---- */

static ty_status_t ty_tok_load_norm(ty_tokenizer_t *tok, const json_t *json, const char *path,
                                    int depth) {
  TY_RETURN_IF_ERROR(ty_tok_depth_check(depth, path));
  const char *type;
  TY_RETURN_IF_ERROR(ty_tok_json_type(json, path, &type));
  if (strcmp(type, "Sequence") == 0) {
    return ty_tok_load_sequence(tok, json, "normalizers", path, depth, ty_tok_load_norm);
  }
  bool prepend = strcmp(type, "Prepend") == 0;
  if (!prepend && strcmp(type, "Replace") != 0) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: normalizer type '%s' is not supported (supported: Sequence, "
                          "Prepend, Replace)",
                          path, type);
  }
  TY_RETURN_IF_ERROR(
      ty_tok_grow_array((void **)&tok->norms, tok->norm_count, sizeof(ty_tok_norm_t)));
  ty_tok_norm_t *norm = &tok->norms[tok->norm_count++];
  const char *text;
  size_t size;
  if (prepend) {
    norm->kind = TY_TOK_NORM_PREPEND;
    TY_RETURN_IF_ERROR(ty_tok_json_string(json, "prepend", path, true, &text, &size));
  } else {
    norm->kind = TY_TOK_NORM_REPLACE;
    TY_RETURN_IF_ERROR(ty_tok_load_pattern(json, path, &norm->pattern));
    TY_RETURN_IF_ERROR(ty_tok_json_string(json, "content", path, true, &text, &size));
  }
  return ty_tok_copy_text(text, size, &norm->text, &norm->text_size);
}

ty_status_t ty_tok_load_normalizer(ty_tokenizer_t *tok, const json_t *json) {
  if (!json || json_is_null(json)) return TY_OK;
  return ty_tok_load_norm(tok, json, "normalizer", 0);
}

/* ---- pre-tokenizer ---- */

static ty_status_t ty_tok_load_behavior(const json_t *json, const char *path,
                                        ty_tok_split_behavior_t *out) {
  static const struct {
    const char *name;
    ty_tok_split_behavior_t behavior;
  } names[] = {
      {"Removed", TY_TOK_SPLIT_REMOVED},
      {"Isolated", TY_TOK_SPLIT_ISOLATED},
      {"MergedWithPrevious", TY_TOK_SPLIT_MERGED_WITH_PREVIOUS},
      {"MergedWithNext", TY_TOK_SPLIT_MERGED_WITH_NEXT},
      {"Contiguous", TY_TOK_SPLIT_CONTIGUOUS},
  };
  const char *name;
  TY_RETURN_IF_ERROR(ty_tok_json_string(json, "behavior", path, true, &name, NULL));
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    if (strcmp(name, names[i].name) == 0) {
      *out = names[i].behavior;
      return TY_OK;
    }
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "%s.behavior: '%s' is not Removed, Isolated, MergedWithPrevious, "
                        "MergedWithNext or Contiguous",
                        path, name);
}

static ty_status_t ty_tok_load_pre(ty_tokenizer_t *tok, const json_t *json, const char *path,
                                   int depth) {
  TY_RETURN_IF_ERROR(ty_tok_depth_check(depth, path));
  const char *type;
  TY_RETURN_IF_ERROR(ty_tok_json_type(json, path, &type));
  if (strcmp(type, "Sequence") == 0) {
    return ty_tok_load_sequence(tok, json, "pretokenizers", path, depth, ty_tok_load_pre);
  }
  ty_tok_pre_kind_t kind;
  if (strcmp(type, "Split") == 0) {
    kind = TY_TOK_PRE_SPLIT;
  } else if (strcmp(type, "ByteLevel") == 0) {
    kind = TY_TOK_PRE_BYTE_LEVEL;
  } else if (strcmp(type, "Metaspace") == 0) {
    kind = TY_TOK_PRE_METASPACE;
  } else {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: pre-tokenizer type '%s' is not supported (supported: Sequence, "
                          "Split, ByteLevel, Metaspace)",
                          path, type);
  }
  TY_RETURN_IF_ERROR(ty_tok_grow_array((void **)&tok->pres, tok->pre_count, sizeof(ty_tok_pre_t)));
  ty_tok_pre_t *pre = &tok->pres[tok->pre_count++];
  pre->kind = kind;
  if (kind == TY_TOK_PRE_SPLIT) {
    TY_RETURN_IF_ERROR(ty_tok_load_pattern(json, path, &pre->pattern));
    pre->has_pattern = true;
    TY_RETURN_IF_ERROR(ty_tok_load_behavior(json, path, &pre->behavior));
    return ty_tok_json_bool(json, "invert", path, false, &pre->invert);
  }
  if (kind == TY_TOK_PRE_BYTE_LEVEL) {
    bool use_regex;
    TY_RETURN_IF_ERROR(
        ty_tok_json_bool(json, "add_prefix_space", path, true, &pre->add_prefix_space));
    TY_RETURN_IF_ERROR(ty_tok_json_bool(json, "use_regex", path, true, &use_regex));
    pre->behavior = TY_TOK_SPLIT_ISOLATED;
    if (!use_regex) return TY_OK;
    pre->has_pattern = true;
    return ty_tok_regex_compile(ty_tok_gpt2_pattern, sizeof(ty_tok_gpt2_pattern) - 1, false, path,
                                &pre->pattern);
  }
  bool split;
  TY_RETURN_IF_ERROR(
      ty_tok_load_char(json, "replacement", path, pre->replacement, &pre->replacement_size));
  TY_RETURN_IF_ERROR(ty_tok_load_prepend(json, path, &pre->prepend));
  TY_RETURN_IF_ERROR(ty_tok_json_bool(json, "split", path, true, &split));
  pre->behavior = TY_TOK_SPLIT_MERGED_WITH_NEXT;
  if (!split) return TY_OK;
  pre->has_pattern = true;
  return ty_tok_regex_compile(pre->replacement, pre->replacement_size, true, path, &pre->pattern);
}

ty_status_t ty_tok_load_pre_tokenizer(ty_tokenizer_t *tok, const json_t *json) {
  if (!json || json_is_null(json)) return TY_OK;
  return ty_tok_load_pre(tok, json, "pre_tokenizer", 0);
}

/* ---- post-processor ---- */

/* TemplateProcessing's "single" template: special tokens around $A. */
static ty_status_t ty_tok_load_template(ty_tokenizer_t *tok, const json_t *json, const char *path) {
  if (tok->prefix_ids || tok->suffix_ids) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED, "%s: more than one TemplateProcessing", path);
  }
  const json_t *single = json_object_get(json, "single");
  const json_t *specials = json_object_get(json, "special_tokens");
  if (!json_is_array(single)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.single: missing or not an array", path);
  }
  if (!json_is_object(specials)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.special_tokens: missing or not an object",
                          path);
  }
  ty_tok_ids_t before = {0}, after = {0};
  bool seen_a = false;
  ty_status_t status = TY_OK;
  size_t i;
  const json_t *item;
  json_array_foreach(single, i, item) {
    const json_t *sequence = json_object_get(item, "Sequence");
    const json_t *special = json_object_get(item, "SpecialToken");
    if (json_is_object(sequence)) {
      const char *id = json_string_value(json_object_get(sequence, "id"));
      if (!id || strcmp(id, "A") != 0 || seen_a) {
        status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                "%s.single[%zu]: the single template must hold sequence A "
                                "once (got %s)",
                                path, i, id ? id : "no id");
        break;
      }
      seen_a = true;
      continue;
    }
    const char *name =
        json_is_object(special) ? json_string_value(json_object_get(special, "id")) : NULL;
    if (!name) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "%s.single[%zu]: expected {\"Sequence\": {...}} or "
                              "{\"SpecialToken\": {\"id\": ...}}",
                              path, i);
      break;
    }
    const json_t *ids = json_object_get(json_object_get(specials, name), "ids");
    if (!json_is_array(ids)) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "%s.special_tokens[\"%s\"].ids: missing or not an array", path, name);
      break;
    }
    size_t k;
    const json_t *id;
    json_array_foreach(ids, k, id) {
      int64_t value = 0;
      status = ty_json_token_id(id, 0, &value);
      if (status) {
        status = ty_status_annotate(status, "%s.special_tokens[\"%s\"].ids[%zu]", path, name, k);
        break;
      }
      uint32_t v = (uint32_t)value;
      status = ty_tok_ids_append(seen_a ? &after : &before, &v, 1);
      if (status) break;
    }
    if (status) break;
  }
  if (!status && !seen_a) {
    status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.single: no sequence A", path);
  }
  if (status) {
    ty_tok_ids_free(&before);
    ty_tok_ids_free(&after);
    return status;
  }
  tok->prefix_ids = before.data;
  tok->prefix_count = before.count;
  tok->suffix_ids = after.data;
  tok->suffix_count = after.count;
  return TY_OK;
}

static ty_status_t ty_tok_load_post(ty_tokenizer_t *tok, const json_t *json, const char *path,
                                    int depth) {
  TY_RETURN_IF_ERROR(ty_tok_depth_check(depth, path));
  const char *type;
  TY_RETURN_IF_ERROR(ty_tok_json_type(json, path, &type));
  if (strcmp(type, "Sequence") == 0) {
    return ty_tok_load_sequence(tok, json, "processors", path, depth, ty_tok_load_post);
  }
  /* ByteLevel only trims offsets, which encode does not return. */
  if (strcmp(type, "ByteLevel") == 0) return TY_OK;
  if (strcmp(type, "TemplateProcessing") == 0) return ty_tok_load_template(tok, json, path);
  return ty_status_make(TY_CODE_UNIMPLEMENTED,
                        "%s: post-processor type '%s' is not supported (supported: Sequence, "
                        "ByteLevel, TemplateProcessing)",
                        path, type);
}

ty_status_t ty_tok_load_post_processor(ty_tokenizer_t *tok, const json_t *json) {
  if (!json || json_is_null(json)) return TY_OK;
  return ty_tok_load_post(tok, json, "post_processor", 0);
}

/* ---- decoder ---- */

static ty_status_t ty_tok_load_size(const json_t *json, const char *key, const char *path,
                                    size_t *out) {
  const json_t *value = json_object_get(json, key);
  json_int_t v = json_is_integer(value) ? json_integer_value(value) : -1;
  if (v < 0 || v > 1000000) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.%s: missing or not a count", path, key);
  }
  *out = (size_t)v;
  return TY_OK;
}

static ty_status_t ty_tok_load_dec(ty_tokenizer_t *tok, const json_t *json, const char *path,
                                   int depth) {
  TY_RETURN_IF_ERROR(ty_tok_depth_check(depth, path));
  const char *type;
  TY_RETURN_IF_ERROR(ty_tok_json_type(json, path, &type));
  if (strcmp(type, "Sequence") == 0) {
    return ty_tok_load_sequence(tok, json, "decoders", path, depth, ty_tok_load_dec);
  }
  static const struct {
    const char *name;
    ty_tok_dec_kind_t kind;
  } kinds[] = {
      {"ByteLevel", TY_TOK_DEC_BYTE_LEVEL},
      {"Replace", TY_TOK_DEC_REPLACE},
      {"ByteFallback", TY_TOK_DEC_BYTE_FALLBACK},
      {"Fuse", TY_TOK_DEC_FUSE},
      {"Strip", TY_TOK_DEC_STRIP},
      {"Metaspace", TY_TOK_DEC_METASPACE},
  };
  size_t k = 0;
  while (k < sizeof(kinds) / sizeof(kinds[0]) && strcmp(kinds[k].name, type) != 0) ++k;
  if (k == sizeof(kinds) / sizeof(kinds[0])) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: decoder type '%s' is not supported (supported: Sequence, "
                          "ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)",
                          path, type);
  }
  TY_RETURN_IF_ERROR(ty_tok_grow_array((void **)&tok->decs, tok->dec_count, sizeof(ty_tok_dec_t)));
  ty_tok_dec_t *dec = &tok->decs[tok->dec_count++];
  dec->kind = kinds[k].kind;
  const char *text;
  size_t size;
  switch (dec->kind) {
    case TY_TOK_DEC_REPLACE:
      TY_RETURN_IF_ERROR(ty_tok_load_pattern(json, path, &dec->pattern));
      TY_RETURN_IF_ERROR(ty_tok_json_string(json, "content", path, true, &text, &size));
      return ty_tok_copy_text(text, size, &dec->text, &dec->text_size);
    case TY_TOK_DEC_STRIP:
      TY_RETURN_IF_ERROR(
          ty_tok_load_char(json, "content", path, dec->character, &dec->character_size));
      TY_RETURN_IF_ERROR(ty_tok_load_size(json, "start", path, &dec->start));
      return ty_tok_load_size(json, "stop", path, &dec->stop);
    case TY_TOK_DEC_METASPACE:
      TY_RETURN_IF_ERROR(
          ty_tok_load_char(json, "replacement", path, dec->character, &dec->character_size));
      return ty_tok_load_prepend(json, path, &dec->prepend);
    case TY_TOK_DEC_BYTE_LEVEL:
    case TY_TOK_DEC_BYTE_FALLBACK:
    case TY_TOK_DEC_FUSE: break;
  }
  return TY_OK;
}

ty_status_t ty_tok_load_decoder(ty_tokenizer_t *tok, const json_t *json) {
  if (!json || json_is_null(json)) return TY_OK;
  tok->has_decoder = true;
  return ty_tok_load_dec(tok, json, "decoder", 0);
}

void ty_tok_pipeline_free(ty_tokenizer_t *tok) {
  for (size_t i = 0; i < tok->norm_count; ++i) {
    free(tok->norms[i].text);
    ty_tok_regex_free(&tok->norms[i].pattern);
  }
  free(tok->norms);
  for (size_t i = 0; i < tok->pre_count; ++i) ty_tok_regex_free(&tok->pres[i].pattern);
  free(tok->pres);
  for (size_t i = 0; i < tok->dec_count; ++i) {
    free(tok->decs[i].text);
    ty_tok_regex_free(&tok->decs[i].pattern);
  }
  free(tok->decs);
  free(tok->prefix_ids);
  free(tok->suffix_ids);
}
