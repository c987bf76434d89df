/* The cuda plugin's attention kernels on a GPU, through sessions: forward and
 * backward against the f64 reference (ops/reference/ref_attention.c) on the
 * conformance shapes and on the tensor-core path's shapes (GQA, odd T,
 * T != S, decode, kv_len, window, D = 64 and 128), the paths compared with
 * each other (TRAINYARD_CUDA_ATTENTION=generic, =mma, and auto: wgmma on a
 * compute capability 9.0 card at head dim 64),
 * run-to-run bit equality, and the kv_len data error. With --bench it times
 * the training shapes instead (GPT-2 124M, a Llama-style ~1B with GQA,
 * Llama-7B, decode) and prints, per path, the mean of 20 runs (after a
 * warm-up) in ms, TFLOP/s in FlashAttention's convention, and GB/s of the
 * tensors each kernel must read or write. A run is one session run: the
 * replayed CUDA graph plus the error-flag read and a wait (~10-20 us).
 *
 * Exit 77 (skipped, with the reason) when no CUDA device can be opened.
 * Usage: attention_cuda_test [--bench] [--device URI] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph/ir/graph.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "hal/half.h"
#include "hal/registry.h"
#include "ops/attrs.h"
#include "ops/reference/ref_attention.h"

typedef struct att_case_t {
  const char *name;
  ty_dtype_t dtype;
  /* kv_len 0: no input; window -1: causal=0 (context parallel's earlier key
   * blocks: the mma.sync kernels' _full instances in modes mma and auto,
   * never wgmma) */
  int64_t B, T, S, Hq, Hkv, D, window, kv_len;
  double scale; /* 0: the default 1/sqrt(D) */
} att_case_t;

static int g_failures, g_checks;
/* The paths, by TRAINYARD_CUDA_ATTENTION: "auto" is the wgmma kernels on a
 * compute capability 9.0 card at head dim 64, the mma.sync ones elsewhere. */
static const char *const g_modes[3] = {"generic", "mma", "auto"};
static const char *g_uri = "cuda:0";

static const char *dtname(ty_dtype_t d) {
  return d == TY_DTYPE_F32 ? "f32" : d == TY_DTYPE_BF16 ? "bf16" : "f16";
}

static size_t esize(ty_dtype_t d) { return d == TY_DTYPE_F32 ? 4 : 2; }

/* x rounded to dtype, stored at element i of dst; returns the stored value. */
static double store(void *dst, size_t i, ty_dtype_t d, double x) {
  if (d == TY_DTYPE_F32) {
    ((float *)dst)[i] = (float)x;
    return (float)x;
  }
  uint16_t h = d == TY_DTYPE_BF16 ? ty_f64_to_bf16(x) : ty_f64_to_f16(x);
  ((uint16_t *)dst)[i] = h;
  return d == TY_DTYPE_BF16 ? ty_bf16_to_f64(h) : ty_f16_to_f64(h);
}

static double load(const void *src, size_t i, ty_dtype_t d) {
  if (d == TY_DTYPE_F32) return ((const float *)src)[i];
  uint16_t h = ((const uint16_t *)src)[i];
  return d == TY_DTYPE_BF16 ? ty_bf16_to_f64(h) : ty_f16_to_f64(h);
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double uniform(double lo, double hi) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return lo + (hi - lo) * (double)(g_rng >> 11) / 9007199254740992.0;
}

/* A host tensor: storage bytes and the f64 values they hold. */
typedef struct host_t {
  size_t n;
  void *raw;
  double *v;
} host_t;

static host_t host_make(size_t n, ty_dtype_t d) {
  host_t h = {n, calloc(n ? n : 1, esize(d)), calloc(n ? n : 1, sizeof(double))};
  if (!h.raw || !h.v) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  return h;
}

static void host_fill(host_t *h, ty_dtype_t d, double lo, double hi) {
  for (size_t i = 0; i < h->n; ++i) h->v[i] = store(h->raw, i, d, uniform(lo, hi));
}

static void host_free(host_t *h) {
  free(h->raw);
  free(h->v);
}

static void check(int ok, const char *what) {
  g_checks++;
  if (!ok) {
    g_failures++;
    printf("  FAIL %s\n", what);
  }
}

