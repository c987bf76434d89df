/* Writing token datasets: documents are packed into each split's stream and
 * cut into overlapping rows as they arrive, rows go straight to shard files
 * in "<dir>.tmp.<pid>", and finish renames that folder into place. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/dataset_internal.h"

typedef struct ty_ds_shard_info_t {
  char file[32];
  uint64_t rows;
  uint64_t bytes;
  char sha256[65];
} ty_ds_shard_info_t;

typedef struct ty_ds_split_writer_t {
  int fd; /* the open shard, or -1 */
  char *path;
  uint32_t next_index;
  uint64_t shard_rows;
  uint32_t padding; /* of the last row, once finish pads it */
  uint8_t *out; /* write buffer */
  size_t out_fill;
  /* The row being filled: tokens[0..fill) and, for each, its weight as a
   * target (weights[0] belongs to the previous row). */
  uint32_t *tokens;
  uint8_t *weights;
  size_t fill;
  bool started;
  ty_dataset_split_stats_t stats;
  ty_ds_shard_info_t *shards;
  size_t shard_capacity;
} ty_ds_split_writer_t;

struct ty_dataset_writer_t {
  char *dir, *tmp_dir;
  char *tokenizer_sha256, *created_by, *input_format, *chat_template, *prepare_json;
  uint32_t seq_len, vocab_size, eos_id;
  bool loss_weights, overwrite, finished;
  uint8_t tokenizer_prefix[8];
  uint64_t stride, rows_per_shard;
  uint8_t *row; /* one encoded row */
  ty_ds_split_writer_t splits[TY_DATASET_SPLIT_COUNT];
};

enum { TY_DS_OUT_BUFFER = 1 << 20 };

static ty_status_t ty_ds_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing a dataset");
}

/* Removes a flat folder and the files in it. Best effort. */
static void ty_ds_remove_folder(const char *dir) {
  DIR *d = opendir(dir);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      char *path = ty_ds_path_join(dir, e->d_name);
      if (path) unlink(path);
      free(path);
    }
    closedir(d);
  }
  rmdir(dir);
}

/* Whether `dir` may become the dataset: absent or an empty folder (*replace
 * false), or a folder holding a dataset.json with `overwrite` (*replace
 * true). */
static ty_status_t ty_ds_check_target(const char *dir, bool overwrite, bool *out_replace) {
  *out_replace = false;
  struct stat st;
  if (lstat(dir, &st) != 0) {
    if (errno == ENOENT) return TY_OK;
    return ty_status_from_errno(errno, "cannot inspect %s", dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return ty_status_make(TY_CODE_ALREADY_EXISTS,
                          "%s exists and is not a folder; choose another output folder", dir);
  }
  DIR *d = opendir(dir);
  if (!d) return ty_status_from_errno(errno, "cannot read folder %s", dir);
  bool empty = true, has_json = false;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    empty = false;
    if (strcmp(e->d_name, TY_DATASET_JSON) == 0) has_json = true;
  }
  closedir(d);
  if (empty) return TY_OK;
  if (!has_json) {
    return ty_status_make(TY_CODE_ALREADY_EXISTS,
                          "%s is not empty and holds no dataset (no " TY_DATASET_JSON
                          "); it is never replaced; choose another output folder",
                          dir);
  }
  if (!overwrite) {
    return ty_status_make(TY_CODE_ALREADY_EXISTS,
                          "%s already holds a dataset; pass --force to replace it", dir);
  }
  *out_replace = true;
  return TY_OK;
}

static char *ty_ds_strdup_or_empty(const char *s) { return strdup(s ? s : ""); }

