/* Loading tokenizer.json: the file, the BPE model (vocab, merges and its
 * options), added tokens, the id table and the added-token tries. The
 * components around the model are parsed in tokenizer_pipeline.c. Also the
 * public lookups and destroy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "models/json_input.h"
#include "models/tokenizer_internal.h"
#include "hal/sha256.h"

/* ---- JSON fields ---- */

ty_status_t ty_tok_json_bool(const json_t *object, const char *key, const char *path, bool fallback,
                             bool *out) {
  const json_t *value = json_object_get(object, key);
  if (!value || json_is_null(value)) {
    *out = fallback;
    return TY_OK;
  }
  if (!json_is_boolean(value)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.%s: expected true or false", path, key);
  }
  *out = json_is_true(value);
  return TY_OK;
}

ty_status_t ty_tok_json_string(const json_t *object, const char *key, const char *path,
                               bool required, const char **out, size_t *out_size) {
  const json_t *value = json_object_get(object, key);
  *out = NULL;
  if (out_size) *out_size = 0;
  if (!value || json_is_null(value)) {
    if (!required) return TY_OK;
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.%s: missing", path, key);
  }
  if (!json_is_string(value)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s.%s: expected a string", path, key);
  }
  *out = json_string_value(value);
  if (out_size) *out_size = json_string_length(value);
  return TY_OK;
}

ty_status_t ty_tok_json_type(const json_t *object, const char *path, const char **out_type) {
  if (!json_is_object(object)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: expected an object", path);
  }
  const char *type = NULL;
  TY_RETURN_IF_ERROR(ty_tok_json_string(object, "type", path, true, &type, NULL));
  *out_type = type;
  return TY_OK;
}

/* ---- the file ---- */

const ty_file_kind_t ty_tokenizer_file_kind = {
    .what = "tokenizer file",
    .max_bytes = 256 * TY_MIB,
    .limit_env = "TRAINYARD_MAX_TOKENIZER_BYTES",
    .text = true,
    .bad_code = TY_CODE_DATA_LOSS,
    .skip_bom = true,
};

/* ---- the model ---- */

static ty_status_t ty_tok_load_vocab(ty_tokenizer_t *tok, const json_t *vocab) {
  if (!json_is_object(vocab)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "model.vocab: missing or not an object of token -> id");
  }
  const char *key;
  size_t key_size;
  json_t *value;
  json_object_keylen_foreach((json_t *)vocab, key, key_size, value) {
    json_int_t id = json_is_integer(value) ? json_integer_value(value) : -1;
    if (id < 0 || id > INT32_MAX) {
      char shown[48];
      ty_json_brief(value, shown, sizeof(shown));
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "model.vocab[\"%.*s\"]: the id must be an integer in [0, %d], "
                            "not %s", (int)key_size, key, INT32_MAX, shown);
    }
    TY_RETURN_IF_ERROR(ty_tok_strmap_put(&tok->vocab, key, key_size, (uint32_t)id, NULL));
  }
  return TY_OK;
}

/* One merge as its two tokens: "a b" (exactly one space, as HF requires) or
 * ["a", "b"]. */
static ty_status_t ty_tok_merge_parts(const json_t *merge, size_t index, const char **a,
                                      size_t *a_size, const char **b, size_t *b_size) {
  if (json_is_string(merge)) {
    const char *text = json_string_value(merge);
    size_t size = json_string_length(merge);
    const char *space = memchr(text, ' ', size);
    if (!space || memchr(space + 1, ' ', size - (size_t)(space - text) - 1)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "model.merges[%zu]: \"%.*s\" is not two tokens separated by one "
                            "space",
                            index, (int)size, text);
    }
    *a = text;
    *a_size = (size_t)(space - text);
    *b = space + 1;
    *b_size = size - *a_size - 1;
    return TY_OK;
  }
  if (json_is_array(merge) && json_array_size(merge) == 2 &&
      json_is_string(json_array_get(merge, 0)) && json_is_string(json_array_get(merge, 1))) {
    *a = json_string_value(json_array_get(merge, 0));
    *a_size = json_string_length(json_array_get(merge, 0));
    *b = json_string_value(json_array_get(merge, 1));
    *b_size = json_string_length(json_array_get(merge, 1));
    return TY_OK;
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "model.merges[%zu]: expected \"a b\" or [\"a\", \"b\"]", index);
}

