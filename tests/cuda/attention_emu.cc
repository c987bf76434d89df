/* The attention kernels of the cuda plugin (backends/cuda/kernels/attention.cu)
 * run on the CPU emulation of tests/cuda/cuda_emu.h, against a naive f64
 * attention (the formulas of ops/reference/ref_attention.c): both paths
 * (generic and tensor-core), forward and backward, on the conformance shapes
 * and on shapes of the fast path (partial tiles, T != S, decode, kv_len,
 * window, GQA, misaligned pointers), plus the kv_len data error and run-to-run
 * determinism. Kernels are found by the names the builder's plan gives
 * (cuda_attention_plan.c) and launched with its grids and shared-memory
 * sizes, so a wrong name or size fails here too.
 *
 * Usage: attention_emu [--quick | --big] [--only SUBSTRING] [--seed N]
 *   --quick runs the conformance shapes in one dtype each and a few
 *   tensor-core cases (what ctest runs: seconds); the default runs every
 *   case (about 30 s); --big adds
 *   T = S = 1024, D = 64 cases.
 * Exit 0 when every check passes; 1 otherwise (each failure is printed). */
#include "cuda_emu.h"

#include "backends/cuda/kernels/attention.cu"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_attention_plan.h"

namespace {

typedef void (*fwd_fn)(const void *, const void *, const void *, void *, float *,
                       const long long *, int, int, int, int, int, float, float, int, int *, int);
typedef void (*dq_fn)(const void *, const void *, const void *, const void *, const float *,
                      const float *, const long long *, void *, int, int, int, int, int, float,
                      float, int, int *, int);
typedef void (*dkv_fn)(const void *, const void *, const void *, const void *, const float *,
                       const float *, const long long *, void *, void *, int, int, int, int, int,
                       float, float, int, int *, int);
typedef void (*delta_fn)(const void *, const void *, const float *, float *, long long, int,
                         int, int);

struct Case {
  std::string name;
  int B, T, S, Hq, Hkv, D;
  int window;
  long long kvlen; /* 0: absent */
  double scale;    /* 0: 1/sqrt(D) */
  ty_dtype_t dtype;
  bool backward;
  bool misalign; /* tensors 2 bytes past a 16-byte boundary */
};

/* A device tensor: storage bytes (exactly sized, so AddressSanitizer sees
 * overruns) and the f64 values they hold. */
struct Tensor {
  ty_dtype_t dtype = TY_DTYPE_F32;
  size_t n = 0;
  unsigned char *alloc = nullptr, *data = nullptr;
  std::vector<double> v;
  Tensor() = default;
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;
  ~Tensor() { free(alloc); }
  void init(ty_dtype_t dt, size_t count, bool misalign) {
    free(alloc);
    dtype = dt;
    n = count;
    const size_t off = misalign ? 2 : 0;
    alloc = (unsigned char *)aligned_alloc(16, (esize() * n + off + 15) / 16 * 16);
    data = alloc + off;
    memset(data, 0xff, esize() * n); /* NaN everywhere: unwritten outputs show */
    v.assign(n, 0.0);
  }
  size_t esize() const { return dtype == TY_DTYPE_F32 ? 4 : 2; }
  double get(size_t i) const {
    if (dtype == TY_DTYPE_F32) return ((const float *)data)[i];
    uint16_t h;
    memcpy(&h, data + 2 * i, 2);
    if (dtype == TY_DTYPE_BF16) return __uint_as_float((uint32_t)h << 16);
    return __half2float(__ushort_as_half(h));
  }
  void set(size_t i, double x) {
    if (dtype == TY_DTYPE_F32) {
      ((float *)data)[i] = (float)x;
    } else {
      uint16_t h = dtype == TY_DTYPE_BF16 ? __bfloat16_as_ushort(__float2bfloat16_rn((float)x))
                                          : __half_as_ushort(__float2half_rn((float)x));
      memcpy(data + 2 * i, &h, 2);
    }
    v[i] = get(i);
  }
  void fill_uniform(std::mt19937_64 &rng, double lo, double hi) {
    std::uniform_real_distribution<double> u(lo, hi);
    for (size_t i = 0; i < n; ++i) set(i, u(rng));
  }
  void read_back() {
    for (size_t i = 0; i < n; ++i) v[i] = get(i);
  }
};

struct Shape {
  int B, T, S, Hq, Hkv, D, window;
  long long L;
  double scale;
  size_t qi(int b, int t, int h, int d) const { return (((size_t)b * T + t) * Hq + h) * D + d; }
  size_t ki(int b, int s, int h, int d) const { return (((size_t)b * S + s) * Hkv + h) * D + d; }
  size_t li(int b, int h, int t) const { return ((size_t)b * Hq + h) * T + t; }
  /* window -1: causal=0 (every key below L; the generic kernels' encoding). */
  bool visible(int t, int s) const {
    if (window < 0) return s < L;
    const long long pos = t + L - T;
    return s <= pos && (window == 0 || pos - s < window);
  }
};

/* ---- the f64 oracle ---- */

double dot(const std::vector<double> &a, size_t ao, const std::vector<double> &b, size_t bo,
           int n) {
  double acc = 0.0;
  for (int i = 0; i < n; ++i) acc += a[ao + i] * b[bo + i];
  return acc;
}

void ref_forward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k,
                 const std::vector<double> &v, std::vector<double> &out,
                 std::vector<double> &lse) {
  const int G = s.Hq / s.Hkv;
  out.assign((size_t)s.B * s.T * s.Hq * s.D, 0.0);
  lse.assign((size_t)s.B * s.Hq * s.T, 0.0);
  std::vector<double> sc(s.S);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.Hq; ++h)
      for (int t = 0; t < s.T; ++t) {
        double m = -INFINITY;
        for (int j = 0; j < s.S; ++j) {
          if (!s.visible(t, j)) continue;
          sc[j] = s.scale * dot(q, s.qi(b, t, h, 0), k, s.ki(b, j, h / G, 0), s.D);
          m = fmax(m, sc[j]);
        }
        double z = 0.0;
        for (int j = 0; j < s.S; ++j)
          if (s.visible(t, j)) z += exp(sc[j] - m);
        const double row_lse = m + log(z);
        lse[s.li(b, h, t)] = row_lse;
        for (int j = 0; j < s.S; ++j) {
          if (!s.visible(t, j)) continue;
          const double p = exp(sc[j] - row_lse);
          for (int d = 0; d < s.D; ++d) out[s.qi(b, t, h, d)] += p * v[s.ki(b, j, h / G, d)];
        }
      }
}