static double nmse(const double *x, const double *ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

static void check_nmse(const char *what, const double *x, const double *ref, size_t n,
                       double bound) {
  const double e = nmse(x, ref, n);
  printf("  %-28s nmse %.3e (bound %.0e)%s\n", what, e, bound, e <= bound ? "" : "  <-- FAIL");
  g_checks++;
  if (!(e <= bound)) g_failures++;
}

static void oom(void) {
  fprintf(stderr, "out of memory\n");
  exit(1);
}

static void die_status(ty_status_t s, const char *what) {
  fprintf(stderr, "%s: %s\n", what, ty_status_message(s));
  exit(1);
}

#define OK(expr)                                   \
  do {                                             \
    ty_status_t s_ = (expr);                       \
    if (s_) die_status(s_, #expr);                 \
  } while (0)

/* The one-node graph of the case (forward or backward). */
static ty_graph_t *build_graph(const att_case_t *c, int backward) {
  ty_graph_t *g = NULL;
  OK(ty_graph_create(&g));
  const int64_t qd[4] = {c->B, c->T, c->Hq, c->D}, kd[4] = {c->B, c->S, c->Hkv, c->D};
  const int64_t ld[3] = {c->B, c->Hq, c->T};
  ty_value_id_t in[7];
  uint32_t n = 0;
  if (backward) OK(ty_graph_add_input(g, "dout", c->dtype, 4, qd, &in[n++]));
  OK(ty_graph_add_input(g, "q", c->dtype, 4, qd, &in[n++]));
  OK(ty_graph_add_input(g, "k", c->dtype, 4, kd, &in[n++]));
  OK(ty_graph_add_input(g, "v", c->dtype, 4, kd, &in[n++]));
  if (backward) {
    OK(ty_graph_add_input(g, "out", c->dtype, 4, qd, &in[n++]));
    OK(ty_graph_add_input(g, "lse", TY_DTYPE_F32, 3, ld, &in[n++]));
  }
  if (c->kv_len) OK(ty_graph_add_input(g, "kv_len", TY_DTYPE_I64, 0, NULL, &in[n++]));
  ty_attrs_t attrs = TY_ATTRS_EMPTY;
  if (c->window > 0) OK(ty_attrs_set_int(&attrs, "window", c->window));
  if (c->window < 0) OK(ty_attrs_set_int(&attrs, "causal", 0));
  if (c->scale > 0) OK(ty_attrs_set_float(&attrs, "scale", c->scale));
  ty_value_id_t out[3];
  OK(ty_graph_add_node(g, backward ? "attention_backward" : "attention", in, n, &attrs, out,
                       backward ? 3 : 2));
  static const char *const fwd_names[2] = {"y", "y_lse"}, *const bwd_names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < (backward ? 3 : 2); ++i) {
    OK(ty_graph_set_output(g, out[i], backward ? bwd_names[i] : fwd_names[i]));
  }
  return g;
}

typedef struct run_t {
  double *out[3]; /* y, lse or dq, dk, dv as f64 */
  void *raw[3];   /* their bytes */
  size_t n[3], bytes[3];
  ty_status_t status;
} run_t;

static void run_free(run_t *r) {
  for (int i = 0; i < 3; ++i) {
    free(r->out[i]);
    free(r->raw[i]);
  }
  ty_status_free(r->status);
}

/* Opens the device afresh (its compile cache would otherwise serve the other
 * path's executable), compiles with TRAINYARD_CUDA_ATTENTION=`mode`, binds,
 * runs `runs` times (keeping the last) and reads the outputs. With timing,
 * *seconds gets the mean of the runs after a warm-up run. */
static run_t run_once(ty_registry_t *reg, const att_case_t *c, int backward, const char *mode,
                      host_t *const ins[6], int runs, double *seconds) {
  run_t r;
  memset(&r, 0, sizeof(r));
  setenv("TRAINYARD_CUDA_ATTENTION", mode, 1);
  ty_device_t *d = NULL;
  OK(ty_device_open(reg, g_uri, &d));
  ty_graph_t *g = build_graph(c, backward);
  ty_session_t *s = NULL;
  OK(ty_session_create(d, g, NULL, &s));
  const int64_t qd[4] = {c->B, c->T, c->Hq, c->D}, kd[4] = {c->B, c->S, c->Hkv, c->D};
  const int64_t ld[3] = {c->B, c->Hq, c->T};
  const size_t qn = (size_t)(c->B * c->T * c->Hq * c->D);
  const size_t kn = (size_t)(c->B * c->S * c->Hkv * c->D);
  const size_t es = esize(c->dtype);
  if (backward) {
    OK(ty_session_bind(s, "dout", c->dtype, 4, qd, ins[3]->raw, qn * es));
    OK(ty_session_bind(s, "out", c->dtype, 4, qd, ins[4]->raw, qn * es));
    OK(ty_session_bind(s, "lse", TY_DTYPE_F32, 3, ld, ins[5]->raw, ins[5]->n * 4));
  }
  OK(ty_session_bind(s, "q", c->dtype, 4, qd, ins[0]->raw, qn * es));
  OK(ty_session_bind(s, "k", c->dtype, 4, kd, ins[1]->raw, kn * es));
  OK(ty_session_bind(s, "v", c->dtype, 4, kd, ins[2]->raw, kn * es));
  if (c->kv_len) {
    OK(ty_session_bind(s, "kv_len", TY_DTYPE_I64, 0, NULL, &c->kv_len, sizeof(c->kv_len)));
  }
  struct timespec t0, t1;
  for (int i = 0; i < runs && !r.status; ++i) {
    if (i == 1) clock_gettime(CLOCK_MONOTONIC, &t0);
    r.status = ty_session_run(s);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (seconds && runs > 1) {
    *seconds = ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) /
               (runs - 1);
  }
  static const char *const fwd_names[2] = {"y", "y_lse"}, *const bwd_names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < (backward ? 3 : 2) && !r.status; ++i) {
    const int is_lse = !backward && i == 1;
    const ty_dtype_t dt = is_lse ? TY_DTYPE_F32 : c->dtype;
    r.n[i] = is_lse ? (size_t)(c->B * c->Hq * c->T) : (backward && i > 0 ? kn : qn);
    r.bytes[i] = r.n[i] * esize(dt);
    r.raw[i] = malloc(r.bytes[i] ? r.bytes[i] : 1);
    r.out[i] = malloc((r.n[i] ? r.n[i] : 1) * sizeof(double));
    if (!r.raw[i] || !r.out[i]) oom();
    OK(ty_session_read(s, backward ? bwd_names[i] : fwd_names[i], r.raw[i], r.bytes[i]));
    for (size_t j = 0; j < r.n[i]; ++j) r.out[i][j] = load(r.raw[i], j, dt);
  }
  ty_session_destroy(s);
  ty_graph_destroy(g);
  ty_device_close(d);
  return r;
}