ty_status_t ty_dataset_writer_create(const ty_dataset_writer_options_t *o,
                                     ty_dataset_writer_t **out_writer) {
  if (!o || !o->dir || !*o->dir) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "dataset writer: no output folder");
  }
  if (o->seq_len == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "dataset writer: seq_len must be at least 1");
  }
  if (o->eos_id >= o->vocab_size) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dataset writer: eos_id %u is not below vocab_size %u", o->eos_id,
                          o->vocab_size);
  }
  uint8_t prefix[8], digest[32];
  if (!o->tokenizer_sha256 || !ty_ds_hex_decode(o->tokenizer_sha256, digest, 32)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dataset writer: tokenizer_sha256 must be 64 lower-case hex digits");
  }
  memcpy(prefix, digest, 8);
  uint64_t stride = ty_dataset_row_stride(o->seq_len, o->loss_weights);
  if (stride == 0 || o->seq_len > (1u << 24)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "dataset writer: seq_len %u is too large",
                          o->seq_len);
  }
  bool replace = false;
  TY_RETURN_IF_ERROR(ty_ds_check_target(o->dir, o->overwrite, &replace));

  ty_dataset_writer_t *w = calloc(1, sizeof(*w));
  if (!w) return ty_ds_oom();
  for (int s = 0; s < TY_DATASET_SPLIT_COUNT; ++s) w->splits[s].fd = -1;
  size_t dir_len = strlen(o->dir);
  while (dir_len > 1 && o->dir[dir_len - 1] == '/') --dir_len;
  w->dir = strndup(o->dir, dir_len);
  w->tmp_dir = malloc(dir_len + 32);
  w->tokenizer_sha256 = strdup(o->tokenizer_sha256);
  w->created_by = ty_ds_strdup_or_empty(o->created_by);
  w->input_format = ty_ds_strdup_or_empty(o->input_format);
  w->chat_template = o->chat_template ? strdup(o->chat_template) : NULL;
  w->prepare_json = o->prepare_json ? strdup(o->prepare_json) : NULL;
  w->seq_len = o->seq_len;
  w->vocab_size = o->vocab_size;
  w->eos_id = o->eos_id;
  w->loss_weights = o->loss_weights;
  w->overwrite = o->overwrite;
  memcpy(w->tokenizer_prefix, prefix, 8);
  w->stride = stride;
  w->rows_per_shard = o->rows_per_shard ? o->rows_per_shard : ((128u << 20) + stride - 1) / stride;
  w->row = malloc(stride);
  bool ok = w->dir && w->tmp_dir && w->tokenizer_sha256 && w->created_by && w->input_format &&
            (w->chat_template || !o->chat_template) && (w->prepare_json || !o->prepare_json) &&
            w->row;
  for (int s = 0; ok && s < TY_DATASET_SPLIT_COUNT; ++s) {
    ty_ds_split_writer_t *sw = &w->splits[s];
    sw->out = malloc(TY_DS_OUT_BUFFER);
    sw->tokens = malloc(((size_t)o->seq_len + 1) * sizeof(uint32_t));
    sw->weights = malloc((size_t)o->seq_len + 1);
    ok = sw->out && sw->tokens && sw->weights;
  }
  if (!ok) {
    ty_dataset_writer_destroy(w);
    return ty_ds_oom();
  }
  snprintf(w->tmp_dir, dir_len + 32, "%s.tmp.%ld", w->dir, (long)getpid());
  ty_ds_remove_folder(w->tmp_dir); /* a leftover of an earlier process with our pid */
  if (mkdir(w->tmp_dir, 0777) != 0) {
    ty_status_t status = ty_status_from_errno(errno, "cannot create the dataset folder %s (as %s)", w->dir, w->tmp_dir);
    free(w->tmp_dir);
    w->tmp_dir = NULL;
    ty_dataset_writer_destroy(w);
    return status;
  }
  *out_writer = w;
  return TY_OK;
}

/* ---- shards ---- */

static ty_status_t ty_ds_write_all(int fd, const void *data, size_t size, const char *path) {
  const uint8_t *p = data;
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ty_status_from_errno(errno, "cannot write %s", path);
    }
    p += n;
    size -= (size_t)n;
  }
  return TY_OK;
}