/* dlse: the lse output's gradient (empty for none): delta becomes
 * sum_j p_j dp_j - dlse, as in ops/reference/ref_attention.c. */
void ref_backward(const Shape &s, const std::vector<double> &q, const std::vector<double> &k,
                  const std::vector<double> &v, const std::vector<double> &lse,
                  const std::vector<double> &dout, const std::vector<float> &dlse,
                  std::vector<double> &dq, std::vector<double> &dk, std::vector<double> &dv) {
  const int G = s.Hq / s.Hkv;
  dq.assign((size_t)s.B * s.T * s.Hq * s.D, 0.0);
  dk.assign((size_t)s.B * s.S * s.Hkv * s.D, 0.0);
  dv.assign(dk.size(), 0.0);
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.Hq; ++h)
      for (int t = 0; t < s.T; ++t) {
        const double l = lse[s.li(b, h, t)];
        double delta = dlse.empty() ? 0.0 : -(double)dlse[s.li(b, h, t)];
        for (int j = 0; j < s.S; ++j) {
          if (!s.visible(t, j)) continue;
          const size_t qo = s.qi(b, t, h, 0), ko = s.ki(b, j, h / G, 0);
          const double p = exp(s.scale * dot(q, qo, k, ko, s.D) - l);
          delta += p * dot(dout, s.qi(b, t, h, 0), v, s.ki(b, j, h / G, 0), s.D);
        }
        for (int j = 0; j < s.S; ++j) {
          if (!s.visible(t, j)) continue;
          const size_t ko = s.ki(b, j, h / G, 0), qo = s.qi(b, t, h, 0);
          const double p = exp(s.scale * dot(q, qo, k, ko, s.D) - l);
          const double ds = p * (dot(dout, qo, v, ko, s.D) - delta);
          for (int d = 0; d < s.D; ++d) {
            dq[qo + d] += s.scale * ds * k[ko + d];
            dk[ko + d] += s.scale * ds * q[qo + d];
            dv[ko + d] += p * dout[qo + d];
          }
        }
      }
}

/* ---- checks ---- */

int g_failures = 0, g_checks = 0;

double nmse(const std::vector<double> &x, const std::vector<double> &ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return den > 0 ? num / den : num;
}

void expect(bool ok, const std::string &what) {
  g_checks++;
  if (!ok) {
    g_failures++;
    printf("  FAIL %s\n", what.c_str());
  }
}

void expect_nmse(const std::string &what, const std::vector<double> &x,
                 const std::vector<double> &ref, double bound) {
  const double e = nmse(x, ref);
  char line[256];
  snprintf(line, sizeof(line), "%-34s nmse %.3e (bound %.0e)", what.c_str(), e, bound);
  printf("  %s%s\n", line, e <= bound ? "" : "  <-- FAIL");
  g_checks++;
  if (!(e <= bound)) g_failures++;
}

/* Output rounding of the storage dtype sets the bounds: the conformance
 * "reduction" bounds versus the f64 oracle; between the two paths, whose
 * outputs are each rounded once (bf16 ~3e-6, f16 ~4e-8) and differ further
 * by P and dS rounded to 16 bits in the tensor-core path, about 3x their
 * observed spread (bf16 4e-6..8e-6, f16 ~1e-7). */
double oracle_bound(ty_dtype_t dt) {
  return dt == TY_DTYPE_F32 ? 1e-9 : dt == TY_DTYPE_BF16 ? 1e-4 : 1e-6;
}
double paths_bound(ty_dtype_t dt) { return dt == TY_DTYPE_BF16 ? 2e-5 : 5e-7; }

template <typename F> F lookup(const char *name) {
  void *p = dlsym(RTLD_DEFAULT, name);
  if (!p) {
    printf("  FAIL kernel %s not found (dlsym: %s)\n", name, dlerror());
    exit(1);
  }
  return (F)p;
}

