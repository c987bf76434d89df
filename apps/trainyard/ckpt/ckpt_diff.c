/* `trainyard ckpt diff A B`: two checkpoints (or model folders, or
 * safetensors files) compared tensor by tensor, matched by name, with the
 * figures of ckpt/tensor_diff.h, the differing tensors ranked worst first,
 * and exit 0 only when every tensor agrees within the tolerance.
 *
 * Both sides stay mapped (the safetensors readers map their files) and
 * are read one tensor pair at a time; the pages of a pair are handed back
 * to the kernel once it is compared, so a diff of two large checkpoints
 * holds about two tensors in memory, not two checkpoints. */
#include "ckpt/ckpt_diff.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app.h"
#include "ckpt/tensor_diff.h"
#include "files/ckpt_identity.h"
#include "models/safetensors.h"

#define TY_DIFF_CMD "ckpt diff"

static const char *const ty_diff_usage =
    "usage: trainyard ckpt diff A B [--tol T] [--rtol R] [--top N] [--json] [--weights-only]\n"
    "\n"
    "Compares two checkpoints tensor by tensor. A and B are each a checkpoint folder\n"
    "of 'trainyard train' (model.safetensors and the optimizer state, one file or\n"
    "ZeRO-1 shards with their index), a Hugging Face model folder (model.safetensors,\n"
    "or model-*-of-*.safetensors with model.safetensors.index.json) or one\n"
    ".safetensors file. Tensors are matched by name. For each: max absolute and\n"
    "relative error (|a-b| / max(|a|,|b|)), max ULP distance in its own dtype\n"
    "(integers: absolute difference), differing elements, NaN/Inf counts of each side,\n"
    "and a SHA-256 of each side's bytes (16 hex digits). A NaN equals a NaN at the same\n"
    "place; -0 equals +0. A tensor on one side only, or of another shape or dtype,\n"
    "is a difference.\n"
    "\n"
    "  --tol T         absolute tolerance (default 0)\n"
    "  --rtol R        relative tolerance (default 0): an element agrees when\n"
    "                  |a-b| <= T + R*|b|; by default only equal values agree\n"
    "  --top N         list at most N differing tensors, worst first (default 20)\n"
    "  --json          one JSON object with every tensor's figures instead\n"
    "  --weights-only  leave out the optimizer state\n"
    "  -h, --help      this help\n"
    "\n"
    "Exit status: 0 every tensor agrees within the tolerance, 1 some tensor differs or\n"
    "is on one side only, 2 bad input (a missing path, a folder without tensors, a\n"
    "broken file) or usage.\n";

/* ---- one side ------------------------------------------------------------- */

typedef struct ty_diff_side_t {
  const char *path;             /* as given */
  const char *label;            /* "A" or "B" */
  ty_safetensors_file_t *file;  /* a .safetensors file given itself */
  ty_safetensors_set_t *model;  /* a folder's model */
  ty_safetensors_set_t *optim;  /* a folder's optimizer state */
} ty_diff_side_t;

static size_t ty_diff_count(const ty_safetensors_set_t *set) {
  return set ? ty_safetensors_set_tensor_count(set) : 0;
}

static size_t ty_diff_side_count(const ty_diff_side_t *side) {
  return (side->file ? ty_safetensors_file_tensor_count(side->file) : 0) +
         ty_diff_count(side->model) + ty_diff_count(side->optim);
}

static const ty_safetensors_tensor_t *ty_diff_side_at(const ty_diff_side_t *side, size_t i) {
  if (side->file) return ty_safetensors_file_tensor_at(side->file, i);
  size_t m = ty_diff_count(side->model);
  return i < m ? ty_safetensors_set_tensor_at(side->model, i)
               : ty_safetensors_set_tensor_at(side->optim, i - m);
}

static const ty_safetensors_tensor_t *ty_diff_side_find(const ty_diff_side_t *side,
                                                        const char *name) {
  if (side->file) return ty_safetensors_file_find(side->file, name);
  const ty_safetensors_tensor_t *t = side->model ? ty_safetensors_set_find(side->model, name) : NULL;
  if (!t && side->optim) t = ty_safetensors_set_find(side->optim, name);
  return t;
}

