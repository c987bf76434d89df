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
#include "distributed/dist.h"
#include "files/out_paths.h"
#include "files/run_folder.h"
#include "hal/dtype.h"
#include "hal/file.h"
#include "models/checkpoint.h"
#include "models/presets.h"
#include "models/safetensors.h"
#include "models/tokenizer.h"
#include "train_graph.h"
#include "trainer.h"


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

/* The checkpoint folder `dir` of a run folder: its step, or -1 when it is
 * not <run folder>/checkpoint-<step>. */
static int64_t ty_checkpoint_step_in(const char *path, const char *run_folder) {
  char dir[TY_CFG_PATH_MAX];
  snprintf(dir, sizeof(dir), "%s", path);
  for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/';) dir[--n] = '\0';
  const char *base = strrchr(dir, '/');
  base = base ? base + 1 : dir;
  char *end = NULL;
  if (strncmp(base, TY_RUN_CKPT_PREFIX, strlen(TY_RUN_CKPT_PREFIX)) != 0) return -1;
  const char *digits = base + strlen(TY_RUN_CKPT_PREFIX);
  if (*digits < '0' || *digits > '9') return -1;
  long long step = strtoll(digits, &end, 10);
  if (*end) return -1;
  char parent[TY_CFG_PATH_MAX + 8];
  snprintf(parent, sizeof(parent), "%.*s", base == dir ? 1 : (int)(base - dir - 1),
           base == dir ? "." : dir);
  return ty_path_same(parent, run_folder) ? step : -1;
}

/* A fresh run (or one resumed from another folder) into a folder that holds
 * a run: refused, or with --overwrite that run is marked for deletion
 * (t->folder.clear_pending), done by ty_trainer_clear_pending once every other
 * check has passed: a run refused later must not have deleted it. */
static ty_status_t ty_trainer_claim_folder(ty_trainer_t *t, const char *resume_dir) {
  const ty_train_config_t *c = &t->cfg;
  char what[512];
  TY_RETURN_IF_ERROR(ty_run_folder_describe(t->folder.run, what, sizeof(what)));
  if (!what[0]) return TY_OK;
  if (!c->overwrite) {
    return ty_status_make(
        TY_CODE_FAILED_PRECONDITION,
        "--out %s already holds a training run (%s); %s, or start over with --overwrite, "
        "which deletes only the files a run writes",
        c->out, what,
        !strcmp(c->resume, "auto") ? "it has no checkpoint to resume"
        : resume_dir[0]            ? "choose an empty --out for the resumed run"
                                   : "continue it with --resume latest");
  }
  t->folder.clear_pending = true;
  return TY_OK;
}

ty_status_t ty_trainer_clear_pending(ty_trainer_t *t, const char *resume_dir) {
  const ty_train_config_t *c = &t->cfg;
  if (!t->folder.clear_pending) return TY_OK;
  t->folder.clear_pending = false;
  char what[512];
  TY_RETURN_IF_ERROR(ty_run_folder_describe(t->folder.run, what, sizeof(what)));
  if (!what[0]) return TY_OK;
  const ty_run_folder_input_t inputs[] = {
      {"--data", c->data},         {"--model", c->model},
      {"--tokenizer", c->tokenizer}, {"--artifact", c->artifact},
      {"--resume", resume_dir},    {"--cache-dir", c->cache_dir},
  };
  ty_status_t s = ty_run_folder_clear(t->folder.run, inputs, sizeof(inputs) / sizeof(inputs[0]));
  if (!s)
    fprintf(stderr, "trainyard train: --overwrite: deleted the run in %s (%s)\n", c->out, what);
  return s;
}