static ty_status_t ty_ds_flush(ty_ds_split_writer_t *sw) {
  ty_status_t status = ty_ds_write_all(sw->fd, sw->out, sw->out_fill, sw->path);
  sw->out_fill = 0;
  return status;
}

static ty_status_t ty_ds_open_shard(ty_dataset_writer_t *w, ty_dataset_split_t split) {
  ty_ds_split_writer_t *sw = &w->splits[split];
  if (sw->stats.shards == sw->shard_capacity) {
    size_t capacity = sw->shard_capacity ? sw->shard_capacity * 2 : 4;
    ty_ds_shard_info_t *grown = realloc(sw->shards, capacity * sizeof(*grown));
    if (!grown) return ty_ds_oom();
    sw->shards = grown;
    sw->shard_capacity = capacity;
  }
  ty_ds_shard_info_t *info = &sw->shards[sw->stats.shards];
  memset(info, 0, sizeof(*info));
  snprintf(info->file, sizeof(info->file), "%s-%05u.tyds", ty_dataset_split_name(split),
           sw->next_index);
  sw->path = ty_ds_path_join(w->tmp_dir, info->file);
  if (!sw->path) return ty_ds_oom();
  sw->fd = open(sw->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (sw->fd < 0) return ty_status_from_errno(errno, "cannot create %s", sw->path);
  sw->stats.shards++;
  sw->shard_rows = 0;
  /* The header is written last, when the row count is known. */
  memset(sw->out, 0, TY_DATASET_SHARD_HEADER_SIZE);
  sw->out_fill = TY_DATASET_SHARD_HEADER_SIZE;
  return TY_OK;
}

static ty_status_t ty_ds_close_shard(ty_dataset_writer_t *w, ty_dataset_split_t split) {
  ty_ds_split_writer_t *sw = &w->splits[split];
  ty_ds_shard_info_t *info = &sw->shards[sw->stats.shards - 1];
  TY_RETURN_IF_ERROR(ty_ds_flush(sw));
  ty_ds_header_t h = {
      .version = TY_DATASET_FORMAT_VERSION,
      .header_size = TY_DATASET_SHARD_HEADER_SIZE,
      .seq_len = w->seq_len,
      .vocab_size = w->vocab_size,
      .eos_id = w->eos_id,
      .flags = w->loss_weights ? TY_DS_FLAG_LOSS_WEIGHTS : 0,
      .row_count = sw->shard_rows,
      .padding = sw->padding,
      .shard_index = sw->next_index,
      .split = (uint32_t)split,
  };
  memcpy(h.tokenizer_prefix, w->tokenizer_prefix, 8);
  uint8_t header[TY_DATASET_SHARD_HEADER_SIZE];
  ty_ds_header_encode(&h, header);
  if (pwrite(sw->fd, header, sizeof(header), 0) != (ssize_t)sizeof(header)) {
    return ty_status_from_errno(errno ? errno : EIO, "cannot write the header of %s", sw->path);
  }
  if (fsync(sw->fd) != 0) return ty_status_from_errno(errno, "cannot sync %s", sw->path);
  int rc = close(sw->fd);
  sw->fd = -1;
  if (rc != 0) return ty_status_from_errno(errno, "cannot close %s", sw->path);
  info->rows = sw->shard_rows;
  info->bytes = TY_DATASET_SHARD_HEADER_SIZE + sw->shard_rows * w->stride;
  /* Hashed as it lies on disk, which also reads back what was written. */
  TY_RETURN_IF_ERROR(ty_ds_sha256_file(sw->path, info->sha256));
  free(sw->path);
  sw->path = NULL;
  sw->next_index++;
  return TY_OK;
}

/* Encodes the full row buffer of `split` and starts the next row with its
 * last token. */
static ty_status_t ty_ds_emit_row(ty_dataset_writer_t *w, ty_dataset_split_t split) {
  ty_ds_split_writer_t *sw = &w->splits[split];
  if (sw->fd < 0) TY_RETURN_IF_ERROR(ty_ds_open_shard(w, split));
  uint8_t *p = w->row;
  size_t t = w->seq_len;
  for (size_t i = 0; i <= t; ++i) ty_ds_put_u32(p + 4 * i, sw->tokens[i]);
  size_t used = 4 * (t + 1);
  if (w->loss_weights) {
    memcpy(p + used, sw->weights + 1, t);
    used += t;
  }
  size_t crc_at = (size_t)w->stride - 4;
  memset(p + used, 0, crc_at - used);
  ty_ds_put_u32(p + crc_at, ty_ds_crc32(0, p, crc_at));
  if (sw->out_fill + w->stride > TY_DS_OUT_BUFFER) TY_RETURN_IF_ERROR(ty_ds_flush(sw));
  if (w->stride > TY_DS_OUT_BUFFER) {
    TY_RETURN_IF_ERROR(ty_ds_write_all(sw->fd, p, (size_t)w->stride, sw->path));
  } else {
    memcpy(sw->out + sw->out_fill, p, (size_t)w->stride);
    sw->out_fill += (size_t)w->stride;
  }
  sw->shard_rows++;
  sw->stats.rows++;
  sw->tokens[0] = sw->tokens[t];
  sw->weights[0] = sw->weights[t];
  sw->fill = 1;
  if (sw->shard_rows == w->rows_per_shard) TY_RETURN_IF_ERROR(ty_ds_close_shard(w, split));
  return TY_OK;
}

static ty_status_t ty_ds_push(ty_dataset_writer_t *w, ty_dataset_split_t split, uint32_t token,
                              uint8_t weight) {
  ty_ds_split_writer_t *sw = &w->splits[split];
  sw->tokens[sw->fill] = token;
  sw->weights[sw->fill] = weight;
  sw->fill++;
  sw->stats.tokens++;
  if (sw->fill == (size_t)w->seq_len + 1) return ty_ds_emit_row(w, split);
  return TY_OK;
}

ty_status_t ty_dataset_writer_add_document(ty_dataset_writer_t *w, ty_dataset_split_t split,
                                           const uint32_t *tokens, const uint8_t *weights,
                                           size_t count) {
  if (!w || w->finished || (unsigned)split >= TY_DATASET_SPLIT_COUNT) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dataset writer: no writer, a finished one, or an unknown split");
  }
  if (weights && !w->loss_weights) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "dataset writer: weights given but the dataset has no loss weights");
  }
  ty_ds_split_writer_t *sw = &w->splits[split];
  uint64_t doc = sw->stats.documents;
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] >= w->vocab_size) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "dataset writer: %s document %llu, position %zu: token %u is not "
                            "below vocab_size %u",
                            ty_dataset_split_name(split), (unsigned long long)doc, i, tokens[i],
                            w->vocab_size);
    }
    if (weights && weights[i] > 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "dataset writer: %s document %llu, position %zu: weight %u is not 0 "
                            "or 1",
                            ty_dataset_split_name(split), (unsigned long long)doc, i, weights[i]);
    }
  }
  if (!sw->started) {
    /* The stream starts with EOS, so a document's first token is a target
     * too; stream[0] itself never is. */
    sw->started = true;
    TY_RETURN_IF_ERROR(ty_ds_push(w, split, w->eos_id, 0));
  }
  for (size_t i = 0; i < count; ++i) {
    TY_RETURN_IF_ERROR(ty_ds_push(w, split, tokens[i], weights ? weights[i] : 1));
  }
  TY_RETURN_IF_ERROR(ty_ds_push(w, split, w->eos_id, weights ? 0 : 1));
  sw->stats.documents++;
  return TY_OK;
}

