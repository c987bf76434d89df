/* What the ranks of one `trainyard train` job must agree on (issue 33):
 * the fields handed to ty_dist_agree_fields (distributed/dist.h) before the run's
 * first collective. Paths that may differ between hosts (--model, --data,
 * --tokenizer) are compared by what they hold; every other option by its
 * value, so that ranks started with different options stop at once with
 * one message instead of corrupting memory inside MPI or quietly training
 * different things. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "build_info.h"
#include "distributed/dist.h"
#include "hal/device_uri.h"
#include "hal/registry.h"
#include "hal/file.h"
#include "models/config.h"
#include "models/dataset.h"
#include "models/safetensors.h"
#include "models/tokenizer.h"
#include "trainer.h"

/* Options that may differ between ranks: where each host keeps its compile
 * cache, rank 0's own outputs and services, how MPI was asked for (every
 * rank that got here is in the world), and a limit checked per device.
 * --model, --data and --tokenizer are compared by content instead. */
static const char *const ty_agree_skipped[] = {
    "cache_dir", "retry_failed", "dump_graph", "control_registry", "distributed",
    "memory_limit", "model", "data", "tokenizer", NULL};

/* A growing text (the canonical form of a field's value). */
typedef struct {
  char *data;
  size_t size, capacity;
  bool failed;
} ty_agree_text_t;

static void ty_agree_add(ty_agree_text_t *t, const void *bytes, size_t n) {
  if (t->failed) return;
  if (t->size + n + 1 > t->capacity) {
    size_t cap = t->capacity ? t->capacity : 4096;
    while (cap < t->size + n + 1) cap *= 2;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->data = grown;
    t->capacity = cap;
  }
  memcpy(t->data + t->size, bytes, n);
  t->size += n;
  t->data[t->size] = '\0';
}

