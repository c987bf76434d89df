/* What the files of models/tokenizer*.c share: the loaded pipeline, growable
 * buffers, maps, PCRE2 regexes and the per-call work area. Not installed and
 * not for use outside models/tokenizer*.c. */
#ifndef TY_MODELS_TOKENIZER_INTERNAL_H_
#define TY_MODELS_TOKENIZER_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "hal/status.h"
#include "models/tokenizer.h"

#define TY_TOK_NONE UINT32_MAX

/* ---- growable arrays (tokenizer_util.c) ---- */

typedef struct ty_tok_buf_t {
  char *data;
  size_t size;
  size_t capacity;
} ty_tok_buf_t;

ty_status_t ty_tok_buf_reserve(ty_tok_buf_t *buf, size_t extra);
ty_status_t ty_tok_buf_append(ty_tok_buf_t *buf, const void *data, size_t size);
void ty_tok_buf_free(ty_tok_buf_t *buf);

typedef struct ty_tok_ids_t {
  uint32_t *data;
  size_t count;
  size_t capacity;
} ty_tok_ids_t;

ty_status_t ty_tok_ids_append(ty_tok_ids_t *ids, const uint32_t *data, size_t count);
void ty_tok_ids_free(ty_tok_ids_t *ids);

/* A substring [offset, offset + size) of some buffer. `at_origin` marks the
 * piece that starts at offset 0 of the original text (Metaspace "first"). */
typedef struct ty_tok_piece_t {
  size_t offset;
  size_t size;
  bool at_origin;
  uint32_t added; /* index of the added token it is, or TY_TOK_NONE */
} ty_tok_piece_t;

typedef struct ty_tok_pieces_t {
  ty_tok_piece_t *data;
  size_t count;
  size_t capacity;
} ty_tok_pieces_t;

ty_status_t ty_tok_pieces_push(ty_tok_pieces_t *pieces, size_t offset, size_t size, bool at_origin,
                               uint32_t added);
void ty_tok_pieces_free(ty_tok_pieces_t *pieces);

/* ---- UTF-8 (tokenizer_util.c) ---- */

/* Length of the UTF-8 sequence that starts with `lead` (1 for stray bytes). */
size_t ty_tok_utf8_len(unsigned char lead);
/* True when the bytes are well-formed UTF-8; else *out_bad is the offset of
 * the first bad byte. */
bool ty_tok_utf8_valid(const char *text, size_t size, size_t *out_bad);
/* Decodes one code point of valid UTF-8 at text[0..size); *out_len its bytes. */
uint32_t ty_tok_utf8_decode(const char *text, size_t size, size_t *out_len);
/* Encodes `cp` into out (4 bytes); returns the length. */
size_t ty_tok_utf8_encode(uint32_t cp, char *out);

/* ---- hashing and maps (tokenizer_util.c) ---- */

uint64_t ty_tok_hash(const void *data, size_t size);

/* Byte string -> uint32 value; keeps its own copy of the keys. */
typedef struct ty_tok_strmap_entry_t {
  size_t offset; /* of the key in `keys` */
  uint32_t size;
  uint32_t value;
} ty_tok_strmap_entry_t;

typedef struct ty_tok_strmap_t {
  ty_tok_buf_t keys;
  ty_tok_strmap_entry_t *entries;
  size_t count;
  size_t entry_capacity;
  uint32_t *slots; /* entry index or TY_TOK_NONE; power-of-two count */
  size_t slot_count;
} ty_tok_strmap_t;

/* Inserts or overwrites. *out_index (may be NULL) receives the entry index. */
ty_status_t ty_tok_strmap_put(ty_tok_strmap_t *map, const char *key, size_t size, uint32_t value,
                              uint32_t *out_index);
/* Entry index of `key`, or TY_TOK_NONE. */
uint32_t ty_tok_strmap_find(const ty_tok_strmap_t *map, const char *key, size_t size);
static inline const char *ty_tok_strmap_key(const ty_tok_strmap_t *map, uint32_t index) {
  return map->keys.data + map->entries[index].offset;
}
void ty_tok_strmap_free(ty_tok_strmap_t *map);

