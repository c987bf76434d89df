/* Checkpoint loading benchmark: writes a GPT-2 124M-shaped checkpoint of
 * random weights with our writer (f32, ~498 MB; or bf16), then times warm
 * loads: open (map + header validation) and every tensor either touched
 * (every byte read) or copied/converted into f32 parameter buffers that
 * already exist, as a model load does. Prints one line per measure (min and
 * median of --repeat runs) and removes the file unless --keep.
 *
 *   ty_load_bench [--dir DIR] [--dtype f32|bf16] [--repeat N] [--keep] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/safetensors.h"

typedef struct bench_tensor_t {
  char name[64];
  uint32_t rank;
  int64_t dims[2];
  uint64_t count;
} bench_tensor_t;

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void bench_add(bench_tensor_t *t, size_t *n, const char *name, int64_t d0, int64_t d1) {
  bench_tensor_t *e = &t[(*n)++];
  snprintf(e->name, sizeof(e->name), "%s", name);
  e->rank = d1 ? 2 : 1;
  e->dims[0] = d0;
  e->dims[1] = d1;
  e->count = (uint64_t)d0 * (uint64_t)(d1 ? d1 : 1);
}

/* The tensors of Hugging Face's gpt2 checkpoint (tied lm_head, so none). */
static size_t bench_gpt2(bench_tensor_t *t) {
  const int64_t c = 768, layers = 12;
  size_t n = 0;
  char name[64];
  bench_add(t, &n, "wte.weight", 50257, c);
  bench_add(t, &n, "wpe.weight", 1024, c);
  for (int64_t l = 0; l < layers; ++l) {
    static const struct { const char *suffix; int64_t d0, d1; } shapes[] = {
        {"ln_1.weight", 768, 0},        {"ln_1.bias", 768, 0},
        {"attn.c_attn.weight", 768, 2304}, {"attn.c_attn.bias", 2304, 0},
        {"attn.c_proj.weight", 768, 768},  {"attn.c_proj.bias", 768, 0},
        {"ln_2.weight", 768, 0},        {"ln_2.bias", 768, 0},
        {"mlp.c_fc.weight", 768, 3072},    {"mlp.c_fc.bias", 3072, 0},
        {"mlp.c_proj.weight", 3072, 768},  {"mlp.c_proj.bias", 768, 0}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
      snprintf(name, sizeof(name), "h.%lld.%s", (long long)l, shapes[s].suffix);
      bench_add(t, &n, name, shapes[s].d0, shapes[s].d1);
    }
  }
  bench_add(t, &n, "ln_f.weight", c, 0);
  bench_add(t, &n, "ln_f.bias", c, 0);
  return n;
}

static int bench_check(ty_status_t status, const char *what) {
  if (!status) return 0;
  fprintf(stderr, "ty_load_bench: %s: %s\n", what, ty_status_message(status));
  ty_status_free(status);
  return 1;
}

