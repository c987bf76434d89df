/* Input readers of `trainyard data`: files and folders in, documents out.
 *
 * Formats (docs/formats.md, "Token shards"):
 *   text     each file is one document
 *   lines    each non-blank line is a document
 *   jsonl    one JSON object per line; a string field (default "text")
 *   chat     one JSON object per line: {"messages": [{"role", "content"}...]}
 *   fortune  fortune(6) files: entries separated by lines holding only '%'
 *
 * Errors are statuses naming the file and line. Not thread-safe. */
#ifndef TY_APPS_TRAINYARD_DATA_INPUTS_H_
#define TY_APPS_TRAINYARD_DATA_INPUTS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "models/chat.h"

typedef enum ty_data_format_t {
  TY_DATA_FORMAT_TEXT,
  TY_DATA_FORMAT_LINES,
  TY_DATA_FORMAT_JSONL,
  TY_DATA_FORMAT_CHAT,
  TY_DATA_FORMAT_FORTUNE,
  TY_DATA_FORMAT_IDS, /* pre-tokenized: a JSON list of ids (or {"ids": [...]}, optionally
                         with "weights": [0|1, ...] per id) per line */
} ty_data_format_t;

/* "text|lines|jsonl|chat|fortune" -> format; false for anything else. */
bool ty_data_format_parse(const char *name, ty_data_format_t *out);
const char *ty_data_format_name(ty_data_format_t format);

typedef struct ty_data_doc_t {
  const char *text; /* the document text (NULL for chat) */
  size_t size;
  const ty_chat_message_t *messages; /* chat only */
  size_t message_count;
  const int64_t *ids; /* ids only */
  size_t id_count;
  const uint8_t *weights; /* ids only: {"ids": [...], "weights": [...]}, or NULL */
  const char *raw; /* what the split hash reads: the text, or a chat's line */
  size_t raw_size;
  const char *file;
  size_t line;     /* 1-based line where it starts; 0 for a whole file */
  uint64_t offset; /* bytes of the file read once this document is done */
} ty_data_doc_t;

typedef ty_status_t (*ty_data_doc_fn)(void *user, const ty_data_doc_t *doc);

/* The files named by `paths`: files as given, folders as their regular
 * files (not hidden, not symbolic links, not fortune's *.dat indexes),
 * sorted by name, one level deep. NOT_FOUND for a missing path,
 * INVALID_ARGUMENT for an empty folder. *out_files (strdup'ed) and
 * *out_sizes belong to the caller: ty_data_files_free. */
ty_status_t ty_data_files_expand(const char *const *paths, size_t path_count,
                                 char ***out_files, uint64_t **out_sizes, size_t *out_count);
void ty_data_files_free(char **files, uint64_t *sizes, size_t count);

/* Reads one file and calls `fn` for each document in order; stops at the
 * first error, annotated with file and line. */
ty_status_t ty_data_read_file(const char *path, ty_data_format_t format, const char *text_field,
                              ty_data_doc_fn fn, void *user);

#endif /* TY_APPS_TRAINYARD_DATA_INPUTS_H_ */
