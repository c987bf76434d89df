/* The safetensors writer: files laid out byte for byte as the reference
 * implementation lays them out, written atomically (temporary file, fsync,
 * rename, fsync of the folder), and transformers-style sharded folders. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models/safetensors.h"
#include "models/safetensors_internal.h"

#define TY_ST_INDEX_NAME "model.safetensors.index.json"
#define TY_ST_SINGLE_NAME "model.safetensors"

typedef struct ty_st_entry_t {
  char *name;
  const ty_st_dtype_row_t *row;
  uint32_t rank;
  int64_t dims[TY_TENSOR_MAX_RANK];
  const void *data; /* borrowed */
  uint64_t byte_size;
} ty_st_entry_t;

struct ty_safetensors_writer_t {
  ty_st_entry_t *entries; /* in the order added */
  size_t count, capacity;
  json_t *metadata;
};

ty_status_t ty_safetensors_writer_create(ty_safetensors_writer_t **out_writer) {
  *out_writer = NULL;
  ty_safetensors_writer_t *w = calloc(1, sizeof(*w));
  if (!w || !(w->metadata = json_object()) ||
      json_object_set_new(w->metadata, "format", json_string("pt")) != 0) {
    if (w) json_decref(w->metadata);
    free(w);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory creating a writer");
  }
  *out_writer = w;
  return TY_OK;
}

void ty_safetensors_writer_destroy(ty_safetensors_writer_t *writer) {
  if (!writer) return;
  for (size_t i = 0; i < writer->count; ++i) free(writer->entries[i].name);
  free(writer->entries);
  json_decref(writer->metadata);
  free(writer);
}

ty_status_t ty_safetensors_writer_set_metadata(ty_safetensors_writer_t *writer,
                                               const char *key, const char *value) {
  json_t *probe = key ? json_string(key) : NULL; /* jansson checks UTF-8 */
  if (!probe) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "metadata key is NULL or not UTF-8");
  }
  json_decref(probe);
  json_t *v = json_string(value);
  if (!v) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "metadata value for '" TY_ST_MSG_NAME "' is NULL or not UTF-8", key);
  }
  if (json_object_set_new(writer->metadata, key, v) != 0) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory setting metadata");
  }
  return TY_OK;
}

static ty_status_t ty_st_writer_add(ty_safetensors_writer_t *w, const char *name,
                                    const ty_st_dtype_row_t *row, uint32_t rank,
                                    const int64_t *dims, const void *data,
                                    uint64_t byte_size) {
  if (!name || !name[0] || strcmp(name, "__metadata__") == 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor name '%s' is empty or reserved", name ? name : "(null)");
  }
  json_t *probe = json_string(name); /* jansson checks UTF-8 */
  if (!probe) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor name '" TY_ST_MSG_NAME "' is not valid UTF-8", name);
  }
  json_decref(probe);
  if (!row) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor '" TY_ST_MSG_NAME "': invalid dtype", name);
  }
  if (rank > TY_TENSOR_MAX_RANK || (rank && !dims)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor '" TY_ST_MSG_NAME "': rank %u is above %d or dims "
                          "are missing", name, rank, TY_TENSOR_MAX_RANK);
  }
  uint64_t count = 1;
  bool overflow = false;
  for (uint32_t i = 0; i < rank; ++i) {
    if (dims[i] < 0) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "tensor '" TY_ST_MSG_NAME "': dim %u is negative (%lld)",
                            name, i, (long long)dims[i]);
    }
    if (dims[i] && count > UINT64_MAX / (uint64_t)dims[i] / row->size) overflow = true;
    count *= (uint64_t)dims[i];
  }
  if (count == 0) overflow = false;
  if (overflow || count * row->size != byte_size || (byte_size && !data)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "tensor '" TY_ST_MSG_NAME "': %s with this shape needs "
                          "%llu bytes, but %llu were given%s",
                          name, row->name, (unsigned long long)(count * row->size),
                          (unsigned long long)byte_size,
                          byte_size && !data ? " (data is NULL)" : "");
  }
  for (size_t i = 0; i < w->count; ++i) {
    if (strcmp(w->entries[i].name, name) == 0) {
      return ty_status_make(TY_CODE_ALREADY_EXISTS,
                            "tensor '" TY_ST_MSG_NAME "' was already added", name);
    }
  }
  if (w->count == w->capacity) {
    size_t cap = w->capacity ? 2 * w->capacity : 64;
    ty_st_entry_t *grown = realloc(w->entries, cap * sizeof(*grown));
    if (!grown) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    w->entries = grown;
    w->capacity = cap;
  }
  ty_st_entry_t *e = &w->entries[w->count];
  memset(e, 0, sizeof(*e));
  if (!(e->name = strdup(name))) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  e->row = row;
  e->rank = rank;
  if (rank) memcpy(e->dims, dims, rank * sizeof(*dims));
  e->data = data;
  e->byte_size = byte_size;
  ++w->count;
  return TY_OK;
}