static ty_status_t ty_tok_load_merges(ty_tokenizer_t *tok, const json_t *merges) {
  if (!json_is_array(merges)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "model.merges: missing or not an array; a BPE model needs its merges");
  }
  ty_tok_buf_t joined = {0};
  ty_status_t status = TY_OK;
  size_t index;
  const json_t *merge;
  json_array_foreach(merges, index, merge) {
    const char *a = NULL, *b = NULL;
    size_t a_size = 0, b_size = 0;
    status = ty_tok_merge_parts(merge, index, &a, &a_size, &b, &b_size);
    if (status) break;
    uint32_t ea = ty_tok_strmap_find(&tok->vocab, a, a_size);
    uint32_t eb = ty_tok_strmap_find(&tok->vocab, b, b_size);
    if (ea == TY_TOK_NONE || eb == TY_TOK_NONE) {
      status = ty_status_make(
          TY_CODE_INVALID_ARGUMENT, "model.merges[%zu]: token \"%.*s\" is not in model.vocab",
          index, (int)(ea == TY_TOK_NONE ? a_size : b_size), ea == TY_TOK_NONE ? a : b);
      break;
    }
    joined.size = 0;
    status = ty_tok_buf_append(&joined, a, a_size);
    if (!status) status = ty_tok_buf_append(&joined, b, b_size);
    if (status) break;
    uint32_t em = ty_tok_strmap_find(&tok->vocab, joined.data, joined.size);
    if (em == TY_TOK_NONE) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "model.merges[%zu]: the merged token \"%.*s\" is not in model.vocab",
                              index, (int)joined.size, joined.data);
      break;
    }
    if (index >= UINT32_MAX) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "model.merges: too many merges");
      break;
    }
    status =
        ty_tok_pairmap_put(&tok->merges, tok->vocab.entries[ea].value, tok->vocab.entries[eb].value,
                           (uint32_t)index, tok->vocab.entries[em].value);
    if (status) break;
  }
  ty_tok_buf_free(&joined);
  return status;
}

static ty_status_t ty_tok_load_model(ty_tokenizer_t *tok, const json_t *model) {
  if (!json_is_object(model)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "model: missing or not an object");
  }
  const char *type = NULL;
  TY_RETURN_IF_ERROR(ty_tok_json_string(model, "type", "model", false, &type, NULL));
  if (!type) {
    /* Old files leave the type out; HF then infers it from the fields. */
    if (!json_object_get(model, "merges")) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "model.type: missing, and without merges this is not a BPE model");
    }
    type = "BPE";
  }
  if (strcmp(type, "BPE") != 0) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "model.type '%s' is not supported; only BPE models (GPT-2, Llama, "
                          "Mistral families) load",
                          type);
  }
  const json_t *dropout = json_object_get(model, "dropout");
  if (dropout && !json_is_null(dropout)) {
    double p = json_is_number(dropout) ? json_number_value(dropout) : -1.0;
    if (!(p >= 0.0 && p <= 1.0)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "model.dropout: expected a number in [0, 1]");
    }
    if (p > 0.0) {
      return ty_status_make(TY_CODE_UNIMPLEMENTED,
                            "model.dropout %g: BPE dropout (random merges, for training "
                            "tokenizers) is not supported; set it to null",
                            p);
    }
  }
  static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
  for (size_t i = 0; i < 2; ++i) {
    const char *text;
    size_t size;
    TY_RETURN_IF_ERROR(ty_tok_json_string(model, affixes[i], "model", false, &text, &size));
    if (size) {
      return ty_status_make(TY_CODE_UNIMPLEMENTED,
                            "model.%s \"%s\" is not supported (only null or \"\")", affixes[i],
                            text);
    }
  }
  TY_RETURN_IF_ERROR(ty_tok_json_bool(model, "fuse_unk", "model", false, &tok->fuse_unk));
  TY_RETURN_IF_ERROR(ty_tok_json_bool(model, "byte_fallback", "model", false, &tok->byte_fallback));
  TY_RETURN_IF_ERROR(ty_tok_json_bool(model, "ignore_merges", "model", false, &tok->ignore_merges));
  TY_RETURN_IF_ERROR(ty_tok_load_vocab(tok, json_object_get(model, "vocab")));
  TY_RETURN_IF_ERROR(ty_tok_load_merges(tok, json_object_get(model, "merges")));

  const char *unk;
  size_t unk_size;
  TY_RETURN_IF_ERROR(ty_tok_json_string(model, "unk_token", "model", false, &unk, &unk_size));
  tok->unk_id = TY_TOK_NONE;
  if (unk) {
    tok->has_unk_token = true;
    tok->unk_token = strdup(unk);
    if (!tok->unk_token) {
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for model.unk_token");
    }
    /* Like HF, an unk_token missing from the vocab is an error only when an
     * unknown character needs it. */
    uint32_t e = ty_tok_strmap_find(&tok->vocab, unk, unk_size);
    if (e != TY_TOK_NONE) tok->unk_id = tok->vocab.entries[e].value;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    snprintf(name, sizeof(name), "<0x%02X>", b);
    uint32_t e = ty_tok_strmap_find(&tok->vocab, name, 6);
    tok->byte_ids[b] = e == TY_TOK_NONE ? TY_TOK_NONE : tok->vocab.entries[e].value;
  }
  return TY_OK;
}

