/* The launch shapes of kernels/gemv.cu, shared by the kernels and their
 * builder (cuda_gemm.c). Plain C: no CUDA types. */
#ifndef TY_CUDA_KERNELS_GEMV_SHAPES_H_
#define TY_CUDA_KERNELS_GEMV_SHAPES_H_

#define TY_GEMV_MAX_M 4      /* rows of a the GEMV path takes (decode steps) */
#define TY_GEMV_THREADS 256  /* threads a block */
#define TY_GEMV_NK_COLS 8    /* columns a block of gemv_nk (a warp each) */
#define TY_GEMV_KN_COLS 64   /* columns a block of gemv_kn */
#define TY_GEMV_KN_MAX_RUNS 64 /* runs of K gemv_kn splits a product into */
#define TY_GEMV_GROUP_MAX 3  /* products of one a a gemv_group launch makes */

#endif /* TY_CUDA_KERNELS_GEMV_SHAPES_H_ */
