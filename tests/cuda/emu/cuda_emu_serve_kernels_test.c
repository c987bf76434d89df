/* The serving kernels of the cuda plugin (kernels/paged.cu, kernels/sample.cu)
 * launched by name through the fake driver of tests/cuda/emu (the
 * TRAINYARD_CUDA_DRIVER library), on small buffers, against the f64
 * definitions of issue 29's ops written out below: paged_kv_write (padding
 * rows, odd block size, the slot error), paged_attention (GQA, window,
 * padding rows, shuffled block tables, block size 5, rows whose span crosses
 * several splits, head chunks, bf16, batch invariance in bits, prefill runs
 * sharing K/V tiles with the bits of each row alone, the three row errors) and sample / top_logprobs (greedy ties, top_k / top_p / min_p kept
 * sets with tied weights, penalties, the splitmix64 counter stream, batch
 * invariance, the param and history errors). The emulator's memory is host
 * memory, so buffers are plain host allocations. */
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/test_util.h"

#include "backends/common/device_errors.h"
#include "backends/cuda/kernels/paged_shapes.h"
#include "backends/cuda/kernels/sample_shapes.h"

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_get_fn)(void **, void *, const char *);
typedef int (*cu_launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, void *, void **, void **);
typedef int (*cu_sync_fn)(void);

static void *g_lib;
static cu_get_fn g_get;
static cu_launch_fn g_launch;
static cu_sync_fn g_sync;
static int g_err[8]; /* the error buffer: code, node, three i64 details */

static int setup(void **state) {
  (void)state;
  const char *path = getenv("TRAINYARD_CUDA_DRIVER");
  if (!path) {
    fprintf(stderr, "TRAINYARD_CUDA_DRIVER must name the emulator's libcuda_emu.so\n");
    return -1;
  }
  g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!g_lib) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return -1;
  }
  cu_init_fn init = (cu_init_fn)dlsym(g_lib, "cuInit");
  g_get = (cu_get_fn)dlsym(g_lib, "cuModuleGetFunction");
  g_launch = (cu_launch_fn)dlsym(g_lib, "cuLaunchKernel");
  g_sync = (cu_sync_fn)dlsym(g_lib, "cuCtxSynchronize");
  return init && g_get && g_launch && g_sync && init(0) == 0 ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  if (g_lib) dlclose(g_lib);
  return 0;
}

static void launch_smem(const char *kernel, unsigned gx, unsigned gy, unsigned gz,
                        unsigned threads, unsigned smem, void **args) {
  void *f = NULL;
  if (g_get(&f, NULL, kernel) != 0) fail_msg("the emulator has no kernel %s", kernel);
  assert_int_equal(g_launch(f, gx, gy, gz, threads, 1, 1, smem, NULL, args, NULL), 0);
  assert_int_equal(g_sync(), 0);
}

static void launch(const char *kernel, unsigned gx, unsigned gy, unsigned gz, unsigned threads,
                   void **args) {
  launch_smem(kernel, gx, gy, gz, threads, 0, args);
}

static void clear_error(void) { memset(g_err, 0, sizeof(g_err)); }

static void expect_error(int code, long long a, long long b, long long c) {
  long long d[3];
  memcpy(d, g_err + 2, sizeof(d));
  assert_int_equal(g_err[0], code);
  assert_int_equal(g_err[1], 7); /* the node the launch named */
  assert_int_equal(d[0], a);
  assert_int_equal(d[1], b);
  assert_int_equal(d[2], c);
}

