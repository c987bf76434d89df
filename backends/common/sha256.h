/* SHA-256 (FIPS 180-4) for plugins, which link no crypto library: content
 * hashes of serialized executables. Part of the backend support library. */
#ifndef TY_BACKENDS_COMMON_SHA256_H_
#define TY_BACKENDS_COMMON_SHA256_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_sha256_ctx_t {
  uint32_t state[8];
  uint64_t bytes; /* message length so far */
  unsigned char block[64];
  size_t fill;
} ty_sha256_ctx_t;

void ty_sha256_init(ty_sha256_ctx_t *ctx);
void ty_sha256_update(ty_sha256_ctx_t *ctx, const void *data, size_t size);
void ty_sha256_final(ty_sha256_ctx_t *ctx, unsigned char out_digest[32]);

/* One call: the digest of `size` bytes. */
void ty_sha256(const void *data, size_t size, unsigned char out_digest[32]);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_SHA256_H_ */