static void ty_agree_printf(ty_agree_text_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void ty_agree_printf(ty_agree_text_t *t, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  if (n > 0) ty_agree_add(t, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

/* A file's bytes appended whole, read as its owner reads it (the kind's
 * cap; dataset.json, tokenizer.json); a file that cannot be read adds that
 * fact, so ranks that can read it and ranks that cannot disagree (and the
 * load that follows says why). */
static void ty_agree_file(ty_agree_text_t *t, const char *path, const ty_file_kind_t *kind) {
  char *data = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read(path, kind, &data, &size);
  if (s) {
    ty_agree_printf(t, "(cannot read %s: %s)", path, ty_code_name(ty_status_code(s)));
    ty_status_free(s);
    return;
  }
  ty_agree_add(t, data, size);
  free(data);
}

/* The model: its config.json (canonical: keys sorted, compact) and its
 * weights' names, dtypes and shapes (from the safetensors headers; the
 * values are not read, so a fine-tune of a 7B model does not hash 14 GB
 * before its first step; docs/design-notes.md "Ranks agree or stop"). */
static void ty_agree_model(const char *dir, ty_agree_text_t *t, char *shown, size_t capacity) {
  char path[TY_CFG_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/config.json", dir);
  char *bytes = NULL;
  size_t size = 0;
  ty_status_t read = ty_file_read(path, &ty_model_config_file_kind, &bytes, &size);
  json_error_t error;
  json_t *config = read ? NULL : json_loadb(bytes, size, 0, &error);
  ty_status_free(read);
  free(bytes);
  char *canonical = config ? json_dumps(config, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
  const char *type = json_string_value(json_object_get(config, "model_type"));
  snprintf(shown, capacity, "%s", type ? type : "(no model_type)");
  if (canonical) {
    ty_agree_add(t, canonical, strlen(canonical));
  } else {
    ty_agree_printf(t, "(cannot read %s)", path);
  }
  free(canonical);
  json_decref(config);
  ty_safetensors_set_t *set = NULL;
  ty_status_t s = ty_safetensors_open_dir(dir, &set);
  if (s) {
    ty_agree_printf(t, "\n(no weights: %s)", ty_code_name(ty_status_code(s)));
    ty_status_free(s);
    return;
  }
  for (size_t i = 0; i < ty_safetensors_set_tensor_count(set); ++i) {
    ty_tensor_desc_t d;
    ty_status_t e = ty_safetensors_tensor_desc(ty_safetensors_set_tensor_at(set, i), &d);
    if (e) {
      ty_agree_printf(t, "\n(tensor %zu: %s)", i, ty_code_name(ty_status_code(e)));
      ty_status_free(e);
      continue;
    }
    ty_agree_printf(t, "\n%s %s", d.name, ty_dtype_name(d.dtype));
    for (uint32_t k = 0; k < d.rank; ++k) ty_agree_printf(t, " %lld", (long long)d.dims[k]);
  }
  ty_safetensors_set_close(set);
}

static int ty_agree_name_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The backend plugin this rank would load: its name, version and build
 * identity (hal/registry.h ty_backend_identity). The registry made here is
 * the run's (ty_trainer_setup keeps it). */
static void ty_agree_backend(ty_trainer_t *t, ty_agree_text_t *text, char *shown,
                             size_t capacity) {
  ty_device_uri_t uri;
  memset(&uri, 0, sizeof(uri));
  ty_status_t s = ty_device_uri_parse(t->cfg.backend, &uri);
  if (!s && !t->registry) s = ty_app_registry_create(t->app, &t->registry);
  ty_backend_t *b = NULL;
  if (!s) s = ty_registry_find(t->registry, uri.backend, &b);
  if (s) {
    /* the device open that follows says why */
    ty_agree_printf(text, "(%s: %s)", t->cfg.backend, ty_code_name(ty_status_code(s)));
    snprintf(shown, capacity, "%.60s (not loadable)", t->cfg.backend);
    ty_status_free(s);
  } else {
    ty_agree_printf(text, "%s %s %s", ty_backend_name(b), ty_backend_version(b),
                    ty_backend_identity(b));
    snprintf(shown, capacity, "%s %s (%.40s)", ty_backend_name(b), ty_backend_version(b),
             ty_backend_identity(b));
  }
  ty_device_uri_deinit(&uri); /* zeroed when the parse failed */
}

/* Fills fields[*n] from `text` (freed here) and advances *n; false when
 * out of memory. */
static bool ty_agree_take(ty_dist_field_t *fields, size_t *n, const char *name,
                          const char *about, ty_agree_text_t *text, const char *shown) {
  bool ok = !text->failed;
  if (ok) {
    ty_dist_field_set(&fields[*n], name, about, text->data ? text->data : "", text->size,
                      shown);
    (*n)++;
  }
  free(text->data);
  *text = (ty_agree_text_t){0};
  return ok;
}

/* Every field, in the order they are checked: the build, the plugin, what
 * the run reads, then every option not skipped (sorted by name). */
static ty_status_t ty_agree_fields(ty_trainer_t *t, ty_dist_field_t *fields, size_t capacity,
                                   size_t *out_count) {
  const ty_train_config_t *c = &t->cfg;
  size_t n = 0;
  bool ok = true;
  ty_agree_text_t text = {0};
  char shown[112];
  ty_agree_printf(&text, "%s %s %s %s", TY_VERSION_STRING, TY_BUILD_FEATURES, TY_BUILD_TYPE,
                  TY_BUILD_COMPILER);
  snprintf(shown, sizeof(shown), "%s", text.data ? text.data : "");
  ok = ty_agree_take(fields, &n, "trainyard", "its version and build", &text, shown) && ok;
  ty_agree_backend(t, &text, shown, sizeof(shown));
  ok = ty_agree_take(fields, &n, "--backend", "the plugin and its build id", &text,
                     shown) && ok;
  if (c->model[0]) {
    char type[48];
    ty_agree_model(c->model, &text, type, sizeof(type));
    snprintf(shown, sizeof(shown), "%.40s from %.60s", type, c->model);
  } else {
    ty_agree_printf(&text, "(none: --preset)");
    snprintf(shown, sizeof(shown), "none (--preset)");
  }
  ok = ty_agree_take(fields, &n, "--model",
                     "its config.json and its weights' names, dtypes and shapes", &text,
                     shown) && ok;
  char path[TY_CFG_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/" TY_DATASET_JSON, c->data);
  ty_agree_file(&text, path, &ty_dataset_json_file_kind);
  snprintf(shown, sizeof(shown), "%.100s", c->data);
  ok = ty_agree_take(fields, &n, "--data", "its " TY_DATASET_JSON, &text, shown) && ok;
  if (c->tokenizer[0]) ty_agree_file(&text, c->tokenizer, &ty_tokenizer_file_kind);
  snprintf(shown, sizeof(shown), "%.100s", c->tokenizer[0] ? c->tokenizer : "(the model's)");
  ok = ty_agree_take(fields, &n, "--tokenizer", "its bytes", &text, shown) && ok;
  /* every other option, by value */
  json_t *j = ty_train_config_to_json(c);
  if (!j) ok = false;
  const char *keys[128];
  size_t nkeys = 0;
  const char *key;
  json_t *value;
  json_object_foreach(j, key, value) {
    bool skipped = false;
    for (size_t k = 0; ty_agree_skipped[k] && !skipped; ++k) {
      skipped = !strcmp(key, ty_agree_skipped[k]);
    }
    if (!skipped && nkeys < sizeof(keys) / sizeof(keys[0])) keys[nkeys++] = key;
  }
  /* a fixed order on every rank (an object's own order is not promised) */
  qsort(keys, nkeys, sizeof(keys[0]), ty_agree_name_cmp);
  for (size_t k = 0; ok && k < nkeys && n < capacity; ++k) {
    char *v = json_dumps(json_object_get(j, keys[k]), JSON_ENCODE_ANY | JSON_COMPACT);
    if (!v) {
      ok = false;
      break;
    }
    char name[40] = "--";
    for (size_t i = 0; keys[k][i] && i + 3 < sizeof(name); ++i) {
      name[i + 2] = keys[k][i] == '_' ? '-' : keys[k][i];
      name[i + 3] = '\0';
    }
    ty_agree_add(&text, v, strlen(v));
    /* a string shown as the user typed it, not JSON-quoted */
    const char *as_text = json_string_value(json_object_get(j, keys[k]));
    ok = ty_agree_take(fields, &n, name, "", &text, as_text ? as_text : v);
    free(v);
  }
  json_decref(j);
  if (!ok) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  *out_count = n;
  return TY_OK;
}

ty_status_t ty_trainer_agree(ty_trainer_t *t) {
  if (t->par.world == 1) return TY_OK;
  enum { TY_AGREE_MAX = 160 };
  ty_dist_field_t *fields = calloc(TY_AGREE_MAX, sizeof(*fields));
  if (!fields) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  ty_status_t s = ty_agree_fields(t, fields, TY_AGREE_MAX, &n);
  /* a rank that could not describe itself still joins the exchange (with
   * no fields), so the others stop with a message rather than wait */
  ty_status_t a = ty_dist_agree_fields(t->par.dist, fields, s ? 0 : n);
  free(fields);
  if (s) {
    ty_status_free(a);
    return s;
  }
  return a;
}
