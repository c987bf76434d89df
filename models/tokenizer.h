/* Hugging Face tokenizer.json: loading, encoding and decoding for BPE models.
 *
 * Supported: byte-level BPE like GPT-2 and Llama-3 (ByteLevel and
 * Split pre-tokenizers, ByteLevel decoder) and SentencePiece-style BPE with
 * byte fallback like Llama-2 and Mistral (Prepend/Replace normalizers or the
 * Metaspace pre-tokenizer; Replace, ByteFallback, Fuse, Strip and Metaspace
 * decoders); added and special tokens; TemplateProcessing for BOS/EOS.
 * docs/formats.md ("tokenizer.json") lists what is refused and every known
 * difference from the `tokenizers` library.
 *
 * Ownership: a tokenizer owns everything it holds; arrays returned by encode
 * and decode belong to the caller, who releases them with free().
 * Threads: a loaded tokenizer is immutable except for an internal word cache
 * guarded by a lock, so encode, decode and the lookups may be called from
 * several threads at once. Destroy must not race with any other call.
 * Errors: every fallible call returns a status naming the file, the JSON field
 * or the id at fault, and leaves its outputs untouched.
 */
#ifndef TY_MODELS_TOKENIZER_H_
#define TY_MODELS_TOKENIZER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/file.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_tokenizer_t ty_tokenizer_t;

/* Flags of ty_tokenizer_encode. */
enum {
  /* Like Hugging Face's add_special_tokens=False: the post-processor adds no
   * BOS/EOS. Special tokens written in the text are still matched. */
  TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS = 1u << 0,
};

/* Flags of ty_tokenizer_decode. */
enum {
  /* Like skip_special_tokens=True: added tokens marked "special" are left
   * out of the text. */
  TY_TOKENIZER_DECODE_SKIP_SPECIAL = 1u << 0,
};

/* tokenizer.json files as read by ty_tokenizer_load_file and by anything
 * else that reads one (hal/file.h): text, capped at 256 MiB (ten times the
 * largest published tokenizer.json) unless TRAINYARD_MAX_TOKENIZER_BYTES
 * says otherwise. */
extern const ty_file_kind_t ty_tokenizer_file_kind;

/* Reads and loads a tokenizer.json file. Errors: INVALID_ARGUMENT for a
 * folder; ty_status_from_errno's code (NOT_FOUND, PERMISSION_DENIED,
 * FAILED_PRECONDITION for a path through a file, ...) when the file cannot
 * be read; RESOURCE_EXHAUSTED past the size cap; DATA_LOSS when it is not
 * JSON (or holds a NUL byte); INVALID_ARGUMENT naming the field when a
 * field is missing or wrong;
 * UNIMPLEMENTED naming the component (model type, pre-tokenizer, ...) that
 * this loader does not support. */
ty_status_t ty_tokenizer_load_file(const char *path, ty_tokenizer_t **out_tokenizer);

/* ty_tokenizer_load_file that also writes the lower-case hex SHA-256 of the
 * file's bytes (what dataset.json records as the data's tokenizer) into
 * out_sha256 (may be NULL), from the same read. */
ty_status_t ty_tokenizer_load_file_sha256(const char *path, ty_tokenizer_t **out_tokenizer,
                                          char out_sha256[65]);

/* Loads tokenizer.json text held in memory (`size` bytes, need not be
 * NUL-terminated). `name` (may be NULL) is used in error messages. The
 * buffer is not kept. Errors as ty_tokenizer_load_file. */
ty_status_t ty_tokenizer_load_json(const char *json, size_t size, const char *name,
                                   ty_tokenizer_t **out_tokenizer);

/* Releases a tokenizer. NULL is a no-op. */
void ty_tokenizer_destroy(ty_tokenizer_t *tokenizer);

/* Encodes `size` bytes of UTF-8 text into token ids, like Hugging Face's
 * Tokenizer.encode(text, add_special_tokens=...). On success *out_ids is a
 * malloc'ed array of *out_count ids (NULL when the count is 0) that the
 * caller frees. Errors: INVALID_ARGUMENT when the text is not valid UTF-8
 * (the message gives the byte offset), RESOURCE_EXHAUSTED when memory runs
 * out or a regular expression exceeds its matching limits. */
ty_status_t ty_tokenizer_encode(const ty_tokenizer_t *tokenizer, const char *text, size_t size,
                                uint32_t flags, uint32_t **out_ids, size_t *out_count);

/* Decodes ids into text bytes through the tokenizer's decoder. On success
 * *out_text is a malloc'ed buffer of *out_size bytes plus a terminating NUL
 * (the text itself may contain NUL bytes) that the caller frees.
 * Errors: INVALID_ARGUMENT naming the first id that is not in the
 * vocabulary (Hugging Face skips such ids silently). */
ty_status_t ty_tokenizer_decode(const ty_tokenizer_t *tokenizer, const uint32_t *ids, size_t count,
                                uint32_t flags, char **out_text, size_t *out_size);

/* One more than the largest id, model vocabulary and added tokens together. */
uint32_t ty_tokenizer_vocab_size(const ty_tokenizer_t *tokenizer);

/* The token text of `id` (added tokens first, then the model vocabulary), not
 * NUL-terminated, owned by the tokenizer. False when `id` has no token. */
bool ty_tokenizer_id_to_token(const ty_tokenizer_t *tokenizer, uint32_t id, const char **out_token,
                              size_t *out_size);

/* The id of a token text (added tokens first). False when there is none. */
bool ty_tokenizer_token_to_id(const ty_tokenizer_t *tokenizer, const char *token, size_t size,
                              uint32_t *out_id);

/* Whether `id` is an added token marked special. */
bool ty_tokenizer_is_special(const ty_tokenizer_t *tokenizer, uint32_t id);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_TOKENIZER_H_ */
