/* Vocabulary-parallel embedding and cross-entropy (ops/op_vocab.c, issue 17):
 * one tp rank's shard, rows [start, start + valid) of the whole vocabulary,
 * held in Vp >= valid rows of a table or columns of the logits (the rest is
 * padding: never read, gradient 0). None of them communicates; the model
 * puts tp_reduce between them.
 *
 *   vocab_embedding        out[n, :] = table[id_n - start, :] for id_n in the
 *                          shard, else 0
 *   ..._backward           dtable[r, :] = sum_{n: id_n - start = r} dout[n, :],
 *                          in increasing n (embedding.cu's counting sort on
 *                          the shard's local ids; other ids add nothing, the
 *                          padding rows are 0)
 *   vocab_max              m_n = max_{c < valid} z_nc
 *   vocab_max_backward     dz_nc = dy_n at the first c < valid with z_nc = m_n
 *   vocab_ce_sums          s0 = sum_{c < valid} exp(z_nc - m_n),
 *                          s1 = z_{n, t_n - start} - m_n (t_n in the shard) else 0
 *   vocab_ce_sums_backward dz_nc = ds0 exp(z_nc - m_n) [c < valid] + ds1 [c = t_n - start]
 *                          dm_n = -(ds0 s0 + ds1 [t_n in the shard])
 *   vocab_ce_loss          l_n = log(s0) - s1, 0 for t_n < 0 (t_n >= V: an error)
 *   ..._backward           ds = [dl_n / s0, -dl_n], 0 for t_n < 0
 *
 * The row kernels take one block per row (grid-stride); exponentials are
 * expf of f32, their sums f64 in a fixed order (deterministic), as the cpu
 * backend's (cpu_kernels_vocab.c). Statistics (m, sums, dm, loss) are f32.
 * Checked by `trainyard conform` on the CPU emulator (tests/cuda/emu) against
 * the f64 reference, every dtype, forward and backward. */
#include "vec.cuh"

__device__ inline bool ty_vocab_in(long long id, long long start, long long valid) {
  return id >= start && id < start + valid;
}

/* ---- embedding ---- */

template <typename T>
__device__ __forceinline__ void ty_vocab_embedding_impl(const void *table_, const void *ids,
                                                        int dti, void *out_, long long N,
                                                        long long D, long long start,
                                                        long long valid) {
  const T *table = (const T *)table_;
  T *out = (T *)out_;
  TY_FOR_EACH(i, N * D) {
    const long long n = i / D, d = i - n * D;
    const long long id = ty_ldi(ids, n, dti);
    out[i] = ty_vocab_in(id, start, valid) ? table[(id - start) * D + d] : ty_from_f<T>(0.0f);
  }
}
#define TY_VOCAB_EMB_PARAMS                                                            \
  const void *table, const void *ids, int dti, void *out, long long N, long long D,    \
      long long start, long long valid
#define TY_VOCAB_EMB_ARGS table, ids, dti, out, N, D, start, valid
TY_KERNEL3(ty_vocab_embedding, TY_VOCAB_EMB_PARAMS, TY_VOCAB_EMB_ARGS)

/* The backward's first step: lids[n] = id_n - start in the shard, else -1,
 * and counts[r] = how many tokens have local id r (counts zeroed by the
 * host). embedding.cu's ty_emb_scan, ty_emb_place and ty_emb_sum_* then
 * run on the local ids (they skip -1). */
extern "C" __global__ void ty_vocab_local_ids(const void *ids, int dti, long long N,
                                              long long start, long long valid, int *lids,
                                              int *counts) {
  ty_pdl_enter();
  TY_FOR_EACH(n, N) {
    const long long id = ty_ldi(ids, n, dti);
    const bool mine = ty_vocab_in(id, start, valid);
    lids[n] = mine ? (int)(id - start) : -1;
    if (mine) atomicAdd(counts + (id - start), 1);
  }
}

/* ---- the loss's row kernels ---- */

template <typename T>
__device__ __forceinline__ void ty_vocab_max_impl(const void *z_, float *m, long long rows,
                                                  long long vp, long long valid) {
  __shared__ float scratch[32];
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    const T *z = (const T *)z_ + n * vp;
    float best = -INFINITY;
    for (long long c = threadIdx.x; c < valid; c += blockDim.x) best = fmaxf(best, ty_to_f(z[c]));
    best = ty_block_max(best, scratch);
    if (threadIdx.x == 0) m[n] = best;
  }
}
#define TY_VOCAB_MAX_PARAMS const void *z, float *m, long long rows, long long vp, long long valid
#define TY_VOCAB_MAX_ARGS z, m, rows, vp, valid
TY_KERNEL3(ty_vocab_max, TY_VOCAB_MAX_PARAMS, TY_VOCAB_MAX_ARGS)

/* The first column (c < valid) equal to m_n gets dy_n. Columns are below
 * 2^24, so a float holds them exactly for the block's minimum. */
