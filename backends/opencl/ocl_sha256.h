/* SHA-256 (FIPS 180-4), for the program-binary cache key. The plugin links
 * nothing but libc and libdl, so it carries its own. Pure, thread-safe. */
#ifndef TY_BACKENDS_OPENCL_OCL_SHA256_H_
#define TY_BACKENDS_OPENCL_OCL_SHA256_H_

#include <stddef.h>
#include <stdint.h>

typedef struct ty_ocl_sha256_t {
  uint32_t h[8];
  uint64_t length; /* bytes hashed so far */
  unsigned char block[64];
  size_t used;
} ty_ocl_sha256_t;

void ty_ocl_sha256_init(ty_ocl_sha256_t *s);
void ty_ocl_sha256_update(ty_ocl_sha256_t *s, const void *data, size_t size);
/* Finishes and writes 64 lowercase hex digits and a NUL. */
void ty_ocl_sha256_hex(ty_ocl_sha256_t *s, char out_hex[65]);

#endif /* TY_BACKENDS_OPENCL_OCL_SHA256_H_ */