unsigned g_seed = 1;
/* The backward cases' dlse input (the lse output's gradient): empty runs
 * them without it, as the graphs without an attention_merge do. */
std::vector<float> g_dlse;

void launch(const ty_cu_att_launch_t &l, const std::function<void()> &body) {
  ty_emu_launch({l.grid[0], l.grid[1], l.grid[2]}, l.threads, l.smem, g_seed++, body);
}

struct Outputs {
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<unsigned char> raw; /* every output's bytes, for determinism */
};

/* Runs one path on the case; returns false when the plan refuses it. */
bool run_path(const Case &c, const Shape &s, bool fast, Tensor &q, Tensor &k, Tensor &v,
              Tensor &dout, Tensor &out_in, std::vector<float> &lse_in, Outputs *res,
              int *err_flag) {
  ty_cu_att_plan_t plan;
  const ty_cu_att_path_t want = fast ? TY_CU_ATT_MMA : TY_CU_ATT_GENERIC;
  const char *why =
      ty_cu_att_plan(c.dtype, c.B, c.T, c.S, c.Hq, c.Hkv, c.D, want, false, c.window >= 0,
                     &plan);
  if (why) {
    printf("  FAIL plan refused: %s\n", why);
    g_failures++;
    return false;
  }
  if (plan.path != want) return false;
  const float scale = (float)s.scale, sl2 = (float)(s.scale * 1.4426950408889634);
  const long long kvlen = c.kvlen;
  const long long *kvp = c.kvlen ? &kvlen : nullptr;
  int err[8] = {0};
  if (!c.backward) {
    Tensor out;
    out.init(c.dtype, q.n, c.misalign);
    std::vector<float> lse((size_t)c.B * c.Hq * c.T);
    memset(lse.data(), 0xff, lse.size() * 4);
    const ty_cu_att_launch_t &l = plan.launch[TY_CU_ATT_FWD];
    fwd_fn f = lookup<fwd_fn>(l.kernel);
    launch(l, [&] {
      f(q.data, k.data, v.data, out.data, lse.data(), kvp, c.T, c.S, c.Hq, c.Hkv, c.D, scale,
        sl2, c.window, err, 7);
    });
    out.read_back();
    res->out = out.v;
    res->lse.assign(lse.begin(), lse.end());
    res->raw.assign(out.data, out.data + out.n * out.esize());
    res->raw.insert(res->raw.end(), (unsigned char *)lse.data(),
                    (unsigned char *)(lse.data() + lse.size()));
  } else {
    Tensor dq, dk, dv;
    dq.init(c.dtype, q.n, c.misalign);
    dk.init(c.dtype, k.n, c.misalign);
    dv.init(c.dtype, k.n, c.misalign);
    std::vector<float> delta(lse_in.size());
    memset(delta.data(), 0xff, delta.size() * 4);
    const ty_cu_att_launch_t &ld = plan.launch[TY_CU_ATT_DELTA];
    delta_fn fd = lookup<delta_fn>(ld.kernel);
    launch(ld, [&] {
      fd(dout.data, out_in.data, g_dlse.empty() ? nullptr : g_dlse.data(), delta.data(),
         (long long)delta.size(), c.T, c.Hq, c.D);
    });
    const ty_cu_att_launch_t &lq = plan.launch[TY_CU_ATT_DQ];
    dq_fn fq = lookup<dq_fn>(lq.kernel);
    launch(lq, [&] {
      fq(dout.data, q.data, k.data, v.data, lse_in.data(), delta.data(), kvp, dq.data, c.T, c.S,
         c.Hq, c.Hkv, c.D, scale, sl2, c.window, err, 7);
    });
    const ty_cu_att_launch_t &lk = plan.launch[TY_CU_ATT_DKV];
    dkv_fn fk = lookup<dkv_fn>(lk.kernel);
    launch(lk, [&] {
      fk(dout.data, q.data, k.data, v.data, lse_in.data(), delta.data(), kvp, dk.data, dv.data,
         c.T, c.S, c.Hq, c.Hkv, c.D, scale, sl2, c.window, err, 7);
    });
    dq.read_back();
    dk.read_back();
    dv.read_back();
    res->dq = dq.v;
    res->dk = dk.v;
    res->dv = dv.v;
    res->raw.assign(dq.data, dq.data + dq.n * dq.esize());
    res->raw.insert(res->raw.end(), dk.data, dk.data + dk.n * dk.esize());
    res->raw.insert(res->raw.end(), dv.data, dv.data + dv.n * dv.esize());
  }
  if (err_flag) memcpy(err_flag, err, sizeof(err));
  return true;
}

const char *dtname(ty_dtype_t d) {
  return d == TY_DTYPE_F32 ? "f32" : d == TY_DTYPE_BF16 ? "bf16" : "f16";
}

