/* A byte-level BPE trainer (GPT-2 style) that writes Hugging Face
 * tokenizer.json files.
 *
 * Text is split into words exactly as the written tokenizer will split it
 * (ByteLevel pre-tokenizer with the GPT-2 pattern, no prefix space), each
 * word becomes a sequence of its bytes, and the most frequent adjacent pair
 * is merged into a new token until the vocabulary is full or no pair occurs
 * min_frequency times. Ties go to the pair with the smaller (left, right)
 * ids, so the result depends only on the multiset of words, never on the
 * order of the input. Pair counts are updated incrementally over a table of
 * distinct words and their frequencies; a max-heap with lazy deletion picks
 * the next pair.
 *
 * Ids: 0-255 are the bytes (token text in GPT-2's bytes_to_unicode
 * alphabet), then the merges in the order they were learned, then the
 * special tokens in the order given (added tokens, special, not normalized).
 *
 * Ownership: the JSON text returned belongs to the caller (free()).
 * Threads: one trainer, one thread at a time. Errors: INVALID_ARGUMENT for
 * bad options or text that is not UTF-8 (with the byte offset),
 * RESOURCE_EXHAUSTED when memory runs out. */
#ifndef TY_MODELS_BPE_TRAINER_H_
#define TY_MODELS_BPE_TRAINER_H_

#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_tokenizer_trainer_t ty_tokenizer_trainer_t;

typedef struct ty_tokenizer_trainer_options_t {
  /* The whole vocabulary: 256 bytes + merges + special tokens. */
  uint32_t vocab_size;
  /* Pairs seen fewer times are never merged; 0 means 2. */
  uint32_t min_frequency;
  const char *const *special_tokens; /* NUL-terminated UTF-8, distinct, non-empty */
  size_t special_count;
} ty_tokenizer_trainer_options_t;

typedef struct ty_tokenizer_trainer_stats_t {
  uint64_t bytes;          /* text added */
  uint64_t words;          /* pre-tokenized words */
  uint64_t distinct_words;
  uint32_t merges;         /* learned so far */
  uint32_t vocab_size;     /* of the result: bytes, merges, specials */
} ty_tokenizer_trainer_stats_t;

ty_status_t ty_tokenizer_trainer_create(const ty_tokenizer_trainer_options_t *options,
                                        ty_tokenizer_trainer_t **out_trainer);
void ty_tokenizer_trainer_destroy(ty_tokenizer_trainer_t *trainer);

/* Counts the words of one text (a document; pre-tokenization does not
 * cross texts). Not after train. */
ty_status_t ty_tokenizer_trainer_add_text(ty_tokenizer_trainer_t *trainer, const char *text,
                                          size_t size);

/* Called now and then during training with the merges learned so far and
 * the most there can be; may be NULL. */
typedef void (*ty_tokenizer_trainer_progress_fn)(void *user, uint32_t merges, uint32_t target);

/* Learns the merges. Call once, after the last add_text. */
ty_status_t ty_tokenizer_trainer_train(ty_tokenizer_trainer_t *trainer,
                                       ty_tokenizer_trainer_progress_fn progress, void *user);

void ty_tokenizer_trainer_stats(const ty_tokenizer_trainer_t *trainer,
                                ty_tokenizer_trainer_stats_t *out_stats);

/* The trained tokenizer as tokenizer.json text (NUL-terminated, *out_size
 * bytes without the NUL). */
ty_status_t ty_tokenizer_trainer_to_json(const ty_tokenizer_trainer_t *trainer, char **out_json,
                                         size_t *out_size);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_BPE_TRAINER_H_ */