template <typename T>
__device__ __forceinline__ void ty_vocab_max_backward_impl(const float *dy, const void *z_,
                                                           const float *m, void *dz_,
                                                           long long rows, long long vp,
                                                           long long valid) {
  __shared__ float scratch[32];
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    const T *z = (const T *)z_ + n * vp;
    T *dz = (T *)dz_ + n * vp;
    float first = INFINITY;
    for (long long c = threadIdx.x; c < valid; c += blockDim.x) {
      if (ty_to_f(z[c]) == m[n]) {
        first = (float)c;
        break; /* this thread's later columns are larger */
      }
    }
    first = -ty_block_max(-first, scratch);
    for (long long c = threadIdx.x; c < vp; c += blockDim.x) {
      dz[c] = ty_from_f<T>((float)c == first ? dy[n] : 0.0f);
    }
  }
}
#define TY_VOCAB_MAXB_PARAMS                                                         \
  const float *dy, const void *z, const float *m, void *dz, long long rows, long long vp, \
      long long valid
#define TY_VOCAB_MAXB_ARGS dy, z, m, dz, rows, vp, valid
TY_KERNEL3(ty_vocab_max_backward, TY_VOCAB_MAXB_PARAMS, TY_VOCAB_MAXB_ARGS)

/* sum_{c < valid} exp(z_c - m) of one row, f64, the block's fixed order. */
template <typename T>
__device__ __forceinline__ double ty_vocab_sum_exp(const T *z, float m, long long valid,
                                                   double *scratch) {
  double s = 0.0;
  for (long long c = threadIdx.x; c < valid; c += blockDim.x) s += (double)expf(ty_to_f(z[c]) - m);
  return ty_block_sum_d(s, scratch);
}

template <typename T>
__device__ __forceinline__ void ty_vocab_ce_sums_impl(const void *z_, const void *t, int dtt,
                                                      const float *m, float *sums,
                                                      long long rows, long long vp,
                                                      long long start, long long valid) {
  __shared__ double scratch[32];
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    const T *z = (const T *)z_ + n * vp;
    const double s = ty_vocab_sum_exp(z, m[n], valid, scratch);
    if (threadIdx.x == 0) {
      const long long target = ty_ldi(t, n, dtt);
      sums[2 * n] = (float)s;
      sums[2 * n + 1] =
          ty_vocab_in(target, start, valid) ? ty_to_f(z[target - start]) - m[n] : 0.0f;
    }
  }
}
#define TY_VOCAB_SUMS_PARAMS                                                          \
  const void *z, const void *t, int dtt, const float *m, float *sums, long long rows,  \
      long long vp, long long start, long long valid
#define TY_VOCAB_SUMS_ARGS z, t, dtt, m, sums, rows, vp, start, valid
TY_KERNEL3(ty_vocab_ce_sums, TY_VOCAB_SUMS_PARAMS, TY_VOCAB_SUMS_ARGS)

template <typename T>
__device__ __forceinline__ void ty_vocab_ce_sums_backward_impl(
    const float *ds, const void *z_, const void *t, int dtt, const float *m, void *dz_,
    float *dm, long long rows, long long vp, long long start, long long valid) {
  __shared__ double scratch[32];
  for (long long n = blockIdx.x; n < rows; n += gridDim.x) {
    const T *z = (const T *)z_ + n * vp;
    T *dz = (T *)dz_ + n * vp;
    const double s = ty_vocab_sum_exp(z, m[n], valid, scratch);
    const long long target = ty_ldi(t, n, dtt);
    const bool mine = ty_vocab_in(target, start, valid);
    const long long at = mine ? target - start : -1;
    const float ds0 = ds[2 * n], ds1 = ds[2 * n + 1];
    for (long long c = threadIdx.x; c < vp; c += blockDim.x) {
      float v = c < valid ? expf(ty_to_f(z[c]) - m[n]) * ds0 : 0.0f;
      if (c == at) v += ds1;
      dz[c] = ty_from_f<T>(v);
    }
    if (threadIdx.x == 0) dm[n] = (float)(-((double)ds0 * s + (mine ? (double)ds1 : 0.0)));
  }
}
#define TY_VOCAB_SUMSB_PARAMS                                                          \
  const float *ds, const void *z, const void *t, int dtt, const float *m, void *dz,   \
      float *dm, long long rows, long long vp, long long start, long long valid
#define TY_VOCAB_SUMSB_ARGS ds, z, t, dtt, m, dz, dm, rows, vp, start, valid
TY_KERNEL3(ty_vocab_ce_sums_backward, TY_VOCAB_SUMSB_PARAMS, TY_VOCAB_SUMSB_ARGS)

/* ---- per-token loss ---- */

extern "C" __global__ void ty_vocab_ce_loss(const float *sums, const void *t, int dtt,
                                            float *loss, long long N, long long V, ERR_ARGS) {
  ty_pdl_enter();
  TY_FOR_EACH(n, N) {
    const long long target = ty_ldi(t, n, dtt);
    if (target >= V) {
      ty_fail(err, node, TY_ERR_TARGET, n, target, V);
      loss[n] = 0.0f;
      continue;
    }
    loss[n] = target < 0 ? 0.0f : (float)(log((double)sums[2 * n]) - (double)sums[2 * n + 1]);
  }
}

extern "C" __global__ void ty_vocab_ce_loss_backward(const float *dloss, const float *sums,
                                                     const void *t, int dtt, float *ds,
                                                     long long N) {
  ty_pdl_enter();
  TY_FOR_EACH(n, N) {
    const bool counted = ty_ldi(t, n, dtt) >= 0;
    ds[2 * n] = counted ? (float)((double)dloss[n] / (double)sums[2 * n]) : 0.0f;
    ds[2 * n + 1] = counted ? -dloss[n] : 0.0f;
  }
}