/* ---- added tokens ---- */

static ty_status_t ty_tok_load_added(ty_tokenizer_t *tok, const json_t *added) {
  if (!added || json_is_null(added)) return TY_OK;
  if (!json_is_array(added)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "added_tokens: expected an array");
  }
  size_t count = json_array_size(added);
  tok->added = calloc(count ? count : 1, sizeof(ty_tok_added_t));
  if (!tok->added) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for %zu added tokens", count);
  }
  size_t index;
  const json_t *entry;
  json_array_foreach(added, index, entry) {
    char path[48];
    snprintf(path, sizeof(path), "added_tokens[%zu]", index);
    if (!json_is_object(entry)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: expected an object", path);
    }
    const json_t *id_json = json_object_get(entry, "id");
    int64_t id = 0;
    ty_status_t bad = ty_json_token_id(id_json, 0, &id);
    if (bad) return ty_status_annotate(bad, "%s.id", path);
    const char *content;
    size_t size;
    TY_RETURN_IF_ERROR(ty_tok_json_string(entry, "content", path, true, &content, &size));
    ty_tok_added_t a = {.id = (uint32_t)id};
    TY_RETURN_IF_ERROR(ty_tok_json_bool(entry, "special", path, false, &a.special));
    TY_RETURN_IF_ERROR(ty_tok_json_bool(entry, "lstrip", path, false, &a.lstrip));
    TY_RETURN_IF_ERROR(ty_tok_json_bool(entry, "rstrip", path, false, &a.rstrip));
    TY_RETURN_IF_ERROR(ty_tok_json_bool(entry, "single_word", path, false, &a.single_word));
    TY_RETURN_IF_ERROR(ty_tok_json_bool(entry, "normalized", path, true, &a.normalized));
    if (size == 0) continue; /* HF ignores empty added tokens */
    /* HF gives an added token that is in the model vocabulary the vocab id. */
    uint32_t e = ty_tok_strmap_find(&tok->vocab, content, size);
    if (e != TY_TOK_NONE) a.id = tok->vocab.entries[e].value;
    a.content_offset = tok->added_text.size;
    a.content_size = size;
    TY_RETURN_IF_ERROR(ty_tok_buf_append(&tok->added_text, content, size));
    TY_RETURN_IF_ERROR(
        ty_tok_strmap_put(&tok->added_by_content, content, size, (uint32_t)tok->added_count, NULL));
    tok->added[tok->added_count++] = a;
  }
  return TY_OK;
}