void run_case(const Case &c, bool with_dlse) {
  printf("%s %s: B=%d T=%d S=%d Hq=%d Hkv=%d D=%d window=%d kv_len=%lld%s%s%s\n",
         c.name.c_str(), dtname(c.dtype), c.B, c.T, c.S, c.Hq, c.Hkv, c.D, c.window, c.kvlen,
         c.backward ? " backward" : "", c.misalign ? " misaligned" : "",
         with_dlse ? " dlse" : "");
  Shape s = {c.B, c.T, c.S, c.Hq, c.Hkv, c.D, c.window, c.kvlen ? c.kvlen : c.S,
             c.scale > 0 ? c.scale : 1.0 / sqrt((double)c.D)};
  std::mt19937_64 rng(0x5eed + c.T * 131 + c.S * 7 + c.D);
  Tensor q, k, v, dout, out_in;
  q.init(c.dtype, (size_t)c.B * c.T * c.Hq * c.D, c.misalign);
  k.init(c.dtype, (size_t)c.B * c.S * c.Hkv * c.D, c.misalign);
  v.init(c.dtype, k.n, c.misalign);
  q.fill_uniform(rng, -2, 2);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  std::vector<double> ref_out, ref_lse;
  ref_forward(s, q.v, k.v, v.v, ref_out, ref_lse);
  std::vector<float> lse_in(ref_lse.begin(), ref_lse.end());
  std::vector<double> ref_dq, ref_dk, ref_dv;
  if (c.backward) {
    dout.init(c.dtype, q.n, c.misalign);
    dout.fill_uniform(rng, -1, 1);
    out_in.init(c.dtype, q.n, c.misalign);
    for (size_t i = 0; i < q.n; ++i) out_in.set(i, ref_out[i]);
    /* The oracle's gradient of the rounded inputs: what conform compares to. */
    std::vector<double> lse_f(lse_in.begin(), lse_in.end());
    g_dlse.clear();
    if (with_dlse) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (size_t i = 0; i < lse_in.size(); ++i) g_dlse.push_back(u(rng));
    }
    ref_backward(s, q.v, k.v, v.v, ref_lse, dout.v, g_dlse, ref_dq, ref_dk, ref_dv);
  }
  const double bound = oracle_bound(c.dtype);
  Outputs gen, fast;
  bool have_fast = false;
  for (int path = 0; path < 2; ++path) {
    Outputs &o = path ? fast : gen;
    ty_emu_reset_stats();
    if (!run_path(c, s, path == 1, q, k, v, dout, out_in, lse_in, &o, nullptr)) continue;
    const char *p = path ? "tc" : "generic";
    if (path) have_fast = true;
    const ty_emu_stats_t st = ty_emu_stats();
    if (!c.backward) {
      expect_nmse(std::string(p) + " out vs f64", o.out, ref_out, bound);
      double worst = 0;
      for (size_t i = 0; i < ref_lse.size(); ++i) worst = fmax(worst, fabs(o.lse[i] - ref_lse[i]));
      if (!std::isfinite(worst)) worst = INFINITY;
      printf("  %-34s max |err| %.2e\n", (std::string(p) + " lse vs f64").c_str(), worst);
      expect(worst <= (c.dtype == TY_DTYPE_F32 ? 1e-5 : 2e-3), std::string(p) + " lse");
    } else {
      expect_nmse(std::string(p) + " dq vs f64", o.dq, ref_dq, bound);
      expect_nmse(std::string(p) + " dk vs f64", o.dk, ref_dk, bound);
      expect_nmse(std::string(p) + " dv vs f64", o.dv, ref_dv, bound);
    }
    expect(st.races == 0, std::string(p) + ": no shared-memory races");
    if (path) {
      printf("  tc: %lld ldmatrix, %lld with bank conflicts; %lld cp.async\n", st.ldmatrix,
             st.ldmatrix_conflicted, st.cp_async);
      expect(st.ldmatrix_conflicted == 0, "tc: conflict-free ldmatrix");
    }
  }
  if (have_fast) {
    if (!c.backward) {
      expect_nmse("tc out vs generic", fast.out, gen.out, paths_bound(c.dtype));
    } else {
      expect_nmse("tc dq vs generic", fast.dq, gen.dq, paths_bound(c.dtype));
      expect_nmse("tc dk vs generic", fast.dk, gen.dk, paths_bound(c.dtype));
      expect_nmse("tc dv vs generic", fast.dv, gen.dv, paths_bound(c.dtype));
    }
    /* Another scheduling order gives the same bits. */
    Outputs again;
    run_path(c, s, true, q, k, v, dout, out_in, lse_in, &again, nullptr);
    expect(again.raw == fast.raw, "tc: bit-identical on a second run");
  }
  Outputs again;
  run_path(c, s, false, q, k, v, dout, out_in, lse_in, &again, nullptr);
  expect(again.raw == gen.raw, "generic: bit-identical on a second run");
}