/* (left id, right id) -> (rank, merged id). */
typedef struct ty_tok_pairmap_t {
  uint64_t *keys; /* UINT64_MAX when empty */
  uint32_t *ranks;
  uint32_t *results;
  size_t slot_count;
  size_t count;
} ty_tok_pairmap_t;

ty_status_t ty_tok_pairmap_put(ty_tok_pairmap_t *map, uint32_t left, uint32_t right, uint32_t rank,
                               uint32_t result);
bool ty_tok_pairmap_get(const ty_tok_pairmap_t *map, uint32_t left, uint32_t right,
                        uint32_t *out_rank, uint32_t *out_result);
void ty_tok_pairmap_free(ty_tok_pairmap_t *map);

/* ---- regular expressions (tokenizer_regex.c) ---- */

typedef struct ty_tok_regex_t {
  pcre2_code *code; /* NULL for an empty literal, which never matches */
  bool jit;
} ty_tok_regex_t;

/* Compiles a pattern of the `tokenizers` library (Oniguruma syntax as far as
 * PCRE2 shares it) or, with `literal`, a plain string. `what` names the JSON
 * field for errors (INVALID_ARGUMENT with PCRE2's message and offset). */
ty_status_t ty_tok_regex_compile(const char *pattern, size_t size, bool literal, const char *what,
                                 ty_tok_regex_t *out);
void ty_tok_regex_free(ty_tok_regex_t *regex);

/* Finds the first match in subject[0..size) starting at or after `start`.
 * Subjects are valid UTF-8 (checked once by the caller). */
ty_status_t ty_tok_regex_find(const ty_tok_regex_t *regex, pcre2_match_data *match,
                              const char *subject, size_t size, size_t start, bool *out_found,
                              size_t *out_begin, size_t *out_end);

/* ---- the pipeline ---- */

typedef enum ty_tok_split_behavior_t {
  TY_TOK_SPLIT_REMOVED,
  TY_TOK_SPLIT_ISOLATED,
  TY_TOK_SPLIT_MERGED_WITH_PREVIOUS,
  TY_TOK_SPLIT_MERGED_WITH_NEXT,
  TY_TOK_SPLIT_CONTIGUOUS,
} ty_tok_split_behavior_t;

typedef enum ty_tok_prepend_t {
  TY_TOK_PREPEND_ALWAYS,
  TY_TOK_PREPEND_FIRST,
  TY_TOK_PREPEND_NEVER,
} ty_tok_prepend_t;

typedef enum ty_tok_norm_kind_t {
  TY_TOK_NORM_PREPEND,
  TY_TOK_NORM_REPLACE,
} ty_tok_norm_kind_t;

typedef struct ty_tok_norm_t {
  ty_tok_norm_kind_t kind;
  char *text; /* what is prepended, or the replacement */
  size_t text_size;
  ty_tok_regex_t pattern; /* REPLACE */
} ty_tok_norm_t;

typedef enum ty_tok_pre_kind_t {
  TY_TOK_PRE_SPLIT,
  TY_TOK_PRE_BYTE_LEVEL,
  TY_TOK_PRE_METASPACE,
} ty_tok_pre_kind_t;

typedef struct ty_tok_pre_t {
  ty_tok_pre_kind_t kind;
  ty_tok_regex_t pattern; /* SPLIT; BYTE_LEVEL with use_regex; METASPACE with split */
  bool has_pattern;
  ty_tok_split_behavior_t behavior;
  bool invert;
  bool add_prefix_space; /* BYTE_LEVEL */
  char replacement[4];   /* METASPACE, one UTF-8 character */
  size_t replacement_size;
  ty_tok_prepend_t prepend; /* METASPACE */
} ty_tok_pre_t;

