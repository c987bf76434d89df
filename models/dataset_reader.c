/* Reading token datasets: dataset.json says which shards make a split;
 * every shard is mapped read-only and its header checked against it, and
 * every row is checked (CRC-32, token range) when it is read. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hal/file.h"
#include "hal/sha256.h"
#include "models/dataset_internal.h"

typedef struct ty_ds_shard_t {
  char *path;
  const uint8_t *map;
  size_t size;
  uint64_t rows;
  uint32_t padding; /* padded targets at the end of its last row */
  uint64_t first_row; /* index in the split of its first row */
  char sha256[65];    /* from dataset.json */
} ty_ds_shard_t;

struct ty_dataset_t {
  char *dir;
  char *json_path;
  char *input_format;
  char split[8];
  uint32_t split_code;
  uint32_t seq_len, vocab_size, eos_id;
  bool loss_weights;
  char tokenizer_sha256[65];
  uint64_t stride, rows, tokens, padding;
  ty_ds_shard_t *shards;
  size_t shard_count;
};

static ty_status_t ty_ds_bad_json(const ty_dataset_t *ds, const char *field, const char *what) {
  return ty_status_make(TY_CODE_DATA_LOSS, "%s: field \"%s\" %s", ds->json_path, field, what);
}

static ty_status_t ty_bad_json_split(const ty_dataset_t *ds, const char *split) {
  char field[32];
  snprintf(field, sizeof(field), "splits.%s", split);
  return ty_ds_bad_json(ds, field, "is not an object");
}

/* An integer field in [min, max]. */
static ty_status_t ty_ds_json_uint(const ty_dataset_t *ds, const json_t *object, const char *key,
                                   const char *path, uint64_t min, uint64_t max, uint64_t *out) {
  const json_t *v = json_object_get(object, key);
  char field[128];
  snprintf(field, sizeof(field), "%s%s%s", path, *path ? "." : "", key);
  if (!v) return ty_ds_bad_json(ds, field, "is missing");
  if (!json_is_integer(v) || json_integer_value(v) < 0 ||
      (uint64_t)json_integer_value(v) < min || (uint64_t)json_integer_value(v) > max) {
    char what[96];
    snprintf(what, sizeof(what), "is not an integer from %llu to %llu", (unsigned long long)min,
             (unsigned long long)max);
    return ty_ds_bad_json(ds, field, what);
  }
  *out = (uint64_t)json_integer_value(v);
  return TY_OK;
}

static ty_status_t ty_ds_json_sha(const ty_dataset_t *ds, const json_t *object, const char *path,
                                  char out[65]) {
  const char *hex = json_string_value(json_object_get(object, "sha256"));
  uint8_t digest[32];
  if (!hex || !ty_ds_hex_decode(hex, digest, 32)) {
    char field[128];
    snprintf(field, sizeof(field), "%s.sha256", path);
    return ty_ds_bad_json(ds, field, "is not 64 lower-case hex digits");
  }
  memcpy(out, hex, 65);
  return TY_OK;
}

/* Maps one shard and checks it against what dataset.json says. */
static ty_status_t ty_ds_map_shard(ty_dataset_t *ds, size_t index, bool last,
                                   uint64_t json_rows, uint64_t json_bytes) {
  ty_ds_shard_t *sh = &ds->shards[index];
  int fd = -1;
  uint64_t size = 0;
  ty_status_t opened = ty_file_open_read(sh->path, "shard", &fd, &size);
  if (opened && ty_status_code(opened) == TY_CODE_NOT_FOUND) {
    /* dataset.json promises the shard: its absence is lost data, never
     * "no such split". */
    ty_status_free(opened);
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "the dataset %s is incomplete: shard %s of the %s split, listed in "
                          "%s, is missing",
                          ds->dir, sh->path, ds->split, ds->json_path);
  }
  if (opened) {
    return ty_status_annotate(opened, "the %s split of the dataset %s (listed in %s)", ds->split,
                              ds->dir, ds->json_path);
  }
  if (size < TY_DATASET_SHARD_HEADER_SIZE) {
    close(fd);
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: truncated: %llu bytes, shorter than the %u-byte header", sh->path,
                          (unsigned long long)size, TY_DATASET_SHARD_HEADER_SIZE);
  }
  void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  close(fd);
  if (map == MAP_FAILED) return ty_status_from_errno(err, "cannot map %s", sh->path);
  sh->map = map;
  sh->size = (size_t)size;

  ty_ds_header_t h;
  TY_RETURN_IF_ERROR(ty_ds_header_decode(sh->map, sh->path, &h));
  uint8_t prefix[8];
  uint8_t digest[32];
  ty_ds_hex_decode(ds->tokenizer_sha256, digest, 32);
  memcpy(prefix, digest, 8);
  const char *field = NULL;
  unsigned long long header_value = 0, json_value = 0;