/* kv_len outside [T, S]: the error flag names it; nothing is written. */
void run_kvlen_error(ty_dtype_t dt, int D, bool backward) {
  printf("kv_len error %s D=%d%s\n", dtname(dt), D, backward ? " backward" : "");
  Case c = {"kvlen-error", 1, 4, 9, 2, 1, D, 0, 12, 0, dt, backward, false};
  Shape s = {c.B, c.T, c.S, c.Hq, c.Hkv, c.D, 0, c.S, 1.0 / sqrt((double)D)};
  std::mt19937_64 rng(3);
  Tensor q, k, v, dout, out_in;
  q.init(dt, (size_t)c.B * c.T * c.Hq * c.D, false);
  k.init(dt, (size_t)c.B * c.S * c.Hkv * c.D, false);
  v.init(dt, k.n, false);
  q.fill_uniform(rng, -1, 1);
  k.fill_uniform(rng, -1, 1);
  v.fill_uniform(rng, -1, 1);
  dout.init(dt, q.n, false);
  dout.fill_uniform(rng, -1, 1);
  out_in.init(dt, q.n, false);
  out_in.fill_uniform(rng, -1, 1);
  std::vector<float> lse_in((size_t)c.B * c.Hq * c.T, 0.5f);
  for (int path = 0; path < 2; ++path) {
    Outputs o;
    int err[8];
    if (!run_path(c, s, path == 1, q, k, v, dout, out_in, lse_in, &o, err)) continue;
    long long detail[3];
    memcpy(detail, err + 2, sizeof(detail));
    expect(err[0] == TY_ERR_KV_LEN && err[1] == 7 && detail[0] == 12 && detail[1] == 4 &&
               detail[2] == 9,
           std::string(path ? "tc" : "generic") + ": kv_len 12 > S 9 reported");
    bool untouched = true;
    for (double x : backward ? o.dq : o.out) untouched = untouched && std::isnan(x);
    expect(untouched, std::string(path ? "tc" : "generic") + ": nothing written");
  }
}

} // namespace

/* The plan's path rule (cuda_attention_plan.h): the kernels a node gets
 * for its dtype, head dim, T and the fastest path allowed. The wgmma
 * kernels cannot run here; their choice and launch shapes are checked. */
void check_plan_rule() {
  struct Want {
    ty_dtype_t dt;
    int64_t T, D;
    ty_cu_att_path_t best, path;
    bool det; /* deterministic=1 */
  };
  const ty_dtype_t F32 = TY_DTYPE_F32, BF16 = TY_DTYPE_BF16, F16 = TY_DTYPE_F16;
  const Want wants[] = {
      {BF16, 1024, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_WGMMA, false},
      {F16, 64, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_WGMMA, false},
      {BF16, 63, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, false},  /* below one warpgroup tile */
      {BF16, 1, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, false},   /* decoding */
      {BF16, 1024, 128, TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, false},
      {BF16, 1024, 64, TY_CU_ATT_MMA, TY_CU_ATT_MMA, false},  /* TRAINYARD_CUDA_ATTENTION=mma */
      {BF16, 1024, 64, TY_CU_ATT_GENERIC, TY_CU_ATT_GENERIC, false},
      {F32, 1024, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_GENERIC, false},
      {BF16, 1024, 96, TY_CU_ATT_WGMMA, TY_CU_ATT_GENERIC, false},
      /* Deterministic mode: one path for every T (no wgmma from 64 rows). */
      {BF16, 1024, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, true},
      {F16, 64, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, true},
      {BF16, 1, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, true},
      {BF16, 1024, 64, TY_CU_ATT_GENERIC, TY_CU_ATT_GENERIC, true},
      {F32, 1024, 64, TY_CU_ATT_WGMMA, TY_CU_ATT_GENERIC, true},
  };
  /* causal=0: the mma.sync kernels' _full instances (never wgmma, which
   * is causal-only), the generic ones where the tensor cores do not apply. */
  for (ty_cu_att_path_t best : {TY_CU_ATT_WGMMA, TY_CU_ATT_MMA, TY_CU_ATT_GENERIC}) {
    for (ty_dtype_t dt : {BF16, F32}) {
      ty_cu_att_plan_t plan;
      const char *why = ty_cu_att_plan(dt, 2, 1024, 512, 8, 2, 64, best, false, false, &plan);
      const bool tc = dt == BF16 && best != TY_CU_ATT_GENERIC;
      bool names = why == nullptr;
      for (int k = 0; k < TY_CU_ATT_KERNELS_ && names; ++k) {
        if (k == TY_CU_ATT_DELTA) continue;
        const char *n = plan.launch[k].kernel;
        names = !plan.launch[k].sm90 && (tc ? strstr(n, "_tc_") && strstr(n, "_full")
                                            : strstr(n, "_simt_") != nullptr);
      }
      expect(names && plan.path == (tc ? TY_CU_ATT_MMA : TY_CU_ATT_GENERIC),
             std::string("plan: causal=0 ") + dtname(dt) + " with best " +
                 std::to_string((int)best) + (tc ? " -> mma _full" : " -> generic"));
    }
  }
  for (const Want &w : wants) {
    ty_cu_att_plan_t plan;
    const char *why = ty_cu_att_plan(w.dt, 2, w.T, w.T, 8, 2, w.D, w.best, w.det, true, &plan);
    char what[160];
    snprintf(what, sizeof(what), "plan: dtype %d T %lld D %lld best %d%s -> path %d", (int)w.dt,
             (long long)w.T, (long long)w.D, (int)w.best, w.det ? " deterministic" : "",
             (int)w.path);
    expect(why == nullptr && plan.path == w.path, what);
    if (why) continue;
    for (int k = 0; k < TY_CU_ATT_KERNELS_; ++k) {
      const bool sm90 = w.path == TY_CU_ATT_WGMMA && k != TY_CU_ATT_DELTA;
      expect(plan.launch[k].sm90 == sm90 &&
                 (strstr(plan.launch[k].kernel, "_wg_") != nullptr) == sm90,
             std::string(what) + ": kernel " + plan.launch[k].kernel);
    }
    if (w.path == TY_CU_ATT_WGMMA) {
      expect(plan.launch[TY_CU_ATT_FWD].threads == 128 * TY_ATT_WG_FWD_WGS &&
                 plan.launch[TY_CU_ATT_FWD].grid[0] == (w.T + TY_ATT_WG_FWD_BQ - 1) /
                                                           TY_ATT_WG_FWD_BQ &&
                 plan.launch[TY_CU_ATT_DQ].threads == 128 &&
                 plan.launch[TY_CU_ATT_DKV].threads == 128 &&
                 plan.launch[TY_CU_ATT_DKV].grid[1] == 2,
             std::string(what) + ": launch shapes");
    }
  }
}