ty_status_t ty_safetensors_writer_add(ty_safetensors_writer_t *writer,
                                      const char *name, ty_dtype_t dtype,
                                      uint32_t rank, const int64_t *dims,
                                      const void *data, uint64_t byte_size) {
  return ty_st_writer_add(writer, name, ty_st_dtype_row(dtype, false), rank, dims,
                          data, byte_size);
}

ty_status_t ty_safetensors_writer_add_bool(ty_safetensors_writer_t *writer,
                                           const char *name, uint32_t rank,
                                           const int64_t *dims, const uint8_t *data,
                                           uint64_t byte_size) {
  for (uint64_t i = 0; data && i < byte_size; ++i) {
    if (data[i] > 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "bool tensor '" TY_ST_MSG_NAME "': byte %llu is %u, not 0 or 1",
                            name ? name : "(null)", (unsigned long long)i, data[i]);
    }
  }
  return ty_st_writer_add(writer, name, ty_st_dtype_row(TY_DTYPE_U8, true), rank, dims,
                          data, byte_size);
}

/* ---- one file ---------------------------------------------------------------- */

/* The reference implementation's data order: larger dtypes first (so every
 * tensor is aligned to its element size), then by name. */
static int ty_st_cmp_layout(const void *a, const void *b) {
  const ty_st_entry_t *x = *(const ty_st_entry_t *const *)a;
  const ty_st_entry_t *y = *(const ty_st_entry_t *const *)b;
  if (x->row->order != y->row->order) return x->row->order > y->row->order ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int ty_st_cmp_cstr(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The header for `entries` (already in layout order): "__metadata__" with
 * sorted keys first, then the tensors in data order, each as {dtype, shape,
 * data_offsets}; padded with spaces to a multiple of 8 bytes. Every new
 * jansson value goes straight into a *_set_new / *_append_new, which take
 * it over even when they fail, so an out-of-memory path leaks nothing. */
static ty_status_t ty_st_build_header(const ty_safetensors_writer_t *w,
                                      ty_st_entry_t *const *entries, size_t n,
                                      char **out_text, size_t *out_size) {
  *out_text = NULL;
  *out_size = 0;
  json_t *root = json_object();
  bool ok = root != NULL;
  size_t meta_count = json_object_size(w->metadata);
  if (ok && meta_count) {
    json_t *meta = json_object();
    ok = json_object_set_new(root, "__metadata__", meta) == 0;
    const char **keys = ok ? calloc(meta_count, sizeof(*keys)) : NULL;
    ok = ok && keys;
    if (ok) {
      size_t k = 0;
      const char *key;
      json_t *value;
      json_object_foreach(w->metadata, key, value) keys[k++] = key;
      qsort(keys, k, sizeof(*keys), ty_st_cmp_cstr);
      for (size_t i = 0; i < k && ok; ++i) {
        ok = json_object_set(meta, keys[i], json_object_get(w->metadata, keys[i])) == 0;
      }
    }
    free(keys);
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < n && ok; ++i) {
    const ty_st_entry_t *e = entries[i];
    json_t *t = json_object();
    if (json_object_set_new(root, e->name, t) != 0 ||
        json_object_set_new(t, "dtype", json_string(e->row->name)) != 0) {
      ok = false;
      break;
    }
    json_t *shape = json_array();
    if (json_object_set_new(t, "shape", shape) != 0) {
      ok = false;
      break;
    }
    for (uint32_t d = 0; d < e->rank && ok; ++d) {
      ok = json_array_append_new(shape, json_integer(e->dims[d])) == 0;
    }
    json_t *offsets = json_array();
    if (!ok || json_object_set_new(t, "data_offsets", offsets) != 0) {
      ok = false;
      break;
    }
    ok = json_array_append_new(offsets, json_integer((json_int_t)offset)) == 0;
    offset += e->byte_size;
    ok = ok && json_array_append_new(offsets, json_integer((json_int_t)offset)) == 0;
  }
  char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory building a header");
  size_t len = strlen(text);
  size_t padded = (len + 7) / 8 * 8;
  if (padded > TY_SAFETENSORS_MAX_HEADER_BYTES) {
    free(text);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "the header of %zu tensors would take %zu bytes, above "
                          "the %llu-byte limit readers accept",
                          n, padded, (unsigned long long)TY_SAFETENSORS_MAX_HEADER_BYTES);
  }
  char *grown = realloc(text, padded + 1);
  if (!grown) {
    free(text);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory building a header");
  }
  memset(grown + len, ' ', padded - len);
  grown[padded] = '\0';
  *out_text = grown;
  *out_size = padded;
  return TY_OK;
}

/* ---- atomic files ----------------------------------------------------------- */

typedef struct ty_st_atomic_t {
  int fd;
  char *tmp;
  const char *path;
} ty_st_atomic_t;

static ty_status_t ty_st_atomic_begin(const char *path, ty_st_atomic_t *a) {
  a->fd = -1;
  a->path = path;
  size_t n = strlen(path) + 32;
  if (!(a->tmp = malloc(n))) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(a->tmp, n, "%s.tmp.%ld", path, (long)getpid());
  a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (a->fd < 0) {
    ty_status_t status = ty_status_from_errno(errno, "cannot write %s (creating %s)", path, a->tmp);
    free(a->tmp);
    a->tmp = NULL;
    return status;
  }
  return TY_OK;
}

static ty_status_t ty_st_atomic_write(ty_st_atomic_t *a, const void *data, uint64_t size) {
  const uint8_t *p = data;
  while (size > 0) {
    size_t chunk = size > (1u << 30) ? (1u << 30) : (size_t)size;
    ssize_t n = write(a->fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ty_status_from_errno(errno, "cannot write %s", a->tmp);
    }
    p += n;
    size -= (uint64_t)n;
  }
  return TY_OK;
}

static void ty_st_atomic_abort(ty_st_atomic_t *a) {
  if (a->fd >= 0) close(a->fd);
  if (a->tmp) unlink(a->tmp);
  free(a->tmp);
  a->fd = -1;
  a->tmp = NULL;
}

static ty_status_t ty_st_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ty_status_from_errno(errno, "cannot open folder %s to sync it", dir);
  int rc = fsync(fd);
  int err = errno;
  close(fd);
  /* Some file systems cannot sync a folder; the rename itself is done. */
  if (rc != 0 && err != EINVAL && err != ENOTSUP) {
    return ty_status_from_errno(err, "cannot sync folder %s", dir);
  }
  return TY_OK;
}