#define TY_DS_CHECK(name, a, b)                      \
  if (!field && (uint64_t)(a) != (uint64_t)(b)) {     \
    field = name;                                     \
    header_value = (unsigned long long)(a);           \
    json_value = (unsigned long long)(b);             \
  }
  TY_DS_CHECK("seq_len", h.seq_len, ds->seq_len);
  TY_DS_CHECK("vocab_size", h.vocab_size, ds->vocab_size);
  TY_DS_CHECK("eos_id", h.eos_id, ds->eos_id);
  TY_DS_CHECK("loss weights flag", h.flags & TY_DS_FLAG_LOSS_WEIGHTS, ds->loss_weights);
  TY_DS_CHECK("row count", h.row_count, json_rows);
  TY_DS_CHECK("shard index", h.shard_index, index);
  TY_DS_CHECK("split", h.split, ds->split_code);
  TY_DS_CHECK("padding", h.padding, last ? ds->padding : 0);
#undef TY_DS_CHECK
  if (field) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: the shard header says %s %llu but %s says %llu; the shard does "
                          "not belong to this dataset",
                          sh->path, field, header_value, ds->json_path, json_value);
  }
  if (memcmp(h.tokenizer_prefix, prefix, 8) != 0) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: the shard was made with another tokenizer than %s names (SHA-256 "
                          "prefix differs); the shard does not belong to this dataset",
                          sh->path, ds->json_path);
  }
  uint64_t expected = TY_DATASET_SHARD_HEADER_SIZE + h.row_count * ds->stride;
  if (size < expected) {
    uint64_t whole = (size - TY_DATASET_SHARD_HEADER_SIZE) / ds->stride;
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: truncated: %llu bytes, but %llu rows of %llu bytes need %llu; row "
                          "%llu (row %llu of the %s split) is the first incomplete one",
                          sh->path, (unsigned long long)size, (unsigned long long)h.row_count,
                          (unsigned long long)ds->stride, (unsigned long long)expected,
                          (unsigned long long)whole,
                          (unsigned long long)(sh->first_row + whole), ds->split);
  }
  if (size > expected) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: %llu bytes after its last row (%llu rows of %llu bytes); the file "
                          "is damaged",
                          sh->path, (unsigned long long)(size - expected),
                          (unsigned long long)h.row_count, (unsigned long long)ds->stride);
  }
  if (json_bytes != size) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: %llu bytes, but %s says %llu", sh->path,
                          (unsigned long long)size, ds->json_path,
                          (unsigned long long)json_bytes);
  }
  return TY_OK;
}

/* dataset.json lists every shard with its hash: a few hundred bytes each. */
const ty_file_kind_t ty_dataset_json_file_kind = {
    .what = "dataset description", .max_bytes = 64 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS, .skip_bom = true};