typedef enum ty_tok_dec_kind_t {
  TY_TOK_DEC_BYTE_LEVEL,
  TY_TOK_DEC_REPLACE,
  TY_TOK_DEC_BYTE_FALLBACK,
  TY_TOK_DEC_FUSE,
  TY_TOK_DEC_STRIP,
  TY_TOK_DEC_METASPACE,
} ty_tok_dec_kind_t;

typedef struct ty_tok_dec_t {
  ty_tok_dec_kind_t kind;
  ty_tok_regex_t pattern; /* REPLACE */
  char *text;             /* REPLACE content */
  size_t text_size;
  char character[4]; /* STRIP content, METASPACE replacement */
  size_t character_size;
  size_t start, stop;       /* STRIP */
  ty_tok_prepend_t prepend; /* METASPACE */
} ty_tok_dec_t;

typedef struct ty_tok_added_t {
  uint32_t id;
  size_t content_offset; /* in tokenizer->added_text */
  size_t content_size;
  bool special, lstrip, rstrip, single_word, normalized;
} ty_tok_added_t;

/* A byte trie over added tokens, matched leftmost-longest. */
typedef struct ty_tok_trie_node_t {
  uint32_t first_child;
  uint32_t next_sibling;
  uint32_t added; /* added-token index ending here, or TY_TOK_NONE */
  unsigned char byte;
} ty_tok_trie_node_t;

typedef struct ty_tok_trie_t {
  ty_tok_trie_node_t *nodes; /* nodes[0] is the root */
  size_t count;
  size_t capacity;
} ty_tok_trie_t;

/* What an id stands for. */
enum {
  TY_TOK_ID_PRESENT = 1,
  TY_TOK_ID_ADDED = 2,
  TY_TOK_ID_SPECIAL = 4,
};
typedef struct ty_tok_id_t {
  const char *text; /* into vocab keys or added_text; stable after load */
  uint32_t size;
  uint8_t flags;
} ty_tok_id_t;

typedef struct ty_tok_cache_t ty_tok_cache_t;

struct ty_tokenizer_t {
  /* model */
  ty_tok_strmap_t vocab; /* token -> id */
  ty_tok_pairmap_t merges;
  /* For cutting long words (tokenizer_bpe.c): single-character tokens as
   * (code point, 0) and every pair of adjacent characters inside a token. */
  bool chunk_words;
  ty_tok_pairmap_t chars;
  ty_tok_pairmap_t bigrams;
  bool has_unk_token;
  char *unk_token; /* model.unk_token, or NULL */
  uint32_t unk_id; /* TY_TOK_NONE when there is none or it is not in the vocab */
  bool byte_fallback, fuse_unk, ignore_merges;
  uint32_t byte_ids[256]; /* "<0xHH>" ids for byte fallback, TY_TOK_NONE if absent */

  /* ids: model vocabulary and added tokens together */
  ty_tok_id_t *ids;
  uint32_t id_count;

  /* added tokens */
  ty_tok_added_t *added;
  size_t added_count;
  ty_tok_buf_t added_text;
  ty_tok_strmap_t added_by_content; /* content -> id */
  ty_tok_trie_t raw_trie;           /* matched on the original text */
  ty_tok_trie_t norm_trie;          /* matched on normalized text (normalized contents) */
  ty_tok_regex_t word_char;         /* \w, for single_word */
  ty_tok_regex_t space_char;        /* \s, for lstrip / rstrip */

  /* pipeline */
  ty_tok_norm_t *norms;
  size_t norm_count;
  ty_tok_pre_t *pres;
  size_t pre_count;
  ty_tok_dec_t *decs;
  size_t dec_count;
  bool has_decoder;
  uint32_t *prefix_ids, *suffix_ids; /* TemplateProcessing around sequence A */
  size_t prefix_count, suffix_count;

  /* GPT-2 bytes_to_unicode: the UTF-8 text of each byte and the reverse */
  char byte_char[256][2];
  uint8_t byte_char_size[256];
  int16_t char_byte[324]; /* code point -> byte, -1 when none */

