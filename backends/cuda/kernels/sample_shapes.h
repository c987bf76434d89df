/* The launch shapes of kernels/sample.cu, shared by the kernels and their
 * builder (cuda_ops_serve.c). Plain C: no CUDA types. */
#ifndef TY_CUDA_KERNELS_SAMPLE_SHAPES_H_
#define TY_CUDA_KERNELS_SAMPLE_SHAPES_H_

#define TY_SAMPLE_THREADS 512      /* sample, top_logprobs: a block per row */
#define TY_SAMPLE_SCAN_THREADS 256 /* sample_scan: a block per chunk of a row */
#define TY_SAMPLE_CHUNK 4096       /* ids a block of sample_scan takes */

#endif /* TY_CUDA_KERNELS_SAMPLE_SHAPES_H_ */
