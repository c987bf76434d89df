/* Run identity of a checkpoint's parts (see ckpt_identity.h). */
#include "files/ckpt_identity.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "hal/file.h"
#include "models/safetensors.h"

static const ty_file_kind_t ty_ident_json_kind = {
    .what = "checkpoint file", .max_bytes = 64 * TY_MIB, .text = true,
    .bad_code = TY_CODE_DATA_LOSS};

ty_status_t ty_ckpt_run_id_new(char out[TY_CKPT_RUN_ID_CAP]) {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ty_status_from_errno(errno, "cannot draw a random run id");
    got += (size_t)n;
  }
  for (size_t i = 0; i < sizeof(bytes); ++i) snprintf(out + 2 * i, 3, "%02x", bytes[i]);
  return TY_OK;
}

int ty_ckpt_run_id_valid(const char *id) {
  size_t n = strlen(id);
  if (n == 0 || n > 32) return 0;
  for (size_t i = 0; i < n; ++i) {
    if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'))) return 0;
  }
  return 1;
}

/* "run <id> at step <n>", or what stands for a missing id. */
static void ty_ident_describe(const char *id, int64_t step, char *out, size_t capacity) {
  const bool none = !id || !id[0];
  int n = snprintf(out, capacity, "%s%s", none ? "no run id (from before run ids, or another "
                   "tool's)" : "run ", none ? "" : id);
  if (n < 0 || (size_t)n >= capacity) return;
  if (step >= 0) {
    snprintf(out + n, capacity - (size_t)n, " at step %" PRId64, step);
  } else if (!none) {
    snprintf(out + n, capacity - (size_t)n, " (no step)");
  }
}

/* A part whose id and step (-1: none) must be want's. */
static ty_status_t ty_ident_compare(const char *part, const char *id, int64_t step,
                                    const ty_ckpt_identity_t *want) {
  const char *have = id ? id : "";
  bool same = !strcmp(have, want->run_id) && (!have[0] || step == want->step);
  if (same) return TY_OK;
  char a[160], b[160];
  ty_ident_describe(have, step, a, sizeof(a));
  ty_ident_describe(want->run_id, want->step, b, sizeof(b));
  return ty_status_make(TY_CODE_DATA_LOSS,
                        "%s is from %s, but %s is from %s: the checkpoint mixes parts of "
                        "different runs or saves; use the files of one save together (a "
                        "checkpoint-<step> folder as the run wrote it)",
                        part, a, want->source, b);
}

/* The step in a file's metadata: -1 when absent, DATA_LOSS when not a number. */
static ty_status_t ty_ident_parse_step(const char *part, const char *text, int64_t *out) {
  *out = -1;
  if (!text) return TY_OK;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 10);
  if (!text[0] || *end || errno || v < 0) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: metadata " TY_CKPT_STEP_KEY " '%s' is not a "
                          "step number", part, text);
  }
  *out = v;
  return TY_OK;
}

static ty_status_t ty_ident_check_file(const ty_safetensors_file_t *f,
                                       const ty_ckpt_identity_t *want) {
  const char *path = ty_safetensors_file_path(f);
  int64_t step = -1;
  TY_RETURN_IF_ERROR(ty_ident_parse_step(
      path, ty_safetensors_file_metadata_get(f, TY_CKPT_STEP_KEY), &step));
  return ty_ident_compare(path, ty_safetensors_file_metadata_get(f, TY_CKPT_RUN_ID_KEY), step,
                          want);
}

/* Every file of the set `base` ("model", "optimizer"); a folder without
 * one (a checkpoint without optimizer state) has nothing to check. */
static ty_status_t ty_ident_check_set(const char *dir, const char *base,
                                      const ty_ckpt_identity_t *want, size_t *out_shards) {
  *out_shards = 0;
  ty_safetensors_set_t *set = NULL;
  ty_status_t s = ty_safetensors_open_set(dir, base, TY_SAFETENSORS_OPEN_DEFAULT, &set);
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
    ty_status_free(s);
    return TY_OK; /* the loader names a missing part itself */
  }
  TY_RETURN_IF_ERROR(s);
  for (size_t i = 0; i < ty_safetensors_set_shard_count(set) && !s; ++i) {
    s = ty_ident_check_file(ty_safetensors_set_shard(set, i), want);
  }
  *out_shards = ty_safetensors_set_is_sharded(set) ? ty_safetensors_set_shard_count(set) : 0;
  ty_safetensors_set_close(set);
  return s;
}