static ty_status_t ty_st_fsync_dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash) return ty_st_fsync_dir(".");
  if (slash == path) return ty_st_fsync_dir("/");
  char *dir = strndup(path, (size_t)(slash - path));
  if (!dir) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t status = ty_st_fsync_dir(dir);
  free(dir);
  return status;
}

/* fsync, close, rename over the target, fsync the folder. Aborts on error. */
static ty_status_t ty_st_atomic_commit(ty_st_atomic_t *a) {
  ty_status_t status = TY_OK;
  if (fsync(a->fd) != 0) {
    status = ty_status_from_errno(errno, "cannot sync %s", a->tmp);
  } else {
    int rc = close(a->fd);
    a->fd = -1;
    if (rc != 0) {
      status = ty_status_from_errno(errno, "cannot close %s", a->tmp);
    } else if (rename(a->tmp, a->path) != 0) {
      status = ty_status_from_errno(errno, "cannot rename %s to %s", a->tmp, a->path);
    }
  }
  if (status) {
    ty_st_atomic_abort(a);
    return status;
  }
  free(a->tmp);
  a->tmp = NULL;
  return ty_st_fsync_dir_of(a->path);
}

/* Writes `entries` (pointers, any order) as one safetensors file. */
static ty_status_t ty_st_write_entries(const ty_safetensors_writer_t *w,
                                       ty_st_entry_t **entries, size_t n,
                                       const char *path) {
  qsort(entries, n, sizeof(*entries), ty_st_cmp_layout);
  char *header = NULL;
  size_t header_size = 0;
  TY_RETURN_IF_ERROR(ty_st_build_header(w, entries, n, &header, &header_size));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = (uint8_t)((uint64_t)header_size >> (8 * i));
  ty_st_atomic_t a;
  ty_status_t status = ty_st_atomic_begin(path, &a);
  if (!status) status = ty_st_atomic_write(&a, len, sizeof(len));
  if (!status) status = ty_st_atomic_write(&a, header, header_size);
  for (size_t i = 0; i < n && !status; ++i) {
    status = ty_st_atomic_write(&a, entries[i]->data, entries[i]->byte_size);
  }
  free(header);
  if (status) {
    ty_st_atomic_abort(&a);
    return status;
  }
  return ty_st_atomic_commit(&a);
}

