/* Tiled matmul with local memory:
 *
 *   c[z, m, n] = sum_k op(a)[z, m, k] op(b)[z, k, n] + bias[n]
 *
 * op() transposes a stored [K, M] (trans_a) or b stored [N, K] (trans_b).
 * Batch dimensions broadcast: the host passes the output's batch shape and
 * each operand's matrix stride per batch axis (0 where it repeats).
 *
 * An 8 x 8 work-group computes a 64 x 64 tile of c; work-item (tx, ty) owns
 * rows 8ty .. 8ty+7 and columns 8tx .. 8tx+7 of it, as eight float8
 * accumulators. The K axis is walked 16 at a time: the group stages a
 * 64 x 16 slice of op(a) and a 16 x 64 slice of op(b) in local memory
 * (converted to f32 on the way in; consecutive work-items load along each
 * operand's contiguous axis), then each work-item does 16 steps of
 * "8 scalars of a times one float8 row of b". The explicit float8 keeps the
 * arithmetic vectorized on devices that run work-items one after another
 * (CPU drivers such as PoCL: 2.5x the speed of a 16 x 16 group of 4 x 4
 * scalar blocks there, docs/performance.md); on GPUs it is 64 work-items
 * with 64 accumulators each. Accumulation is f32; checked at the
 * "reduction" conform bound (f32 NMSE 1e-9). */

#define TY_MM_T 8
#define TY_MM_TILE 64
#define TY_MM_K 16
__kernel __attribute__((reqd_work_group_size(TY_MM_T, TY_MM_T, 1))) void ty_matmul(
    IN(a), int dta, IN(b), int dtb, IN(bias), int dtbias, int has_bias, OUT(c), int dtc, int M,
    int N, int K, int ta, int tb, int brank, long8 bdims8, long8 bsa8, long8 bsb8) {
  __local float As[TY_MM_K][TY_MM_TILE];
  __local float Bs[TY_MM_K][TY_MM_TILE];
  const int tx = get_local_id(0), ty = get_local_id(1);
  const int lid = ty * TY_MM_T + tx;
  const int n0 = get_group_id(0) * TY_MM_TILE, m0 = get_group_id(1) * TY_MM_TILE;
  const long z = get_global_id(2);
  long bdims[8], bsa[8], bsb[8], za, zb;
  ty_unpack8(bdims8, bdims);
  ty_unpack8(bsa8, bsa);
  ty_unpack8(bsb8, bsb);
  ty_offsets2(z, brank, bdims, bsa, bsb, &za, &zb);
  const long a_base = za * (long)M * K, b_base = zb * (long)K * N;
  __global const uchar *pa = P(a), *pb = P(b);
  float8 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = (float8)(0.0f);
  for (int k0 = 0; k0 < K; k0 += TY_MM_K) {
    for (int e = lid; e < TY_MM_TILE * TY_MM_K; e += TY_MM_T * TY_MM_T) {
      int mm, kk;
      if (ta) { mm = e % TY_MM_TILE; kk = e / TY_MM_TILE; } else { kk = e % TY_MM_K; mm = e / TY_MM_K; }
      int gm = m0 + mm, gk = k0 + kk;
      float v = 0.0f;
      if (gm < M && gk < K) v = ty_ld(pa, a_base + (ta ? (long)gk * M + gm : (long)gm * K + gk), dta);
      As[kk][mm] = v;
      int nn;
      if (tb) { kk = e % TY_MM_K; nn = e / TY_MM_K; } else { nn = e % TY_MM_TILE; kk = e / TY_MM_TILE; }
      int gn = n0 + nn;
      gk = k0 + kk;
      v = 0.0f;
      if (gn < N && gk < K) v = ty_ld(pb, b_base + (tb ? (long)gn * K + gk : (long)gk * N + gn), dtb);
      Bs[kk][nn] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < TY_MM_K; ++kk) {
      float8 bv = vload8(tx, &Bs[kk][0]);
      for (int i = 0; i < 8; ++i) acc[i] += As[kk][ty * 8 + i] * bv;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  __global uchar *pc = P(c);
  const long c_base = z * (long)M * N;
  for (int i = 0; i < 8; ++i) {
    int m = m0 + ty * 8 + i;
    if (m >= M) continue;
    float r[8];
    vstore8(acc[i], 0, r);
    for (int j = 0; j < 8; ++j) {
      int n = n0 + tx * 8 + j;
      if (n >= N) continue;
      float v = r[j];
      if (has_bias) v += ty_ld(P(bias), n, dtbias);
      ty_st(pc, c_base + (long)m * N + n, dtc, v);
    }
  }
}