/* An integer field of the index metadata: -1 when absent. */
static ty_status_t ty_ident_index_int(const char *path, const json_t *meta, const char *key,
                                      int64_t *out) {
  const json_t *v = json_object_get(meta, key);
  *out = -1;
  if (!v) return TY_OK;
  if (!json_is_integer(v) || json_integer_value(v) < 0) {
    return ty_status_make(TY_CODE_DATA_LOSS, "%s: metadata \"%s\" is not a count", path, key);
  }
  *out = (int64_t)json_integer_value(v);
  return TY_OK;
}

/* The ZeRO-1 index: its identity, and its world size against `shards`. */
static ty_status_t ty_ident_check_index(const char *dir, const ty_ckpt_identity_t *want,
                                        size_t shards) {
  char path[4200];
  snprintf(path, sizeof(path), "%s/optimizer.safetensors.index.json", dir);
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_ident_json_kind, &text, &size));
  json_error_t err;
  json_t *root = json_loadb(text, size, 0, &err);
  free(text);
  const json_t *meta = json_object_get(root, "metadata");
  ty_status_t s = json_is_object(meta)
                      ? TY_OK
                      : ty_status_make(TY_CODE_DATA_LOSS, "%s: no \"metadata\" object", path);
  const json_t *id = json_object_get(meta, "run_id");
  if (!s && id && !json_is_string(id)) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: metadata \"run_id\" is not a string", path);
  }
  int64_t step = -1, world = -1, tp = -1, pp = -1, cp = -1, replicas = -1;
  if (!s) s = ty_ident_index_int(path, meta, "step", &step);
  if (!s) s = ty_ident_index_int(path, meta, "world_size", &world);
  if (!s) s = ty_ident_index_int(path, meta, "tp_size", &tp);
  if (!s) s = ty_ident_index_int(path, meta, "pp_size", &pp);
  if (!s) s = ty_ident_index_int(path, meta, "cp_size", &cp);
  if (!s) s = ty_ident_index_int(path, meta, "replicas", &replicas);
  if (!s) s = ty_ident_compare(path, id ? json_string_value(id) : NULL, step, want);
  /* One shard per share: world_size = replicas x tp_size x pp_size,
   * where "zero_group" "dp_cp" says the shares are every cp rank's;
   * without it (an index of before) the cp ranks of a replica shared its
   * shard, and world_size = replicas x tp_size x pp_size x cp_size. An
   * index from before "replicas" holds no pp_size: its world need only be
   * a multiple of the shards over tp. */
  const json_t *group = json_object_get(meta, "zero_group");
  if (!s && group && (!json_is_string(group) || (strcmp(json_string_value(group), "dp") &&
                                                 strcmp(json_string_value(group), "dp_cp")))) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: metadata \"zero_group\" is not \"dp\" or "
                       "\"dp_cp\"", path);
  }
  const bool over_cp = group && json_is_string(group) && !strcmp(json_string_value(group), "dp_cp");
  const int64_t n = (int64_t)shards, tps = tp > 0 ? tp : 1, pps = pp > 0 ? pp : 1;
  const int64_t cps = cp > 0 && !over_cp ? cp : 1;
  if (!s && replicas >= 0 && (replicas != n || world != replicas * tps * pps * cps)) {
    char rule[96];
    snprintf(rule, sizeof(rule), "replicas x tp_size x pp_size%s = %" PRId64,
             over_cp ? " (zero_group dp_cp)" : " x cp_size", replicas * tps * pps * cps);
    s = ty_status_make(TY_CODE_DATA_LOSS,
                       "%s says %" PRId64 " replicas (world_size %" PRId64 ", tp_size %" PRId64
                       ", pp_size %" PRId64 ", cp_size %" PRId64 "; world_size should be %s) "
                       "but %s holds %" PRId64 " optimizer shards: the index and the shards do "
                       "not belong together",
                       path, replicas, world, tps, pps, cp > 0 ? cp : 1, rule, dir, n);
  } else if (!s && replicas < 0 && (world <= 0 || world % tps || (world / tps) % n)) {
    s = ty_status_make(TY_CODE_DATA_LOSS,
                       "%s says world_size %" PRId64 " (tp_size %" PRId64 ") but %s holds %" PRId64
                       " optimizer shards: the index and the shards do not belong together",
                       path, world, tps, dir, n);
  }
  json_decref(root);
  return s;
}