static void ty_diff_side_close(ty_diff_side_t *side) {
  ty_safetensors_close(side->file);
  ty_safetensors_set_close(side->model);
  ty_safetensors_set_close(side->optim);
}

static bool ty_diff_exists(const char *dir, const char *name) {
  char path[4096];
  int n = snprintf(path, sizeof(path), "%s/%s", dir, name);
  return n > 0 && (size_t)n < sizeof(path) && access(path, F_OK) == 0;
}

/* Opens a folder's model and (unless weights_only) optimizer state; either
 * may be absent, not both. The optimizer state is opened as `ckpt merge`
 * opens it (ZeRO-1 shards gathered by their index, the folder's parts
 * checked to come from one save). */
static ty_status_t ty_diff_open_folder(ty_diff_side_t *side, bool weights_only) {
  ty_status_t s = ty_safetensors_open_dir(side->path, &side->model);
  if (s && ty_status_code(s) == TY_CODE_NOT_FOUND) {
    ty_status_free(s);
    s = TY_OK;
    side->model = NULL;
  }
  TY_RETURN_IF_ERROR(s);
  if (!weights_only && (ty_diff_exists(side->path, "optimizer.safetensors") ||
                        ty_diff_exists(side->path, "optimizer.safetensors.index.json"))) {
    ty_ckpt_identity_t id;
    TY_RETURN_IF_ERROR(ty_ckpt_optimizer_open(side->path, &side->optim, &id));
  }
  if (!ty_diff_side_count(side)) {
    return ty_status_make(
        TY_CODE_NOT_FOUND,
        "%s holds no tensors: no model.safetensors (or model.safetensors.index.json)%s; give a "
        "checkpoint folder, a model folder or a .safetensors file",
        side->path,
        weights_only ? " (--weights-only leaves out the optimizer state)"
                     : " and no optimizer.safetensors (or its index)");
  }
  /* Matching is by name, so one name must mean one tensor per side. */
  for (size_t i = 0; i < ty_diff_count(side->optim) && side->model; ++i) {
    const ty_safetensors_tensor_t *t = ty_safetensors_set_tensor_at(side->optim, i);
    const ty_safetensors_tensor_t *m = ty_safetensors_set_find(side->model, t->name);
    if (m) {
      return ty_status_make(TY_CODE_DATA_LOSS, "tensor '%s' is both in %s and in %s", t->name,
                            ty_safetensors_file_path(m->file), ty_safetensors_file_path(t->file));
    }
  }
  return TY_OK;
}

static ty_status_t ty_diff_side_open_path(ty_diff_side_t *side, bool weights_only) {
  struct stat st;
  if (stat(side->path, &st) != 0) {
    if (errno == ENOENT) {
      return ty_status_make(TY_CODE_NOT_FOUND,
                            "%s does not exist; give a checkpoint folder, a model folder "
                            "or a .safetensors file",
                            side->path);
    }
    return ty_status_from_errno(errno, "cannot read %s", side->path);
  }
  if (S_ISDIR(st.st_mode)) return ty_diff_open_folder(side, weights_only);
  if (!S_ISREG(st.st_mode)) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s is neither a folder nor a file; give a checkpoint folder, a model "
                          "folder or a .safetensors file",
                          side->path);
  }
  TY_RETURN_IF_ERROR(ty_safetensors_open(side->path, &side->file));
  if (!ty_diff_side_count(side)) {
    return ty_status_make(TY_CODE_NOT_FOUND, "%s holds no tensors", side->path);
  }
  return TY_OK;
}

/* Opens side A or B; errors start with its label. */
static ty_status_t ty_diff_side_open(ty_diff_side_t *side, bool weights_only) {
  return ty_status_annotate(ty_diff_side_open_path(side, weights_only), "%s", side->label);
}

