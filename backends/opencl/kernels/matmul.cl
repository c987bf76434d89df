/* Tiled matmul with local memory:
 *
 *   c[z, m, n] = sum_k op(a)[z, m, k] op(b)[z, k, n] + bias[n]
 *
 * op() transposes a stored [K, M] (trans_a) or b stored [N, K] (trans_b).
 * Batch dimensions broadcast: the host passes the output's batch shape and
 * each operand's matrix stride per batch axis (0 where it repeats).
 *
 * A 16 x 16 work-group computes a 64 x 64 tile of c, each work-item a 4 x 4
 * block (rows ty + 16i, columns tx + 16j). The K axis is walked 16 at a time:
 * the group stages a 64 x 16 slice of op(a) and a 16 x 64 slice of op(b) in
 * local memory (converted to f32 on the way in, with loads laid out along
 * each operand's contiguous axis), then every work-item does 16 rank-1
 * updates from local memory. Accumulation is f32; checked at the
 * "reduction" conform bound (f32 NMSE 1e-9). */

#define TY_MM_T 16  /* work-items per side */
#define TY_MM_R 4   /* outputs per work-item per side */
#define TY_MM_TILE (TY_MM_T * TY_MM_R)
#define TY_MM_K 16

__kernel __attribute__((reqd_work_group_size(TY_MM_T, TY_MM_T, 1))) void ty_matmul(
    IN(a), int dta, IN(b), int dtb, IN(bias), int dtbias, int has_bias, OUT(c), int dtc, int M,
    int N, int K, int ta, int tb, int brank, long8 bdims8, long8 bsa8, long8 bsb8) {
  __local float As[TY_MM_K][TY_MM_TILE + 1];
  __local float Bs[TY_MM_K][TY_MM_TILE + 1];
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
  float acc[TY_MM_R][TY_MM_R];
  for (int i = 0; i < TY_MM_R; ++i)
    for (int j = 0; j < TY_MM_R; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += TY_MM_K) {
    /* 64 x 16 = 1024 elements per operand, 4 per work-item. */
    for (int e = lid; e < TY_MM_TILE * TY_MM_K; e += TY_MM_T * TY_MM_T) {
      int mm, kk;
      if (ta) { /* a is [K, M]: consecutive work-items walk m */
        mm = e % TY_MM_TILE;
        kk = e / TY_MM_TILE;
      } else { /* a is [M, K]: walk k */
        kk = e % TY_MM_K;
        mm = e / TY_MM_K;
      }
      int gm = m0 + mm, gk = k0 + kk;
      float v = 0.0f;
      if (gm < M && gk < K) {
        v = ty_ld(pa, a_base + (ta ? (long)gk * M + gm : (long)gm * K + gk), dta);
      }
      As[kk][mm] = v;
      int nn;
      if (tb) { /* b is [N, K]: walk k */
        kk = e % TY_MM_K;
        nn = e / TY_MM_K;
      } else { /* b is [K, N]: walk n */
        nn = e % TY_MM_TILE;
        kk = e / TY_MM_TILE;
      }
      int gn = n0 + nn;
      gk = k0 + kk;
      v = 0.0f;
      if (gn < N && gk < K) {
        v = ty_ld(pb, b_base + (tb ? (long)gn * K + gk : (long)gk * N + gn), dtb);
      }
      Bs[kk][nn] = v;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < TY_MM_K; ++kk) {
      float ar[TY_MM_R], br[TY_MM_R];
      for (int i = 0; i < TY_MM_R; ++i) ar[i] = As[kk][ty + TY_MM_T * i];
      for (int j = 0; j < TY_MM_R; ++j) br[j] = Bs[kk][tx + TY_MM_T * j];
      for (int i = 0; i < TY_MM_R; ++i)
        for (int j = 0; j < TY_MM_R; ++j) acc[i][j] += ar[i] * br[j];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  __global uchar *pc = P(c);
  const long c_base = z * (long)M * N;
  for (int i = 0; i < TY_MM_R; ++i) {
    int m = m0 + ty + TY_MM_T * i;
    if (m >= M) continue;
    for (int j = 0; j < TY_MM_R; ++j) {
      int n = n0 + tx + TY_MM_T * j;
      if (n >= N) continue;
      float v = acc[i][j];
      if (has_bias) v += ty_ld(P(bias), n, dtbias);
      ty_st(pc, c_base + (long)m * N + n, dtc, v);
    }
  }
}
