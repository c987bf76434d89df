/* Text from a stream of generated token ids, piece by piece, for streaming
 * clients: incremental detokenization and stop strings.
 *
 * Each push returns the text that has become final: a token's bytes may
 * end inside a UTF-8 character (byte-level and byte-fallback vocabularies
 * split characters), and text that could be the start of a stop string is
 * held back until it is known not to be one. Concatenating every piece gives
 * exactly the text of the whole sequence (cut before the first stop string),
 * as valid UTF-8: bytes that never form a character become U+FFFD, one per
 * maximal invalid subpart, as Python's errors="replace" does. One exception:
 * where the tokenizer's byte-fallback decoder would rewrite text already
 * streamed (a run of byte tokens that is not UTF-8 becomes one U+FFFD per
 * token, a valid byte at its start included), the streamed text stays and
 * the new tokens are decoded on their own.
 *
 * Decoding follows the prefix-offset scheme of Hugging Face's
 * text-generation-inference: the new text is the difference between the
 * decodes of ids[prefix:] and ids[prefix:read], so decoders that treat the
 * first token specially (SentencePiece's leading-space strip) are decoded
 * with context and each step decodes only a few ids.
 *
 * Ids the tokenizer has no token for (a model vocabulary padded past the
 * tokenizer's) make no text, as Hugging Face's decode skips them.
 *
 * Ownership: the stream keeps a pointer to the tokenizer (which must outlive
 * it) and copies the stop strings. The text a call returns belongs to the
 * stream and stays valid until the next call. Threads: one thread per
 * stream; several streams may share a tokenizer. Errors:
 * RESOURCE_EXHAUSTED. */
#ifndef TY_MODELS_TEXT_STREAM_H_
#define TY_MODELS_TEXT_STREAM_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "models/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_text_stream_t ty_text_stream_t;

/* `stops`: `stop_count` stop strings (UTF-8, NUL-terminated, non-empty).
 * `decode_flags` as ty_tokenizer_decode's (e.g. skip special tokens). */
ty_status_t ty_text_stream_create(const ty_tokenizer_t *tokenizer, uint32_t decode_flags,
                                  const char *const *stops, size_t stop_count,
                                  ty_text_stream_t **out_stream);
void ty_text_stream_destroy(ty_text_stream_t *stream);

/* Adds one generated id. *out_text / *out_size: the text that became final
 * (possibly empty). *out_stopped turns true when a stop string appeared:
 * the text returned then ends just before it, and later pushes return
 * nothing. */
ty_status_t ty_text_stream_push(ty_text_stream_t *stream, uint32_t id, const char **out_text,
                                size_t *out_size, bool *out_stopped);

/* The sequence ended: everything held back (an unfinished character
 * becomes U+FFFD; text that was waiting to be ruled out as a stop string).
 * Empty after a stop. */
ty_status_t ty_text_stream_finish(ty_text_stream_t *stream, const char **out_text,
                                  size_t *out_size);

/* Whether a stop string was found, and how many bytes of text were
 * returned in all (the offset of the next piece). */
bool ty_text_stream_stopped(const ty_text_stream_t *stream);
size_t ty_text_stream_offset(const ty_text_stream_t *stream);

/* `size` bytes as valid UTF-8 into a malloc'ed, NUL-terminated
 * *out_text (*out_size bytes): each maximal invalid subpart becomes U+FFFD.
 * With `keep_incomplete_tail`, a tail that is the start of a valid
 * character is left out and its length returned in *out_tail (else 0). */
ty_status_t ty_utf8_sanitize(const char *bytes, size_t size, bool keep_incomplete_tail,
                             char **out_text, size_t *out_size, size_t *out_tail);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_TEXT_STREAM_H_ */