/* "model.safetensors (12 tensors), optimizer.safetensors.index.json: 2
 * shards (24 tensors)": where a side's tensors come from. */
static void ty_diff_side_describe(const ty_diff_side_t *side, FILE *out) {
  fprintf(out, "%s: %s:", side->label, side->path);
  if (side->file) {
    fprintf(out, " one file (%zu tensors)\n", ty_safetensors_file_tensor_count(side->file));
    return;
  }
  const ty_safetensors_set_t *sets[2] = {side->model, side->optim};
  const char *bases[2] = {"model", "optimizer"};
  const char *sep = " ";
  for (int k = 0; k < 2; ++k) {
    if (!sets[k]) continue;
    if (ty_safetensors_set_is_sharded(sets[k])) {
      fprintf(out, "%s%s.safetensors.index.json: %zu shards (%zu tensors)", sep, bases[k],
              ty_safetensors_set_shard_count(sets[k]), ty_diff_count(sets[k]));
    } else {
      fprintf(out, "%s%s.safetensors (%zu tensors)", sep, bases[k], ty_diff_count(sets[k]));
    }
    sep = ", ";
  }
  fputc('\n', out);
}

static json_t *ty_diff_side_json(const ty_diff_side_t *side) {
  json_t *o = json_object(), *files = json_array();
  if (!o || !files) {
    json_decref(o);
    json_decref(files);
    return NULL;
  }
  json_object_set_new(o, "path", json_string(side->path));
  json_object_set_new(o, "files", files);
  if (side->file) {
    json_t *f = json_object();
    json_object_set_new(f, "part", json_string("file"));
    json_object_set_new(f, "tensors",
                        json_integer((json_int_t)ty_safetensors_file_tensor_count(side->file)));
    json_array_append_new(files, f);
    return o;
  }
  const ty_safetensors_set_t *sets[2] = {side->model, side->optim};
  const char *parts[2] = {"model", "optimizer"};
  for (int k = 0; k < 2; ++k) {
    if (!sets[k]) continue;
    json_t *f = json_object(), *shards = json_array();
    json_object_set_new(f, "part", json_string(parts[k]));
    json_object_set_new(f, "sharded", json_boolean(ty_safetensors_set_is_sharded(sets[k])));
    for (size_t i = 0; i < ty_safetensors_set_shard_count(sets[k]); ++i) {
      json_array_append_new(
          shards, json_string(ty_safetensors_file_path(ty_safetensors_set_shard(sets[k], i))));
    }
    json_object_set_new(f, "files", shards);
    json_object_set_new(f, "tensors", json_integer((json_int_t)ty_diff_count(sets[k])));
    json_array_append_new(files, f);
  }
  return o;
}

/* ---- comparing ------------------------------------------------------------- */

/* Kinds in the order they are listed. */
typedef enum {
  TY_DIFF_MISMATCH = 0, /* another shape or dtype */
  TY_DIFF_DIFFERS,
  TY_DIFF_ONLY_A,
  TY_DIFF_ONLY_B,
  TY_DIFF_WITHIN,
  TY_DIFF_IDENTICAL,
} ty_diff_kind_t;

static const char *const ty_diff_kind_names[] = {"differing",        "differing", "only_in_a",
                                                 "only_in_b",        "within_tolerance",
                                                 "identical"};

typedef struct ty_diff_record_t {
  const ty_safetensors_tensor_t *a, *b; /* NULL for the side without it */
  ty_diff_kind_t kind;
  ty_tensor_diff_t d;  /* a against b; for one tensor alone, its NaN/Inf counts */
  ty_tensor_diff_t da; /* a's and b's own NaN/Inf counts (mismatches, one side only) */
  ty_tensor_diff_t db;
  char hash_a[TY_TENSOR_DIFF_HASH_CHARS + 1], hash_b[TY_TENSOR_DIFF_HASH_CHARS + 1];
} ty_diff_record_t;

/* Hands a tensor's whole pages of a read-only file mapping back to the
 * kernel: they are read again from the file if touched, and the diff never
 * touches a tensor twice, so what it holds stays about two tensors. */
