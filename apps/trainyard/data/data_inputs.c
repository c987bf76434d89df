/* Input readers of `trainyard data` (data_inputs.h): each file is mapped
 * read-only (a pipe or device is read, up to a cap) and cut into documents
 * by its format. */
#include "data_inputs.h"

#include <dirent.h>
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
#include "models/json_input.h"

static const char *const ty_data_format_names[] = {"text", "lines", "jsonl", "chat", "fortune",
                                                   "ids"};

bool ty_data_format_parse(const char *name, ty_data_format_t *out) {
  for (size_t i = 0; i < sizeof(ty_data_format_names) / sizeof(ty_data_format_names[0]); ++i) {
    if (strcmp(name, ty_data_format_names[i]) == 0) {
      *out = (ty_data_format_t)i;
      return true;
    }
  }
  return false;
}

const char *ty_data_format_name(ty_data_format_t format) {
  size_t count = sizeof(ty_data_format_names) / sizeof(ty_data_format_names[0]);
  return (size_t)format < count ? ty_data_format_names[format] : "?";
}

/* Inputs are text in every format. Files are mapped, so only pipes and
 * devices, which are read into memory, meet the cap. */
static const ty_file_kind_t ty_data_input_kind = {
    .what = "input",
    .max_bytes = 4 * TY_GIB,
    .limit_env = "TRAINYARD_MAX_INPUT_BYTES",
    .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT,
};

static ty_status_t ty_data_oom(void) {
  return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading the inputs");
}

static ty_status_t ty_data_errno(int err, const char *what, const char *path) {
  return ty_status_from_errno(err, "cannot %s %s", what, path);
}

/* ---- file lists ---- */

typedef struct ty_data_list_t {
  char **files;
  uint64_t *sizes;
  size_t count, capacity;
} ty_data_list_t;

static ty_status_t ty_data_list_push(ty_data_list_t *list, const char *path, uint64_t size) {
  if (list->count == list->capacity) {
    size_t capacity = list->capacity ? list->capacity * 2 : 16;
    char **files = realloc(list->files, capacity * sizeof(char *));
    if (files) list->files = files;
    uint64_t *sizes = files ? realloc(list->sizes, capacity * sizeof(uint64_t)) : NULL;
    if (!sizes) return ty_data_oom();
    list->sizes = sizes;
    list->capacity = capacity;
  }
  char *copy = strdup(path);
  if (!copy) return ty_data_oom();
  list->files[list->count] = copy;
  list->sizes[list->count] = size;
  list->count++;
  return TY_OK;
}

static int ty_data_cmp_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static ty_status_t ty_data_expand_folder(const char *dir, ty_data_list_t *list) {
  DIR *d = opendir(dir);
  if (!d) return ty_data_errno(errno, "read folder", dir);
  char **names = NULL;
  size_t count = 0, capacity = 0;
  ty_status_t status = TY_OK;
  struct dirent *e;
  while (!status && (e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || (n > 4 && strcmp(e->d_name + n - 4, ".dat") == 0)) continue;
    if (count == capacity) {
      capacity = capacity ? capacity * 2 : 32;
      char **grown = realloc(names, capacity * sizeof(char *));
      if (!grown) {
        status = ty_data_oom();
        break;
      }
      names = grown;
    }
    names[count] = strdup(e->d_name);
    if (!names[count]) status = ty_data_oom();
    else ++count;
  }
  closedir(d);
  if (count) qsort(names, count, sizeof(char *), ty_data_cmp_names);
  size_t before = list->count;
  for (size_t i = 0; i < count && !status; ++i) {
    size_t size = strlen(dir) + strlen(names[i]) + 2;
    char *path = malloc(size);
    if (!path) {
      status = ty_data_oom();
      break;
    }
    snprintf(path, size, "%s/%s", dir, names[i]);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
      status = ty_data_list_push(list, path, (uint64_t)st.st_size);
    }
    free(path);
  }
  for (size_t i = 0; i < count; ++i) free(names[i]);
  free(names);
  if (!status && list->count == before) {
    status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "folder %s holds no input files (hidden files, links and *.dat are "
                            "skipped)",
                            dir);
  }
  return status;
}

ty_status_t ty_data_files_expand(const char *const *paths, size_t path_count, char ***out_files,
                                 uint64_t **out_sizes, size_t *out_count) {
  ty_data_list_t list = {0};
  ty_status_t status = TY_OK;
  for (size_t i = 0; i < path_count && !status; ++i) {
    struct stat st;
    if (stat(paths[i], &st) != 0) {
      status = ty_data_errno(errno, "read input", paths[i]);
    } else if (S_ISDIR(st.st_mode)) {
      status = ty_data_expand_folder(paths[i], &list);
    } else {
      status = ty_data_list_push(&list, paths[i], (uint64_t)st.st_size);
    }
  }
  if (status) {
    ty_data_files_free(list.files, list.sizes, list.count);
    return status;
  }
  *out_files = list.files;
  *out_sizes = list.sizes;
  *out_count = list.count;
  return TY_OK;
}

