/* The columns of the `sample` op's params input ([N, 7] f32, one row per
 * sequence; docs/ops.md, issue 29) and the constants of its
 * random stream, listed once for every language that reads them: the host
 * sampler and the f64 reference (C), the cpu and opencl kernels (C, OpenCL
 * C, embedded by ocl_program.c) and the cuda kernels. So it holds
 * preprocessor lines only: no includes, no C-only types. */
#ifndef TY_BACKENDS_COMMON_SAMPLE_PARAMS_H_
#define TY_BACKENDS_COMMON_SAMPLE_PARAMS_H_

#define TY_SAMPLE_P_TEMPERATURE 0 /* 0: greedy (argmax, ties: the lower id), no draw */
#define TY_SAMPLE_P_TOP_K 1       /* 0: all; an integer stored in f32 */
#define TY_SAMPLE_P_TOP_P 2       /* 1: all; in (0, 1] */
#define TY_SAMPLE_P_MIN_P 3       /* 0: off; in [0, 1) */
#define TY_SAMPLE_P_REPETITION 4  /* repetition penalty; 1: off; > 0 */
#define TY_SAMPLE_P_PRESENCE 5    /* presence penalty; 0: off */
#define TY_SAMPLE_P_FREQUENCY 6   /* frequency penalty; 0: off */
#define TY_SAMPLE_P_COUNT 7       /* columns of params */
/* The column a sample data error names for a bad history id (details of
 * TY_ERR_SAMPLE_PARAM, device_errors.h). */
#define TY_SAMPLE_P_HISTORY 7

/* The draw of row i: splitmix64 state seed + (counter + 1) * GOLDEN, mixed
 * by the finalizer (z ^= z >> 30; z *= MIX1; z ^= z >> 27; z *= MIX2;
 * z ^= z >> 31), u = (z >> 11) * 2^-53. Draw number c of the host sampler's
 * stream started at `seed` (models/sampler.c). */
#define TY_SAMPLE_GOLDEN 0x9E3779B97F4A7C15
#define TY_SAMPLE_MIX1 0xBF58476D1CE4E5B9
#define TY_SAMPLE_MIX2 0x94D049BB133111EB

#endif /* TY_BACKENDS_COMMON_SAMPLE_PARAMS_H_ */