static void ty_diff_drop_pages(const ty_safetensors_tensor_t *t) {
  if (!t || t->data_is_copy || !t->byte_size) return;
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) return;
  uintptr_t begin = (uintptr_t)t->data, end = begin + (uintptr_t)t->byte_size;
  begin = (begin + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
  end = end / (uintptr_t)page * (uintptr_t)page;
  if (end > begin) (void)madvise((void *)begin, end - begin, MADV_DONTNEED);
}

static bool ty_diff_same_layout(const ty_safetensors_tensor_t *a,
                                const ty_safetensors_tensor_t *b) {
  if (a->dtype != b->dtype || a->is_bool != b->is_bool || a->rank != b->rank) return false;
  for (uint32_t i = 0; i < a->rank; ++i) {
    if (a->dims[i] != b->dims[i]) return false;
  }
  return true;
}

/* A tensor's own figures (NaN/Inf counts) and hash. */
static ty_status_t ty_diff_alone(const ty_safetensors_tensor_t *t, ty_tensor_diff_t *d,
                                 char *hash) {
  TY_RETURN_IF_ERROR(ty_tensor_diff_compute(t->dtype, t->data, t->data, t->element_count, 0, 0, d));
  return ty_tensor_diff_hash(t->data, (size_t)t->byte_size, hash);
}

static ty_status_t ty_diff_pair(ty_diff_record_t *r, double tol, double rtol) {
  if (!r->b || !r->a) {
    r->kind = r->a ? TY_DIFF_ONLY_A : TY_DIFF_ONLY_B;
    return r->a ? ty_diff_alone(r->a, &r->da, r->hash_a) : ty_diff_alone(r->b, &r->db, r->hash_b);
  }
  if (!ty_diff_same_layout(r->a, r->b)) {
    r->kind = TY_DIFF_MISMATCH;
    TY_RETURN_IF_ERROR(ty_diff_alone(r->a, &r->da, r->hash_a));
    return ty_diff_alone(r->b, &r->db, r->hash_b);
  }
  TY_RETURN_IF_ERROR(ty_tensor_diff_compute(r->a->dtype, r->a->data, r->b->data,
                                            r->a->element_count, tol, rtol, &r->d));
  TY_RETURN_IF_ERROR(ty_tensor_diff_hash(r->a->data, (size_t)r->a->byte_size, r->hash_a));
  TY_RETURN_IF_ERROR(ty_tensor_diff_hash(r->b->data, (size_t)r->b->byte_size, r->hash_b));
  /* Identical means the same bytes (-0 against +0 agrees, yet is not). */
  if (r->d.outside) {
    r->kind = TY_DIFF_DIFFERS;
  } else if (!r->d.differing && !memcmp(r->a->data, r->b->data, (size_t)r->a->byte_size)) {
    r->kind = TY_DIFF_IDENTICAL;
  } else {
    r->kind = TY_DIFF_WITHIN;
  }
  return TY_OK;
}

static const char *ty_diff_name(const ty_diff_record_t *r) { return r->a ? r->a->name : r->b->name; }

static int ty_diff_record_cmp(const void *px, const void *py) {
  const ty_diff_record_t *x = px, *y = py;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->kind == TY_DIFF_DIFFERS) {
    int c = ty_tensor_diff_rank(&x->d, &y->d);
    if (c) return c;
  }
  return strcmp(ty_diff_name(x), ty_diff_name(y));
}

/* ---- output ------------------------------------------------------------------ */

static void ty_diff_shape(const ty_safetensors_tensor_t *t, char *out, size_t capacity) {
  size_t n = (size_t)snprintf(out, capacity, "[");
  for (uint32_t i = 0; i < t->rank && n < capacity; ++i) {
    n += (size_t)snprintf(out + n, capacity - n, "%s%lld", i ? "," : "", (long long)t->dims[i]);
  }
  if (n < capacity) snprintf(out + n, capacity - n, "]");
}

