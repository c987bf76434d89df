/* The data errors a device kernel reports (an id out of range, a KV
 * position past the cache, ...), listed once for the three languages that
 * meet them: C (the decoder, device_exec.c), CUDA (kernels/common.cuh) and
 * OpenCL C (embedded and put before kernels/common.cl by ocl_program.c).
 * So it holds preprocessor lines only: no includes, no C-only types.
 *
 * A kernel that finds one records it in the executable's error buffer of
 * TY_DEVICE_ERROR_BYTES bytes: int32 code (0: none; the first failing
 * thread wins a compare-and-swap), int32 node, then three int64 details
 * whose meaning each entry below states; the host decodes it after the
 * step with ty_dev_data_error(). */
#ifndef TY_BACKENDS_COMMON_DEVICE_ERRORS_H_
#define TY_BACKENDS_COMMON_DEVICE_ERRORS_H_

/* X(name, code): details (a, b, c). */
#define TY_DEVICE_ERROR_LIST(X)                                                   \
  X(TY_ERR_EMBEDDING_ID, 1) /* id index, id, vocabulary */                      \
  X(TY_ERR_TARGET, 2)       /* target index, target, vocabulary */              \
  X(TY_ERR_KV_POSITION, 3)  /* start, new positions, max_len */                 \
  X(TY_ERR_KV_LEN, 4)       /* kv_len, query length, key length */              \
  X(TY_ERR_CAST_RANGE, 5)   /* element index, value */                          \
  X(TY_ERR_ADAMW_STEP, 6)   /* step */                                          \
  X(TY_ERR_SGD_NESTEROV, 7) /* momentum's f32 bits */                           \
  X(TY_ERR_ADAFACTOR, 8)    /* step, beta1's f32 bits */                      \
  X(TY_ERR_PAGED_SLOT, 9)   /* row, slot, NB*BS slots */                        \
  X(TY_ERR_PAGED_ROW, 10)   /* row*4 + TY_PAGED_BAD_*, the bad value, its bound */ \
  X(TY_ERR_SAMPLE_PARAM, 11) /* row, column (TY_SAMPLE_P_*; TY_SAMPLE_P_HISTORY: \
                                a history id), value (a param's f32 bits; the id) */

/* What TY_ERR_PAGED_ROW found wrong in paged_attention's row (the low two
 * bits of its first detail): row_seq outside [-1, S), row_pos outside
 * [0, MB*BS), or a block number the row reads outside [0, NB). */
#define TY_PAGED_BAD_SEQ 0
#define TY_PAGED_BAD_POS 1
#define TY_PAGED_BAD_BLOCK 2

#define TY_DEVICE_ERROR_ENUM_(name, code) name = code,
enum ty_device_error_e { TY_DEVICE_ERROR_LIST(TY_DEVICE_ERROR_ENUM_) };
#undef TY_DEVICE_ERROR_ENUM_

/* The error buffer's size in bytes (code, node, three details). */
#define TY_DEVICE_ERROR_BYTES 32

#endif /* TY_BACKENDS_COMMON_DEVICE_ERRORS_H_ */