ty_status_t ty_safetensors_writer_write_file(const ty_safetensors_writer_t *writer,
                                             const char *path) {
  ty_st_entry_t **entries = malloc((writer->count ? writer->count : 1) * sizeof(*entries));
  if (!entries) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < writer->count; ++i) entries[i] = &writer->entries[i];
  ty_status_t status = ty_st_write_entries(writer, entries, writer->count, path);
  free(entries);
  return status;
}

/* ---- sharded folders ---------------------------------------------------------- */

static void ty_st_shard_name(size_t index, size_t count, char *buf, size_t cap) {
  snprintf(buf, cap, "model-%05zu-of-%05zu.safetensors", index + 1, count);
}

/* True for model-<digits>-of-<digits>.safetensors; *out_index is 0-based. */
static bool ty_st_parse_shard_name(const char *name, size_t *out_index, size_t *out_count) {
  unsigned long long i = 0, n = 0;
  int end = 0;
  if (sscanf(name, "model-%llu-of-%llu.safetensors%n", &i, &n, &end) != 2 ||
      name[end] != '\0' || i == 0) {
    return false;
  }
  *out_index = (size_t)(i - 1);
  *out_count = (size_t)n;
  return true;
}

/* Removes the checkpoint files of an earlier save that a save of
 * `shard_count` shards (1: model.safetensors) does not use. */
static ty_status_t ty_st_remove_stale(const char *dir, size_t shard_count) {
  if (shard_count <= 1) {
    /* The index goes first: while it exists, readers follow it to the old
     * shards, which must therefore stay until it is gone. */
    char *index = ty_st_path_join(dir, TY_ST_INDEX_NAME);
    if (!index) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    int rc = unlink(index);
    ty_status_t status = rc != 0 && errno != ENOENT
        ? ty_status_from_errno(errno, "saved, but cannot remove the stale %s", index)
        : TY_OK;
    free(index);
    TY_RETURN_IF_ERROR(status);
  }
  DIR *d = opendir(dir);
  if (!d) return ty_status_from_errno(errno, "cannot list %s", dir);
  ty_status_t status = TY_OK;
  struct dirent *ent;
  char expected[64];
  while (!status && (ent = readdir(d)) != NULL) {
    const char *name = ent->d_name;
    size_t index, count;
    bool stale;
    if (strcmp(name, TY_ST_SINGLE_NAME) == 0) {
      stale = shard_count > 1;
    } else if (strcmp(name, TY_ST_INDEX_NAME) == 0) {
      stale = shard_count <= 1;
    } else if (ty_st_parse_shard_name(name, &index, &count)) {
      ty_st_shard_name(index, count, expected, sizeof(expected));
      stale = shard_count <= 1 || count != shard_count || index >= count ||
              strcmp(expected, name) != 0;
    } else {
      continue;
    }
    if (!stale) continue;
    char *path = ty_st_path_join(dir, name);
    if (!path) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    } else if (unlink(path) != 0 && errno != ENOENT) {
      status = ty_status_from_errno(errno, "saved, but cannot remove the stale %s", path);
    }
    free(path);
  }
  closedir(d);
  TY_RETURN_IF_ERROR(status);
  return ty_st_fsync_dir(dir);
}