static ty_status_t ty_tok_build_ids(ty_tokenizer_t *tok) {
  uint64_t max_id = 0;
  bool any = false;
  for (size_t e = 0; e < tok->vocab.count; ++e) {
    if (tok->vocab.entries[e].value >= max_id) max_id = tok->vocab.entries[e].value;
    any = true;
  }
  for (size_t i = 0; i < tok->added_count; ++i) {
    if (tok->added[i].id >= max_id) max_id = tok->added[i].id;
    any = true;
  }
  uint64_t tokens = tok->vocab.count + tok->added_count;
  if (any && max_id >= 4 * tokens + 65536) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "model.vocab / added_tokens: ids are too sparse (largest id %llu for "
                          "%llu tokens)",
                          (unsigned long long)max_id, (unsigned long long)tokens);
  }
  tok->id_count = any ? (uint32_t)(max_id + 1) : 0;
  tok->ids = calloc(tok->id_count ? tok->id_count : 1, sizeof(ty_tok_id_t));
  if (!tok->ids) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for %u ids", tok->id_count);
  }
  for (size_t e = 0; e < tok->vocab.count; ++e) {
    const ty_tok_strmap_entry_t *entry = &tok->vocab.entries[e];
    ty_tok_id_t *slot = &tok->ids[entry->value];
    if (slot->flags) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "model.vocab: id %u is given to both \"%.*s\" and \"%.*s\"",
                            entry->value, (int)slot->size, slot->text, (int)entry->size,
                            ty_tok_strmap_key(&tok->vocab, (uint32_t)e));
    }
    *slot = (ty_tok_id_t){.text = ty_tok_strmap_key(&tok->vocab, (uint32_t)e),
                          .size = entry->size,
                          .flags = TY_TOK_ID_PRESENT};
  }
  for (size_t i = 0; i < tok->added_count; ++i) {
    const ty_tok_added_t *a = &tok->added[i];
    const char *content = tok->added_text.data + a->content_offset;
    ty_tok_id_t *slot = &tok->ids[a->id];
    if (slot->flags &&
        (slot->size != a->content_size || memcmp(slot->text, content, a->content_size) != 0)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "added_tokens: id %u of \"%.*s\" already belongs to \"%.*s\"", a->id,
                            (int)a->content_size, content, (int)slot->size, slot->text);
    }
    slot->text = content;
    slot->size = (uint32_t)a->content_size;
    slot->flags |= TY_TOK_ID_PRESENT | TY_TOK_ID_ADDED | (a->special ? TY_TOK_ID_SPECIAL : 0);
  }
  return TY_OK;
}

/* ---- tries of added tokens ---- */

static ty_status_t ty_tok_trie_insert(ty_tok_trie_t *trie, const char *key, size_t size,
                                      uint32_t added) {
  if (trie->count + size + 1 > trie->capacity) {
    size_t capacity = (trie->capacity ? trie->capacity * 2 : 64) + size + 1;
    ty_tok_trie_node_t *nodes = realloc(trie->nodes, capacity * sizeof(*nodes));
    if (!nodes) {
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for the added-token trie");
    }
    trie->nodes = nodes;
    trie->capacity = capacity;
  }
  if (trie->count == 0) {
    trie->nodes[trie->count++] = (ty_tok_trie_node_t){TY_TOK_NONE, TY_TOK_NONE, TY_TOK_NONE, 0};
  }
  uint32_t node = 0;
  for (size_t i = 0; i < size; ++i) {
    unsigned char byte = (unsigned char)key[i];
    uint32_t child = trie->nodes[node].first_child;
    while (child != TY_TOK_NONE && trie->nodes[child].byte != byte) {
      child = trie->nodes[child].next_sibling;
    }
    if (child == TY_TOK_NONE) {
      child = (uint32_t)trie->count++;
      trie->nodes[child] = (ty_tok_trie_node_t){.first_child = TY_TOK_NONE,
                                                .next_sibling = trie->nodes[node].first_child,
                                                .added = TY_TOK_NONE,
                                                .byte = byte};
      trie->nodes[node].first_child = child;
    }
    node = child;
  }
  trie->nodes[node].added = added;
  return TY_OK;
}