ty_status_t ty_trainer_open_run(ty_trainer_t *t, char *resume_dir, size_t cap) {
  const ty_train_config_t *c = &t->cfg;
  resume_dir[0] = '\0';
  /* What was there before, so that a run refused at start-up can leave the
   * folder as it found it (ty_trainer_discard_fresh). */
  char lock[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(lock, sizeof(lock), c->out, TY_RUN_LOCK_NAME));
  struct stat st;
  t->folder.out_created = stat(c->out, &st) != 0 && errno == ENOENT;
  t->folder.lock_created = lstat(lock, &st) != 0 && errno == ENOENT;
  TY_RETURN_IF_ERROR(ty_run_folder_open(c->out, &t->folder.run));
  if (!ty_run_folder_locked(t->folder.run)) {
    fprintf(stderr, "trainyard train: warning: the file system of %s cannot lock it (flock); "
                    "another run into it would not be detected\n", c->out);
  }
  /* Under the lock no live run saves here: what a save left is garbage. */
  TY_RETURN_IF_ERROR(ty_run_folder_clean_partial(t->folder.run));
  int64_t *steps = NULL;
  size_t n = 0;
  TY_RETURN_IF_ERROR(ty_run_folder_checkpoints(t->folder.run, &steps, &n));
  bool latest = !strcmp(c->resume, "latest"), automatic = !strcmp(c->resume, "auto");
  ty_status_t s = TY_OK;
  if ((latest || automatic) && n) {
    snprintf(resume_dir, cap, "%s/" TY_RUN_CKPT_PREFIX "%lld", c->out, (long long)steps[n - 1]);
  } else if (latest) {
    s = ty_status_make(TY_CODE_NOT_FOUND,
                       "--resume latest: %s holds no complete checkpoint (a checkpoint-<step> "
                       "folder with trainer_state.json); start without --resume, or use "
                       "--resume auto to resume only when there is one",
                       c->out);
  } else if (c->resume[0] && !automatic) {
    char state[TY_CFG_PATH_MAX + 64];
    s = ty_path_join(state, sizeof(state), c->resume, "trainer_state.json");
    if (!s && access(state, R_OK) != 0) {
      s = ty_status_make(TY_CODE_NOT_FOUND,
                         "--resume %s: not a complete checkpoint (no trainer_state.json)",
                         c->resume);
    }
    if (!s) snprintf(resume_dir, cap, "%s", c->resume);
  }
  int64_t from = s || !resume_dir[0] ? -1 : ty_checkpoint_step_in(resume_dir, c->out);
  if (!s && from >= 0) {
    /* Continuing this folder's run: a later checkpoint would belong to the
     * abandoned future and mix with the continued one. */
    char what[512];
    s = ty_run_folder_describe(t->folder.run, what, sizeof(what)); /* misplaced names */
    if (!s && n && steps[n - 1] > from) {
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                         "--resume %s: %s also holds checkpoint-%lld, past step %lld; a run "
                         "continued from there would mix with it (and --resume latest would "
                         "pick it): move the later checkpoints away first",
                         resume_dir, c->out, (long long)steps[n - 1], (long long)from);
    }
  } else if (!s) {
    s = ty_trainer_claim_folder(t, resume_dir);
  }
  free(steps);
  return s;
}

void ty_trainer_discard_fresh(ty_trainer_t *t) {
  if (!t->folder.run || !ty_run_folder_locked(t->folder.run)) return; /* not ours to undo */
  char lock[TY_CFG_PATH_MAX + 64];
  ty_status_t joined = t->folder.lock_created
                           ? ty_path_join(lock, sizeof(lock), t->cfg.out, TY_RUN_LOCK_NAME)
                           : TY_OK;
  /* Still held: a run that opened it meanwhile was refused. */
  if (t->folder.lock_created && !joined) unlink(lock);
  ty_status_free(joined);
  /* Only an empty folder goes: whatever else is there stays. */
  if (t->folder.out_created) rmdir(t->cfg.out);
}

/* The session that holds the optimizer states: the optimizer-step graph's
 * with gradient accumulation, else the fused train step's. */
static ty_session_t *ty_trainer_optimizer_session(const ty_trainer_t *t) {
  return t->graphs.s_opt ? t->graphs.s_opt : t->graphs.s_train;
}

/* The optimizer states of every parameter: "<param>.exp_avg", ... A
 * parameter has those its shape gives it (Adafactor: row and column
 * moments for matrices, a full one for vectors): the ones its session has. */
