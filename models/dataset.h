/* Token datasets: a folder of fixed-length token rows ("token shards") and a
 * dataset.json that says how they were made, for training. docs/formats.md
 * ("Token shards") specifies the bytes.
 *
 * A split ("train", "val") is one token stream: EOS, then every document of
 * the split followed by EOS. The stream is cut into rows of seq_len + 1
 * tokens; consecutive rows overlap by one token (row i holds
 * stream[i*T .. i*T+T], T = seq_len), so inputs are row[0..T-1] and targets
 * row[1..T], and every stream token after the first is a target exactly
 * once. The last row is padded with EOS whose loss weight is 0. With loss
 * weights, each target also has a weight 0 or 1 (chat data: 1 only on what
 * the assistant says).
 *
 * Reading: ty_dataset_open maps the shards of one split and checks their
 * headers against dataset.json; ty_dataset_read_row checks each row it reads
 * (CRC-32, token range). Writing: ty_dataset_writer_* packs documents into a
 * temporary folder beside the target and renames it into place at the end,
 * so a failed or interrupted run never leaves a half-written dataset.
 *
 * Ownership: objects are released with their destroy/close call; strings
 * returned by getters belong to the object. Threads: a dataset opened for
 * reading is immutable, so ty_dataset_read_row and the getters may be called
 * from several threads at once; a writer must be used by one thread at a
 * time. Errors: every fallible call returns a status naming the folder, the
 * file and the row at fault (DATA_LOSS for damaged or incomplete data,
 * INVALID_ARGUMENT for bad arguments, NOT_FOUND for a missing dataset or an
 * undeclared split) and leaves its outputs untouched. */
#ifndef TY_MODELS_DATASET_H_
#define TY_MODELS_DATASET_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/file.h"
#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_DATASET_FORMAT_VERSION 1u
#define TY_DATASET_SHARD_MAGIC "TYDSHARD"
#define TY_DATASET_SHARD_HEADER_SIZE 64u
#define TY_DATASET_JSON "dataset.json"

/* How dataset.json is read (its size cap and checks): for anyone else who
 * reads it whole, as the rank agreement does. */
extern const ty_file_kind_t ty_dataset_json_file_kind;

typedef enum ty_dataset_split_t {
  TY_DATASET_SPLIT_TRAIN = 0,
  TY_DATASET_SPLIT_VAL = 1,
  TY_DATASET_SPLIT_COUNT = 2,
} ty_dataset_split_t;

/* "train" or "val"; NULL for anything else. */
const char *ty_dataset_split_name(ty_dataset_split_t split);

/* Bytes one row takes in a shard: the tokens, the weights when present,
 * zero padding to a multiple of 4, and the row's CRC-32. 0 on overflow. */
uint64_t ty_dataset_row_stride(uint32_t seq_len, bool loss_weights);

/* Which split a document goes to, from its bytes alone: a 64-bit hash of
 * (seed, text) compared with val_fraction, so the answer does not depend on
 * the order of the inputs or on what else is in them, and equal documents
 * land in the same split. val_fraction 0 is always train. */
ty_dataset_split_t ty_dataset_assign_split(uint64_t seed, double val_fraction, const char *text,
                                           size_t size);

/* ---- reading ---- */

typedef struct ty_dataset_t ty_dataset_t;

enum {
  /* Also reads every byte of the split at open: the SHA-256 of each shard
   * against dataset.json and every row's CRC and tokens. */
  TY_DATASET_OPEN_VERIFY = 1u << 0,
  /* An optional split: when dataset.json declares no such split, open
   * succeeds with *out_dataset = NULL. Only that: a declared split whose
   * shard is missing or unreadable is still an error. This is how a caller
   * asks "is there a val split?"; never infer it from an error code. */
  TY_DATASET_OPEN_IF_DECLARED = 1u << 1,
};

/* Opens split `split` ("train", "val") of the dataset folder `dir`: reads
 * dataset.json, maps every shard of the split and checks its size and header
 * against dataset.json. A split listed with no rows opens with a row count
 * of 0. Errors: NOT_FOUND (no folder, no dataset.json, a split dataset.json
 * does not declare, unless TY_DATASET_OPEN_IF_DECLARED); DATA_LOSS naming the
 * file (and row) for anything damaged or inconsistent, a shard listed in
 * dataset.json that is missing included (the dataset is incomplete);
 * FAILED_PRECONDITION for a shard or dataset.json that is a folder;
 * PERMISSION_DENIED for one that cannot be read; UNIMPLEMENTED for a newer
 * format version. */
ty_status_t ty_dataset_open(const char *dir, const char *split, uint32_t flags,
                            ty_dataset_t **out_dataset);
/* Unmaps and releases. NULL is a no-op. Must not race with other calls. */
void ty_dataset_close(ty_dataset_t *dataset);