ty_status_t ty_ckpt_identity_of_state(const char *dir, ty_ckpt_identity_t *out) {
  memset(out, 0, sizeof(*out));
  out->step = -1;
  snprintf(out->source, sizeof(out->source), "%s/trainer_state.json", dir);
  if (access(out->source, F_OK) != 0) {
    return ty_status_from_errno(errno, "no trainer state %s", out->source);
  }
  char *text = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(out->source, &ty_ident_json_kind, &text, &size));
  json_error_t err;
  json_t *root = json_loadb(text, size, 0, &err);
  free(text);
  const json_t *id = json_object_get(root, "run_id"), *step = json_object_get(root, "step");
  ty_status_t s = TY_OK;
  if (!json_is_integer(step) || json_integer_value(step) < 0) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: \"step\" is missing or not a step number",
                       out->source);
  } else if (id && (!json_is_string(id) || !ty_ckpt_run_id_valid(json_string_value(id)))) {
    s = ty_status_make(TY_CODE_DATA_LOSS, "%s: \"run_id\" is not a run id (1 to 32 lowercase "
                       "hex digits)", out->source);
  } else {
    out->step = (int64_t)json_integer_value(step);
    if (id) snprintf(out->run_id, sizeof(out->run_id), "%s", json_string_value(id));
  }
  json_decref(root);
  return s;
}

ty_status_t ty_ckpt_identity_check(const char *dir, const ty_ckpt_identity_t *want) {
  size_t shards = 0;
  TY_RETURN_IF_ERROR(ty_ident_check_set(dir, "model", want, &shards));
  TY_RETURN_IF_ERROR(ty_ident_check_set(dir, "optimizer", want, &shards));
  return shards ? ty_ident_check_index(dir, want, shards) : TY_OK;
}

/* The identity every part of `dir` must carry: its trainer_state.json's,
 * else (a folder of optimizer files alone) that of the first optimizer
 * file; then every part against it. */
static ty_status_t ty_ckpt_identity_of_folder(const char *dir, const ty_safetensors_set_t *set,
                                              ty_ckpt_identity_t *out) {
  ty_status_t s = ty_ckpt_identity_of_state(dir, out);
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND && ty_safetensors_set_shard_count(set)) {
    ty_status_free(s);
    s = TY_OK;
    const ty_safetensors_file_t *f = ty_safetensors_set_shard(set, 0);
    const char *id = ty_safetensors_file_metadata_get(f, TY_CKPT_RUN_ID_KEY);
    const char *step = ty_safetensors_file_metadata_get(f, TY_CKPT_STEP_KEY);
    memset(out, 0, sizeof(*out));
    snprintf(out->run_id, sizeof(out->run_id), "%s", id ? id : "");
    out->step = step ? strtoll(step, NULL, 10) : -1;
    snprintf(out->source, sizeof(out->source), "%s", ty_safetensors_file_path(f));
  }
  TY_RETURN_IF_ERROR(s);
  return ty_ckpt_identity_check(dir, out);
}

ty_status_t ty_ckpt_optimizer_open(const char *dir, ty_safetensors_set_t **out_set,
                                   ty_ckpt_identity_t *out_id) {
  *out_set = NULL;
  ty_safetensors_set_t *set = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_open_set(dir, "optimizer", TY_SAFETENSORS_OPEN_DEFAULT, &set));
  ty_status_t s = ty_ckpt_identity_of_folder(dir, set, out_id);
  if (s) {
    ty_safetensors_set_close(set);
    return s;
  }
  *out_set = set;
  return TY_OK;
}
