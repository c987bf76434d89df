/* `trainyard ckpt`: `diff` compares two checkpoints (ckpt_diff.c); `merge`
 * and `split`, here, convert a checkpoint's optimizer state between one
 * file (optimizer.safetensors, what a run without ZeRO writes) and shards
 * with an index (what `train --zero 1` writes, one per rank:
 * optimizer-<k>-of-<n>.safetensors and optimizer.safetensors.index.json).
 * A run loads either layout on any number of ranks; these are for tools
 * that want one file, and for tests. Both write the new files first and
 * remove the old ones last, so an interrupted conversion leaves a loadable
 * checkpoint. Both first check that every part comes from one run and one
 * save (files/ckpt_identity.h) and carry that identity into what they
 * write. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "ckpt/ckpt_diff.h"
#include "files/ckpt_identity.h"
#include "hal/file.h"
#include "models/safetensors.h"

static const char *const ty_ckpt_usage =
    "usage: trainyard ckpt merge CHECKPOINT\n"
    "       trainyard ckpt split CHECKPOINT --ranks N\n"
    "       trainyard ckpt diff A B [options]\n"
    "\n"
    "diff compares two checkpoints (or model folders, or .safetensors files) tensor\n"
    "by tensor; 'trainyard ckpt diff --help' tells its options.\n"
    "\n"
    "Converts the optimizer state of a 'trainyard train' checkpoint folder:\n"
    "  merge   the shards of a ZeRO-1 run, train zero=1 (optimizer-*-of-*.safetensors,\n"
    "          optimizer.safetensors.index.json) into optimizer.safetensors\n"
    "  split   optimizer.safetensors into N shards and their index, as N ranks\n"
    "          of a ZeRO-1 run write them\n"
    "Either layout resumes on any number of ranks; the weights are untouched.\n"
    "Both refuse a folder whose parts (model, optimizer files, index) come from\n"
    "different runs or saves, naming the files.\n"
    "\n"
    "  --ranks N     shards to split into (>= 2)\n"
    "  -h, --help    this help\n";

static ty_status_t ty_ckpt_path(char *out, size_t capacity, const char *dir, const char *name) {
  int n = snprintf(out, capacity, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= capacity) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "path %s/%s is too long", dir, name);
  }
  return TY_OK;
}

/* Every tensor of `set` into a writer; shard k of n takes those whose index
 * i (in the set's order) has owner[i] == k (owner NULL: all). */
static ty_status_t ty_ckpt_write(const ty_safetensors_set_t *set, const int *owner, int k,
                                 const ty_ckpt_identity_t *id, const char *path,
                                 size_t *out_count) {
  ty_safetensors_writer_t *w = NULL;
  TY_RETURN_IF_ERROR(ty_safetensors_writer_create(&w));
  ty_status_t s = TY_OK;
  if (id->run_id[0]) { /* a checkpoint from before run ids stays without */
    char step[32];
    snprintf(step, sizeof(step), "%lld", (long long)id->step);
    s = ty_safetensors_writer_set_metadata(w, TY_CKPT_RUN_ID_KEY, id->run_id);
    if (!s) s = ty_safetensors_writer_set_metadata(w, TY_CKPT_STEP_KEY, step);
  }
  size_t count = 0;
  for (size_t i = 0; i < ty_safetensors_set_tensor_count(set) && !s; ++i) {
    if (owner && owner[i] != k) continue;
    const ty_safetensors_tensor_t *t = ty_safetensors_set_tensor_at(set, i);
    s = ty_safetensors_writer_add(w, t->name, t->dtype, t->rank, t->dims, t->data, t->byte_size);
    ++count;
  }
  if (!s) s = ty_safetensors_writer_write_file(w, path);
  ty_safetensors_writer_destroy(w);
  *out_count = count;
  return s;
}

static ty_status_t ty_ckpt_merge(const char *dir) {
  ty_safetensors_set_t *set = NULL;
  ty_ckpt_identity_t id;
  ty_status_t opened = ty_ckpt_optimizer_open(dir, &set, &id);
  if (opened) return ty_status_annotate(opened, "refusing to merge");
  if (!ty_safetensors_set_is_sharded(set)) {
    ty_safetensors_set_close(set);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s: the optimizer state is one file already (optimizer.safetensors)",
                          dir);
  }
  char path[4096], index[4096];
  size_t count = 0;
  ty_status_t s = ty_ckpt_path(path, sizeof(path), dir, "optimizer.safetensors");
  if (!s) s = ty_ckpt_path(index, sizeof(index), dir, "optimizer.safetensors.index.json");
  if (!s) s = ty_ckpt_write(set, NULL, 0, &id, path, &count);
  /* The index goes first: without it the folder is the one-file layout. */
  if (!s && unlink(index) != 0) s = ty_status_from_errno(errno, "cannot remove %s", index);
  for (size_t i = 0; !s && i < ty_safetensors_set_shard_count(set); ++i) {
    const char *shard = ty_safetensors_file_path(ty_safetensors_set_shard(set, i));
    if (unlink(shard) != 0) s = ty_status_from_errno(errno, "cannot remove %s", shard);
  }
  if (!s) printf("merged %zu optimizer tensors into %s\n", count, path);
  ty_safetensors_set_close(set);
  return s;
}