/* Deterministic mode's promise for attention (cuda_exec.h): one query row
 * gives the same bits however it is batched — alone over a KV cache (T = 1,
 * kv_len), as the last row of a causal prefill, in the middle of a longer
 * block, at the end of a chunk over a cache, or in the second sequence of a
 * batch. Every variant holds the same q row, the same first L keys and
 * values, and different data everywhere else. Run on both emulated paths
 * (mma.sync and generic), the path the plan gives every T under
 * deterministic=1. */
void check_row_invariance(ty_dtype_t dt, int D, int Hq, int Hkv, int window) {
  const int L = 150; /* the row's position + 1: three key tiles of 64 */
  struct Variant {
    const char *name;
    int B, T, S;
    long long kvlen; /* 0: none (S = L + rows after the row) */
    int b, t;        /* where the row sits */
  };
  const Variant vars[] = {
      {"decode over a cache", 1, 1, 200, L, 0, 0},
      {"last row of a causal prefill", 1, L, L, 0, 0, L - 1},
      {"middle of a block", 1, L + 80, L + 80, 0, 0, L - 1},
      {"end of a chunk over a cache", 1, 37, 200, L, 0, 36},
      {"second sequence of a batch", 2, 1, 160, L, 1, 0},
  };
  std::mt19937_64 rng(0xde7 + D + window);
  Tensor q0, k0, v0; /* the row and its L keys and values */
  q0.init(dt, (size_t)Hq * D, false);
  k0.init(dt, (size_t)L * Hkv * D, false);
  v0.init(dt, k0.n, false);
  q0.fill_uniform(rng, -2, 2);
  k0.fill_uniform(rng, -1, 1);
  v0.fill_uniform(rng, -1, 1);
  for (int fast = 0; fast < 2; ++fast) {
    std::vector<unsigned char> first;
    for (const Variant &w : vars) {
      Case c = {"row-invariance", w.B, w.T, w.S, Hq, Hkv, D, window, w.kvlen, 0, dt, false, false};
      ty_cu_att_plan_t plan;
      const ty_cu_att_path_t best = fast ? TY_CU_ATT_WGMMA : TY_CU_ATT_GENERIC;
      const ty_cu_att_path_t want = fast ? TY_CU_ATT_MMA : TY_CU_ATT_GENERIC;
      if (ty_cu_att_plan(dt, w.B, w.T, w.S, Hq, Hkv, D, best, true, true, &plan) ||
          plan.path != want) {
        expect(fast && !(D == 64 || D == 128) && plan.path == TY_CU_ATT_GENERIC,
               std::string("deterministic plan path for ") + w.name);
        break;
      }
      Shape s = {c.B, c.T, c.S, c.Hq, c.Hkv, c.D, c.window, c.kvlen ? c.kvlen : c.S,
                 1.0 / sqrt((double)D)};
      Tensor q, k, v, dout, out_in;
      q.init(dt, (size_t)c.B * c.T * Hq * D, false);
      k.init(dt, (size_t)c.B * c.S * Hkv * D, false);
      v.init(dt, k.n, false);
      q.fill_uniform(rng, -2, 2);
      k.fill_uniform(rng, -1, 1);
      v.fill_uniform(rng, -1, 1);
      for (int h = 0; h < Hq; ++h)
        for (int d = 0; d < D; ++d) q.set(s.qi(w.b, w.t, h, d), q0.v[(size_t)h * D + d]);
      for (int j = 0; j < L; ++j)
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const size_t i0 = ((size_t)j * Hkv + h) * D + d;
            k.set(s.ki(w.b, j, h, d), k0.v[i0]);
            v.set(s.ki(w.b, j, h, d), v0.v[i0]);
          }
      std::vector<float> lse_in;
      Outputs o;
      run_path(c, s, fast == 1, q, k, v, dout, out_in, lse_in, &o, nullptr);
      /* The row's output bytes (every head), then its lse values. */
      std::vector<unsigned char> row;
      const size_t es = dt == TY_DTYPE_F32 ? 4 : 2, out_bytes = q.n * es;
      for (int h = 0; h < Hq; ++h) {
        const unsigned char *p = o.raw.data() + s.qi(w.b, w.t, h, 0) * es;
        row.insert(row.end(), p, p + (size_t)D * es);
        const unsigned char *l = o.raw.data() + out_bytes + s.li(w.b, h, w.t) * 4;
        row.insert(row.end(), l, l + 4);
      }
      if (first.empty()) {
        first = row;
        continue;
      }
      char what[200];
      snprintf(what, sizeof(what), "deterministic %s %s D=%d window=%d: %s == decode row",
               fast ? "tc" : "generic", dtname(dt), D, window, w.name);
      printf("  %s: %s\n", what, row == first ? "same bits" : "DIFFERENT");
      expect(row == first, what);
    }
  }
}

