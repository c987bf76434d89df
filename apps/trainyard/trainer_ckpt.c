/* Checkpoints of `trainyard train`: checkpoint-<step>/ holds config.json,
 * model.safetensors (Hugging Face names and layouts), tokenizer.json,
 * optimizer.safetensors (the optimizer moments, exactly) and
 * trainer_state.json (progress and configuration). A checkpoint is written
 * into a hidden temporary folder and renamed into place, so a crash at any
 * moment leaves the previous checkpoints whole. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_info.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/presets.h"
#include "models/safetensors.h"
#include "models/tokenizer.h"
#include "train_graph.h"
#include "trainer.h"

/* trainer_state.json: progress and the configuration, a few kilobytes. */
static const ty_file_kind_t ty_trainer_state_kind = {
    .what = "trainer state", .max_bytes = 16 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS};

#define TY_CKPT_PREFIX "checkpoint-"
#define TY_CKPT_TMP_PREFIX ".checkpoint-"

static ty_status_t ty_errno_status(const char *what, const char *path) {
  return ty_status_from_errno(errno, "%s %s", what, path);
}

/* dir + "/" + name into out; INVALID_ARGUMENT when it does not fit. */
static ty_status_t ty_path_join(char *out, size_t capacity, const char *dir, const char *name) {
  size_t n = strlen(dir), m = strlen(name);
  if (n + 1 + m + 1 > capacity) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "path %s/%s is too long", dir, name);
  }
  memcpy(out, dir, n);
  out[n] = '/';
  memcpy(out + n + 1, name, m + 1);
  return TY_OK;
}

static ty_status_t ty_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return ty_errno_status("cannot open", path);
  int rc = fsync(fd);
  close(fd);
  return rc == 0 ? TY_OK : ty_errno_status("cannot fsync", path);
}

/* Copies src, a file of `kind` read whole under its cap, to dst (fsync'ed). */
static ty_status_t ty_copy_file(const char *src, const ty_file_kind_t *kind, const char *dst) {
  char *data = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(src, kind, &data, &size));
  FILE *out = fopen(dst, "wb");
  if (!out) {
    free(data);
    return ty_errno_status("cannot write", dst);
  }
  bool ok = fwrite(data, 1, size, out) == size && fflush(out) == 0 && fsync(fileno(out)) == 0;
  ok = fclose(out) == 0 && ok;
  free(data);
  return ok ? TY_OK : ty_errno_status("cannot copy to", dst);
}

static void ty_remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char path[TY_CFG_PATH_MAX + 300];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      ty_remove_tree(path);
    } else {
      unlink(path);
    }
  }
  closedir(d);
  rmdir(dir);
}

/* Steps of the complete checkpoints in cfg.out, ascending. */
static int ty_step_compare(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static size_t ty_list_checkpoints(const char *out, int64_t **steps) {
  *steps = NULL;
  DIR *d = opendir(out);
  if (!d) return 0;
  size_t count = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, TY_CKPT_PREFIX, strlen(TY_CKPT_PREFIX)) != 0) continue;
    char *end;
    long long step = strtoll(e->d_name + strlen(TY_CKPT_PREFIX), &end, 10);
    if (*end || step < 0) continue;
    char state[TY_CFG_PATH_MAX + 300];
    snprintf(state, sizeof(state), "%s/%s/trainer_state.json", out, e->d_name);
    if (access(state, R_OK) != 0) continue; /* not a complete checkpoint */
    if (count == cap) {
      cap = cap ? cap * 2 : 16;
      int64_t *p = realloc(*steps, cap * sizeof(int64_t));
      if (!p) break;
      *steps = p;
    }
    (*steps)[count++] = step;
  }
  closedir(d);
  if (count) qsort(*steps, count, sizeof(int64_t), ty_step_compare);
  return count;
}

void ty_trainer_clean_partial(const ty_train_config_t *cfg) {
  DIR *d = opendir(cfg->out);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, TY_CKPT_TMP_PREFIX, strlen(TY_CKPT_TMP_PREFIX)) != 0) continue;
    char path[TY_CFG_PATH_MAX + 300];
    snprintf(path, sizeof(path), "%s/%s", cfg->out, e->d_name);
    ty_remove_tree(path);
  }
  closedir(d);
}