static ty_status_t ty_ckpt_split(const char *dir, int ranks) {
  ty_safetensors_set_t *set = NULL;
  ty_ckpt_identity_t id;
  ty_status_t opened = ty_ckpt_optimizer_open(dir, &set, &id);
  if (opened) return ty_status_annotate(opened, "refusing to split");
  if (ty_safetensors_set_is_sharded(set)) {
    ty_safetensors_set_close(set);
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "%s: the optimizer state is sharded already; 'trainyard ckpt merge' "
                          "it first",
                          dir);
  }
  size_t n = ty_safetensors_set_tensor_count(set);
  int *owner = calloc(n ? n : 1, sizeof(int));
  uint64_t *load = calloc((size_t)ranks, sizeof(uint64_t));
  json_t *map = json_object(), *root = json_object(), *meta = json_object();
  ty_status_t s = owner && load && map && root && meta
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  /* In order, each to the least-loaded shard: sizes within one tensor. */
  uint64_t total = 0;
  for (size_t i = 0; i < n && !s; ++i) {
    const ty_safetensors_tensor_t *t = ty_safetensors_set_tensor_at(set, i);
    int r = 0;
    for (int q = 1; q < ranks; ++q) r = load[q] < load[r] ? q : r;
    owner[i] = r;
    load[r] += t->byte_size;
    total += t->byte_size;
  }
  for (int r = 0; r < ranks && !s; ++r) {
    char name[64], path[4096];
    snprintf(name, sizeof(name), "optimizer-%05d-of-%05d.safetensors", r + 1, ranks);
    size_t count = 0;
    s = ty_ckpt_path(path, sizeof(path), dir, name);
    if (!s) s = ty_ckpt_write(set, owner, r, &id, path, &count);
    for (size_t i = 0; i < n && !s; ++i) {
      if (owner[i] == r) {
        json_object_set_new(map, ty_safetensors_set_tensor_at(set, i)->name, json_string(name));
      }
    }
  }
  char *text = NULL;
  if (!s) {
    json_object_set_new(meta, "total_size", json_integer((json_int_t)total));
    json_object_set_new(meta, "world_size", json_integer(ranks));
    json_object_set_new(meta, "replicas", json_integer(ranks));
    if (id.run_id[0]) {
      json_object_set_new(meta, "run_id", json_string(id.run_id));
      json_object_set_new(meta, "step", json_integer(id.step));
    }
    json_object_set_new(meta, "format", json_string("trainyard optimizer state, ZeRO-1 shards"));
    json_object_set(root, "metadata", meta);
    json_object_set(root, "weight_map", map);
    text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  char index[4096], single[4096];
  if (!s) s = ty_ckpt_path(index, sizeof(index), dir, "optimizer.safetensors.index.json");
  if (!s) s = ty_ckpt_path(single, sizeof(single), dir, "optimizer.safetensors");
  /* The index makes the shards the state; the one file goes after it. */
  if (!s) s = ty_file_write_atomic(index, text, strlen(text));
  ty_safetensors_set_close(set); /* unmaps the file before it is removed */
  if (!s && unlink(single) != 0) s = ty_status_from_errno(errno, "cannot remove %s", single);
  if (!s) printf("split %zu optimizer tensors into %d shards in %s\n", n, ranks, dir);
  free(text);
  free(owner);
  free(load);
  json_decref(map);
  json_decref(meta);
  json_decref(root);
  return s;
}

int ty_cmd_ckpt(ty_app_t *app, int argc, char **argv) {
  (void)app;
  if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    fputs(ty_ckpt_usage, stdout);
    return TY_EXIT_OK;
  }
  if (argc >= 2 && !strcmp(argv[1], "diff")) return ty_cmd_ckpt_diff(argc - 1, argv + 1);
  if (argc < 2 || (strcmp(argv[1], "merge") && strcmp(argv[1], "split"))) {
    return ty_app_usage_error("ckpt", "expected 'merge', 'split' or 'diff'");
  }
  const bool split = !strcmp(argv[1], "split");
  static const struct option longopts[] = {{"ranks", required_argument, NULL, 'r'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  long ranks = 0;
  optind = 1;
  opterr = 0;
  int c;
  if (ty_app_refuse_empty_values("ckpt", argc - 1, argv + 1, "h", longopts) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc - 1, argv + 1, "h", longopts, NULL)) != -1) {
    if (c == 'h') {
      fputs(ty_ckpt_usage, stdout);
      return TY_EXIT_OK;
    }
    if (c == 'r' && split) {
      char *end = NULL;
      ranks = strtol(optarg, &end, 10);
      if (!end || *end || ranks < 2 || ranks > 65536) {
        return ty_app_usage_error("ckpt", "--ranks must be a number from 2 to 65536, not '%s'",
                                  optarg);
      }
      continue;
    }
    if (c == 'r') return ty_app_usage_error("ckpt", "--ranks is for 'ckpt split'");
    return ty_app_usage_error("ckpt", "unknown option '%s'", argv[optind]);
  }
  if (argc - 1 - optind != 1) {
    return ty_app_usage_error("ckpt", "give one checkpoint folder");
  }
  if (split && !ranks) return ty_app_usage_error("ckpt", "split needs --ranks N");
  const char *dir = argv[1 + optind];
  ty_status_t s = split ? ty_ckpt_split(dir, (int)ranks) : ty_ckpt_merge(dir);
  return s ? ty_app_fail("ckpt", s) : TY_EXIT_OK;
}