int main(int argc, char **argv) {
  const char *dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  ty_dtype_t dtype = TY_DTYPE_F32;
  int repeat = 5;
  int keep = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
      ++i;
      dtype = strcmp(argv[i], "bf16") == 0 ? TY_DTYPE_BF16 : TY_DTYPE_F32;
    } else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = atoi(argv[++i]);
      if (repeat < 1 || repeat > 1000) repeat = 5;
    } else if (strcmp(argv[i], "--keep") == 0) {
      keep = 1;
    } else {
      fprintf(stderr, "usage: %s [--dir DIR] [--dtype f32|bf16] [--repeat N] [--keep]\n", argv[0]);
      return 2;
    }
  }
  bench_tensor_t tensors[160];
  size_t n = bench_gpt2(tensors);
  uint64_t params = 0;
  for (size_t i = 0; i < n; ++i) params += tensors[i].count;
  size_t esize = ty_dtype_size(dtype);

  /* Random weights (splitmix64 bits -> values in [-1, 1)). */
  uint8_t *src = malloc(params * esize);
  float **dst = calloc(n, sizeof(*dst));
  if (!src || !dst) return 1;
  uint64_t state = 0x6770743231323421ull;
  for (uint64_t i = 0; i < params; ++i) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    float v = (float)((double)((z ^ (z >> 31)) >> 40) / (double)(1ull << 23) - 1.0);
    if (dtype == TY_DTYPE_F32) {
      memcpy(src + 4 * i, &v, 4);
    } else {
      uint32_t u;
      memcpy(&u, &v, 4);
      uint16_t h = (uint16_t)(u >> 16);
      memcpy(src + 2 * i, &h, 2);
    }
  }
  ty_safetensors_writer_t *w = NULL;
  if (bench_check(ty_safetensors_writer_create(&w), "writer")) return 1;
  uint64_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bench_check(ty_safetensors_writer_add(w, tensors[i].name, dtype, tensors[i].rank,
                                              tensors[i].dims, src + off * esize,
                                              tensors[i].count * esize),
                    "add")) {
      return 1;
    }
    off += tensors[i].count;
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s/ty_load_bench.%ld.safetensors", dir, (long)getpid());
  double t0 = bench_now();
  if (bench_check(ty_safetensors_writer_write_file(w, path), "write")) return 1;
  double save = bench_now() - t0;
  ty_safetensors_writer_destroy(w);
  printf("checkpoint: GPT-2 124M shapes, %zu tensors, %llu parameters, %s, %.1f MB at %s\n", n,
         (unsigned long long)params, ty_dtype_name(dtype), (double)(params * esize) / 1e6, path);
  printf("save (atomic, with fsync):            %8.3f s\n", save);

  /* The model's parameter buffers exist before a load: allocate and fault
   * them in once, outside the timings. */
  for (size_t i = 0; i < n; ++i) {
    dst[i] = malloc(tensors[i].count * sizeof(float));
    if (!dst[i]) return 1;
    memset(dst[i], 0, tensors[i].count * sizeof(float));
  }
  double *open_s = calloc((size_t)repeat, sizeof(double));
  double *touch_s = calloc((size_t)repeat, sizeof(double));
  double *load_s = calloc((size_t)repeat, sizeof(double));
  if (!open_s || !touch_s || !load_s) return 1;
  volatile uint64_t sink = 0;
  for (int r = -1; r < repeat; ++r) { /* run -1 warms the page cache */
    ty_safetensors_file_t *f = NULL;
    double a = bench_now();
    if (bench_check(ty_safetensors_open(path, &f), "open")) return 1;
    double b = bench_now();
    uint64_t x = 0;
    for (size_t i = 0; i < ty_safetensors_file_tensor_count(f); ++i) {
      const ty_safetensors_tensor_t *t = ty_safetensors_file_tensor_at(f, i);
      const uint64_t *p = t->data;
      for (uint64_t k = 0; k < t->byte_size / 8; ++k) x += p[k];
    }
    sink += x;
    double c = bench_now();
    ty_safetensors_close(f);
    /* A full load: open again, then every tensor into its f32 buffer. */
    double d = bench_now();
    if (bench_check(ty_safetensors_open(path, &f), "open")) return 1;
    for (size_t i = 0; i < n; ++i) {
      const ty_safetensors_tensor_t *t = NULL;
      if (bench_check(ty_safetensors_file_lookup(f, tensors[i].name, &t), "lookup") ||
          bench_check(ty_safetensors_tensor_read(t, TY_DTYPE_F32, dst[i],
                                                 tensors[i].count * sizeof(float)),
                      "read")) {
        return 1;
      }
    }
    ty_safetensors_close(f);
    double e = bench_now();
    if (r >= 0) {
      open_s[r] = b - a;
      touch_s[r] = c - a;
      load_s[r] = e - d;
    }
  }
  /* Sanity: the last tensor read back equals what was written. */
  const uint8_t *last_src = src + (params - tensors[n - 1].count) * esize;
  for (uint64_t k = 0; k < tensors[n - 1].count; ++k) {
    float want;
    if (dtype == TY_DTYPE_F32) {
      memcpy(&want, last_src + 4 * k, 4);
    } else {
      uint16_t h;
      memcpy(&h, last_src + 2 * k, 2);
      uint32_t u = (uint32_t)h << 16;
      memcpy(&want, &u, 4);
    }
    if (dst[n - 1][k] != want) {
      fprintf(stderr, "ty_load_bench: %s[%llu] read back wrong\n", tensors[n - 1].name,
              (unsigned long long)k);
      return 1;
    }
  }
  qsort(open_s, (size_t)repeat, sizeof(double), bench_cmp);
  qsort(touch_s, (size_t)repeat, sizeof(double), bench_cmp);
  qsort(load_s, (size_t)repeat, sizeof(double), bench_cmp);
  printf("warm open (map + validate header):     %8.4f s min, %8.4f s median of %d\n",
         open_s[0], open_s[repeat / 2], repeat);
  printf("warm open + touch every byte:          %8.4f s min, %8.4f s median of %d\n",
         touch_s[0], touch_s[repeat / 2], repeat);
  printf("warm open + read all into f32 buffers: %8.4f s min, %8.4f s median of %d (%.2f GB/s of f32)\n",
         load_s[0], load_s[repeat / 2], repeat, (double)params * 4 / load_s[0] / 1e9);
  if (!keep) unlink(path);
  for (size_t i = 0; i < n; ++i) free(dst[i]);
  free(dst);
  free(src);
  free(open_s);
  free(touch_s);
  free(load_s);
  (void)sink;
  return 0;
}