ty_status_t ty_trainer_find_resume(const ty_train_config_t *cfg, char *out_dir, size_t cap) {
  out_dir[0] = '\0';
  if (strcmp(cfg->resume, "latest") != 0) {
    char state[TY_CFG_PATH_MAX + 64];
    TY_RETURN_IF_ERROR(ty_path_join(state, sizeof(state), cfg->resume, "trainer_state.json"));
    if (access(state, R_OK) != 0) {
      return ty_status_make(TY_CODE_NOT_FOUND,
                            "--resume %s: not a complete checkpoint (no trainer_state.json)",
                            cfg->resume);
    }
    snprintf(out_dir, cap, "%s", cfg->resume);
    return TY_OK;
  }
  int64_t *steps = NULL;
  size_t n = ty_list_checkpoints(cfg->out, &steps);
  if (n) snprintf(out_dir, cap, "%s/" TY_CKPT_PREFIX "%lld", cfg->out, (long long)steps[n - 1]);
  free(steps);
  return TY_OK; /* nothing to resume: a fresh start */
}

ty_status_t ty_trainer_read_state(const char *dir, ty_trainer_t *t, ty_train_config_t *saved) {
  char path[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(path, sizeof(path), dir, "trainer_state.json"));
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_trainer_state_kind, &text, &size));
  json_error_t err;
  json_t *j = json_loadb(text, size, 0, &err);
  free(text);
  if (!j) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: unreadable trainer state (line %d: %s)", path,
                          err.line, err.text);
  }
  ty_status_t s = TY_OK;
  json_t *format = json_object_get(j, "format");
  if (!json_is_string(format) || strcmp(json_string_value(format), "trainyard-trainer-state") ||
      json_integer_value(json_object_get(j, "version")) != 1) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: not a trainyard trainer state (version 1)", path);
  } else {
    t->step = json_integer_value(json_object_get(j, "step"));
    t->epoch = json_integer_value(json_object_get(j, "epoch"));
    t->cursor = json_integer_value(json_object_get(j, "cursor"));
    t->tokens_seen = json_integer_value(json_object_get(j, "tokens_seen"));
    t->train_seconds = json_number_value(json_object_get(j, "train_seconds"));
    t->last_loss = json_number_value(json_object_get(j, "loss"));
    ty_train_config_defaults(saved);
    s = ty_train_config_from_json(saved, json_object_get(j, "config"));
    if (s) s = ty_status_annotate(s, "%s", path);
  }
  json_decref(j);
  return s;
}

/* The session that holds the optimizer states: the optimizer-step graph's
 * with gradient accumulation, else the fused train step's. */
static ty_session_t *ty_trainer_optimizer_session(const ty_trainer_t *t) {
  return t->accum > 1 ? t->s_opt : t->s_train;
}

/* The optimizer states of every parameter: "<param>.exp_avg", ... A
 * parameter has those its shape gives it (Adafactor: row and column
 * moments for matrices, a full one for vectors): the ones its session has. */
static const char *const *ty_optimizer_states(const ty_trainer_t *t) {
  ty_train_step_params_t step;
  ty_status_free(ty_train_graph_step_options(&t->cfg, &step));
  return ty_optimizer_state_kinds(step.optimizer);
}

/* The descriptor of state `name`, or NOT_FOUND when the parameter has none
 * of that kind. */
static ty_status_t ty_optimizer_state_desc(const ty_trainer_t *t, const char *name,
                                           ty_tensor_desc_t *out) {
  return ty_session_value_desc(ty_trainer_optimizer_session(t), name, out);
}