static const char *const *ty_optimizer_states(const ty_trainer_t *t) {
  ty_train_step_params_t step;
  ty_train_recipe_t recipe;
  /* the options were validated: neither call can fail here */
  ty_status_free(ty_train_config_recipe(&t->cfg, &recipe));
  ty_status_free(ty_train_graph_step_options(&recipe, &step));
  return ty_optimizer_state_kinds(step.optimizer);
}

/* The state `kind` of parameter `p`: its name "<param>.<kind>" (in `name`)
 * and descriptor; *out_present false (and OK) when the parameter has none of
 * that kind. */
static ty_status_t ty_optimizer_state_find(const ty_trainer_t *t, const ty_llm_param_t *p,
                                           const char *kind, char *name, size_t capacity,
                                           ty_tensor_desc_t *out, bool *out_present) {
  snprintf(name, capacity, "%s.%s", p->name, kind);
  ty_status_t s = ty_session_value_desc(ty_trainer_optimizer_session(t), name, out);
  *out_present = !s;
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
    ty_status_free(s);
    return TY_OK;
  }
  return s;
}

/* Tensor parallel: the parameters and/or the optimizer states this rank
 * holds gathered whole on its tp group's rank 0 (weights[i], states[i *
 * kinds + k]; NULL elsewhere and where a parameter has no state of a kind;
 * each array NULL when not asked for) before anything is written, so that
 * every tp rank runs the same gathers in the same order whatever the file
 * system does. The states are the parameter's shape (AdamW, SGD; Adafactor
 * is refused with --tp). Under ZeRO-1 a replica holds the states of its
 * share only, the same parameters on each of its tp ranks. */
typedef struct ty_tp_collected_t {
  void **weights;
  float **states;
  size_t kinds;
} ty_tp_collected_t;

static void ty_tp_collected_free(const ty_trainer_t *t, ty_tp_collected_t *c) {
  for (uint32_t i = 0; c->weights && i < t->graphs.m_train.param_count; ++i) free(c->weights[i]);
  for (size_t i = 0; c->states && i < t->graphs.m_train.param_count * c->kinds; ++i)
    free(c->states[i]);
  free(c->weights);
  free(c->states);
  memset(c, 0, sizeof(*c));
}

static ty_status_t ty_tp_collect(ty_trainer_t *t, bool weights, bool states,
                                 ty_tp_collected_t *c) {
  memset(c, 0, sizeof(*c));
  const char *const *kinds = ty_optimizer_states(t);
  while (kinds[c->kinds]) ++c->kinds;
  const uint32_t n = t->graphs.m_train.param_count;
  if (weights) c->weights = calloc(n ? n : 1, sizeof(void *));
  if (states) c->states = calloc(n * c->kinds + 1, sizeof(float *));
  ty_status_t s = (!weights || c->weights) && (!states || c->states)
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  const size_t elem = ty_dtype_size(t->graphs.m_train.options.dtype);
  for (uint32_t i = 0; i < n && !s; ++i) {
    const ty_llm_param_t *p = &t->graphs.m_train.params[i];
    if (weights) s = ty_trainer_tp_gather(t, t->graphs.s_train, p, p->name, elem, &c->weights[i]);
    for (size_t k = 0; states && k < c->kinds && !s; ++k) {
      char name[TY_LLM_NAME_MAX + 32];
      ty_tensor_desc_t desc;
      bool present = false;
      s = ty_optimizer_state_find(t, p, kinds[k], name, sizeof(name), &desc, &present);
      if (!s && present) {
        s = ty_trainer_tp_gather(t, ty_trainer_optimizer_session(t), p, name, sizeof(float),
                                 (void **)&c->states[i * c->kinds + k]);
      }
    }
  }
  if (s) ty_tp_collected_free(t, c);
  return s;
}

/* The optimizer states this rank's optimizer session holds (all of them,
 * or under ZeRO-1 those of its share) into <dir>/<file>; with tensor
 * parallel, the gathered whole ones of `tp` (else NULL; tp->states set). */
/* The run's identity and step, in the metadata of a file it writes. */
static ty_status_t ty_tag_writer(const ty_trainer_t *t, ty_safetensors_writer_t *w) {
  char step[32];
  snprintf(step, sizeof(step), "%lld", (long long)t->progress.step);
  TY_RETURN_IF_ERROR(ty_safetensors_writer_set_metadata(w, TY_CKPT_RUN_ID_KEY, t->folder.run_id));
  return ty_safetensors_writer_set_metadata(w, TY_CKPT_STEP_KEY, step);
}