/* *out_declared is false when dataset.json parses but lists no `split`. */
static ty_status_t ty_ds_load(ty_dataset_t *ds, const char *split, bool *out_declared) {
  *out_declared = true;
  struct stat st;
  if (stat(ds->dir, &st) != 0) {
    return ty_status_from_errno(errno, "cannot open the dataset folder %s", ds->dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s is a file, not a dataset folder (one made by 'trainyard data "
                          "prepare')",
                          ds->dir);
  }
  char *text = NULL;
  size_t text_size = 0;
  ty_status_t read = ty_file_read(ds->json_path, &ty_dataset_json_file_kind, &text, &text_size);
  if (read && ty_status_code(read) == TY_CODE_NOT_FOUND) {
    ty_status_free(read);
    return ty_status_make(TY_CODE_NOT_FOUND, "%s is not a trainyard dataset (no " TY_DATASET_JSON
                                             ")",
                          ds->dir);
  }
  if (read) return read;
  json_error_t error;
  json_t *root = json_loadb(text, text_size, 0, &error);
  free(text);
  if (!root) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: not valid JSON (line %d: %s)", ds->json_path,
                          error.line, error.text);
  }
  ty_status_t status = TY_OK;
  uint64_t version = 0, value = 0;
  const json_t *tok = json_object_get(root, "tokenizer");
  const json_t *splits = json_object_get(root, "splits");
  const json_t *sp = json_object_get(splits, split);
  const json_t *weights = json_object_get(root, "loss_weights");
  const char *input_format = json_string_value(json_object_get(root, "input_format"));
  status = ty_ds_json_uint(ds, root, "format_version", "", 1, UINT32_MAX, &version);
  if (!status && version > TY_DATASET_FORMAT_VERSION) {
    status = ty_status_make(TY_CODE_UNIMPLEMENTED,
                            "%s: dataset format version %llu is newer than this trainyard reads "
                            "(%u); update trainyard",
                            ds->json_path, (unsigned long long)version,
                            TY_DATASET_FORMAT_VERSION);
  }
  if (!status && !json_is_object(tok)) status = ty_ds_bad_json(ds, "tokenizer", "is missing");
  if (!status) status = ty_ds_json_sha(ds, tok, "tokenizer", ds->tokenizer_sha256);
  if (!status) status = ty_ds_json_uint(ds, tok, "vocab_size", "tokenizer", 1, UINT32_MAX, &value);
  if (!status) ds->vocab_size = (uint32_t)value;
  if (!status) {
    status = ty_ds_json_uint(ds, tok, "eos_id", "tokenizer", 0, ds->vocab_size - 1, &value);
  }
  if (!status) ds->eos_id = (uint32_t)value;
  if (!status) status = ty_ds_json_uint(ds, root, "seq_len", "", 1, 1u << 24, &value);
  if (!status) ds->seq_len = (uint32_t)value;
  if (!status && !json_is_boolean(weights)) {
    status = ty_ds_bad_json(ds, "loss_weights", "is not true or false");
  }
  if (!status && !input_format) status = ty_ds_bad_json(ds, "input_format", "is not a string");
  if (!status && !json_is_object(splits)) status = ty_ds_bad_json(ds, "splits", "is missing");
  if (!status && !sp) {
    *out_declared = false;
    status = ty_status_make(TY_CODE_NOT_FOUND, "%s declares no split \"%s\"", ds->json_path,
                            split);
  } else if (!status && !json_is_object(sp)) {
    status = ty_bad_json_split(ds, split);
  }
  if (!status) {
    ds->loss_weights = json_is_true(weights);
    ds->stride = ty_dataset_row_stride(ds->seq_len, ds->loss_weights);
    ds->input_format = strdup(input_format);
    if (!ds->input_format) status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  char path[64];
  snprintf(path, sizeof(path), "splits.%s", split);
  if (!status) status = ty_ds_json_uint(ds, sp, "rows", path, 0, UINT64_MAX >> 1, &ds->rows);
  if (!status) status = ty_ds_json_uint(ds, sp, "tokens", path, 0, UINT64_MAX >> 1, &ds->tokens);
  if (!status) status = ty_ds_json_uint(ds, sp, "padding", path, 0, ds->seq_len - 1, &ds->padding);
  const json_t *shards = json_object_get(sp, "shards");
  if (!status && !json_is_array(shards)) {
    status = ty_ds_bad_json(ds, "shards", "is not a list");
  }
  size_t count = status ? 0 : json_array_size(shards);
  if (count) {
    ds->shards = calloc(count, sizeof(*ds->shards));
    if (!ds->shards) status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  uint64_t total = 0;
  for (size_t i = 0; i < count && !status; ++i) {
    const json_t *entry = json_array_get(shards, i);
    char entry_path[96];
    snprintf(entry_path, sizeof(entry_path), "splits.%s.shards[%zu]", split, i);
    const char *file = json_string_value(json_object_get(entry, "file"));
    uint64_t rows = 0, bytes = 0;
    if (!file || !*file || strchr(file, '/') || file[0] == '.') {
      status = ty_ds_bad_json(ds, entry_path, "has no plain file name in \"file\"");
      break;
    }
    status = ty_ds_json_uint(ds, entry, "rows", entry_path, 1, UINT64_MAX >> 1, &rows);
    if (!status) {
      status = ty_ds_json_uint(ds, entry, "bytes", entry_path, 0, UINT64_MAX >> 1, &bytes);
    }
    if (!status) status = ty_ds_json_sha(ds, entry, entry_path, ds->shards[i].sha256);
    if (status) break;
    ds->shard_count = i + 1;
    ds->shards[i].path = ty_ds_path_join(ds->dir, file);
    ds->shards[i].rows = rows;
    ds->shards[i].first_row = total;
    if (!ds->shards[i].path) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      break;
    }
    status = ty_ds_map_shard(ds, i, i + 1 == count, rows, bytes);
    ds->shards[i].padding = i + 1 == count ? (uint32_t)ds->padding : 0;
    total += rows;
  }
  if (!status && total != ds->rows) {
    status = ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: split \"%s\" lists %llu rows but its shards hold %llu",
                            ds->json_path, split, (unsigned long long)ds->rows,
                            (unsigned long long)total);
  }
  json_decref(root);
  return status;
}

