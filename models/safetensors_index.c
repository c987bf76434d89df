/* Model folders: model.safetensors, or model.safetensors.index.json and the
 * shards it names, opened as one set with one lookup. The index and the
 * shards must agree exactly (see ty_safetensors_open_dir). */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hal/file.h"
#include "models/safetensors.h"
#include "models/safetensors_internal.h"

#define TY_ST_INDEX_NAME "model.safetensors.index.json"
#define TY_ST_SINGLE_NAME "model.safetensors"
/* Indexes of the largest models are a few hundred kilobytes. */
static const ty_file_kind_t ty_st_index_kind = {
    .what = "safetensors index", .max_bytes = 64 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS, .skip_bom = true};

struct ty_safetensors_set_t {
  char *dir;
  char *index_path; /* NULL when not sharded */
  int64_t total_size;
  ty_safetensors_file_t **shards;
  size_t shard_count;
  const ty_safetensors_tensor_t **order;   /* shards in order, file order */
  const ty_safetensors_tensor_t **by_name; /* sorted by name */
  size_t tensor_count;
};

void ty_safetensors_set_close(ty_safetensors_set_t *set) {
  if (!set) return;
  for (size_t i = 0; i < set->shard_count; ++i) ty_safetensors_close(set->shards[i]);
  free(set->shards);
  free(set->order);
  free(set->by_name);
  free(set->index_path);
  free(set->dir);
  free(set);
}

static bool ty_st_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static int ty_st_cmp_tensor_name(const void *a, const void *b) {
  const ty_safetensors_tensor_t *const *x = a, *const *y = b;
  return strcmp((*x)->name, (*y)->name);
}

static int ty_st_cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A shard must be a file in the model folder itself. */
static bool ty_st_plain_file_name(const char *name) {
  return name[0] != '\0' && !strchr(name, '/') && !strchr(name, '\\') &&
         !strstr(name, "..");
}

/* Builds the merged arrays once every shard is open; DATA_LOSS when a name
 * is in two shards. */
static ty_status_t ty_st_set_index_tensors(ty_safetensors_set_t *set) {
  size_t n = 0;
  for (size_t s = 0; s < set->shard_count; ++s) {
    n += ty_safetensors_file_tensor_count(set->shards[s]);
  }
  set->order = calloc(n ? n : 1, sizeof(*set->order));
  set->by_name = calloc(n ? n : 1, sizeof(*set->by_name));
  if (!set->order || !set->by_name) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "out of memory indexing %zu tensors of %s", n, set->dir);
  }
  for (size_t s = 0; s < set->shard_count; ++s) {
    size_t count = ty_safetensors_file_tensor_count(set->shards[s]);
    for (size_t i = 0; i < count; ++i) {
      set->order[set->tensor_count++] = ty_safetensors_file_tensor_at(set->shards[s], i);
    }
  }
  memcpy(set->by_name, set->order, n * sizeof(*set->order));
  qsort(set->by_name, n, sizeof(*set->by_name), ty_st_cmp_tensor_name);
  for (size_t i = 1; i < n; ++i) {
    if (strcmp(set->by_name[i - 1]->name, set->by_name[i]->name) == 0) {
      return ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: tensor '" TY_ST_MSG_NAME "' is in two shards, %s "
                            "and %s",
                            set->dir, set->by_name[i]->name,
                            ty_safetensors_file_path(set->by_name[i - 1]->file),
                            ty_safetensors_file_path(set->by_name[i]->file));
    }
  }
  return TY_OK;
}

/* Parses the index, opens each distinct shard and checks that index and
 * shards agree. */