int main(int argc, char **argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0); /* in step with the emulator's stderr */
  check_plan_rule();
  bool big = false, quick = false;
  const char *only = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--big")) big = true;
    else if (!strcmp(argv[i], "--quick")) quick = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = (unsigned)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--quick | --big] [--only SUBSTRING] [--seed N]\n", argv[0]);
      return 2;
    }
  }
  const ty_dtype_t F32 = TY_DTYPE_F32, BF16 = TY_DTYPE_BF16, F16 = TY_DTYPE_F16;
  std::vector<Case> cases;
  /* The conformance shapes (graph/conform_cases.c), every dtype. */
  for (ty_dtype_t dt : {F32, BF16, F16}) {
    cases.push_back({"causal-mha", 2, 8, 8, 4, 4, 16, 0, 0, 0, dt, false, false});
    cases.push_back({"gqa", 1, 8, 8, 8, 2, 16, 0, 0, 0, dt, false, false});
    cases.push_back({"kv-offset-gqa", 2, 3, 11, 4, 2, 8, 0, 0, 0, dt, false, false});
    cases.push_back({"window", 1, 12, 12, 2, 2, 16, 4, 0, 0, dt, false, false});
    cases.push_back({"scale", 1, 5, 7, 2, 2, 8, 0, 0, 0.2, dt, false, false});
    cases.push_back({"decode-mqa", 2, 1, 9, 4, 1, 16, 0, 0, 0, dt, false, false});
    cases.push_back({"cache-kv-len", 1, 2, 12, 4, 2, 8, 0, 7, 0, dt, false, false});
    cases.push_back({"longer-gqa", 1, 33, 33, 4, 2, 32, 0, 0, 0, dt, false, false});
    cases.push_back({"causal-mha", 2, 8, 8, 4, 4, 16, 0, 0, 0, dt, true, false});
    cases.push_back({"kv-offset-gqa", 1, 3, 7, 4, 2, 8, 0, 0, 0, dt, true, false});
    cases.push_back({"window", 1, 10, 10, 2, 2, 8, 3, 0, 0, dt, true, false});
    cases.push_back({"cache-kv-len", 1, 2, 12, 4, 2, 8, 0, 7, 0, dt, true, false});
  }
  /* causal=0 (window -1): S < T, kv_len below T, and a shape the tensor
   * cores would take if it were causal (the plan routes it to generic). */
  for (ty_dtype_t dt : {F32, BF16, F16}) {
    for (bool bw : {false, true}) {
      cases.push_back({"noncausal-gqa", 2, 8, 5, 4, 2, 16, -1, 0, 0, dt, bw, false});
      cases.push_back({"noncausal-kv-len", 1, 6, 12, 4, 2, 8, -1, 3, 0, dt, bw, false});
      cases.push_back({"noncausal-d64-tiles", 1, 70, 140, 2, 1, 64, -1, 0, 0, dt, bw, false});
    }
  }
  /* causal=0 on the tensor cores (their _full instances): partial tiles,
   * S < T, kv_len inside a tile, D = 128. */
  for (ty_dtype_t dt : {BF16, F16}) {
    for (bool bw : {false, true}) {
      cases.push_back({"tc-noncausal-gqa", 1, 150, 200, 4, 2, 64, -1, 0, 0, dt, bw, false});
      cases.push_back({"tc-noncausal-short", 2, 130, 50, 2, 1, 64, -1, 0, 0, dt, bw, false});
      cases.push_back({"tc-noncausal-kvlen", 1, 90, 300, 2, 1, 64, -1, 77, 0, dt, bw, false});
      cases.push_back({"tc-noncausal-d128", 1, 100, 140, 2, 2, 128, -1, 0, 0, dt, bw, false});
      cases.push_back({"tc-noncausal-d128-kvlen", 1, 40, 200, 1, 1, 128, -1, 33, 0, dt, bw,
                       false});
    }
  }
  /* Head dims of the other generic buckets, f32 and bf16. */
  for (ty_dtype_t dt : {F32, BF16}) {
    for (bool bw : {false, true}) {
      cases.push_back({"d100", 1, 37, 45, 3, 3, 100, 0, 0, 0, dt, bw, false});
      cases.push_back({"d256-gqa", 1, 20, 20, 4, 2, 256, 0, 0, 0, dt, bw, false});
      cases.push_back({"d64-f32-tiles", 1, 130, 130, 2, 1, 64, 0, 0, 0, dt, bw, false});
      cases.push_back({"d200-window", 1, 40, 50, 2, 1, 200, 9, 0, 0, dt, bw, false});
    }
  }
  /* The tensor-core shapes: partial tiles, T != S, decode, kv_len, window. */
  for (ty_dtype_t dt : {BF16, F16}) {
    for (bool bw : {false, true}) {
      cases.push_back({"tc-gqa", 1, 128, 128, 2, 1, 64, 0, 0, 0, dt, bw, false});
      cases.push_back({"tc-odd-T", 1, 200, 200, 2, 2, 64, 0, 0, 0, dt, bw, false});
      cases.push_back({"tc-T-ne-S", 1, 100, 300, 4, 2, 64, 0, 0, 0, dt, bw, false});
      cases.push_back({"tc-decode", 2, 1, 333, 4, 1, 128, 0, 0, 0, dt, bw, false});
      cases.push_back({"tc-kv-len", 1, 70, 500, 2, 1, 64, 0, 250, 0, dt, bw, false});
      cases.push_back({"tc-window", 1, 256, 256, 2, 2, 64, 50, 0, 0, dt, bw, false});
      cases.push_back({"tc-d128", 1, 150, 150, 2, 1, 128, 0, 0, 0, dt, bw, false});
      cases.push_back({"tc-d128-window-kvlen", 1, 40, 200, 1, 1, 128, 17, 120, 0, dt, bw, false});
      cases.push_back({"tc-misaligned", 1, 90, 90, 2, 1, 64, 0, 0, 0.3, dt, bw, true});
    }
  }
  if (big) {
    for (bool bw : {false, true}) {
      cases.push_back({"big-gpt2", 1, 1024, 1024, 1, 1, 64, 0, 0, 0, BF16, bw, false});
      cases.push_back({"big-f32", 1, 1024, 1024, 1, 1, 64, 0, 0, 0, F32, bw, false});
    }
  }
  if (quick) {
    /* Every conformance shape once (dtypes in turn), the tensor-core edges
     * in small sizes. */
    std::vector<Case> picked;
    int i = 0;
    for (const Case &c : cases) {
      const bool head_dim_case = c.name[0] == 'd' && c.name[1] >= '0' && c.name[1] <= '9';
      const bool conform = c.name.rfind("tc-", 0) != 0 && !head_dim_case &&
                           c.name.rfind("big", 0) != 0 && c.window >= 0;
      if (conform && (i++ % 3) == (int)(c.dtype - 1)) picked.push_back(c);
    }
    for (bool bw : {false, true}) {
      picked.push_back({"tc-odd-T-window-kvlen", 1, 70, 140, 2, 1, 64, 40, 130, 0, BF16, bw,
                        false});
      picked.push_back({"tc-d128-decode", 1, 1, 77, 2, 1, 128, 0, 0, 0, F16, bw, false});
      picked.push_back({"tc-misaligned", 1, 20, 33, 1, 1, 64, 0, 0, 0, BF16, bw, true});
      picked.push_back({"d100-f32", 1, 9, 13, 2, 1, 100, 0, 0, 0, F32, bw, false});
      picked.push_back({"noncausal-gqa", 2, 8, 5, 4, 2, 16, -1, 0, 0, F32, bw, false});
      picked.push_back({"noncausal-kv-len", 1, 6, 12, 4, 2, 8, -1, 3, 0, BF16, bw, false});
      picked.push_back({"noncausal-d64-tiles", 1, 70, 140, 2, 1, 64, -1, 0, 0, BF16, bw, false});
      picked.push_back({"tc-noncausal-kvlen", 1, 90, 140, 2, 1, 64, -1, 77, 0, F16, bw, false});
      picked.push_back({"tc-noncausal-d128-short", 1, 40, 30, 1, 1, 128, -1, 0, 0, BF16, bw,
                        false});
    }
    cases = picked;
  }
  for (const Case &c : cases) {
    const std::string label = c.name + " " + dtname(c.dtype) + (c.backward ? " bwd" : " fwd");
    if (only && !strstr(label.c_str(), only)) continue;
    run_case(c, false);
    /* Every backward case again with dlse (attention_merge's gradient into
     * lse): the delta kernel subtracts it; the other kernels are as before. */
    if (c.backward) run_case(c, true);
    g_dlse.clear();
  }
  if (!only || strstr("row-invariance", only)) {
    printf("row invariance (deterministic mode)\n");
    check_row_invariance(BF16, 64, 4, 2, 0);
    check_row_invariance(BF16, 64, 4, 2, 40);
    check_row_invariance(F32, 32, 2, 1, 0);
    if (!quick) {
      check_row_invariance(F16, 128, 2, 1, 0);
      check_row_invariance(BF16, 96, 2, 2, 17);
    }
  }
  if (!only) {
    for (int D : {16, 64}) {
      if (quick && D == 16) continue;
      run_kvlen_error(TY_DTYPE_BF16, D, false);
      run_kvlen_error(TY_DTYPE_BF16, D, true);
    }
    run_kvlen_error(TY_DTYPE_F32, 32, false);
  }
  printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
