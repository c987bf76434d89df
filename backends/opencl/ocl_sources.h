/* The OpenCL C sources of kernels/, embedded at build time by
 * embed_sources.cmake into ocl_sources.c (in the build tree). */
#ifndef TY_BACKENDS_OPENCL_OCL_SOURCES_H_
#define TY_BACKENDS_OPENCL_OCL_SOURCES_H_

#include <stddef.h>

typedef struct ty_ocl_source_t {
  const char *name; /* file name, e.g. "matmul.cl" */
  const char *text; /* NUL-terminated */
  size_t size;      /* bytes, without the NUL */
} ty_ocl_source_t;

extern const ty_ocl_source_t ty_ocl_sources[];
extern const size_t ty_ocl_source_count;

#endif /* TY_BACKENDS_OPENCL_OCL_SOURCES_H_ */