static ty_ref_attention_shape_t ref_shape(const att_case_t *c) {
  ty_ref_attention_shape_t s = {c->B,      c->T, c->S, c->Hq,
                                c->Hkv,    c->D, c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->D),
                                c->window > 0 ? c->window : 0, c->kv_len, c->window < 0};
  return s;
}

static int fast_applies(const att_case_t *c) {
  return c->dtype != TY_DTYPE_F32 && (c->D == 64 || c->D == 128);
}

/* The conformance "reduction" bounds against the f64 oracle; between the
 * paths (each output rounded once, P and dS rounded to 16 bits on the
 * tensor cores) about 3x the spread the CPU emulation shows (bf16 4e-6 to
 * 8e-6, f16 ~1e-7); tests/cuda/attention_emu.cc uses the same. */
static double oracle_bound(ty_dtype_t d) {
  return d == TY_DTYPE_F32 ? 1e-9 : d == TY_DTYPE_BF16 ? 1e-4 : 1e-6;
}

static double paths_bound(ty_dtype_t d) { return d == TY_DTYPE_BF16 ? 2e-5 : 5e-7; }

static void test_case(ty_registry_t *reg, const att_case_t *c) {
  printf("%s %s: B=%lld T=%lld S=%lld Hq=%lld Hkv=%lld D=%lld window=%lld kv_len=%lld\n",
         c->name, dtname(c->dtype), (long long)c->B, (long long)c->T, (long long)c->S,
         (long long)c->Hq, (long long)c->Hkv, (long long)c->D, (long long)c->window,
         (long long)c->kv_len);
  const size_t qn = (size_t)(c->B * c->T * c->Hq * c->D);
  const size_t kn = (size_t)(c->B * c->S * c->Hkv * c->D);
  const size_t ln = (size_t)(c->B * c->Hq * c->T);
  host_t q = host_make(qn, c->dtype), k = host_make(kn, c->dtype), v = host_make(kn, c->dtype);
  host_t dout = host_make(qn, c->dtype), out = host_make(qn, c->dtype);
  host_t lse = host_make(ln, TY_DTYPE_F32);
  host_fill(&q, c->dtype, -2, 2);
  host_fill(&k, c->dtype, -1, 1);
  host_fill(&v, c->dtype, -1, 1);
  host_fill(&dout, c->dtype, -1, 1);
  const ty_ref_attention_shape_t rs = ref_shape(c);
  double *ref_out = calloc(qn, sizeof(double)), *ref_lse = calloc(ln, sizeof(double));
  double *ref_dq = calloc(qn, sizeof(double)), *ref_dk = calloc(kn, sizeof(double));
  double *ref_dv = calloc(kn, sizeof(double));
  if (!ref_out || !ref_lse || !ref_dq || !ref_dk || !ref_dv) oom();
  OK(ty_ref_attention_forward(&rs, q.v, k.v, v.v, ref_out, ref_lse));
  /* The backward's saved inputs as the conformance kit derives them: the
   * oracle's out rounded to the dtype, its lse in f32. */
  for (size_t i = 0; i < qn; ++i) out.v[i] = store(out.raw, i, c->dtype, ref_out[i]);
  for (size_t i = 0; i < ln; ++i) lse.v[i] = store(lse.raw, i, TY_DTYPE_F32, ref_lse[i]);
  OK(ty_ref_attention_backward(&rs, q.v, k.v, v.v, lse.v, dout.v, ref_dq, ref_dk, ref_dv));
  host_t *ins[6] = {&q, &k, &v, &dout, &out, &lse};
  const double bound = oracle_bound(c->dtype);
  for (int backward = 0; backward < 2; ++backward) {
    run_t paths[3];
    const int npaths = fast_applies(c) ? 3 : 1;
    for (int p = 0; p < npaths; ++p) {
      const char *label = g_modes[p];
      char what[96];
      paths[p] = run_once(reg, c, backward, g_modes[p], ins, 1, NULL);
      run_t *r = &paths[p];
      if (r->status) {
        printf("  FAIL %s %s: %s\n", label, backward ? "backward" : "forward",
               ty_status_message(r->status));
        g_failures++;
        continue;
      }
      if (!backward) {
        snprintf(what, sizeof(what), "%s out vs f64", label);
        check_nmse(what, r->out[0], ref_out, qn, bound);
        double worst = 0;
        for (size_t i = 0; i < ln; ++i) worst = fmax(worst, fabs(r->out[1][i] - ref_lse[i]));
        printf("  %-28s max |err| %.2e\n", "lse vs f64", worst);
        const double lse_bound = c->dtype == TY_DTYPE_F32 ? 1e-5 : 2e-3;
        snprintf(what, sizeof(what), "%s lse within %.0e", label, lse_bound);
        check(worst <= lse_bound, what);
      } else {
        const double *refs[3] = {ref_dq, ref_dk, ref_dv};
        static const char *const names[3] = {"dq", "dk", "dv"};
        for (int i = 0; i < 3; ++i) {
          snprintf(what, sizeof(what), "%s %s vs f64", label, names[i]);
          check_nmse(what, r->out[i], refs[i], r->n[i], bound);
        }
      }
      /* A second run of the same path gives the same bits. */
      run_t again = run_once(reg, c, backward, g_modes[p], ins, 2, NULL);
      int same = !again.status;
      for (int i = 0; i < 3 && same; ++i) {
        same = r->bytes[i] == again.bytes[i] &&
               (r->bytes[i] == 0 || memcmp(r->raw[i], again.raw[i], r->bytes[i]) == 0);
      }
      snprintf(what, sizeof(what), "%s %s bit-identical run to run", label,
               backward ? "backward" : "forward");
      check(same, what);
      run_free(&again);
    }
    for (int p = 1; p < npaths; ++p) {
      if (paths[0].status || paths[p].status) continue;
      for (int i = 0; i < (backward ? 3 : 1); ++i) {
        char what[64];
        static const char *const names[4] = {"out", "dq", "dk", "dv"};
        snprintf(what, sizeof(what), "%s %s vs generic", g_modes[p], names[backward ? i + 1 : 0]);
        check_nmse(what, paths[p].out[i], paths[0].out[i], paths[0].n[i], paths_bound(c->dtype));
      }
    }
    for (int p = 0; p < npaths; ++p) run_free(&paths[p]);
  }
  /* kv_len outside [T, S] fails the run with a message naming it. */
  if (c->kv_len) {
    att_case_t bad = *c;
    bad.kv_len = c->S + 3;
    for (int p = 0; p < (fast_applies(c) ? 3 : 1); ++p) {
      run_t r = run_once(reg, &bad, 0, g_modes[p], ins, 1, NULL);
      char what[96];
      snprintf(what, sizeof(what), "%s: kv_len > S is an INVALID_ARGUMENT naming kv_len",
               g_modes[p]);
      check(r.status && ty_status_code(r.status) == TY_CODE_INVALID_ARGUMENT &&
                strstr(ty_status_message(r.status), "kv_len input"),
            what);
      run_free(&r);
    }
  }
  free(ref_out);
  free(ref_lse);
  free(ref_dq);
  free(ref_dk);
  free(ref_dv);
  for (int i = 0; i < 6; ++i) host_free(ins[i]);
}