static const char *ty_diff_file(const ty_safetensors_tensor_t *t) {
  const char *path = ty_safetensors_file_path(t->file);
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static void ty_diff_print_ulp(FILE *out, uint64_t ulp) {
  if (ulp == TY_TENSOR_DIFF_ULP_INF) {
    fputs("inf", out);
  } else {
    fprintf(out, "%llu", (unsigned long long)ulp);
  }
}

static void ty_diff_print_record(FILE *out, size_t rank, const ty_diff_record_t *r) {
  char sa[160], sb[160];
  ty_diff_shape(r->a, sa, sizeof(sa));
  ty_diff_shape(r->b, sb, sizeof(sb));
  const char *da = ty_safetensors_dtype_string(r->a->dtype, r->a->is_bool);
  const char *db = ty_safetensors_dtype_string(r->b->dtype, r->b->is_bool);
  if (r->kind == TY_DIFF_MISMATCH) {
    fprintf(out, "%4zu. %s: A is %s %s (%s), B is %s %s (%s)\n", rank, r->a->name, da, sa,
            ty_diff_file(r->a), db, sb, ty_diff_file(r->b));
    fprintf(out, "      sha256 %s | %s\n", r->hash_a, r->hash_b);
    return;
  }
  fprintf(out, "%4zu. %s (%s %s; A %s, B %s)\n", rank, r->a->name, da, sa, ty_diff_file(r->a),
          ty_diff_file(r->b));
  fprintf(out, "      max abs %.6g  max rel %.6g  max ULP ", r->d.max_abs, r->d.max_rel);
  ty_diff_print_ulp(out, r->d.max_ulp);
  fprintf(out, "  differing %llu of %llu (%llu outside tolerance)\n",
          (unsigned long long)r->d.differing, (unsigned long long)r->d.elements,
          (unsigned long long)r->d.outside);
  fprintf(out, "      NaN %llu | %llu  Inf %llu | %llu  sha256 %s | %s\n",
          (unsigned long long)r->d.nan_a, (unsigned long long)r->d.nan_b,
          (unsigned long long)r->d.inf_a, (unsigned long long)r->d.inf_b, r->hash_a,
          r->hash_b);
}

/* Prints the records of kind [from, to] of the sorted list, at most `top`. */
static void ty_diff_print_list(FILE *out, const ty_diff_record_t *recs, size_t n,
                               ty_diff_kind_t from, ty_diff_kind_t to, long top,
                               const char *title) {
  size_t total = 0, shown = 0;
  for (size_t i = 0; i < n; ++i) total += recs[i].kind >= from && recs[i].kind <= to;
  if (!total) return;
  fprintf(out, "%s:\n", title);
  for (size_t i = 0; i < n; ++i) {
    const ty_diff_record_t *r = &recs[i];
    if (r->kind < from || r->kind > to) continue;
    if ((long)shown >= top) break;
    ++shown;
    if (r->kind == TY_DIFF_ONLY_A || r->kind == TY_DIFF_ONLY_B) {
      const ty_safetensors_tensor_t *t = r->a ? r->a : r->b;
      char shape[160];
      ty_diff_shape(t, shape, sizeof(shape));
      fprintf(out, "  %s (%s %s, %s)\n", t->name, ty_safetensors_dtype_string(t->dtype, t->is_bool),
              shape, ty_diff_file(t));
    } else {
      ty_diff_print_record(out, shown, r);
    }
  }
  if (total > shown) {
    fprintf(out, "  ... and %zu more (--top N lists more)\n", total - shown);
  }
}

static json_t *ty_diff_number(double v) {
  return isfinite(v) ? json_real(v) : json_string(v > 0 ? "inf" : "-inf");
}

static json_t *ty_diff_ulp_json(uint64_t ulp) {
  if (ulp == TY_TENSOR_DIFF_ULP_INF) return json_string("inf");
  return ulp <= (uint64_t)INT64_MAX ? json_integer((json_int_t)ulp) : json_real((double)ulp);
}

static json_t *ty_diff_tensor_side_json(const ty_safetensors_tensor_t *t, const char *hash,
                                        uint64_t nan, uint64_t inf) {
  json_t *o = json_object(), *shape = json_array();
  if (!o || !shape) {
    json_decref(o);
    json_decref(shape);
    return NULL;
  }
  for (uint32_t i = 0; i < t->rank; ++i) json_array_append_new(shape, json_integer(t->dims[i]));
  json_object_set_new(o, "dtype", json_string(ty_safetensors_dtype_string(t->dtype, t->is_bool)));
  json_object_set_new(o, "shape", shape);
  json_object_set_new(o, "elements", json_integer((json_int_t)t->element_count));
  json_object_set_new(o, "file", json_string(ty_safetensors_file_path(t->file)));
  json_object_set_new(o, "sha256", json_string(hash));
  json_object_set_new(o, "nan", json_integer((json_int_t)nan));
  json_object_set_new(o, "inf", json_integer((json_int_t)inf));
  return o;
}

static json_t *ty_diff_record_json(const ty_diff_record_t *r) {
  json_t *o = json_object();
  if (!o) return NULL;
  json_object_set_new(o, "name", json_string(ty_diff_name(r)));
  json_object_set_new(o, "status", json_string(ty_diff_kind_names[r->kind]));
  bool paired = r->a && r->b && r->kind != TY_DIFF_MISMATCH;
  if (r->kind == TY_DIFF_MISMATCH) {
    json_object_set_new(o, "mismatch",
                        json_string(r->a->dtype != r->b->dtype || r->a->is_bool != r->b->is_bool
                                        ? "dtype"
                                        : "shape"));
  }
  if (r->a) {
    json_object_set_new(o, "a", ty_diff_tensor_side_json(r->a, r->hash_a,
                                                         paired ? r->d.nan_a : r->da.nan_a,
                                                         paired ? r->d.inf_a : r->da.inf_a));
  }
  if (r->b) {
    json_object_set_new(o, "b", ty_diff_tensor_side_json(r->b, r->hash_b,
                                                         paired ? r->d.nan_b : r->db.nan_a,
                                                         paired ? r->d.inf_b : r->db.inf_a));
  }
  if (paired) {
    json_object_set_new(o, "max_abs_error", ty_diff_number(r->d.max_abs));
    json_object_set_new(o, "max_rel_error", ty_diff_number(r->d.max_rel));
    json_object_set_new(o, "max_ulp", ty_diff_ulp_json(r->d.max_ulp));
    json_object_set_new(o, "differing_elements", json_integer((json_int_t)r->d.differing));
    json_object_set_new(o, "outside_tolerance", json_integer((json_int_t)r->d.outside));
  }
  return o;
}

typedef struct ty_diff_options_t {
  double tol, rtol;
  long top;
  bool json, weights_only;
} ty_diff_options_t;

static ty_status_t ty_diff_report_json(const ty_diff_side_t *a, const ty_diff_side_t *b,
                                       const ty_diff_options_t *opt, const ty_diff_record_t *recs,
                                       size_t n, const size_t counts[6]) {
  json_t *root = json_object(), *summary = json_object(), *tensors = json_array();
  ty_status_t s = root && summary && tensors
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (!s) {
    json_object_set_new(root, "a", ty_diff_side_json(a));
    json_object_set_new(root, "b", ty_diff_side_json(b));
    json_object_set_new(root, "tol", json_real(opt->tol));
    json_object_set_new(root, "rtol", json_real(opt->rtol));
    json_object_set_new(root, "weights_only", json_boolean(opt->weights_only));
    size_t differing = counts[TY_DIFF_MISMATCH] + counts[TY_DIFF_DIFFERS];
    json_object_set_new(summary, "compared",
                        json_integer((json_int_t)(differing + counts[TY_DIFF_WITHIN] +
                                                  counts[TY_DIFF_IDENTICAL])));
    json_object_set_new(summary, "identical", json_integer((json_int_t)counts[TY_DIFF_IDENTICAL]));
    json_object_set_new(summary, "within_tolerance",
                        json_integer((json_int_t)counts[TY_DIFF_WITHIN]));
    json_object_set_new(summary, "differing", json_integer((json_int_t)differing));
    json_object_set_new(summary, "only_in_a", json_integer((json_int_t)counts[TY_DIFF_ONLY_A]));
    json_object_set_new(summary, "only_in_b", json_integer((json_int_t)counts[TY_DIFF_ONLY_B]));
    json_object_set_new(root, "agree",
                        json_boolean(!differing && !counts[TY_DIFF_ONLY_A] &&
                                     !counts[TY_DIFF_ONLY_B]));
    json_object_set(root, "summary", summary);
    json_object_set(root, "tensors", tensors);
  }
  for (size_t i = 0; i < n && !s; ++i) {
    json_t *t = ty_diff_record_json(&recs[i]);
    if (!t || json_array_append_new(tensors, t)) {
      s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  if (!s && (json_dumpf(root, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF)) {
    s = ty_status_make(TY_CODE_INTERNAL, "cannot write the JSON report to stdout");
  }
  json_decref(summary);
  json_decref(tensors);
  json_decref(root);
  return s;
}

static void ty_diff_report_text(const ty_diff_side_t *a, const ty_diff_side_t *b,
                                const ty_diff_options_t *opt, const ty_diff_record_t *recs,
                                size_t n, const size_t counts[6]) {
  ty_diff_side_describe(a, stdout);
  ty_diff_side_describe(b, stdout);
  size_t differing = counts[TY_DIFF_MISMATCH] + counts[TY_DIFF_DIFFERS];
  printf("%zu tensors compared: %zu identical, %zu within tolerance, %zu differing; %zu only in "
         "A, %zu only in B\n",
         differing + counts[TY_DIFF_WITHIN] + counts[TY_DIFF_IDENTICAL],
         counts[TY_DIFF_IDENTICAL], counts[TY_DIFF_WITHIN], differing, counts[TY_DIFF_ONLY_A],
         counts[TY_DIFF_ONLY_B]);
  printf("(agree: |a-b| <= %g + %g*|b| element by element; NaN equals NaN at the same place, "
         "-0 equals +0)\n",
         opt->tol, opt->rtol);
  ty_diff_print_list(stdout, recs, n, TY_DIFF_MISMATCH, TY_DIFF_DIFFERS, opt->top,
                     "differing tensors, worst first");
  ty_diff_print_list(stdout, recs, n, TY_DIFF_ONLY_A, TY_DIFF_ONLY_A, opt->top, "only in A");
  ty_diff_print_list(stdout, recs, n, TY_DIFF_ONLY_B, TY_DIFF_ONLY_B, opt->top, "only in B");
}

/* Compares the two open sides and reports; *out_agree says whether every
 * tensor agrees. */
static ty_status_t ty_diff_run(const ty_diff_side_t *a, const ty_diff_side_t *b,
                               const ty_diff_options_t *opt, bool *out_agree) {
  size_t na = ty_diff_side_count(a), nb = ty_diff_side_count(b);
  ty_diff_record_t *recs = calloc(na + nb, sizeof(*recs));
  if (!recs) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  size_t n = 0;
  ty_status_t s = TY_OK;
  for (size_t i = 0; i < na && !s; ++i) {
    ty_diff_record_t *r = &recs[n++];
    r->a = ty_diff_side_at(a, i);
    r->b = ty_diff_side_find(b, r->a->name);
    s = ty_status_annotate(ty_diff_pair(r, opt->tol, opt->rtol), "tensor %s", r->a->name);
    ty_diff_drop_pages(r->a);
    ty_diff_drop_pages(r->b);
  }
  for (size_t i = 0; i < nb && !s; ++i) {
    const ty_safetensors_tensor_t *t = ty_diff_side_at(b, i);
    if (ty_diff_side_find(a, t->name)) continue;
    ty_diff_record_t *r = &recs[n++];
    r->b = t;
    s = ty_status_annotate(ty_diff_pair(r, opt->tol, opt->rtol), "tensor %s", t->name);
    ty_diff_drop_pages(t);
  }
  size_t counts[6] = {0};
  if (!s) {
    qsort(recs, n, sizeof(*recs), ty_diff_record_cmp);
    for (size_t i = 0; i < n; ++i) counts[recs[i].kind]++;
    *out_agree = !counts[TY_DIFF_MISMATCH] && !counts[TY_DIFF_DIFFERS] &&
                 !counts[TY_DIFF_ONLY_A] && !counts[TY_DIFF_ONLY_B];
    if (opt->json) {
      s = ty_diff_report_json(a, b, opt, recs, n, counts);
    } else {
      ty_diff_report_text(a, b, opt, recs, n, counts);
    }
  }
  free(recs);
  return s;
}

/* ---- the command ----------------------------------------------------------------- */

static int ty_diff_parse_tolerance(const char *option, const char *value, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(value, &end);
  if (!end || *end || errno || !isfinite(v) || v < 0) {
    return ty_app_usage_error(TY_DIFF_CMD, "%s must be a finite number >= 0, not '%s'", option,
                              value);
  }
  *out = v;
  return TY_EXIT_OK;
}

int ty_cmd_ckpt_diff(int argc, char **argv) {
  static const struct option longopts[] = {{"tol", required_argument, NULL, 't'},
                                           {"rtol", required_argument, NULL, 'r'},
                                           {"top", required_argument, NULL, 'n'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"weights-only", no_argument, NULL, 'w'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  ty_diff_options_t opt = {.tol = 0, .rtol = 0, .top = 20};
  optind = 1;
  opterr = 0;
  if (ty_app_refuse_empty_values(TY_DIFF_CMD, argc, argv, ":h", longopts) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  int c;
  while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
    int rc = TY_EXIT_OK;
    switch (c) {
      case 'h':
        fputs(ty_diff_usage, stdout);
        return TY_EXIT_OK;
      case 't':
        rc = ty_diff_parse_tolerance("--tol", optarg, &opt.tol);
        break;
      case 'r':
        rc = ty_diff_parse_tolerance("--rtol", optarg, &opt.rtol);
        break;
      case 'n': {
        char *end = NULL;
        errno = 0;
        long v = strtol(optarg, &end, 10);
        if (!end || *end || errno || v < 0 || v > INT_MAX) {
          return ty_app_usage_error(TY_DIFF_CMD, "--top must be a number >= 0, not '%s'", optarg);
        }
        opt.top = v;
        break;
      }
      case 'j':
        opt.json = true;
        break;
      case 'w':
        opt.weights_only = true;
        break;
      case ':':
        return ty_app_usage_error(TY_DIFF_CMD, "%s needs a value", argv[optind - 1]);
      default:
        return ty_app_usage_error(TY_DIFF_CMD, "unknown option '%s'", argv[optind - 1]);
    }
    if (rc != TY_EXIT_OK) return rc;
  }
  if (argc - optind != 2) {
    return ty_app_usage_error(TY_DIFF_CMD,
                              "give two checkpoints (folders or .safetensors files), A and B");
  }
  ty_diff_side_t a = {.path = argv[optind], .label = "A"};
  ty_diff_side_t b = {.path = argv[optind + 1], .label = "B"};
  ty_status_t s = ty_diff_side_open(&a, opt.weights_only);
  if (!s) s = ty_diff_side_open(&b, opt.weights_only);
  bool agree = false;
  if (!s) s = ty_diff_run(&a, &b, &opt, &agree);
  ty_diff_side_close(&a);
  ty_diff_side_close(&b);
  if (s) {
    ty_app_fail(TY_DIFF_CMD, s);
    return TY_EXIT_USAGE; /* as diff(1): 1 is "they differ", trouble is 2 */
  }
  if (fflush(stdout) != 0) return TY_EXIT_USAGE;
  return agree ? TY_EXIT_OK : TY_EXIT_RUNTIME;
}