static ty_status_t ty_save_optimizer(ty_trainer_t *t, const char *dir, const char *file,
                                     const ty_tp_collected_t *tp) {
  ty_safetensors_writer_t *w = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_writer_create(&w));
  ty_status_t tagged = ty_tag_writer(t, w);
  if (tagged) {
    ty_safetensors_writer_destroy(w);
    return tagged;
  }
  const char *const *kinds = ty_optimizer_states(t);
  size_t kind_count = 0;
  while (kinds[kind_count]) ++kind_count;
  size_t n = t->graphs.m_train.param_count * kind_count;
  float **data = calloc(n ? n : 1, sizeof(float *));
  ty_status_t s = data ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < t->graphs.m_train.param_count && !s; ++i) {
    const ty_llm_param_t *p = &t->graphs.m_train.params[i];
    for (size_t k = 0; k < kind_count && !s; ++k) {
      char name[TY_LLM_NAME_MAX + 32];
      ty_tensor_desc_t desc;
      bool present = false;
      s = ty_optimizer_state_find(t, p, kinds[k], name, sizeof(name), &desc, &present);
      if (s || !present) continue;
      if (tp) { /* whole, gathered: the parameter's full shape */
        s = ty_safetensors_writer_add(w, name, TY_DTYPE_F32, p->rank, p->full_dims,
                                      tp->states[i * kind_count + k],
                                      (uint64_t)ty_llm_param_full_count(p) * sizeof(float));
        continue;
      }
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
  if (!s) s = ty_path_join(path, sizeof(path), dir, file);
  if (!s) s = ty_safetensors_writer_write_file(w, path);
  ty_safetensors_writer_destroy(w);
  for (size_t i = 0; data && i < n; ++i) free(data[i]);
  free(data);
  return s;
}

/* ZeRO-1's shard file of share `r` (ty_trainer_zero_index: a replica, or
 * under --cp a cp rank of one) into name[64]. */
static void ty_optimizer_shard_name(const ty_trainer_t *t, int r, char name[64]) {
  snprintf(name, 64, "optimizer-%05d-of-%05d.safetensors", r + 1, ty_trainer_zero_shares(t));
}

/* ZeRO-1: the states of this rank's share into its shard, gathered whole
 * over the share's tp ranks under --tp (its tp rank 0 writes it), so the
 * shards hold whole tensors as without --tp. Collective over the tp
 * group. */
static ty_status_t ty_save_optimizer_share(ty_trainer_t *t, const char *dir) {
  char shard[64];
  ty_optimizer_shard_name(t, ty_trainer_zero_index(t), shard);
  if (t->par.tp == 1) return ty_save_optimizer(t, dir, shard, NULL);
  ty_tp_collected_t whole;
  ty_status_t s = ty_tp_collect(t, false, true, &whole);
  if (!s && t->cfg.tp_rank == 0) s = ty_save_optimizer(t, dir, shard, &whole);
  ty_tp_collected_free(t, &whole);
  return s;
}

/* ZeRO-1: rank 0 indexes the shards every share wrote (the Hugging Face
 * sharded layout, docs/formats.md), so any number of ranks can load them. */
static ty_status_t ty_write_optimizer_index(const ty_trainer_t *t, const char *dir) {
  json_t *map = json_object(), *root = json_object(), *meta = json_object();
  ty_status_t s = map && root && meta
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  json_int_t total = 0;
  for (int r = 0; r < ty_trainer_zero_shares(t) && !s; ++r) {
    char name[64], path[TY_CFG_PATH_MAX + 128];
    ty_optimizer_shard_name(t, r, name);
    s = ty_path_join(path, sizeof(path), dir, name);
    ty_safetensors_file_t *f = NULL;
    if (!s) s = ty_safetensors_open(path, &f);
    for (size_t i = 0; !s && i < ty_safetensors_file_tensor_count(f); ++i) {
      const ty_safetensors_tensor_t *tensor = ty_safetensors_file_tensor_at(f, i);
      json_object_set_new(map, tensor->name, json_string(name));
      total += (json_int_t)tensor->byte_size;
    }
    ty_safetensors_close(f);
  }
  char *text = NULL;
  if (!s) {
    json_object_set_new(meta, "total_size", json_integer(total));
    json_object_set_new(meta, "world_size", json_integer(t->par.world));
    /* one shard per share: world_size = replicas x tp_size x pp_size,
     * "replicas" counting the shares (under --cp every cp rank of every
     * replica: "zero_group" "dp_cp") */
    json_object_set_new(meta, "replicas", json_integer(ty_trainer_zero_shares(t)));
    if (t->par.tp > 1) json_object_set_new(meta, "tp_size", json_integer(t->par.tp));
    if (t->par.pp > 1) json_object_set_new(meta, "pp_size", json_integer(t->par.pp));
    if (t->par.cp > 1) {
      json_object_set_new(meta, "cp_size", json_integer(t->par.cp));
      json_object_set_new(meta, "zero_group", json_string(ty_trainer_zero_group(t)));
    }
    json_object_set_new(meta, "run_id", json_string(t->folder.run_id));
    json_object_set_new(meta, "step", json_integer(t->progress.step));
    json_object_set_new(meta, "format", json_string("trainyard optimizer state, ZeRO-1 shards"));
    json_object_set(root, "metadata", meta);
    json_object_set(root, "weight_map", map);
    text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  char path[TY_CFG_PATH_MAX + 64];
  if (!s) s = ty_path_join(path, sizeof(path), dir, "optimizer.safetensors.index.json");
  if (!s) s = ty_file_write_atomic(path, text, strlen(text));
  free(text);
  json_decref(map);
  json_decref(meta);
  json_decref(root);
  return s;
}

ty_status_t ty_trainer_load_optimizer(ty_trainer_t *t, const char *dir) {
  /* optimizer.safetensors, or the shards of a ZeRO-1 run: either loads into
   * any number of ranks, each taking the states of its share. */
  ty_safetensors_set_t *f = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_open_set(dir, "optimizer", TY_SAFETENSORS_OPEN_DEFAULT, &f));
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/optimizer%s", dir,
           ty_safetensors_set_is_sharded(f) ? ".safetensors.index.json" : ".safetensors");
  const char *const *kinds = ty_optimizer_states(t);
  ty_status_t s = TY_OK;
  unsigned warned = 0;
  for (uint32_t i = 0; i < t->graphs.m_train.param_count && !s; ++i) {
    const ty_llm_param_t *p = &t->graphs.m_train.params[i];
    for (size_t k = 0; kinds[k] && !s; ++k) {
      char name[TY_LLM_NAME_MAX + 32];
      ty_tensor_desc_t desc;
      bool present = false;
      s = ty_optimizer_state_find(t, p, kinds[k], name, sizeof(name), &desc, &present);
      if (s || !present) continue;
      const ty_safetensors_tensor_t *tensor = NULL;
      s = ty_safetensors_set_lookup(f, name, &tensor);
      /* The file holds whole states (any --tp saves them so): with tensor
       * parallel this rank takes its part of each. */
      const bool part = t->par.tp > 1 && p->tp_axis >= 0;
      const int64_t *want = part ? p->full_dims : desc.dims;
      if (!s && (tensor->dtype != TY_DTYPE_F32 || tensor->rank != desc.rank ||
                 memcmp(tensor->dims, want, desc.rank * sizeof(int64_t)) != 0)) {
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
      if (!s && part) {
        const size_t bytes = (size_t)ty_llm_param_part_count(p) * sizeof(float);
        float *mine = malloc(bytes ? bytes : 1);
        if (!mine) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory loading %s", name);
        if (!s)
          ty_llm_tp_take_part(p, t->par.tp, (int)t->cfg.tp_rank, sizeof(float), tensor->data, mine);
        if (!s) {
          s = ty_session_bind(ty_trainer_optimizer_session(t), name, TY_DTYPE_F32, desc.rank,
                              desc.dims, mine, bytes);
        }
        free(mine);
      } else if (!s) {
        s = ty_session_bind(ty_trainer_optimizer_session(t), name, TY_DTYPE_F32, desc.rank,
                            desc.dims, tensor->data, (size_t)tensor->byte_size);
      }
    }
  }
  ty_safetensors_set_close(f);
  return s;
}

static ty_status_t ty_write_state(const ty_trainer_t *t, const char *dir) {
  json_t *j = json_object();
  json_object_set_new(j, "format", json_string("trainyard-trainer-state"));
  json_object_set_new(j, "version", json_integer(1));
  json_object_set_new(j, "created_by", json_string("trainyard " TY_VERSION_STRING));
  json_object_set_new(j, "step", json_integer(t->progress.step));
  json_object_set_new(j, "run_id", json_string(t->folder.run_id));
  json_object_set_new(j, "epoch", json_integer(t->progress.epoch));
  json_object_set_new(j, "cursor", json_integer(t->progress.cursor));
  json_object_set_new(j, "tokens_seen", json_integer(t->progress.tokens_seen));
  /* What the progress fields are counted in, for the checks on resume. */
  json_object_set_new(j, "seq_len", json_integer(t->shape.T));
  json_object_set_new(j, "train_rows",
                      json_integer((json_int_t)ty_dataset_row_count(t->feed.train_data)));
  /* The ranks that made it: a resume on another count keeps the global
   * batch (world_size x batch_size x grad_accum). */
  json_object_set_new(j, "world_size", json_integer(t->par.world));
  json_object_set_new(j, "train_seconds", json_real(t->progress.train_seconds));
  json_object_set_new(j, "loss", json_real(t->progress.last_loss));
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

/* tokenizer.json: the exact bytes run_tokenizer.c loaded and checked at
 * the start (from --tokenizer, the data folder or the model folder). */
static ty_status_t ty_write_tokenizer(const ty_trainer_t *t, const char *dir) {
  if (!t->tok.tokenizer_json) return TY_OK; /* no tokenizer: the checkpoint loads by ids */
  char dst[TY_CFG_PATH_MAX + 64];
  TY_RETURN_IF_ERROR(ty_path_join(dst, sizeof(dst), dir, "tokenizer.json"));
  return ty_file_write_atomic(dst, t->tok.tokenizer_json, t->tok.tokenizer_json_size);
}

static ty_status_t ty_prune(ty_trainer_t *t) {
  if (t->cfg.keep <= 0) return TY_OK;
  int64_t *steps = NULL;
  size_t n = 0;
  ty_status_t s = ty_run_folder_checkpoints(t->folder.run, &steps, &n);
  for (size_t i = 0; !s && i + (size_t)t->cfg.keep < n; ++i) {
    s = ty_run_folder_remove_checkpoint(t->folder.run, steps[i]);
  }
  free(steps);
  return s;
}

/* Puts the whole checkpoint folder `tmp` in place as `final`. When `final`
 * exists (the checkpoint a run resumed from, saved again by a stop before
 * any step), the two are swapped atomically, so that a crash at any moment
 * leaves one whole checkpoint of that step. */
static ty_status_t ty_publish(const char *tmp, const char *final) {
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
    return ty_run_folder_remove_tree(tmp); /* now the old one */
  }
  if (errno != ENOENT && errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return ty_errno_status("cannot exchange into", final);
  }
  /* No checkpoint of that step yet, or a file system without exchange. */
  if (errno != ENOENT) TY_RETURN_IF_ERROR(ty_run_folder_remove_tree(final));
  if (rename(tmp, final) != 0) return ty_errno_status("cannot rename into", final);
  return TY_OK;
}

ty_status_t ty_trainer_save(ty_trainer_t *t) {
  char tmp[TY_CFG_PATH_MAX + 64], final[TY_CFG_PATH_MAX + 64];
  snprintf(tmp, sizeof(tmp), "%s/" TY_RUN_CKPT_TMP_PREFIX "%lld.tmp-%ld", t->cfg.out,
           (long long)t->progress.step, (long)getpid());
  snprintf(final, sizeof(final), "%s/" TY_RUN_CKPT_PREFIX "%lld", t->cfg.out,
           (long long)t->progress.step);
  ty_status_t s = TY_OK;
  /* Tensor parallel: the parts of replica 0's tp ranks, gathered whole on
   * rank 0, which alone writes the model (one Hugging Face checkpoint,
   * loadable with any --tp) and without ZeRO-1 the one single-process
   * optimizer file. */
  ty_tp_collected_t tp = {0};
  if (t->par.tp > 1 && !t->par.pipe &&
      t->par.dp_rank == 0) { /* --pp: rank 0's mirror is whole already */
    s = ty_tp_collect(t, true, !t->par.owner, &tp);
  }
  if (!t->par.owner && (s || t->par.rank != 0)) {
    ty_tp_collected_free(t, &tp);
    return s ? ty_status_annotate(s, "saving checkpoint %lld", (long long)t->progress.step) : TY_OK;
  }
  if (t->par.rank == 0 && !s) {
    s = ty_run_folder_remove_tree(tmp);
    if (!s && mkdir(tmp, 0777) != 0) s = ty_errno_status("cannot create", tmp);
    if (!s) s = ty_write_model_config(t, tmp);
    if (!s) {
      char step[32];
      snprintf(step, sizeof(step), "%lld", (long long)t->progress.step);
      const ty_llm_weights_tag_t tags[] = {{TY_CKPT_RUN_ID_KEY, t->folder.run_id},
                                           {TY_CKPT_STEP_KEY, step}};
      s = ty_llm_save_weights_tagged(&t->graphs.m_train, t->graphs.s_train, tp.weights, tmp, 0,
                                     tags, 2);
    }
    /* Test hook: a pause mid-save, for the crash-during-save test. */
    const char *pause = getenv("TRAINYARD_DEBUG_SAVE_SLEEP_MS");
    if (!s && pause && atol(pause) > 0) usleep((useconds_t)atol(pause) * 1000u);
    if (!s) s = ty_write_tokenizer(t, tmp);
    if (!s && !t->par.owner) {
      s = ty_save_optimizer(t, tmp, "optimizer.safetensors", tp.states ? &tp : NULL);
    }
  }
  ty_tp_collected_free(t, &tp);
  if (t->par.owner) {
    /* ZeRO-1: every replica writes its share of the optimizer state into
     * rank 0's hidden folder; rank 0 indexes the shards and renames the
     * folder only once every rank has written its part. */
    s = ty_dist_agree(t->par.dist, s, "preparing the checkpoint");
    if (!s) s = ty_dist_broadcast(t->par.dist, 0, tmp, sizeof(tmp), "the checkpoint folder");
    if (!s) s = ty_save_optimizer_share(t, tmp);
    s = ty_dist_agree(t->par.dist, s, "writing the optimizer shards");
    if (!s && t->par.rank == 0) s = ty_write_optimizer_index(t, tmp);
    if (t->par.rank != 0)
      return ty_status_annotate(s, "saving checkpoint %lld", (long long)t->progress.step);
  }
  if (!s) s = ty_write_state(t, tmp); /* last: its presence marks a whole checkpoint */
  if (!s) s = ty_fsync_path(tmp);
  if (!s) s = ty_publish(tmp, final);
  /* Test hook: a pause once the checkpoint is published (renamed into
   * place), before the run folder is synced: a kill here must find it whole
   * (tests/apps/test_ckpt_durability.py). */
  const char *published = getenv("TRAINYARD_DEBUG_SAVE_PUBLISHED_SLEEP_MS");
  if (!s && published && atol(published) > 0) usleep((useconds_t)atol(published) * 1000u);
  if (!s) s = ty_fsync_path(t->cfg.out);
  if (s) {
    ty_status_free(ty_run_folder_remove_tree(tmp));
    return ty_status_annotate(s, "saving checkpoint %lld", (long long)t->progress.step);
  }
  /* The new checkpoint is safe; a failed prune only leaves an old one. */
  ty_status_t pruned = ty_prune(t);
  if (pruned) {
    fprintf(stderr, "trainyard train: warning: %s\n", ty_status_message(pruned));
    ty_status_free(pruned);
  }
  return TY_OK;
}