static uint64_t g_rng = 0x1234567ull;
static double uniform(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static float normal(void) { /* small, non-zero, varied */
  return (float)(2.0 * uniform() - 1.0) * 1.5f;
}

/* ---- paged_kv_write ---- */

static void run_kv_write2(void *fresh, void *pool, void *fresh2, void *pool2, unsigned pools,
                          long long *slots, unsigned n, int esize, long long row,
                          long long nslots) {
  int node = 7;
  int *err = g_err;
  void *args[] = {&fresh, &pool, &fresh2, &pool2, &slots, &esize, &row, &nslots, &err, &node};
  launch("ty_paged_kv_write", n, pools, 1, 128, args);
}

static void run_kv_write(void *fresh, void *pool, long long *slots, unsigned n, int esize,
                         long long row, long long nslots) {
  run_kv_write2(fresh, pool, fresh, pool, 1, slots, n, esize, row, nslots);
}

static void test_paged_kv_write(void **state) {
  (void)state;
  /* NB 4, BS 5, Hkv 2, D 3: 24-byte f32 rows and 12-byte f16 rows. */
  enum { NB = 4, BS = 5, ROW = 6, N = 5 };
  for (int esize = 2; esize <= 4; esize += 2) {
    unsigned char pool[NB * BS * ROW * 4], want[NB * BS * ROW * 4], fresh[N * ROW * 4];
    for (size_t i = 0; i < sizeof(pool); ++i) pool[i] = want[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < sizeof(fresh); ++i) fresh[i] = (unsigned char)(200 - i);
    long long slots[N] = {13, -1, 0, 19, 6}; /* padding row 1; blocks out of order */
    for (int i = 0; i < N; ++i) {
      if (slots[i] >= 0) memcpy(want + slots[i] * ROW * esize, fresh + i * ROW * esize, ROW * esize);
    }
    clear_error();
    run_kv_write(fresh, pool, slots, N, esize, ROW, NB * BS);
    assert_int_equal(g_err[0], 0);
    assert_memory_equal(pool, want, (size_t)NB * BS * ROW * esize);
    /* A slot past the pool: the error names the row, the slot and the pool;
     * that row is not written. */
    slots[3] = NB * BS;
    slots[0] = -2;
    memcpy(pool, want, sizeof(pool));
    clear_error();
    run_kv_write(fresh, pool, slots, N, esize, ROW, NB * BS);
    assert_int_equal(g_err[0], TY_ERR_PAGED_SLOT);
    long long d[3];
    memcpy(d, g_err + 2, sizeof(d));
    assert_true((d[0] == 3 && d[1] == NB * BS) || (d[0] == 0 && d[1] == -2));
    assert_int_equal(d[2], NB * BS);
    /* Keys and values in one launch (KV_PAIR): both pools, each from its
     * own rows, and the error once. */
    unsigned char pool2[NB * BS * ROW * 4], want2[NB * BS * ROW * 4], fresh2[N * ROW * 4];
    for (size_t i = 0; i < sizeof(pool2); ++i) pool2[i] = want2[i] = (unsigned char)(i * 5 + 2);
    for (size_t i = 0; i < sizeof(fresh2); ++i) fresh2[i] = (unsigned char)(i * 3 + 9);
    long long slots2[N] = {2, 17, -1, 8, 11};
    for (size_t i = 0; i < sizeof(pool); ++i) pool[i] = want[i] = (unsigned char)(i * 7 + 1);
    for (int i = 0; i < N; ++i) {
      if (slots2[i] < 0) continue;
      memcpy(want + slots2[i] * ROW * esize, fresh + i * ROW * esize, ROW * esize);
      memcpy(want2 + slots2[i] * ROW * esize, fresh2 + i * ROW * esize, ROW * esize);
    }
    clear_error();
    run_kv_write2(fresh, pool, fresh2, pool2, 2, slots2, N, esize, ROW, NB * BS);
    assert_int_equal(g_err[0], 0);
    assert_memory_equal(pool, want, (size_t)NB * BS * ROW * esize);
    assert_memory_equal(pool2, want2, (size_t)NB * BS * ROW * esize);
  }
}

/* ---- paged_attention ---- */

typedef struct {
  int NB, BS, Hq, Hkv, D, S, MB, window;
  int N;
  long long *table, *row_seq, *row_pos;
  float *q, *k, *v;
} pa_case_t;

/* The f64 definition (spec29: causal, window, GQA, padding rows). */
static void pa_reference(const pa_case_t *c, double *out) {
  const int G = c->Hq / c->Hkv;
  const double scale = 1.0 / sqrt((double)c->D);
  for (int i = 0; i < c->N; ++i) {
    for (int h = 0; h < c->Hq; ++h) {
      double *o = out + ((size_t)i * c->Hq + h) * c->D;
      for (int d = 0; d < c->D; ++d) o[d] = 0;
      if (c->row_seq[i] < 0) continue;
      const long long s = c->row_seq[i], p = c->row_pos[i];
      const long long lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
      const float *qv = c->q + ((size_t)i * c->Hq + h) * c->D;
      double m = -INFINITY, l = 0;
      double *sc = malloc(sizeof(double) * (size_t)(p + 1));
      assert_non_null(sc);
      for (long long j = lo; j <= p; ++j) {
        const long long slot = c->table[s * c->MB + j / c->BS] * c->BS + j % c->BS;
        const float *kv = c->k + ((size_t)slot * c->Hkv + h / G) * c->D;
        double dot = 0;
        for (int d = 0; d < c->D; ++d) dot += (double)qv[d] * kv[d];
        sc[j] = dot * scale;
        if (sc[j] > m) m = sc[j];
      }
      for (long long j = lo; j <= p; ++j) l += exp(sc[j] - m);
      for (long long j = lo; j <= p; ++j) {
        const long long slot = c->table[s * c->MB + j / c->BS] * c->BS + j % c->BS;
        const float *vv = c->v + ((size_t)slot * c->Hkv + h / G) * c->D;
        const double w = exp(sc[j] - m) / l;
        for (int d = 0; d < c->D; ++d) o[d] += w * vv[d];
      }
      free(sc);
    }
  }
}

static uint16_t to_bf16(float f) { /* round to nearest even (finite values) */
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void pa_launch(const pa_case_t *c, const char *kernel, const void *q, const void *kp,
                      const void *vp, void *outp);

static void pa_run(const pa_case_t *c, float *out) {
  for (size_t e = 0; e < (size_t)c->N * c->Hq * c->D; ++e) out[e] = NAN; /* unwritten shows */
  pa_launch(c, "ty_paged_attn_f32", c->q, c->k, c->v, out);
}

/* The same in bf16 storage: the case's values are rounded to bf16 first
 * (so the f64 reference sees what the kernel reads), out comes back as f32. */
static void pa_run_bf16(pa_case_t *c, float *out) {
  const size_t pool = (size_t)c->NB * c->BS * c->Hkv * c->D, nq = (size_t)c->N * c->Hq * c->D;
  uint16_t *k = malloc(2 * pool), *v = malloc(2 * pool), *q = malloc(2 * nq), *o = malloc(2 * nq);
  assert_true(k && v && q && o);
  for (size_t e = 0; e < pool; ++e) {
    k[e] = to_bf16(c->k[e]);
    v[e] = to_bf16(c->v[e]);
    c->k[e] = from_bf16(k[e]);
    c->v[e] = from_bf16(v[e]);
  }
  for (size_t e = 0; e < nq; ++e) {
    q[e] = to_bf16(c->q[e]);
    c->q[e] = from_bf16(q[e]);
    o[e] = 0x7fc0; /* NaN: unwritten shows */
  }
  pa_launch(c, "ty_paged_attn_bf16", q, k, v, o);
  for (size_t e = 0; e < nq; ++e) out[e] = from_bf16(o[e]);
  free(k);
  free(v);
  free(q);
  free(o);
}

static void pa_launch(const pa_case_t *c, const char *kernel, const void *q, const void *kp,
                      const void *vp, void *outp) {
  const int G = c->Hq / c->Hkv;
  int gchunk = ty_pa_head_chunk(G, c->D), rgroup = ty_pa_run_rows(gchunk, c->D);
  const int chunks = (G + gchunk - 1) / gchunk;
  long long span = (long long)c->MB * c->BS;
  if (c->window > 0 && c->window < span) span = c->window;
  int max_splits = (int)ty_pa_splits(span);
  float *part = malloc(sizeof(float) * (size_t)c->N * c->Hq * max_splits * (c->D + 2));
  /* The split counts start at 0, as the plugin's zeroed aux bytes do, and
   * must be 0 again after the launch (the merging block resets them). */
  int *count = calloc((size_t)c->N * c->Hkv * chunks, sizeof(int));
  assert_true(part && count);
  float scale = (float)(1.0 / sqrt((double)c->D));
  int node = 7, *err = g_err;
  const long long *table = c->table, *row_seq = c->row_seq, *row_pos = c->row_pos;
  int N = c->N, NB = c->NB, BS = c->BS, Hq = c->Hq, Hkv = c->Hkv, D = c->D, S = c->S;
  int MB = c->MB, window = c->window;
  void *args[] = {&q,  &kp, &vp, &table, &row_seq, &row_pos,    &outp,  &part,  &count, &N,
                  &NB, &BS, &Hq, &Hkv,   &D,       &S,          &MB,    &gchunk, &rgroup,
                  &max_splits, &scale, &window, &err, &node};
  const int esize = strstr(kernel, "f32") ? 4 : 2;
  /* The head-size kernel the plugin picks (ty_pa_head_kernel). */
  char name[64];
  const int hk = ty_pa_head_kernel(c->D);
  if (hk) {
    snprintf(name, sizeof(name), "ty_paged_attn_d%d_%s", hk, esize == 4 ? "f32" : "bf16");
    kernel = name;
  }
  launch_smem(kernel, (unsigned)N, (unsigned)(Hkv * chunks), (unsigned)max_splits,
              TY_PA_THREADS, (unsigned)ty_pa_smem_bytes(rgroup, gchunk, D, esize), args);
  if (g_err[0] == 0) {
    for (int i = 0; i < N * Hkv * chunks; ++i) {
      if (count[i] != 0) fail_msg("paged_attention: split count %d left at %d", i, count[i]);
    }
  }
  free(part);
  free(count);
}

/* A pool of NB blocks with random K/V and a table whose rows name distinct
 * blocks in a shuffled order. */
static void pa_alloc(pa_case_t *c, int N) {
  c->N = N;
  const size_t pool = (size_t)c->NB * c->BS * c->Hkv * c->D;
  c->k = malloc(sizeof(float) * pool);
  c->v = malloc(sizeof(float) * pool);
  c->q = malloc(sizeof(float) * (size_t)N * c->Hq * c->D);
  c->table = malloc(sizeof(long long) * (size_t)c->S * c->MB);
  c->row_seq = malloc(sizeof(long long) * (size_t)N);
  c->row_pos = malloc(sizeof(long long) * (size_t)N);
  assert_true(c->k && c->v && c->q && c->table && c->row_seq && c->row_pos);
  assert_true(c->NB >= c->S * c->MB);
  for (size_t e = 0; e < pool; ++e) {
    c->k[e] = normal();
    c->v[e] = normal();
  }
  for (size_t e = 0; e < (size_t)N * c->Hq * c->D; ++e) c->q[e] = normal();
  long long *perm = malloc(sizeof(long long) * (size_t)c->NB);
  assert_non_null(perm);
  for (int b = 0; b < c->NB; ++b) perm[b] = b;
  for (int b = c->NB - 1; b > 0; --b) {
    const int j = (int)(uniform() * (b + 1));
    const long long t = perm[b];
    perm[b] = perm[j];
    perm[j] = t;
  }
  for (int e = 0; e < c->S * c->MB; ++e) c->table[e] = perm[e];
  free(perm);
}

static void pa_free(pa_case_t *c) {
  free(c->k);
  free(c->v);
  free(c->q);
  free(c->table);
  free(c->row_seq);
  free(c->row_pos);
}

static void pa_check_as(pa_case_t *c, bool bf16) {
  const size_t n = (size_t)c->N * c->Hq * c->D;
  double *want = malloc(sizeof(double) * n);
  float *got = malloc(sizeof(float) * n);
  assert_true(want && got);
  clear_error();
  if (bf16) pa_run_bf16(c, got);
  else pa_run(c, got);
  assert_int_equal(g_err[0], 0);
  pa_reference(c, want);
  /* f32: f32 accumulation against f64; bf16: the output's rounding (2^-9
   * relative) on values below 2 in magnitude. */
  const double bound = bf16 ? 8e-3 : 2e-5;
  double worst = 0;
  for (size_t e = 0; e < n; ++e) {
    assert_false(isnan(got[e]));
    const double d = fabs(got[e] - want[e]);
    if (d > worst) worst = d;
  }
  if (worst > bound) fail_msg("paged_attention: max |device - f64| %g > %g", worst, bound);
  free(want);
  free(got);
}

static void pa_check(pa_case_t *c) { pa_check_as(c, false); }

static void test_paged_attention_mixed_rows(void **state) {
  (void)state;
  /* BS 5, GQA 3 query heads per kv head, a padding row, decode rows of three
   * sequences and a prefill run of one, in a mixed order; then a window. */
  pa_case_t c = {.NB = 30, .BS = 5, .Hq = 6, .Hkv = 2, .D = 12, .S = 3, .MB = 9};
  pa_alloc(&c, 8);
  const long long seq[8] = {2, -1, 0, 1, 1, 1, 0, 2}, pos[8] = {44, 0, 3, 17, 18, 19, 0, 9};
  memcpy(c.row_seq, seq, sizeof(seq));
  memcpy(c.row_pos, pos, sizeof(pos));
  pa_check(&c);
  c.window = 7;
  pa_check(&c);
  c.window = 1;
  pa_check(&c);
  c.window = 0;
  pa_check_as(&c, true);
  pa_free(&c);
  /* Odd and uneven head sizes: D 7 (scalar value pairs, the last one half
   * empty; score pieces of 1 with one empty) and D 20 (pieces of 3, the
   * last ones short or empty), then the sizes with their own kernels (64,
   * 128: ty_pa_head_kernel), each in a run and in decode rows. */
  const int dims[4] = {7, 20, 64, 128};
  for (int k = 0; k < 4; ++k) {
    pa_case_t o = {.NB = 30, .BS = 5, .Hq = 4, .Hkv = 2, .D = dims[k], .S = 3, .MB = 9};
    pa_alloc(&o, 8);
    memcpy(o.row_seq, seq, sizeof(seq));
    memcpy(o.row_pos, pos, sizeof(pos));
    pa_check(&o);
    pa_check_as(&o, true);
    pa_free(&o);
  }
}

static void test_paged_attention_splits(void **state) {
  (void)state;
  /* Spans of 1, 2, 4 and the most splits (TY_PA_SPLIT_KEYS keys each), with
   * and without a window that starts a split mid-block. */
  pa_case_t c = {.NB = 2 * 260, .BS = 5, .Hq = 4, .Hkv = 1, .D = 16, .S = 2, .MB = 260};
  pa_alloc(&c, 4);
  const long long seq[4] = {0, 1, 0, 1};
  const long long pos[4] = {TY_PA_SPLIT_KEYS - 1, TY_PA_SPLIT_KEYS, 1299, 2 * TY_PA_SPLIT_KEYS + 77};
  memcpy(c.row_seq, seq, sizeof(seq));
  memcpy(c.row_pos, pos, sizeof(pos));
  assert_true(ty_pa_splits(1300) == TY_PA_MAX_SPLITS && ty_pa_splits(TY_PA_SPLIT_KEYS) == 1);
  assert_true(ty_pa_splits(2 * TY_PA_SPLIT_KEYS + 78) == 4);
  pa_check(&c);
  c.window = 1100;
  pa_check(&c);
  pa_check_as(&c, true); /* the bf16 instances, split and merge */
  pa_free(&c);
}

static void test_paged_attention_head_chunks(void **state) {
  (void)state;
  /* D 256: 16 query heads per block, so 34 heads of one kv head take 3
   * chunks (16, 16, 2). */
  pa_case_t c = {.NB = 8, .BS = 4, .Hq = 34, .Hkv = 1, .D = 256, .S = 2, .MB = 4};
  assert_int_equal(ty_pa_head_chunk(34, 256), 16);
  pa_alloc(&c, 3);
  const long long seq[3] = {1, 0, 1}, pos[3] = {15, 6, 2};
  memcpy(c.row_seq, seq, sizeof(seq));
  memcpy(c.row_pos, pos, sizeof(pos));
  pa_check(&c);
  pa_free(&c);
}

/* Row 0 (a span of 2 splits) alone, then first and last of batches with
 * other rows: the same bits. */
static void batch_invariance_at(int D) {
  pa_case_t c = {.NB = 2 * 220, .BS = 5, .Hq = 4, .Hkv = 2, .D = D, .S = 2, .MB = 220};
  pa_alloc(&c, 5);
  const long long seq[5] = {0, 1, 1, -1, 0}, pos[5] = {700, 1000, 3, 0, 12};
  memcpy(c.row_seq, seq, sizeof(seq));
  memcpy(c.row_pos, pos, sizeof(pos));
  const size_t row = (size_t)c.Hq * c.D;
  float *all = malloc(sizeof(float) * row * 5), *one = malloc(sizeof(float) * row);
  assert_true(all && one);
  clear_error();
  pa_run(&c, all);
  pa_case_t alone = c;
  alone.N = 1;
  pa_run(&alone, one);
  assert_int_equal(g_err[0], 0);
  assert_memory_equal(all, one, row * sizeof(float));
  /* The same row last in the batch (its q moved with it). */
  float *q = c.q;
  float *q2 = malloc(sizeof(float) * row * 5);
  assert_non_null(q2);
  memcpy(q2, q + row, row * 4 * sizeof(float));
  memcpy(q2 + row * 4, q, row * sizeof(float));
  const long long seq2[5] = {1, 1, -1, 0, 0}, pos2[5] = {1000, 3, 0, 12, 700};
  memcpy(c.row_seq, seq2, sizeof(seq2));
  memcpy(c.row_pos, pos2, sizeof(pos2));
  c.q = q2;
  pa_run(&c, all);
  assert_memory_equal(all + row * 4, one, row * sizeof(float));
  c.q = q;
  free(q2);
  free(all);
  free(one);
  pa_free(&c);
}

/* Prefill runs (rows of one sequence at consecutive positions) share a
 * block's K/V tiles: runs of 12 rows of one split, of 11 rows of two splits
 * cut by a group boundary (16 rows a block here), a decode row between
 * them; every row's bits equal its bits computed alone. Then a window,
 * under which only rows whose window starts at 0 share. */
static void runs_at(int D) {
  pa_case_t c = {.NB = 2 * 220, .BS = 5, .Hq = 4, .Hkv = 2, .D = D, .S = 2, .MB = 220};
  assert_int_equal(ty_pa_run_rows(ty_pa_head_chunk(2, D), D), 16);
  pa_alloc(&c, 24);
  for (int r = 0; r < 24; ++r) {
    c.row_seq[r] = r < 12 ? 0 : 1;
    c.row_pos[r] = r < 12 ? 100 + r : (r == 12 ? 5 : 1000 + r - 13);
  }
  const size_t row = (size_t)c.Hq * c.D;
  float *all = malloc(sizeof(float) * row * 24), *one = malloc(sizeof(float) * row);
  assert_true(all && one);
  for (int window = 0; window <= 600; window += 600) {
    c.window = window;
    pa_check(&c);
    clear_error();
    pa_run(&c, all);
    for (int r = 0; r < 24; ++r) {
      pa_case_t alone = c;
      alone.N = 1;
      alone.q = c.q + row * r;
      alone.row_seq = c.row_seq + r;
      alone.row_pos = c.row_pos + r;
      pa_run(&alone, one);
      if (memcmp(all + row * r, one, row * sizeof(float)) != 0) {
        fail_msg("paged_attention: row %d (window %d) differs alone and in its run", r, window);
      }
    }
    assert_int_equal(g_err[0], 0);
  }
  free(all);
  free(one);
  pa_free(&c);
}

static void test_paged_attention_batch_invariance(void **state) {
  (void)state;
  for (int D = 8; D <= 64; D += 56) batch_invariance_at(D);
}

static void test_paged_attention_runs(void **state) {
  (void)state;
  for (int D = 8; D <= 128; D *= (D == 8 ? 8 : 2)) runs_at(D);
}

static void test_paged_attention_errors(void **state) {
  (void)state;
  pa_case_t c = {.NB = 12, .BS = 5, .Hq = 2, .Hkv = 1, .D = 4, .S = 2, .MB = 6};
  pa_alloc(&c, 2);
  float out[2 * 2 * 4];
  c.row_seq[0] = -1;
  c.row_pos[0] = 0;
  c.row_seq[1] = 2; /* == S */
  c.row_pos[1] = 3;
  clear_error();
  pa_run(&c, out);
  expect_error(TY_ERR_PAGED_ROW, 1 * 4 + TY_PAGED_BAD_SEQ, 2, 2);
  c.row_seq[1] = 1;
  c.row_pos[1] = 30; /* == MB * BS */
  clear_error();
  pa_run(&c, out);
  expect_error(TY_ERR_PAGED_ROW, 1 * 4 + TY_PAGED_BAD_POS, 30, 30);
  c.row_pos[1] = 12;
  c.table[1 * 6 + 2] = 12; /* the block of position 12: == NB */
  clear_error();
  pa_run(&c, out);
  expect_error(TY_ERR_PAGED_ROW, 1 * 4 + TY_PAGED_BAD_BLOCK, 12, 12);
  pa_free(&c);
}

/* ---- sample and top_logprobs ---- */

enum { P_T, P_K, P_P, P_MIN, P_REP, P_PRES, P_FREQ, P_N };

static double splitmix_u(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
  double w;
  long long id;
} cand_t;

static int cand_cmp(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return x->id < y->id ? -1 : (x->id > y->id);
}

static int id_cmp(const void *a, const void *b) {
  const cand_t *x = a, *y = b;
  return x->id < y->id ? -1 : (x->id > y->id);
}

/* The f64 definition of spec29's sample for one row. */
static long long sample_reference(const float *logits, long long V, const float *pr,
                                  const long long seeds[2], const long long *hist, long long L,
                                  double *out_logprob) {
  double *x = malloc(sizeof(double) * (size_t)V);
  cand_t *c = malloc(sizeof(cand_t) * (size_t)V);
  assert_true(x && c);
  for (long long v = 0; v < V; ++v) {
    long long n = 0;
    for (long long k = 0; k < L; ++k) n += hist[k] == v;
    x[v] = logits[v];
    if (n > 0) {
      x[v] = x[v] > 0 ? x[v] / pr[P_REP] : x[v] * pr[P_REP];
      x[v] -= pr[P_PRES] + (double)pr[P_FREQ] * (double)n;
    }
  }
  long long arg = 0;
  for (long long v = 1; v < V; ++v)
    if (x[v] > x[arg]) arg = v;
  long long id = arg;
  if (pr[P_T] > 0) {
    for (long long v = 0; v < V; ++v) {
      c[v].w = exp((x[v] - x[arg]) / pr[P_T]);
      c[v].id = v;
    }
    qsort(c, (size_t)V, sizeof(cand_t), cand_cmp);
    long long keep = V;
    if (pr[P_K] > 0 && pr[P_K] < V) keep = (long long)pr[P_K];
    if (pr[P_P] < 1) {
      double tot = 0, run = 0;
      for (long long k = 0; k < keep; ++k) tot += c[k].w;
      long long k = 0;
      while (k < keep) {
        run += c[k++].w;
        if (run >= pr[P_P] * tot) break;
      }
      keep = k;
    }
    if (pr[P_MIN] > 0) {
      long long k = 1;
      while (k < keep && c[k].w >= pr[P_MIN]) ++k;
      keep = k;
    }
    qsort(c, (size_t)keep, sizeof(cand_t), id_cmp);
    double kept = 0;
    for (long long k = 0; k < keep; ++k) kept += c[k].w;
    double u = splitmix_u((uint64_t)seeds[0], (uint64_t)seeds[1]) * kept;
    id = c[keep - 1].id;
    for (long long k = 0; k < keep; ++k) {
      u -= c[k].w;
      if (u <= 0) {
        id = c[k].id;
        break;
      }
    }
  }
  double m = logits[0], s = 0;
  for (long long v = 1; v < V; ++v)
    if (logits[v] > m) m = logits[v];
  for (long long v = 0; v < V; ++v) s += exp(logits[v] - m);
  *out_logprob = logits[id] - (m + log(s));
  free(x);
  free(c);
  return id;
}

/* As the builder launches it (cuda_ops_serve.c): without a history,
 * ty_sample_scan over chunks of TY_SAMPLE_CHUNK ids first and ty_sample
 * merging them; with one (or with scan false), ty_sample alone. */
static void sample_run_with(const float *logits, unsigned N, long long V, const float *params,
                            const long long *seeds, const long long *hist, long long L,
                            long long *ids, float *logprob, bool scan) {
  float *work = malloc(sizeof(float) * N * (size_t)V);
  int *counts = malloc(sizeof(int) * N * (size_t)V);
  int P = scan && L == 0 ? (int)((V + TY_SAMPLE_CHUNK - 1) / TY_SAMPLE_CHUNK) : 0;
  float *part = malloc(sizeof(float) * 4 * N * (size_t)(P > 0 ? P : 1));
  assert_true(work && counts && part);
  int dtl = 1 /* f32 */, node = 7, *err = g_err;
  if (P > 0) {
    void *sargs[] = {&logits, &dtl, &V, &work, &part};
    launch("ty_sample_scan", N, (unsigned)P, 1, TY_SAMPLE_SCAN_THREADS, sargs);
  }
  void *args[] = {&logits, &dtl, &params, &seeds, &hist, &L, &V, &work, &counts, &ids, &logprob,
                  &err, &node, &part, &P};
  launch("ty_sample", N, 1, 1, TY_SAMPLE_THREADS, args);
  free(work);
  free(counts);
  free(part);
}

static void sample_run(const float *logits, unsigned N, long long V, const float *params,
                       const long long *seeds, const long long *hist, long long L,
                       long long *ids, float *logprob) {
  sample_run_with(logits, N, V, params, seeds, hist, L, ids, logprob, true);
}

static void test_sample_against_definition(void **state) {
  (void)state;
  /* Logits on a grid of 1/4 (many equal weights: the tie rules matter),
   * V = 1500 (three 512-thread tiles in the walk), rows over the params. */
  enum { V = 1500, L = 9 };
  static const float params[][P_N] = {
      {0, 0, 1, 0, 1, 0, 0},       {0.7f, 0, 1, 0, 1, 0, 0},    {1, 5, 1, 0, 1, 0, 0},
      {1.3f, 40, 1, 0, 1, 0, 0},   {1, 0, 0.5f, 0, 1, 0, 0},    {0.8f, 0, 0.9f, 0, 1, 0, 0},
      {1, 0, 1, 0.3f, 1, 0, 0},    {1, 50, 0.8f, 0.05f, 1, 0, 0}, {0, 0, 1, 0, 1.5f, 0.5f, 0.25f},
      {1, 3, 1, 0, 2, 1, 1},       {2, 1, 1, 0, 1, 0, 0},       {0.5f, 0, 0.05f, 0, 1, 0, 0},
  };
  const unsigned N = sizeof(params) / sizeof(params[0]);
  float *logits = malloc(sizeof(float) * N * V);
  long long seeds[2 * 12], hist[12 * L], ids[12];
  float logprob[12];
  assert_non_null(logits);
  for (unsigned i = 0; i < N; ++i) {
    for (long long v = 0; v < V; ++v) logits[i * V + v] = (float)floor(uniform() * 24) / 4 - 3;
    logits[i * V + 17] = logits[i * V + 900] = 3.5f; /* a tied maximum */
    for (int k = 0; k < L; ++k) hist[i * L + k] = k % 3 == 2 ? -1 : (k < 4 ? 17 : 100 * k);
    seeds[2 * i] = (long long)(0x9000ull + i * 77);
    seeds[2 * i + 1] = i % 4;
  }
  for (int pass = 0; pass < 8; ++pass) { /* draws 0..7 of each row's stream */
    for (unsigned i = 0; i < N; ++i) seeds[2 * i + 1] = pass + (long long)i % 4;
    clear_error();
    sample_run(logits, N, V, &params[0][0], seeds, hist, L, ids, logprob);
    assert_int_equal(g_err[0], 0);
    for (unsigned i = 0; i < N; ++i) {
      double lp;
      const long long want =
          sample_reference(logits + i * V, V, params[i], seeds + 2 * i, hist + i * L, L, &lp);
      if (ids[i] != want) {
        fail_msg("sample row %u draw %d: device id %lld, definition %lld", i, pass, ids[i], want);
      }
      assert_true(fabs(logprob[i] - lp) < 1e-5);
    }
  }
  /* Greedy ties: the lower id (row 0 has its maximum at 17 and 900). */
  assert_int_equal(ids[0], 17);
  free(logits);
}

/* Without a history: the chunked first pass (three chunks and a bit, a
 * tied maximum in two of them) against the definition, greedy and
 * sampled, and against ty_sample walking the row alone. */
static void test_sample_chunked_against_definition(void **state) {
  (void)state;
  enum { V = 3 * TY_SAMPLE_CHUNK + 300 };
  static const float params[][P_N] = {
      {0, 0, 1, 0, 1, 0, 0},     {0.7f, 0, 1, 0, 1, 0, 0},  {1, 5, 1, 0, 1, 0, 0},
      {1.3f, 40, 0.9f, 0, 1, 0, 0}, {1, 0, 1, 0.3f, 1, 0, 0},
  };
  const unsigned N = sizeof(params) / sizeof(params[0]);
  float *logits = malloc(sizeof(float) * N * V);
  long long seeds[2 * 5], ids[5], ids_one[5];
  float logprob[5], lp_one[5];
  assert_non_null(logits);
  for (unsigned i = 0; i < N; ++i) {
    for (long long v = 0; v < V; ++v) logits[i * V + v] = (float)floor(uniform() * 24) / 4 - 3;
    logits[i * V + TY_SAMPLE_CHUNK + 5] = logits[i * V + 2 * TY_SAMPLE_CHUNK + 1] = 3.5f;
    seeds[2 * i] = (long long)(0x5000ull + i * 31);
    seeds[2 * i + 1] = i;
  }
  clear_error();
  sample_run(logits, N, V, &params[0][0], seeds, NULL, 0, ids, logprob);
  sample_run_with(logits, N, V, &params[0][0], seeds, NULL, 0, ids_one, lp_one, false);
  assert_int_equal(g_err[0], 0);
  for (unsigned i = 0; i < N; ++i) {
    double lp;
    const long long want = sample_reference(logits + i * V, V, params[i], seeds + 2 * i, NULL,
                                            0, &lp);
    if (ids[i] != want) fail_msg("row %u: chunked id %lld, definition %lld", i, ids[i], want);
    assert_int_equal(ids[i], ids_one[i]);
    assert_true(fabs(logprob[i] - lp) < 1e-5);
    assert_true(fabs(logprob[i] - lp_one[i]) < 1e-5);
  }
  /* the tied maximum: the lower id, in the earlier chunk */
  assert_int_equal(ids[0], TY_SAMPLE_CHUNK + 5);
  free(logits);
}

static void test_sample_batch_invariance(void **state) {
  (void)state;
  enum { V = 700 };
  float *logits = malloc(sizeof(float) * 3 * V);
  assert_non_null(logits);
  for (int e = 0; e < 3 * V; ++e) logits[e] = normal() * 3;
  const float params[3 * P_N] = {0.9f, 0, 0.95f, 0, 1, 0, 0, 1, 0, 1, 0, 1, 0, 0,
                                 0.6f, 30, 1,   0, 1, 0, 0};
  const long long seeds[6] = {11, 3, 12, 0, 13, 5};
  long long ids3[3], id1;
  float lp3[3], lp1;
  clear_error();
  sample_run(logits, 3, V, params, seeds, NULL, 0, ids3, lp3);
  sample_run(logits, 1, V, params, seeds, NULL, 0, &id1, &lp1);
  assert_int_equal(g_err[0], 0);
  assert_int_equal(ids3[0], id1);
  assert_memory_equal(&lp3[0], &lp1, sizeof(float));
  free(logits);
}

static void test_sample_errors(void **state) {
  (void)state;
  enum { V = 50 };
  float logits[2 * V];
  for (int e = 0; e < 2 * V; ++e) logits[e] = normal();
  float params[2 * P_N] = {1, 0, 1, 0, 1, 0, 0, -1, 0, 1, 0, 1, 0, 0};
  const long long seeds[4] = {1, 0, 2, 0};
  long long hist[2 * 2] = {3, -1, 4, 5}, ids[2];
  float lp[2];
  clear_error();
  sample_run(logits, 2, V, params, seeds, hist, 2, ids, lp);
  const float neg = -1;
  uint32_t bits;
  memcpy(&bits, &neg, 4);
  expect_error(TY_ERR_SAMPLE_PARAM, 1, 0, bits);
  params[P_N + P_T] = 1;
  params[P_N + P_K] = 2.5f; /* not an integer */
  memcpy(&bits, &params[P_N + P_K], 4);
  clear_error();
  sample_run(logits, 2, V, params, seeds, hist, 2, ids, lp);
  expect_error(TY_ERR_SAMPLE_PARAM, 1, 1, bits);
  params[P_N + P_K] = 0;
  hist[3] = V; /* a history id past the vocabulary */
  clear_error();
  sample_run(logits, 2, V, params, seeds, hist, 2, ids, lp);
  expect_error(TY_ERR_SAMPLE_PARAM, 1, 7, V);
}

static void test_top_logprobs(void **state) {
  (void)state;
  enum { V = 900, N = 2, K = 6 };
  float logits[N * V];
  for (int e = 0; e < N * V; ++e) logits[e] = (float)floor(uniform() * 40) / 8;
  logits[5] = logits[600] = logits[899] = 9; /* ties: 5, 600, 899 in that order */
  long long ids[N * K];
  float lps[N * K];
  int dtl = 1, k = K;
  long long v = V;
  const float *lp = logits;
  long long *idp = ids;
  float *lpp = lps;
  void *args[] = {&lp, &dtl, &v, &k, &idp, &lpp};
  launch("ty_top_logprobs", N, 1, 1, 512, args);
  for (int i = 0; i < N; ++i) {
    cand_t *c = malloc(sizeof(cand_t) * V);
    assert_non_null(c);
    double m = -INFINITY, s = 0;
    for (int u = 0; u < V; ++u) {
      c[u].w = logits[i * V + u];
      c[u].id = u;
      if (c[u].w > m) m = c[u].w;
    }
    for (int u = 0; u < V; ++u) s += exp(c[u].w - m);
    qsort(c, V, sizeof(cand_t), cand_cmp);
    for (int r = 0; r < K; ++r) {
      assert_int_equal(ids[i * K + r], c[r].id);
      assert_true(fabs(lps[i * K + r] - (c[r].w - m - log(s))) < 1e-5);
    }
    free(c);
  }
  assert_int_equal(ids[0], 5);
  assert_int_equal(ids[1], 600);
  assert_int_equal(ids[2], 899);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_paged_kv_write),
      cmocka_unit_test(test_paged_attention_mixed_rows),
      cmocka_unit_test(test_paged_attention_splits),
      cmocka_unit_test(test_paged_attention_head_chunks),
      cmocka_unit_test(test_paged_attention_batch_invariance),
      cmocka_unit_test(test_paged_attention_runs),
      cmocka_unit_test(test_paged_attention_errors),
      cmocka_unit_test(test_sample_against_definition),
      cmocka_unit_test(test_sample_chunked_against_definition),
      cmocka_unit_test(test_sample_batch_invariance),
      cmocka_unit_test(test_sample_errors),
      cmocka_unit_test(test_top_logprobs),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