void ty_data_files_free(char **files, uint64_t *sizes, size_t count) {
  for (size_t i = 0; i < count; ++i) free(files[i]);
  free(files);
  free(sizes);
}

/* ---- readers ---- */

typedef struct ty_data_reader_t {
  const char *path;
  const char *data;
  size_t size;
  ty_data_format_t format;
  const char *text_field;
  ty_data_doc_fn fn;
  void *user;
} ty_data_reader_t;

static bool ty_data_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!strchr(" \t\r\n\f\v", s[i])) return false;
  }
  return true;
}

static ty_status_t ty_data_emit(ty_data_reader_t *r, ty_data_doc_t *doc) {
  doc->file = r->path;
  if (!doc->raw) {
    doc->raw = doc->text;
    doc->raw_size = doc->size;
  }
  ty_status_t status = r->fn(r->user, doc);
  if (status && doc->line) return ty_status_annotate(status, "%s:%zu", r->path, doc->line);
  if (status) return ty_status_annotate(status, "%s", r->path);
  return TY_OK;
}

/* One JSON line of jsonl or chat. */
static ty_status_t ty_data_json_line(ty_data_reader_t *r, const char *line, size_t size,
                                     size_t line_number, uint64_t end) {
  json_error_t error;
  json_t *root = json_loadb(line, size, 0, &error);
  if (!root) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%zu: not valid JSON (column %d: %s)",
                          r->path, line_number, error.column, error.text);
  }
  ty_status_t status = TY_OK;
  ty_data_doc_t doc = {.line = line_number, .offset = end, .raw = line, .raw_size = size};
  ty_chat_message_t *messages = NULL;
  int64_t *ids = NULL;
  uint8_t *weights = NULL;
  if (r->format == TY_DATA_FORMAT_IDS) {
    const json_t *list = json_is_object(root) ? json_object_get(root, "ids") : root;
    size_t count = json_array_size(list);
    if (!json_is_array(list) || count == 0) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "%s:%zu: expected a non-empty list of token ids (or {\"ids\": "
                              "[...]})",
                              r->path, line_number);
    } else if (!(ids = malloc(count * sizeof(*ids)))) {
      status = ty_data_oom();
    }
    for (size_t i = 0; !status && i < count; ++i) {
      status = ty_json_token_id(json_array_get(list, i), 0, &ids[i]);
      if (status) {
        const char *field = json_is_object(root) ? "\"ids\"" : "ids";
        status = ty_status_annotate(ty_status_annotate(status, "%s[%zu]", field, i), "%s:%zu",
                                    r->path, line_number);
        break;
      }
    }
    /* Per-target weights beside the ids: masked prompts without a tokenizer. */
    const json_t *wlist = json_is_object(root) ? json_object_get(root, "weights") : NULL;
    if (!status && wlist) {
      if (!json_is_array(wlist) || json_array_size(wlist) != count) {
        status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                "%s:%zu: \"weights\" must be a list as long as \"ids\" (%zu)",
                                r->path, line_number, count);
      } else if (!(weights = malloc(count))) {
        status = ty_data_oom();
      }
      for (size_t i = 0; !status && i < count; ++i) {
        const json_t *w = json_array_get(wlist, i);
        if (!json_is_integer(w) || (json_integer_value(w) != 0 && json_integer_value(w) != 1)) {
          status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                  "%s:%zu: weights[%zu] is not 0 or 1", r->path, line_number, i);
          break;
        }
        weights[i] = (uint8_t)json_integer_value(w);
      }
    }
    doc.ids = ids;
    doc.id_count = count;
    doc.weights = weights;
  } else if (!json_is_object(root)) {
    status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%zu: not a JSON object", r->path,
                            line_number);
  } else if (r->format == TY_DATA_FORMAT_JSONL) {
    const json_t *text = json_object_get(root, r->text_field);
    if (!json_is_string(text)) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s:%zu: no string field \"%s\"%s",
                              r->path, line_number, r->text_field,
                              text ? " (it is not a string)"
                                   : "; name the field with --text-field");
    } else {
      doc.text = json_string_value(text);
      doc.size = json_string_length(text);
      doc.raw = NULL; /* the split hash reads the text, not the line */
    }
  } else {
    const json_t *list = json_object_get(root, "messages");
    size_t count = json_array_size(list);
    if (!json_is_array(list) || count == 0) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "%s:%zu: no \"messages\" list (chat lines are {\"messages\": "
                              "[{\"role\": ..., \"content\": ...}, ...]})",
                              r->path, line_number);
    } else if (!(messages = calloc(count, sizeof(*messages)))) {
      status = ty_data_oom();
    }
    for (size_t i = 0; !status && i < count; ++i) {
      status = ty_json_chat_message(json_array_get(list, i), &messages[i]);
      if (status) {
        status = ty_status_annotate(ty_status_annotate(status, "messages[%zu]", i), "%s:%zu",
                                    r->path, line_number);
      }
    }
    doc.messages = messages;
    doc.message_count = count;
  }
  if (!status) status = ty_data_emit(r, &doc);
  free(messages);
  free(ids);
  free(weights);
  json_decref(root);
  return status;
}