void ty_dataset_writer_stats(const ty_dataset_writer_t *w, ty_dataset_split_t split,
                             ty_dataset_split_stats_t *out_stats) {
  memset(out_stats, 0, sizeof(*out_stats));
  if (w && (unsigned)split < TY_DATASET_SPLIT_COUNT) *out_stats = w->splits[split].stats;
}

/* ---- finish ---- */

static json_t *ty_ds_split_json(const ty_ds_split_writer_t *sw) {
  json_t *shards = json_array();
  for (uint64_t i = 0; shards && i < sw->stats.shards; ++i) {
    const ty_ds_shard_info_t *s = &sw->shards[i];
    json_array_append_new(shards, json_pack("{s:s, s:I, s:I, s:s}", "file", s->file, "rows",
                                            (json_int_t)s->rows, "bytes", (json_int_t)s->bytes,
                                            "sha256", s->sha256));
  }
  return json_pack("{s:I, s:I, s:I, s:I, s:o*}", "documents", (json_int_t)sw->stats.documents,
                   "tokens", (json_int_t)sw->stats.tokens, "rows", (json_int_t)sw->stats.rows,
                   "padding", (json_int_t)sw->stats.padding, "shards", shards);
}

static ty_status_t ty_ds_write_json(const ty_dataset_writer_t *w) {
  json_t *prepare = NULL;
  if (w->prepare_json) {
    json_error_t error;
    prepare = json_loads(w->prepare_json, 0, &error);
    if (!json_is_object(prepare)) {
      json_decref(prepare);
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "dataset writer: prepare_json is not a JSON object");
    }
  }
  json_t *splits = json_object();
  for (int s = 0; splits && s < TY_DATASET_SPLIT_COUNT; ++s) {
    json_object_set_new(splits, ty_dataset_split_name((ty_dataset_split_t)s),
                        ty_ds_split_json(&w->splits[s]));
  }
  json_t *root = json_pack(
      "{s:s, s:i, s:s, s:{s:s, s:I, s:I}, s:I, s:s, s:s*, s:b, s:{s:i, s:I}, s:o*}", "format",
      "trainyard token dataset", "format_version", (int)TY_DATASET_FORMAT_VERSION, "created_by",
      w->created_by, "tokenizer", "sha256", w->tokenizer_sha256, "vocab_size",
      (json_int_t)w->vocab_size, "eos_id", (json_int_t)w->eos_id, "seq_len",
      (json_int_t)w->seq_len, "input_format", w->input_format, "chat_template", w->chat_template,
      "loss_weights", (int)w->loss_weights, "shard", "header_bytes",
      (int)TY_DATASET_SHARD_HEADER_SIZE, "row_stride", (json_int_t)w->stride, "splits", splits);
  if (root && prepare) json_object_set_new(root, "prepare", prepare);
  if (!root) json_decref(prepare);
  char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  if (!text) return ty_ds_oom();
  char *path = ty_ds_path_join(w->tmp_dir, TY_DATASET_JSON);
  ty_status_t status = TY_OK;
  int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666) : -1;
  if (!path) {
    status = ty_ds_oom();
  } else if (fd < 0) {
    status = ty_status_from_errno(errno, "cannot create %s", path);
  } else {
    size_t size = strlen(text);
    text[size] = '\n'; /* the NUL becomes the final newline */
    status = ty_ds_write_all(fd, text, size + 1, path);
    if (!status && fsync(fd) != 0) status = ty_status_from_errno(errno, "cannot sync %s", path);
    if (close(fd) != 0 && !status) status = ty_status_from_errno(errno, "cannot close %s", path);
  }
  free(path);
  free(text);
  return status;
}