static ty_status_t ty_save_optimizer(ty_trainer_t *t, const char *dir) {
  ty_safetensors_writer_t *w = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_writer_create(&w));
  const char *const *kinds = ty_optimizer_states(t);
  size_t kind_count = 0;
  while (kinds[kind_count]) ++kind_count;
  size_t n = t->m_train.param_count * kind_count;
  float **data = calloc(n ? n : 1, sizeof(float *));
  ty_status_t s = data ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < t->m_train.param_count && !s; ++i) {
    const ty_llm_param_t *p = &t->m_train.params[i];
    for (size_t k = 0; k < kind_count && !s; ++k) {
      char name[TY_LLM_NAME_MAX + 32];
      snprintf(name, sizeof(name), "%s.%s", p->name, kinds[k]);
      ty_tensor_desc_t desc;
      ty_status_t missing = ty_optimizer_state_desc(t, name, &desc);
      if (missing && ty_status_code(missing) == TY_CODE_NOT_FOUND) {
        ty_status_free(missing);
        continue;
      }
      if ((s = missing)) break;
      int64_t count = 1;
      for (uint32_t d = 0; d < desc.rank; ++d) count *= desc.dims[d];
      float **slot = &data[i * kind_count + k];
      *slot = malloc((size_t)count * sizeof(float) + 1);
      if (!*slot) {
        s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
        break;
      }
      s = ty_session_read(ty_trainer_optimizer_session(t), name, *slot,
                          (size_t)count * sizeof(float));
      if (!s) {
        s = ty_safetensors_writer_add(w, name, TY_DTYPE_F32, desc.rank, desc.dims, *slot,
                                      (uint64_t)count * sizeof(float));
      }
    }
  }
  char path[TY_CFG_PATH_MAX + 64];
  if (!s) s = ty_path_join(path, sizeof(path), dir, "optimizer.safetensors");
  if (!s) s = ty_safetensors_writer_write_file(w, path);
  ty_safetensors_writer_destroy(w);
  for (size_t i = 0; data && i < n; ++i) free(data[i]);
  free(data);
  return s;
}

ty_status_t ty_trainer_load_optimizer(ty_trainer_t *t, const char *dir) {
  char path[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(path, sizeof(path), dir, "optimizer.safetensors"));
  ty_safetensors_file_t *f = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_open(path, &f));
  const char *const *kinds = ty_optimizer_states(t);
  ty_status_t s = TY_OK;
  unsigned warned = 0;
  for (uint32_t i = 0; i < t->m_train.param_count && !s; ++i) {
    const ty_llm_param_t *p = &t->m_train.params[i];
    for (size_t k = 0; kinds[k] && !s; ++k) {
      char name[TY_LLM_NAME_MAX + 32];
      snprintf(name, sizeof(name), "%s.%s", p->name, kinds[k]);
      ty_tensor_desc_t desc;
      ty_status_t missing = ty_optimizer_state_desc(t, name, &desc);
      if (missing && ty_status_code(missing) == TY_CODE_NOT_FOUND) {
        ty_status_free(missing);
        continue;
      }
      if ((s = missing)) break;
      const ty_safetensors_tensor_t *tensor = NULL;
      s = ty_safetensors_file_lookup(f, name, &tensor);
      if (!s && (tensor->dtype != TY_DTYPE_F32 || tensor->rank != desc.rank ||
                 memcmp(tensor->dims, desc.dims, desc.rank * sizeof(int64_t)) != 0)) {
        s = ty_status_make(TY_CODE_DATA_LOSS, "%s: tensor %s has the wrong dtype or shape",
                           path, name);
      }
      if (!s) {
        /* Moments are weights too: NaN in them is NaN in the next update. */
        ty_status_t bad = ty_llm_check_finite(
            path, name, TY_DTYPE_F32, tensor->data, tensor->element_count, NULL, NULL,
            t->cfg.allow_nonfinite ? NULL : "pass --allow-nonfinite to load it anyway");
        if (bad && t->cfg.allow_nonfinite) {
          if (!warned++) {
            fprintf(stderr, "trainyard train: WARNING: %s (loaded because of "
                    "--allow-nonfinite)\n", ty_status_message(bad));
          }
          ty_status_free(bad);
          bad = TY_OK;
        }
        s = bad;
      }
      if (!s) {
        s = ty_session_bind(ty_trainer_optimizer_session(t), name, TY_DTYPE_F32, desc.rank,
                            desc.dims, tensor->data, (size_t)tensor->byte_size);
      }
    }
  }
  ty_safetensors_close(f);
  return s;
}