  ty_tok_cache_t *cache;
};

/* Per-call scratch space of encode. */
typedef struct ty_tok_work_t {
  pcre2_match_data *match;
  ty_tok_buf_t norm;  /* the normalized text of one segment */
  ty_tok_buf_t arena; /* pre-tokenizer pieces */
  ty_tok_pieces_t segments, subsegments, pieces, next_pieces;
  ty_tok_pieces_t spans; /* match / non-match spans of a split */
  void *symbols;         /* BPE scratch, tokenizer_bpe.c */
  size_t symbol_capacity;
  void *heap;
  size_t heap_capacity;
  ty_tok_ids_t word_ids;
} ty_tok_work_t;

/* JSON fields (tokenizer_load.c). `path` names the object holding `key` in
 * error messages ("model", "pre_tokenizer.pretokenizers[1]"). An absent or
 * null field takes the fallback; a field of another type is INVALID_ARGUMENT. */
ty_status_t ty_tok_json_bool(const json_t *object, const char *key, const char *path, bool fallback,
                             bool *out);
/* *out is NULL for an absent or null field unless `required`. */
ty_status_t ty_tok_json_string(const json_t *object, const char *key, const char *path,
                               bool required, const char **out, size_t *out_size);
/* The "type" of a component object. */
ty_status_t ty_tok_json_type(const json_t *object, const char *path, const char **out_type);

/* tokenizer_pipeline.c: the components around the model. */
ty_status_t ty_tok_load_normalizer(ty_tokenizer_t *tok, const json_t *json);
ty_status_t ty_tok_load_pre_tokenizer(ty_tokenizer_t *tok, const json_t *json);
ty_status_t ty_tok_load_post_processor(ty_tokenizer_t *tok, const json_t *json);
ty_status_t ty_tok_load_decoder(ty_tokenizer_t *tok, const json_t *json);
void ty_tok_pipeline_free(ty_tokenizer_t *tok);

/* tokenizer_encode.c */
/* Appends `text` to `out` with every match of `pattern` replaced by `with`. */
ty_status_t ty_tok_replace_all(const ty_tok_regex_t *pattern, const char *with, size_t with_size,
                               pcre2_match_data *match, const char *text, size_t size,
                               ty_tok_buf_t *out);
/* The pre-tokenizers alone over `text` (no normalizer, no added tokens), as
 * HF's pre_tokenizer.pre_tokenize_str: appends the words. For tests. */
ty_status_t ty_tok_pre_tokenize(const ty_tokenizer_t *tok, const char *text, size_t size,
                                ty_tok_buf_t *out_text, ty_tok_pieces_t *out_pieces);
ty_status_t ty_tok_normalize(const ty_tokenizer_t *tok, pcre2_match_data *match, const char *text,
                             size_t size, ty_tok_buf_t *out);

/* tokenizer_encode.c */
ty_status_t ty_tok_split_spans(const ty_tok_regex_t *regex, pcre2_match_data *match,
                               const char *text, size_t size, bool invert,
                               ty_tok_split_behavior_t behavior, ty_tok_pieces_t *spans);

/* tokenizer_bpe.c */
/* Fills tok->chars and tok->bigrams and sets chunk_words; call when no
 * pre-tokenizer splits words. */
ty_status_t ty_tok_bpe_prepare_chunks(ty_tokenizer_t *tok);
ty_status_t ty_tok_cache_create(ty_tok_cache_t **out);
void ty_tok_cache_destroy(ty_tok_cache_t *cache);
/* Appends the ids of one pre-tokenized word. */
ty_status_t ty_tok_bpe_word(const ty_tokenizer_t *tok, ty_tok_work_t *work, const char *word,
                            size_t size, ty_tok_ids_t *out);
void ty_tok_bpe_work_free(ty_tok_work_t *work);

#endif /* TY_MODELS_TOKENIZER_INTERNAL_H_ */