ty_status_t ty_dataset_open(const char *dir, const char *split, uint32_t flags,
                            ty_dataset_t **out_dataset) {
  if (!dir || !split) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "dataset: no folder or split given");
  }
  uint32_t code = strcmp(split, "train") == 0 ? TY_DATASET_SPLIT_TRAIN
                  : strcmp(split, "val") == 0 ? TY_DATASET_SPLIT_VAL
                                              : UINT32_MAX;
  if (code == UINT32_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dataset: unknown split \"%s\" (the splits are train and val)", split);
  }
  ty_dataset_t *ds = calloc(1, sizeof(*ds));
  if (!ds) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(ds->split, sizeof(ds->split), "%s", split);
  ds->split_code = code;
  ds->dir = strdup(dir);
  ds->json_path = ty_ds_path_join(dir, TY_DATASET_JSON);
  bool declared = true;
  ty_status_t status = ds->dir && ds->json_path
                           ? ty_ds_load(ds, split, &declared)
                           : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (status && !declared && (flags & TY_DATASET_OPEN_IF_DECLARED)) {
    ty_status_free(status);
    ty_dataset_close(ds);
    *out_dataset = NULL;
    return TY_OK;
  }
  if (!status && (flags & TY_DATASET_OPEN_VERIFY)) status = ty_dataset_verify(ds);
  if (status) {
    ty_dataset_close(ds);
    return status;
  }
  *out_dataset = ds;
  return TY_OK;
}

void ty_dataset_close(ty_dataset_t *ds) {
  if (!ds) return;
  for (size_t i = 0; i < ds->shard_count; ++i) {
    if (ds->shards[i].map) munmap((void *)ds->shards[i].map, ds->shards[i].size);
    free(ds->shards[i].path);
  }
  free(ds->shards);
  free(ds->dir);
  free(ds->json_path);
  free(ds->input_format);
  free(ds);
}

uint64_t ty_dataset_row_count(const ty_dataset_t *ds) { return ds->rows; }
uint32_t ty_dataset_seq_len(const ty_dataset_t *ds) { return ds->seq_len; }
uint32_t ty_dataset_vocab_size(const ty_dataset_t *ds) { return ds->vocab_size; }
uint32_t ty_dataset_eos_id(const ty_dataset_t *ds) { return ds->eos_id; }
bool ty_dataset_has_loss_weights(const ty_dataset_t *ds) { return ds->loss_weights; }
const char *ty_dataset_tokenizer_sha256(const ty_dataset_t *ds) { return ds->tokenizer_sha256; }
const char *ty_dataset_input_format(const ty_dataset_t *ds) { return ds->input_format; }
uint64_t ty_dataset_token_count(const ty_dataset_t *ds) { return ds->tokens; }

