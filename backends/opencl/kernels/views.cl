/* Element movers and casts: strided copies (transpose, slice,
 * slice_backward, concat, broadcast_to), dtype casts, KV-cache writes, and
 * the executor's plain fills and copies.
 * All are exact: elements are moved as raw bytes; float casts round to
 * nearest even through f32 exactly as hal/half.h does (f64 -> bf16/f16 goes
 * through f32, as PyTorch and the reference do). */

/* y[ystart + ostride(i)] = x[xstart + xstride(i)] for every index i of the
 * shape `dims` (both starts folded into the operands' byte offsets). */
__kernel void ty_strided_copy(IN(x), OUT(y), int esize, long n, int rank, long8 dims8,
                              long8 xs8, long8 ys8) {
  const long i = get_global_id(0);
  if (i >= n) return;
  long dims[8], xs[8], ys[8], xi, yi;
  ty_unpack8(dims8, dims);
  ty_unpack8(xs8, xs);
  ty_unpack8(ys8, ys);
  ty_offsets2(i, rank, dims, xs, ys, &xi, &yi);
  ty_move(P(x), xi, P(y), yi, esize);
}

bool ty_is_float(int dt) { return dt == TY_F32 || dt == TY_BF16 || dt == TY_F16 || dt == TY_F64; }

/* Float <-> float and i32 <-> i64 (an i64 that does not fit i32 is a data
 * error, as in the reference, never a silent wrap). */
__kernel void ty_cast(IN(x), int dtx, OUT(y), int dty, long n, ERR_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  if (ty_is_float(dtx)) {
    if (dtx == TY_F32 && dty == TY_F64) { /* exact, without rounding through f32 twice */
      ((__global ulong *)P(y))[i] = ty_f32_to_f64bits(((__global const float *)P(x))[i]);
    } else {
      ty_st(P(y), i, dty, ty_ld(P(x), i, dtx));
    }
    return;
  }
  const long v = ty_ldi(P(x), i, dtx);
  if (dty == TY_I32) {
    if (v < INT_MIN || v > INT_MAX) ty_fail(err, node, TY_ERR_CAST_RANGE, i, v, 0);
    ((__global int *)P(y))[i] = (int)v;
  } else {
    ((__global long *)P(y))[i] = v;
  }
}

/* cache[b, pos + t, :] = new[b, t, :] for rows of `row` elements (the host
 * first copies cache into cache' unless they share storage). */
__kernel void ty_kv_write(IN(fresh), OUT(cache), IN(pos), int dtpos, int esize, long Smax,
                          long T, long row, long n, ERR_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long p = ty_ldi(P(pos), 0, dtpos);
  if (p < 0 || T > Smax || p > Smax - T) {
    if (i == 0) ty_fail(err, node, TY_ERR_KV_POSITION, p, T, Smax);
    return;
  }
  const long r = i % row, t = (i / row) % T, b = i / (row * T);
  ty_move(P(fresh), i, P(cache), (b * Smax + p + t) * row + r, esize);
}

/* pool[slots[r] / BS, slots[r] % BS, :] = new[r, :] (issue 29), one work-item
 * per element of new, rows of `row` elements; the pool is a flat list of
 * `nslots` slots. Slot -1 skips the row (padding); a slot outside
 * [-1, nslots) is a data error (TY_ERR_PAGED_SLOT: row, slot, nslots) and
 * its row is not written (the step fails; other rows may have been). The
 * host first copies pool into pool' unless they share storage. */
__kernel void ty_paged_kv_write(IN(fresh), OUT(pool), IN(slots), int dtslots, int esize,
                                long nslots, long row, long n, ERR_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long r = i / row;
  const long slot = ty_ldi(P(slots), r, dtslots);
  if (slot < -1 || slot >= nslots) {
    if (i % row == 0) ty_fail(err, node, TY_ERR_PAGED_SLOT, r, slot, nslots);
    return;
  }
  if (slot < 0) return;
  ty_move(P(fresh), i, P(pool), slot * row + i % row, esize);
}

/* The executor's fills and copies (slice_backward's zeros, reshapes that
 * are not views, state updates not done in place): n units of `unit`
 * bytes (16, 8, 4, 2 or 1: the widest that the host found the offsets and
 * the size aligned to), with 64-bit indices. The driver's
 * clEnqueueFillBuffer is not used: NVIDIA's faults the device (-9999) once
 * its range ends past 2^31 bytes (inducer/pyopencl#395), which the arena of
 * a GPT-2 124M step of 4096 tokens reaches; its copy is left alone for the
 * same reason. */
__kernel void ty_fill_zero(OUT(y), int unit, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  __global uchar *p = P(y);
  switch (unit) {
    case 16: ((__global uint4 *)p)[i] = (uint4)(0u); break;
    case 8: ((__global ulong *)p)[i] = 0UL; break;
    case 4: ((__global uint *)p)[i] = 0u; break;
    case 2: ((__global ushort *)p)[i] = (ushort)0; break;
    default: p[i] = (uchar)0; break;
  }
}

__kernel void ty_copy_units(IN(x), OUT(y), int unit, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  if (unit == 16) {
    ((__global uint4 *)P(y))[i] = ((__global const uint4 *)P(x))[i];
  } else {
    ty_move(P(x), i, P(y), i, unit);
  }
}