uint64_t ty_dataset_row_count(const ty_dataset_t *dataset);
uint32_t ty_dataset_seq_len(const ty_dataset_t *dataset);
uint32_t ty_dataset_vocab_size(const ty_dataset_t *dataset);
uint32_t ty_dataset_eos_id(const ty_dataset_t *dataset);
bool ty_dataset_has_loss_weights(const ty_dataset_t *dataset);
/* Lower-case hex SHA-256 of the tokenizer.json bytes the data was made
 * with (64 characters). */
const char *ty_dataset_tokenizer_sha256(const ty_dataset_t *dataset);
/* dataset.json's "input_format" ("text", "jsonl", "chat", ...). */
const char *ty_dataset_input_format(const ty_dataset_t *dataset);
/* Number of stream tokens of the split (documents and EOS separators). */
uint64_t ty_dataset_token_count(const ty_dataset_t *dataset);

/* Copies row `index` out: seq_len + 1 tokens into `tokens` and seq_len
 * target weights (0 or 1) into `weights` (may be NULL). Without stored
 * weights every target weighs 1 except the EOS padding of the split's last
 * row, which weighs 0. The row's CRC-32, tokens and padding are checked
 * first.
 * Errors: OUT_OF_RANGE for an index >= the row count; DATA_LOSS naming the
 * shard file and the row for a CRC mismatch, a token >= vocab_size or a
 * weight other than 0 and 1. Thread-safe. */
ty_status_t ty_dataset_read_row(const ty_dataset_t *dataset, uint64_t index, uint32_t *tokens,
                                uint8_t *weights);

/* What TY_DATASET_OPEN_VERIFY does, on an open dataset. */
ty_status_t ty_dataset_verify(const ty_dataset_t *dataset);

/* ---- writing ---- */

typedef struct ty_dataset_writer_t ty_dataset_writer_t;

typedef struct ty_dataset_writer_options_t {
  const char *dir;              /* the dataset folder to create */
  uint32_t seq_len;             /* T >= 1 */
  uint32_t vocab_size;          /* every token must be below it */
  uint32_t eos_id;              /* < vocab_size */
  const char *tokenizer_sha256; /* 64 hex digits (of the tokenizer.json bytes) */
  const char *created_by;       /* e.g. "trainyard 0.1.0" */
  const char *input_format;     /* recorded in dataset.json */
  const char *chat_template;    /* recorded when not NULL (e.g. "chatml") */
  bool loss_weights;            /* rows carry per-target weights */
  /* Replace `dir` if it already holds a dataset (a dataset.json). A folder
   * that is not empty and holds no dataset.json is never replaced. */
  bool overwrite;
  uint64_t rows_per_shard; /* 0: about 128 MiB of rows per shard */
  /* A JSON object recorded under "prepare" in dataset.json (inputs,
   * options); NULL for none. */
  const char *prepare_json;
} ty_dataset_writer_options_t;

/* Checks the options and creates the temporary folder "<dir>.tmp.<pid>".
 * Errors: INVALID_ARGUMENT for bad options; ALREADY_EXISTS when `dir` is not
 * empty and may not be replaced; the errno's code when the folder cannot be
 * made. */
ty_status_t ty_dataset_writer_create(const ty_dataset_writer_options_t *options,
                                     ty_dataset_writer_t **out_writer);

/* Appends one document to `split`'s stream: its tokens, then EOS. With
 * `weights` == NULL every token and the EOS are trained on (weight 1); with
 * weights (0 or 1 per token, needs loss_weights) the EOS gets weight 0, as
 * chat templates end turns with their own marker. An empty document adds
 * only the EOS. Errors: INVALID_ARGUMENT naming the document and position of
 * a token >= vocab_size or a weight other than 0/1; the errno's code when a
 * shard cannot be written. */
ty_status_t ty_dataset_writer_add_document(ty_dataset_writer_t *writer, ty_dataset_split_t split,
                                           const uint32_t *tokens, const uint8_t *weights,
                                           size_t count);

/* Counts of one split so far (rows include the padded last row only after
 * finish). */
typedef struct ty_dataset_split_stats_t {
  uint64_t documents;
  uint64_t tokens;  /* stream tokens: document tokens and EOS separators */
  uint64_t rows;
  uint64_t padding; /* EOS added to fill the last row */
  uint64_t shards;
} ty_dataset_split_stats_t;

void ty_dataset_writer_stats(const ty_dataset_writer_t *writer, ty_dataset_split_t split,
                             ty_dataset_split_stats_t *out_stats);

/* Pads and writes the last rows, writes dataset.json, syncs everything and
 * renames the temporary folder to `dir` (replacing an older dataset there
 * when `overwrite`). Errors: FAILED_PRECONDITION when the train split has no
 * rows; ALREADY_EXISTS as in create; I/O errors naming the file. On error
 * nothing is left at `dir` that was not there before. Call once. */
ty_status_t ty_dataset_writer_finish(ty_dataset_writer_t *writer);

/* Releases the writer; removes the temporary folder unless finish
 * succeeded. NULL is a no-op. */
void ty_dataset_writer_destroy(ty_dataset_writer_t *writer);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_DATASET_H_ */