static ty_status_t ty_tok_build_tries(ty_tokenizer_t *tok) {
  pcre2_match_data *match = pcre2_match_data_create(1, NULL);
  if (!match) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory for a match");
  ty_tok_buf_t normalized = {0};
  ty_status_t status = TY_OK;
  bool need_classes = false;
  for (size_t i = 0; i < tok->added_count && !status; ++i) {
    const ty_tok_added_t *a = &tok->added[i];
    const char *content = tok->added_text.data + a->content_offset;
    need_classes = need_classes || a->lstrip || a->rstrip || a->single_word;
    if (!a->normalized) {
      status = ty_tok_trie_insert(&tok->raw_trie, content, a->content_size, (uint32_t)i);
      continue;
    }
    /* Normalized tokens are matched on normalized text, so their content is
     * normalized the same way. */
    status = ty_tok_normalize(tok, match, content, a->content_size, &normalized);
    if (!status && normalized.size) {
      status = ty_tok_trie_insert(&tok->norm_trie, normalized.data, normalized.size, (uint32_t)i);
    }
  }
  if (!status && need_classes) {
    /* Rust regex's \w and \s, which HF uses for single_word, lstrip, rstrip. */
    static const char word[] = "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";
    status = ty_tok_regex_compile(word, sizeof(word) - 1, false, "added_tokens", &tok->word_char);
    if (!status) status = ty_tok_regex_compile("\\s", 2, false, "added_tokens", &tok->space_char);
  }
  ty_tok_buf_free(&normalized);
  pcre2_match_data_free(match);
  return status;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
 * the others for U+0100 onwards in byte order. */
static void ty_tok_init_byte_chars(ty_tokenizer_t *tok) {
  for (int cp = 0; cp < 324; ++cp) tok->char_byte[cp] = -1;
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    int cp = printable ? b : next++;
    tok->byte_char_size[b] = (uint8_t)ty_tok_utf8_encode((uint32_t)cp, tok->byte_char[b]);
    tok->char_byte[cp] = (int16_t)b;
  }
}

/* ---- public ---- */

void ty_tokenizer_destroy(ty_tokenizer_t *tok) {
  if (!tok) return;
  ty_tok_strmap_free(&tok->vocab);
  ty_tok_pairmap_free(&tok->merges);
  ty_tok_pairmap_free(&tok->chars);
  ty_tok_pairmap_free(&tok->bigrams);
  free(tok->unk_token);
  free(tok->ids);
  free(tok->added);
  ty_tok_buf_free(&tok->added_text);
  ty_tok_strmap_free(&tok->added_by_content);
  free(tok->raw_trie.nodes);
  free(tok->norm_trie.nodes);
  ty_tok_regex_free(&tok->word_char);
  ty_tok_regex_free(&tok->space_char);
  ty_tok_pipeline_free(tok);
  ty_tok_cache_destroy(tok->cache);
  free(tok);
}

static ty_status_t ty_tok_load_root(ty_tokenizer_t *tok, const json_t *root) {
  if (!json_is_object(root)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "the top level is not a JSON object");
  }
  TY_RETURN_IF_ERROR(ty_tok_cache_create(&tok->cache));
  ty_tok_init_byte_chars(tok);
  TY_RETURN_IF_ERROR(ty_tok_load_model(tok, json_object_get(root, "model")));
  TY_RETURN_IF_ERROR(ty_tok_load_normalizer(tok, json_object_get(root, "normalizer")));
  TY_RETURN_IF_ERROR(ty_tok_load_added(tok, json_object_get(root, "added_tokens")));
  TY_RETURN_IF_ERROR(ty_tok_load_pre_tokenizer(tok, json_object_get(root, "pre_tokenizer")));
  TY_RETURN_IF_ERROR(ty_tok_load_post_processor(tok, json_object_get(root, "post_processor")));
  TY_RETURN_IF_ERROR(ty_tok_load_decoder(tok, json_object_get(root, "decoder")));
  TY_RETURN_IF_ERROR(ty_tok_build_ids(tok));
  TY_RETURN_IF_ERROR(ty_tok_build_tries(tok));
  bool splits = false;
  for (size_t i = 0; i < tok->pre_count; ++i) splits = splits || tok->pres[i].has_pattern;
  if (!splits) TY_RETURN_IF_ERROR(ty_tok_bpe_prepare_chunks(tok));
  const uint32_t *lists[2] = {tok->prefix_ids, tok->suffix_ids};
  size_t counts[2] = {tok->prefix_count, tok->suffix_count};
  for (int l = 0; l < 2; ++l) {
    for (size_t i = 0; i < counts[l]; ++i) {
      if (lists[l][i] >= tok->id_count || !tok->ids[lists[l][i]].flags) {
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "post_processor: special token id %u is not in the vocabulary",
                              lists[l][i]);
      }
    }
  }
  /* Checked last, so that the other parts of a file are still named first.
   * Without a vocabulary the model can encode nothing at all. */
  if (tok->vocab.count == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "model.vocab is empty: a tokenizer needs at least one token");
  }
  return TY_OK;
}

