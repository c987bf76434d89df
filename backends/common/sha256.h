/* SHA-256 for plugins (artifact content hashes), through OpenSSL's
 * libcrypto: a system library, not the Trainyard core, so plugins may link
 * it. */
#ifndef TY_BACKENDS_COMMON_SHA256_H_
#define TY_BACKENDS_COMMON_SHA256_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The 32-byte digest of `size` bytes at `data`. Thread-safe. */
void ty_sha256(const void *data, size_t size, unsigned char out_digest[32]);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_SHA256_H_ */