static ty_status_t ty_st_open_index(ty_safetensors_set_t *set, uint32_t flags) {
  const char *index = set->index_path;
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(index, &ty_st_index_kind, &text, &size));
  json_error_t err;
  json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &err);
  free(text);
  if (!root) {
    return ty_status_make(TY_CODE_DATA_LOSS,
                          "%s: not valid JSON: %s (line %d, column %d)", index,
                          err.text, err.line, err.column);
  }
  ty_status_t status = TY_OK;
  const char **names = NULL;
  json_t *map = json_object_get(root, "weight_map");
  json_t *meta = json_object_get(root, "metadata");
  if (!json_is_object(root) || !json_is_object(map) || json_object_size(map) == 0) {
    status = ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: not a safetensors index (expected a JSON object "
                            "with a non-empty \"weight_map\" object of tensor name "
                            "-> shard file)", index);
    goto done;
  }
  if (meta && !json_is_object(meta)) {
    status = ty_status_make(TY_CODE_DATA_LOSS, "%s: \"metadata\" is not an object", index);
    goto done;
  }
  json_t *total = meta ? json_object_get(meta, "total_size") : NULL;
  if (total && (!json_is_integer(total) || json_integer_value(total) < 0)) {
    status = ty_status_make(TY_CODE_DATA_LOSS,
                            "%s: metadata.total_size is not an integer >= 0", index);
    goto done;
  }
  set->total_size = total ? (int64_t)json_integer_value(total) : -1;

  /* The distinct shard names, sorted. */
  size_t n = json_object_size(map), unique = 0;
  names = calloc(n, sizeof(*names));
  if (!names) {
    status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s", index);
    goto done;
  }
  const char *tensor;
  json_t *value;
  json_object_foreach(map, tensor, value) {
    if (!json_is_string(value) || !ty_st_plain_file_name(json_string_value(value))) {
      status = ty_status_make(TY_CODE_DATA_LOSS,
                              "%s: tensor '" TY_ST_MSG_NAME "' maps to %s%s%s, "
                              "which is not a plain file name in the model folder "
                              "(no '/', '\\' or '..')",
                              index, tensor, json_is_string(value) ? "'" : "",
                              json_is_string(value) ? json_string_value(value) : "a non-string",
                              json_is_string(value) ? "'" : "");
      goto done;
    }
    names[unique++] = json_string_value(value);
  }
  qsort(names, unique, sizeof(*names), ty_st_cmp_str);
  size_t k = 0;
  for (size_t i = 0; i < unique; ++i) {
    if (k == 0 || strcmp(names[k - 1], names[i]) != 0) names[k++] = names[i];
  }
  set->shards = calloc(k, sizeof(*set->shards));
  if (!set->shards) {
    status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading %s", index);
    goto done;
  }
  for (size_t i = 0; i < k; ++i) {
    char *path = ty_st_path_join(set->dir, names[i]);
    if (!path) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      goto done;
    }
    if (!ty_st_exists(path)) {
      status = ty_status_make(TY_CODE_DATA_LOSS,
                              "%s names shard '%s', but %s does not exist: the "
                              "checkpoint is incomplete", index, names[i], path);
      free(path);
      goto done;
    }
    status = ty_safetensors_open_flags(path, flags, &set->shards[i]);
    free(path);
    if (status) {
      status = ty_status_annotate(status, "shard '%s' of %s", names[i], index);
      goto done;
    }
    ++set->shard_count;
  }

  /* Every weight_map entry is in its shard... */
  json_object_foreach(map, tensor, value) {
    const char *shard = json_string_value(value);
    const ty_safetensors_file_t *file = NULL;
    for (size_t i = 0; i < set->shard_count && !file; ++i) {
      if (strcmp(names[i], shard) == 0) file = set->shards[i];
    }
    if (!file || !ty_safetensors_file_find(file, tensor)) {
      status = ty_status_make(TY_CODE_DATA_LOSS,
                              "%s maps tensor '" TY_ST_MSG_NAME "' to shard '%s', "
                              "which does not contain it", index, tensor, shard);
      goto done;
    }
  }
  /* ...and every tensor of a shard is listed for that shard. */
  for (size_t i = 0; i < set->shard_count; ++i) {
    size_t count = ty_safetensors_file_tensor_count(set->shards[i]);
    for (size_t j = 0; j < count; ++j) {
      const char *name = ty_safetensors_file_tensor_at(set->shards[i], j)->name;
      json_t *listed = json_object_get(map, name);
      if (!listed) {
        status = ty_status_make(TY_CODE_DATA_LOSS,
                                "shard '%s' holds tensor '" TY_ST_MSG_NAME "', which "
                                "%s does not list", names[i], name, index);
        goto done;
      }
      if (strcmp(json_string_value(listed), names[i]) != 0) {
        status = ty_status_make(TY_CODE_DATA_LOSS,
                                "tensor '" TY_ST_MSG_NAME "' is in two shards, '%s' "
                                "and '%s' (%s names the latter)",
                                name, names[i], json_string_value(listed), index);
        goto done;
      }
    }
  }
  status = ty_st_set_index_tensors(set);
done:
  free(names);
  json_decref(root);
  return status;
}

static ty_status_t ty_st_open_single(ty_safetensors_set_t *set, const char *path,
                                     uint32_t flags) {
  set->shards = calloc(1, sizeof(*set->shards));
  if (!set->shards) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  TY_RETURN_IF_ERROR(ty_safetensors_open_flags(path, flags, &set->shards[0]));
  set->shard_count = 1;
  return ty_st_set_index_tensors(set);
}

/* Neither safetensors file: say what the folder holds instead. */
static ty_status_t ty_st_missing(const char *dir) {
  static const char *const legacy[] = {"pytorch_model.bin", "pytorch_model.bin.index.json",
                                       "model.pt", "model.ckpt"};
  for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]); ++i) {
    char *path = ty_st_path_join(dir, legacy[i]);
    if (!path) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    bool found = ty_st_exists(path);
    ty_status_t status = found ? ty_st_pickle_status(path, TY_ST_FORMAT_PICKLE_NAME) : TY_OK;
    free(path);
    if (found) return status;
  }
  return ty_status_make(TY_CODE_NOT_FOUND,
                        "%s holds neither " TY_ST_SINGLE_NAME " nor " TY_ST_INDEX_NAME
                        " (is it a Hugging Face model folder?)", dir);
}