static ty_status_t ty_st_write_index(const ty_safetensors_writer_t *w,
                                     const size_t *shard_of, size_t shard_count,
                                     const char *path) {
  json_t *root = json_object();
  json_t *meta = json_object();
  json_t *map = json_object();
  uint64_t total = 0;
  for (size_t i = 0; i < w->count; ++i) total += w->entries[i].byte_size;
  bool ok = json_object_set_new(root, "metadata", meta) == 0 &&
            json_object_set_new(root, "weight_map", map) == 0 &&
            json_object_set_new(meta, "total_size", json_integer((json_int_t)total)) == 0;
  char name[64];
  for (size_t i = 0; i < w->count && ok; ++i) {
    ty_st_shard_name(shard_of[i], shard_count, name, sizeof(name));
    ok = json_object_set_new(map, w->entries[i].name, json_string(name)) == 0;
  }
  /* As transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n". */
  char *text = ok ? json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_ENSURE_ASCII)
                  : NULL;
  json_decref(root);
  if (!text) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory building %s", path);
  ty_st_atomic_t a;
  ty_status_t status = ty_st_atomic_begin(path, &a);
  if (!status) status = ty_st_atomic_write(&a, text, strlen(text));
  if (!status) status = ty_st_atomic_write(&a, "\n", 1);
  free(text);
  if (status) {
    ty_st_atomic_abort(&a);
    return status;
  }
  return ty_st_atomic_commit(&a);
}

/* huggingface_hub's split_torch_state_dict_into_shards: tensors in order; a
 * tensor above the limit is a shard of its own (numbered when it is met);
 * the current shard is closed (and numbered) when the next tensor would
 * take it above the limit. Fills shard_of (0-based) and returns the count. */
static size_t ty_st_plan_shards(const ty_safetensors_writer_t *w, uint64_t max_bytes,
                                size_t *shard_of, size_t *group_rank) {
  const size_t none = SIZE_MAX;
  size_t groups = 0, closed = 0, current = none;
  uint64_t current_size = 0;
  for (size_t i = 0; i < w->count; ++i) {
    uint64_t size = w->entries[i].byte_size;
    if (max_bytes && size > max_bytes) {
      shard_of[i] = groups;
      group_rank[groups++] = closed++;
      continue;
    }
    if (current != none && max_bytes && current_size + size > max_bytes) {
      group_rank[current] = closed++;
      current = none;
    }
    if (current == none) {
      current = groups++;
      current_size = 0;
    }
    shard_of[i] = current;
    current_size += size;
  }
  if (current != none) group_rank[current] = closed++;
  for (size_t i = 0; i < w->count; ++i) shard_of[i] = group_rank[shard_of[i]];
  return closed;
}

ty_status_t ty_safetensors_writer_write_dir(const ty_safetensors_writer_t *writer,
                                            const char *model_dir,
                                            uint64_t max_shard_bytes) {
  size_t n = writer->count ? writer->count : 1;
  size_t *shard_of = calloc(n, sizeof(*shard_of));
  size_t *group_rank = calloc(n, sizeof(*group_rank));
  ty_st_entry_t **entries = calloc(n, sizeof(*entries));
  char *path = NULL;
  ty_status_t status = TY_OK;
  if (!shard_of || !group_rank || !entries) {
    status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  size_t shards = ty_st_plan_shards(writer, max_shard_bytes, shard_of, group_rank);
  if (shards <= 1) {
    if (!(path = ty_st_path_join(model_dir, TY_ST_SINGLE_NAME))) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    status = ty_safetensors_writer_write_file(writer, path);
  } else {
    char name[64];
    for (size_t s = 0; s < shards && !status; ++s) {
      size_t k = 0;
      for (size_t i = 0; i < writer->count; ++i) {
        if (shard_of[i] == s) entries[k++] = &writer->entries[i];
      }
      ty_st_shard_name(s, shards, name, sizeof(name));
      free(path);
      if (!(path = ty_st_path_join(model_dir, name))) {
        status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
      }
      status = ty_st_write_entries(writer, entries, k, path);
    }
    if (status) goto done;
    free(path);
    if (!(path = ty_st_path_join(model_dir, TY_ST_INDEX_NAME))) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    status = ty_st_write_index(writer, shard_of, shards, path);
  }
  if (!status) status = ty_st_remove_stale(model_dir, shards);
done:
  free(path);
  free(entries);
  free(group_rank);
  free(shard_of);
  return status;
}