static ty_status_t ty_write_state(const ty_trainer_t *t, const char *dir) {
  json_t *j = json_object();
  json_object_set_new(j, "format", json_string("trainyard-trainer-state"));
  json_object_set_new(j, "version", json_integer(1));
  json_object_set_new(j, "created_by", json_string("trainyard " TY_VERSION_STRING));
  json_object_set_new(j, "step", json_integer(t->step));
  json_object_set_new(j, "epoch", json_integer(t->epoch));
  json_object_set_new(j, "cursor", json_integer(t->cursor));
  json_object_set_new(j, "tokens_seen", json_integer(t->tokens_seen));
  json_object_set_new(j, "train_seconds", json_real(t->train_seconds));
  json_object_set_new(j, "loss", json_real(t->last_loss));
  /* The data order is rebuilt from (seed, epoch); dropout masks from
   * (seed, step): saying so makes the state self-describing. */
  json_object_set_new(j, "data_order", json_string("fisher-yates(seed, epoch)"));
  json_object_set_new(j, "config", ty_train_config_to_json(&t->cfg));
  char path[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(path, sizeof(path), dir, "trainer_state.json"));
  int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
  json_decref(j);
  if (rc != 0) return ty_errno_status("cannot write", path);
  return ty_fsync_path(path);
}

/* config.json: the fine-tuned model's own, or the preset's. */
static ty_status_t ty_write_model_config(const ty_trainer_t *t, const char *dir) {
  char dst[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(dst, sizeof(dst), dir, "config.json"));
  if (t->cfg.model[0]) {
    char src[TY_CFG_PATH_MAX + 64];
    TY_RETURN_IF_ERROR(ty_path_join(src, sizeof(src), t->cfg.model, "config.json"));
    return ty_copy_file(src, &ty_model_config_file_kind, dst);
  }
  return ty_model_config_write(&t->model_config, dst);
}

/* tokenizer.json: the exact bytes train_tokenizer.c loaded and checked at
 * the start (from --tokenizer, the data folder or the model folder). */
static ty_status_t ty_write_tokenizer(const ty_trainer_t *t, const char *dir) {
  if (!t->tokenizer_json) return TY_OK; /* no tokenizer: the checkpoint loads by ids */
  char dst[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(dst, sizeof(dst), dir, "tokenizer.json"));
  return ty_file_write_atomic(dst, t->tokenizer_json, t->tokenizer_json_size);
}

static void ty_prune(const ty_trainer_t *t) {
  if (t->cfg.keep <= 0) return;
  int64_t *steps = NULL;
  size_t n = ty_list_checkpoints(t->cfg.out, &steps);
  for (size_t i = 0; i + (size_t)t->cfg.keep < n; ++i) {
    char path[TY_CFG_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/" TY_CKPT_PREFIX "%lld", t->cfg.out, (long long)steps[i]);
    ty_remove_tree(path);
  }
  free(steps);
}

ty_status_t ty_trainer_save(ty_trainer_t *t) {
  char tmp[TY_CFG_PATH_MAX + 64], final[TY_CFG_PATH_MAX + 64];
  snprintf(tmp, sizeof(tmp), "%s/" TY_CKPT_TMP_PREFIX "%lld.tmp-%ld", t->cfg.out,
           (long long)t->step, (long)getpid());
  snprintf(final, sizeof(final), "%s/" TY_CKPT_PREFIX "%lld", t->cfg.out, (long long)t->step);
  ty_remove_tree(tmp);
  if (mkdir(tmp, 0777) != 0) return ty_errno_status("cannot create", tmp);
  ty_status_t s = ty_write_model_config(t, tmp);
  if (!s) s = ty_llm_save_weights(&t->m_train, t->s_train, tmp, 0);
  /* Test hook: a pause mid-save, for the crash-during-save test. */
  const char *pause = getenv("TRAINYARD_DEBUG_SAVE_SLEEP_MS");
  if (!s && pause && atol(pause) > 0) usleep((useconds_t)atol(pause) * 1000u);
  if (!s) s = ty_write_tokenizer(t, tmp);
  if (!s) s = ty_save_optimizer(t, tmp);
  if (!s) s = ty_write_state(t, tmp); /* last: its presence marks a whole checkpoint */
  if (!s) s = ty_fsync_path(tmp);
  if (!s) {
    ty_remove_tree(final); /* a checkpoint of this step from an earlier run */
    if (rename(tmp, final) != 0) s = ty_errno_status("cannot rename into", final);
  }
  if (!s) s = ty_fsync_path(t->cfg.out);
  if (s) {
    ty_remove_tree(tmp);
    return ty_status_annotate(s, "saving checkpoint %lld", (long long)t->step);
  }
  ty_prune(t);
  return TY_OK;
}