/* <dir>/<base>.safetensors.index.json when present, else
 * <dir>/<base>.safetensors; `model`: a model folder (the messages, and the
 * conversion hints when neither exists). */
static char *ty_st_path_named(const char *dir, const char *base, const char *suffix) {
  size_t n = strlen(dir) + strlen(base) + strlen(suffix) + 2;
  char *path = malloc(n);
  if (path) snprintf(path, n, "%s/%s%s", dir, base, suffix);
  return path;
}

static ty_status_t ty_st_open_named(const char *model_dir, const char *base, uint32_t flags,
                                    bool model, ty_safetensors_set_t **out_set) {
  *out_set = NULL;
  if (!model_dir) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "model folder path is NULL");
  }
  struct stat st;
  if (stat(model_dir, &st) != 0) {
    return ty_status_from_errno(errno, "cannot open %s folder %s",
                                model ? "model" : "checkpoint", model_dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s is not a folder (for one file, use ty_safetensors_open)",
                          model_dir);
  }
  ty_safetensors_set_t *set = calloc(1, sizeof(*set));
  char *single = NULL;
  ty_status_t status = TY_OK;
  if (!set || !(set->dir = strdup(model_dir)) ||
      !(set->index_path = ty_st_path_named(model_dir, base, ".safetensors.index.json")) ||
      !(single = ty_st_path_named(model_dir, base, ".safetensors"))) {
    status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  } else if (ty_st_exists(set->index_path)) {
    status = ty_st_open_index(set, flags);
  } else {
    free(set->index_path);
    set->index_path = NULL;
    set->total_size = -1;
    status = ty_st_exists(single) ? ty_st_open_single(set, single, flags)
             : model              ? ty_st_missing(model_dir)
                                  : ty_status_make(TY_CODE_NOT_FOUND,
                                                   "%s holds neither %s.safetensors nor "
                                                   "%s.safetensors.index.json",
                                                   model_dir, base, base);
  }
  free(single);
  if (status) {
    ty_safetensors_set_close(set);
    return status;
  }
  *out_set = set;
  return TY_OK;
}

ty_status_t ty_safetensors_open_dir_flags(const char *model_dir, uint32_t flags,
                                          ty_safetensors_set_t **out_set) {
  return ty_st_open_named(model_dir, "model", flags, true, out_set);
}

ty_status_t ty_safetensors_open_set(const char *dir, const char *base, uint32_t flags,
                                    ty_safetensors_set_t **out_set) {
  return ty_st_open_named(dir, base, flags, false, out_set);
}

ty_status_t ty_safetensors_open_dir(const char *model_dir,
                                    ty_safetensors_set_t **out_set) {
  return ty_safetensors_open_dir_flags(model_dir, TY_SAFETENSORS_OPEN_DEFAULT, out_set);
}

size_t ty_safetensors_set_tensor_count(const ty_safetensors_set_t *set) {
  return set->tensor_count;
}

const ty_safetensors_tensor_t *ty_safetensors_set_tensor_at(
    const ty_safetensors_set_t *set, size_t index) {
  return index < set->tensor_count ? set->order[index] : NULL;
}

const ty_safetensors_tensor_t *ty_safetensors_set_find(const ty_safetensors_set_t *set,
                                                       const char *name) {
  size_t lo = 0, hi = set->tensor_count;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(set->by_name[mid]->name, name);
    if (c == 0) return set->by_name[mid];
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return NULL;
}

ty_status_t ty_safetensors_set_lookup(const ty_safetensors_set_t *set,
                                      const char *name,
                                      const ty_safetensors_tensor_t **out_tensor) {
  *out_tensor = ty_safetensors_set_find(set, name);
  if (*out_tensor) return TY_OK;
  return ty_status_make(TY_CODE_NOT_FOUND,
                        "%s: no tensor named '" TY_ST_MSG_NAME "' in its %zu shard%s "
                        "(%zu tensors)",
                        set->dir, name, set->shard_count, set->shard_count == 1 ? "" : "s",
                        set->tensor_count);
}

size_t ty_safetensors_set_shard_count(const ty_safetensors_set_t *set) {
  return set->shard_count;
}

const ty_safetensors_file_t *ty_safetensors_set_shard(const ty_safetensors_set_t *set,
                                                      size_t index) {
  return index < set->shard_count ? set->shards[index] : NULL;
}

bool ty_safetensors_set_is_sharded(const ty_safetensors_set_t *set) {
  return set->index_path != NULL;
}

int64_t ty_safetensors_set_total_size(const ty_safetensors_set_t *set) {
  return set->total_size;
}