static ty_status_t ty_data_read_lines(ty_data_reader_t *r) {
  size_t line_number = 0;
  for (size_t at = 0; at < r->size;) {
    const char *start = r->data + at;
    const char *nl = memchr(start, '\n', r->size - at);
    size_t size = nl ? (size_t)(nl - start) : r->size - at;
    at += size + (nl ? 1 : 0);
    ++line_number;
    if (line_number == 1 && r->format != TY_DATA_FORMAT_LINES) {
      /* JSON lines skip a byte-order mark, as every JSON input does. */
      size_t bom = ty_text_bom_size(start, size);
      start += bom;
      size -= bom;
    }
    if (ty_data_blank(start, size)) continue;
    if (r->format == TY_DATA_FORMAT_LINES) {
      if (size && start[size - 1] == '\r') --size;
      ty_data_doc_t doc = {.text = start, .size = size, .line = line_number, .offset = at};
      TY_RETURN_IF_ERROR(ty_data_emit(r, &doc));
    } else {
      TY_RETURN_IF_ERROR(ty_data_json_line(r, start, size, line_number, at));
    }
  }
  return TY_OK;
}

/* fortune(6) files: entries between lines that hold only '%'. Overstrike
 * sequences (x BACKSPACE y, old-style bold and underline) keep only y. The
 * newline before a separator ends the entry and is not part of it. */
static ty_status_t ty_data_fortune_flush(ty_data_reader_t *r, char *buf, size_t *fill,
                                         size_t line, uint64_t offset) {
  size_t n = *fill;
  *fill = 0;
  if (n && buf[n - 1] == '\n') --n;
  if (ty_data_blank(buf, n)) return TY_OK;
  ty_data_doc_t doc = {.text = buf, .size = n, .line = line, .offset = offset};
  return ty_data_emit(r, &doc);
}

static ty_status_t ty_data_read_fortunes(ty_data_reader_t *r) {
  char *buf = malloc(r->size + 1);
  if (!buf) return ty_data_oom();
  size_t fill = 0, line_number = 0, entry_line = 1, at = 0;
  ty_status_t status = TY_OK;
  while (at < r->size && !status) {
    const char *start = r->data + at;
    const char *nl = memchr(start, '\n', r->size - at);
    size_t size = nl ? (size_t)(nl - start) : r->size - at;
    at += size + (nl ? 1 : 0);
    ++line_number;
    if (size >= 1 && start[0] == '%' && (size == 1 || (size == 2 && start[1] == '\r'))) {
      status = ty_data_fortune_flush(r, buf, &fill, entry_line, at);
      entry_line = line_number + 1;
      continue;
    }
    for (size_t i = 0; i < size; ++i) {
      if (start[i] == '\b') {
        /* Drop the character before the backspace (all its bytes). */
        while (fill > 0 && ((unsigned char)buf[fill - 1] & 0xC0) == 0x80) --fill;
        if (fill > 0 && buf[fill - 1] != '\n') --fill;
      } else {
        buf[fill++] = start[i];
      }
    }
    if (nl) buf[fill++] = '\n';
  }
  if (!status) status = ty_data_fortune_flush(r, buf, &fill, entry_line, at);
  free(buf);
  return status;
}

ty_status_t ty_data_read_file(const char *path, ty_data_format_t format, const char *text_field,
                              ty_data_doc_fn fn, void *user) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ty_data_errno(errno, "read input", path);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ty_status_t status = ty_data_errno(errno, "read input", path);
    close(fd);
    return status;
  }
  if (S_ISDIR(st.st_mode)) {
    close(fd);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "input %s is a folder", path);
  }
  /* A file is mapped (its size bounds the work); a pipe or device has no
   * size to trust and is read, up to the input cap. */
  size_t size = 0;
  void *map = NULL;
  char *owned = NULL;
  ty_status_t status = TY_OK;
  if (!S_ISREG(st.st_mode)) {
    status = ty_file_read_fd(fd, path, &ty_data_input_kind, &owned, &size);
  } else if ((size = (size_t)st.st_size) > 0) {
    map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      map = NULL;
      status = ty_data_errno(errno, "map input", path);
    }
  }
  close(fd);
  const char *data = map ? (const char *)map : owned ? owned : "";
  if (!status) status = ty_file_check_text(data, size, path, &ty_data_input_kind);
  if (status) {
    if (map) munmap(map, size);
    free(owned);
    return status;
  }
  ty_data_reader_t r = {path, data, size, format, text_field, fn, user};
  switch (format) {
    case TY_DATA_FORMAT_TEXT: {
      ty_data_doc_t doc = {.text = r.data, .size = size, .line = 0, .offset = size};
      if (!ty_data_blank(r.data, size)) status = ty_data_emit(&r, &doc);
      break;
    }
    case TY_DATA_FORMAT_FORTUNE: status = ty_data_read_fortunes(&r); break;
    default: status = ty_data_read_lines(&r); break;
  }
  if (map) munmap(map, size);
  free(owned);
  return status;
}