static ty_status_t ty_ds_parent_sync(const char *dir) {
  const char *slash = strrchr(dir, '/');
  if (!slash) return ty_ds_fsync_dir(".");
  if (slash == dir) return ty_ds_fsync_dir("/");
  char *parent = strndup(dir, (size_t)(slash - dir));
  if (!parent) return ty_ds_oom();
  ty_status_t status = ty_ds_fsync_dir(parent);
  free(parent);
  return status;
}

/* Renames the finished temporary folder to the target, moving an older
 * dataset aside first and deleting it only once the new one is in place. */
static ty_status_t ty_ds_install(ty_dataset_writer_t *w) {
  bool replace = false;
  TY_RETURN_IF_ERROR(ty_ds_check_target(w->dir, w->overwrite, &replace));
  char *old = NULL;
  if (replace) {
    size_t n = strlen(w->dir) + 32;
    old = malloc(n);
    if (!old) return ty_ds_oom();
    snprintf(old, n, "%s.old.%ld", w->dir, (long)getpid());
    ty_ds_remove_folder(old);
    if (rename(w->dir, old) != 0) {
      ty_status_t status = ty_status_from_errno(errno, "cannot move %s aside", w->dir);
      free(old);
      return status;
    }
  }
  /* rename(2) replaces an empty folder. */
  if (rename(w->tmp_dir, w->dir) != 0) {
    ty_status_t status =
        ty_status_from_errno(errno, "cannot rename %s to %s", w->tmp_dir, w->dir);
    if (old && rename(old, w->dir) != 0) {
      status = ty_status_annotate(status, "the previous dataset is left at %s", old);
    }
    free(old);
    return status;
  }
  if (old) ty_ds_remove_folder(old);
  free(old);
  return ty_ds_parent_sync(w->dir);
}