ty_status_t ty_tokenizer_load_json(const char *json, size_t size, const char *name,
                                   ty_tokenizer_t **out_tokenizer) {
  if (!out_tokenizer || (!json && size)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "ty_tokenizer_load_json: NULL output or NULL text");
  }
  if (!name) name = "tokenizer.json";
  /* jansson would stop at a raw NUL and report a puzzling "end of file". */
  TY_RETURN_IF_ERROR(ty_file_check_text(json, size, name, &ty_tokenizer_file_kind));
  size_t bom = json ? ty_text_bom_size(json, size) : 0; /* as ty_file_read skips it */
  json_error_t error;
  json_t *root = json_loadb(json ? json + bom : "", size - bom, JSON_ALLOW_NUL, &error);
  if (!root) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "tokenizer '%s' is not valid JSON: %s (line %d, column %d)", name,
                          error.text, error.line, error.column);
  }
  ty_tokenizer_t *tok = calloc(1, sizeof(*tok));
  if (!tok) {
    json_decref(root);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory loading tokenizer '%s'", name);
  }
  ty_status_t status = ty_tok_load_root(tok, root);
  json_decref(root);
  if (status) {
    ty_tokenizer_destroy(tok);
    return ty_status_annotate(status, "tokenizer '%s'", name);
  }
  *out_tokenizer = tok;
  return TY_OK;
}

ty_status_t ty_tokenizer_load_file_sha256(const char *path, ty_tokenizer_t **out_tokenizer,
                                          char out_sha256[65]) {
  if (!path || !out_tokenizer) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "ty_tokenizer_load_file: NULL argument");
  }
  struct stat info;
  if (stat(path, &info) == 0 && S_ISDIR(info.st_mode)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "'%s' is a folder; pass the tokenizer.json file inside it", path);
  }
  char *text = NULL;
  size_t size = 0;
  ty_status_t status = ty_file_read(path, &ty_tokenizer_file_kind, &text, &size);
  if (!status && out_sha256) {
    if (!ty_sha256_hex(text, size, out_sha256)) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing %s", path);
    }
  }
  if (!status) status = ty_tokenizer_load_json(text, size, path, out_tokenizer);
  free(text);
  return status;
}

ty_status_t ty_tokenizer_load_file(const char *path, ty_tokenizer_t **out_tokenizer) {
  return ty_tokenizer_load_file_sha256(path, out_tokenizer, NULL);
}

uint32_t ty_tokenizer_vocab_size(const ty_tokenizer_t *tok) {
  return tok->id_count;
}

bool ty_tokenizer_id_to_token(const ty_tokenizer_t *tok, uint32_t id, const char **out_token,
                              size_t *out_size) {
  if (id >= tok->id_count || !tok->ids[id].flags) return false;
  *out_token = tok->ids[id].text;
  *out_size = tok->ids[id].size;
  return true;
}

bool ty_tokenizer_token_to_id(const ty_tokenizer_t *tok, const char *token, size_t size,
                              uint32_t *out_id) {
  uint32_t e = ty_tok_strmap_find(&tok->added_by_content, token, size);
  if (e != TY_TOK_NONE) {
    *out_id = tok->added[tok->added_by_content.entries[e].value].id;
    return true;
  }
  e = ty_tok_strmap_find(&tok->vocab, token, size);
  if (e == TY_TOK_NONE) return false;
  *out_id = tok->vocab.entries[e].value;
  return true;
}

bool ty_tokenizer_is_special(const ty_tokenizer_t *tok, uint32_t id) {
  return id < tok->id_count && (tok->ids[id].flags & TY_TOK_ID_SPECIAL);
}