/* Checks one mapped row; `tokens`/`weights` (may be NULL) receive it. */
static ty_status_t ty_ds_check_row(const ty_dataset_t *ds, const ty_ds_shard_t *sh, uint64_t local,
                                   uint32_t *tokens, uint8_t *weights) {
  const uint8_t *p = sh->map + TY_DATASET_SHARD_HEADER_SIZE + local * ds->stride;
  size_t crc_at = (size_t)ds->stride - 4;
  uint32_t crc = ty_ds_crc32(0, p, crc_at), stored = ty_ds_get_u32(p + crc_at);
  if (crc != stored) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: row %llu (row %llu of the %s split) is damaged (CRC-32 %08x, "
                          "stored %08x)",
                          sh->path, (unsigned long long)local,
                          (unsigned long long)(sh->first_row + local), ds->split, crc, stored);
  }
  size_t t = ds->seq_len;
  for (size_t i = 0; i <= t; ++i) {
    uint32_t token = ty_ds_get_u32(p + 4 * i);
    if (token >= ds->vocab_size) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: row %llu (row %llu of the %s split), position %zu: token %u is "
                            "not below vocab_size %u",
                            sh->path, (unsigned long long)local,
                            (unsigned long long)(sh->first_row + local), ds->split, i, token,
                            ds->vocab_size);
    }
    if (tokens) tokens[i] = token;
  }
  /* The padding of a split's last row: EOS, never trained on. */
  size_t pad = local + 1 == sh->rows ? sh->padding : 0;
  for (size_t i = t + 1 - pad; i <= t; ++i) {
    if (ty_ds_get_u32(p + 4 * i) != ds->eos_id) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: row %llu (row %llu of the %s split), position %zu: padding "
                            "that is not EOS",
                            sh->path, (unsigned long long)local,
                            (unsigned long long)(sh->first_row + local), ds->split, i);
    }
  }
  if (ds->loss_weights) {
    const uint8_t *w = p + 4 * (t + 1);
    for (size_t i = t - pad; i < t; ++i) {
      if (w[i] != 0) {
        return ty_status_make(TY_CODE_DATA_LOSS,
                              "%s: row %llu (row %llu of the %s split), target %zu: padding "
                              "with loss weight %u",
                              sh->path, (unsigned long long)local,
                              (unsigned long long)(sh->first_row + local), ds->split, i, w[i]);
      }
    }
    for (size_t i = 0; i < t; ++i) {
      if (w[i] > 1) {
        return ty_status_make(TY_CODE_DATA_LOSS,
                              "%s: row %llu (row %llu of the %s split), target %zu: loss weight "
                              "%u is not 0 or 1",
                              sh->path, (unsigned long long)local,
                              (unsigned long long)(sh->first_row + local), ds->split, i, w[i]);
      }
    }
    if (weights) memcpy(weights, w, t);
  } else if (weights) {
    memset(weights, 1, t - pad);
    memset(weights + t - pad, 0, pad);
  }
  return TY_OK;
}

ty_status_t ty_dataset_read_row(const ty_dataset_t *ds, uint64_t index, uint32_t *tokens,
                                uint8_t *weights) {
  if (!ds || !tokens) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "dataset: read_row needs a token buffer");
  }
  if (index >= ds->rows) {
    return ty_status_make(TY_CODE_OUT_OF_RANGE, "%s: row %llu of the %s split: it has %llu rows",
                          ds->dir, (unsigned long long)index, ds->split,
                          (unsigned long long)ds->rows);
  }
  size_t lo = 0, hi = ds->shard_count; /* the last shard whose first_row <= index */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (ds->shards[mid].first_row <= index) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const ty_ds_shard_t *sh = &ds->shards[lo];
  return ty_ds_check_row(ds, sh, index - sh->first_row, tokens, weights);
}

ty_status_t ty_dataset_verify(const ty_dataset_t *ds) {
  for (size_t i = 0; i < ds->shard_count; ++i) {
    const ty_ds_shard_t *sh = &ds->shards[i];
    char hex[65];
    if (!ty_sha256_hex(sh->map, sh->size, hex)) {
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing %s", sh->path);
    }
    for (uint64_t r = 0; r < sh->rows; ++r) {
      TY_RETURN_IF_ERROR(ty_ds_check_row(ds, sh, r, NULL, NULL));
    }
    if (strcmp(hex, sh->sha256) != 0) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: SHA-256 %s differs from %s's %s; the file was changed after it "
                            "was written",
                            sh->path, hex, ds->json_path, sh->sha256);
    }
  }
  return TY_OK;
}