ty_status_t ty_dataset_writer_finish(ty_dataset_writer_t *w) {
  if (!w || w->finished) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION, "dataset writer: already finished");
  }
  for (int s = 0; s < TY_DATASET_SPLIT_COUNT; ++s) {
    ty_ds_split_writer_t *sw = &w->splits[s];
    /* Targets left over: pad the last row with EOS that is not trained on. */
    if (sw->fill > 1) {
      while (sw->fill <= w->seq_len) {
        sw->tokens[sw->fill] = w->eos_id;
        sw->weights[sw->fill] = 0;
        sw->fill++;
        sw->stats.padding++;
      }
      sw->padding = (uint32_t)sw->stats.padding;
      TY_RETURN_IF_ERROR(ty_ds_emit_row(w, (ty_dataset_split_t)s));
    }
    if (sw->fd >= 0) TY_RETURN_IF_ERROR(ty_ds_close_shard(w, (ty_dataset_split_t)s));
  }
  const ty_ds_split_writer_t *train = &w->splits[TY_DATASET_SPLIT_TRAIN];
  if (train->stats.rows == 0) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "no training rows: the train split received %llu documents and no "
                          "tokens; give more input (or a smaller validation fraction)",
                          (unsigned long long)train->stats.documents);
  }
  TY_RETURN_IF_ERROR(ty_ds_write_json(w));
  TY_RETURN_IF_ERROR(ty_ds_fsync_dir(w->tmp_dir));
  TY_RETURN_IF_ERROR(ty_ds_install(w));
  w->finished = true;
  return TY_OK;
}

void ty_dataset_writer_destroy(ty_dataset_writer_t *w) {
  if (!w) return;
  for (int s = 0; s < TY_DATASET_SPLIT_COUNT; ++s) {
    ty_ds_split_writer_t *sw = &w->splits[s];
    if (sw->fd >= 0) close(sw->fd);
    free(sw->path);
    free(sw->out);
    free(sw->tokens);
    free(sw->weights);
    free(sw->shards);
  }
  if (!w->finished && w->tmp_dir) ty_ds_remove_folder(w->tmp_dir);
  free(w->dir);
  free(w->tmp_dir);
  free(w->tokenizer_sha256);
  free(w->created_by);
  free(w->input_format);
  free(w->chat_template);
  free(w->prepare_json);
  free(w->row);
  free(w);
}