/* Visible (query, key) pairs: the work of the causal mask. */
static double visible_pairs(const att_case_t *c) {
  const int64_t L = c->kv_len ? c->kv_len : c->S;
  double pairs = 0;
  for (int64_t t = 0; t < c->T; ++t) {
    const int64_t pos = t + L - c->T;
    int64_t lo = c->window > 0 && pos - c->window + 1 > 0 ? pos - c->window + 1 : 0;
    pairs += (double)(pos - lo + 1);
  }
  return pairs * (double)(c->B * c->Hq);
}

static void bench_case(ty_registry_t *reg, const att_case_t *c) {
  const size_t qn = (size_t)(c->B * c->T * c->Hq * c->D);
  const size_t kn = (size_t)(c->B * c->S * c->Hkv * c->D);
  host_t q = host_make(qn, c->dtype), k = host_make(kn, c->dtype), v = host_make(kn, c->dtype);
  host_t dout = host_make(qn, c->dtype), out = host_make(qn, c->dtype);
  host_t lse = host_make((size_t)(c->B * c->Hq * c->T), TY_DTYPE_F32);
  host_fill(&q, c->dtype, -2, 2);
  host_fill(&k, c->dtype, -1, 1);
  host_fill(&v, c->dtype, -1, 1);
  host_fill(&dout, c->dtype, -1, 1);
  host_fill(&out, c->dtype, -0.5, 0.5);
  host_fill(&lse, TY_DTYPE_F32, 3, 4);
  host_t *ins[6] = {&q, &k, &v, &dout, &out, &lse};
  /* FlashAttention's convention: forward 4 D flops per visible pair (two
   * matmuls), backward 2.5x that (five matmuls; these kernels do seven). */
  const double fwd_flops = 4.0 * (double)c->D * visible_pairs(c);
  /* Bytes every kernel must move at least once (decode is bound by these):
   * forward q, k, v, out; backward dout, q, k, v, out, dq, dk, dv. */
  const double es = (double)esize(c->dtype);
  const double fwd_bytes = es * (2.0 * (double)qn + 2.0 * (double)kn);
  const double bwd_bytes = es * (4.0 * (double)qn + 4.0 * (double)kn);
  for (int p = fast_applies(c) ? 2 : 0; p >= 0; --p) {
    for (int backward = 0; backward < 2; ++backward) {
      double sec = 0;
      run_t r = run_once(reg, c, backward, g_modes[p], ins, 21, &sec);
      const double flops = backward ? 2.5 * fwd_flops : fwd_flops;
      if (r.status) {
        printf("%-14s %-5s %-8s %-8s FAILED: %s\n", c->name, dtname(c->dtype), g_modes[p],
               backward ? "backward" : "forward",
               ty_status_message(r.status));
        g_failures++;
      } else {
        printf("%-14s %-5s %-8s %-8s %9.3f ms %8.1f TFLOP/s %8.1f GB/s\n", c->name,
               dtname(c->dtype), g_modes[p], backward ? "backward" : "forward",
               sec * 1e3, flops / sec * 1e-12, (backward ? bwd_bytes : fwd_bytes) / sec * 1e-9);
      }
      run_free(&r);
    }
  }
  for (int i = 0; i < 6; ++i) host_free(ins[i]);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int bench = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--bench")) bench = 1;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc) g_uri = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--bench] [--device URI]\n", argv[0]);
      return 2;
    }
  }
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *reg = NULL;
  OK(ty_registry_create(&options, &reg));
  ty_device_t *probe = NULL;
  ty_status_t s = ty_device_open(reg, g_uri, &probe);
  if (s) {
    printf("SKIP: cannot open %s: %s\n", g_uri, ty_status_message(s));
    ty_status_free(s);
    ty_registry_destroy(reg);
    return 77;
  }
  printf("%s: %s\n", g_uri, ty_device_info(probe)->name);
  ty_device_close(probe);
  const ty_dtype_t F32 = TY_DTYPE_F32, BF16 = TY_DTYPE_BF16, F16 = TY_DTYPE_F16;
  if (bench) {
    const att_case_t cases[] = {
        {"gpt2-124m", BF16, 16, 1024, 1024, 12, 12, 64, 0, 0, 0},
        {"gpt2-124m", F16, 16, 1024, 1024, 12, 12, 64, 0, 0, 0},
        {"gpt2-124m", F32, 16, 1024, 1024, 12, 12, 64, 0, 0, 0},
        {"llama-1b-gqa", BF16, 8, 2048, 2048, 32, 8, 64, 0, 0, 0},
        {"llama-7b", BF16, 4, 2048, 2048, 32, 32, 128, 0, 0, 0},
        {"decode-7b", BF16, 1, 1, 4096, 32, 32, 128, 0, 0, 0},
        {"decode-gqa", BF16, 8, 1, 4096, 32, 8, 64, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) bench_case(reg, &cases[i]);
  } else {
    const att_case_t cases[] = {
        /* The conformance shapes. */
        {"causal-mha", F32, 2, 8, 8, 4, 4, 16, 0, 0, 0},
        {"gqa", BF16, 1, 8, 8, 8, 2, 16, 0, 0, 0},
        {"kv-offset-gqa", F16, 2, 3, 11, 4, 2, 8, 0, 0, 0},
        {"window", F32, 1, 12, 12, 2, 2, 16, 4, 0, 0},
        {"cache-kv-len", BF16, 1, 2, 12, 4, 2, 8, 0, 7, 0},
        {"longer-gqa", F32, 1, 33, 33, 4, 2, 32, 0, 0, 0},
        /* Generic head-dim buckets. */
        {"d100", F32, 1, 37, 45, 3, 3, 100, 0, 0, 0},
        {"d256-gqa", BF16, 1, 20, 20, 4, 2, 256, 0, 0, 0},
        {"d64-f32", F32, 2, 130, 130, 2, 1, 64, 0, 0, 0},
        /* The tensor-core path: both dtypes, edges of every kind. */
        {"tc-gqa", BF16, 2, 256, 256, 4, 2, 64, 0, 0, 0},
        {"tc-odd-T", F16, 1, 200, 200, 2, 2, 64, 0, 0, 0},
        {"tc-T-ne-S", BF16, 1, 100, 300, 4, 2, 64, 0, 0, 0},
        {"tc-decode", BF16, 2, 1, 333, 4, 1, 128, 0, 0, 0},
        {"tc-kv-len", F16, 1, 70, 500, 2, 1, 64, 0, 250, 0},
        {"tc-window", BF16, 1, 256, 256, 2, 2, 64, 50, 0, 0},
        {"tc-d128", F16, 1, 150, 150, 2, 1, 128, 0, 0, 0.3},
        {"tc-d128-kvlen", BF16, 1, 40, 200, 1, 1, 128, 17, 120, 0},
        {"tc-gpt2-tile", BF16, 1, 1024, 1024, 2, 2, 64, 0, 0, 0},
        /* causal=0 (issue 31): S < T, kv_len below T, a tensor-core shape. */
        {"full-gqa", F32, 1, 6, 9, 4, 2, 8, -1, 0, 0},
        {"full-short", BF16, 2, 7, 3, 2, 2, 8, -1, 0, 0},
        {"full-kv-len", F16, 1, 6, 12, 4, 2, 8, -1, 3, 0},
        {"full-tc-shape", BF16, 1, 200, 300, 4, 2, 64, -1, 0, 0},
        {"full-f32-d64", F32, 1, 256, 256, 2, 1, 64, -1, 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) test_case(reg, &cases[i]);
    printf("%d checks, %d failed\n", g_checks, g_failures);
  }
  ty_registry_destroy(reg);
  return g_failures ? 1 : 0;
}
