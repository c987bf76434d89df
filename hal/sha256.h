/* SHA-256, the one implementation in Trainyard (OpenSSL's libcrypto), for
 * the core (graph hashes, compile-cache keys, dataset and plugin-file
 * digests) and for plugins (artifact content hashes, program-cache keys):
 * it is archived into the core and into the plugin support library and
 * installed as <trainyard/sha256.h>, so a plugin links libcrypto, a system
 * library, and never the core.
 *
 * Errors: OpenSSL fails only when it cannot allocate. This header is an SDK
 * header, and the SDK has no ty_status_t, so the calls that can fail return
 * false (and write an all-zero digest) and the caller words the status with
 * what it was hashing. Thread-safety: a ty_sha256_t is used by one thread at
 * a time; distinct ones and the one-shot calls are thread-safe. */
#ifndef TY_HAL_SHA256_H_
#define TY_HAL_SHA256_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TY_SHA256_MUST_USE __attribute__((warn_unused_result))
#else
#define TY_SHA256_MUST_USE
#endif

/* A running hash. Plain data (the OpenSSL context is behind a pointer), so
 * it lives on the caller's stack; a failure to allocate inside init or
 * update is remembered and reported by the final call. */
typedef struct ty_sha256_t {
  void *ctx;   /* OpenSSL's EVP_MD_CTX, NULL once failed or finished */
  bool failed; /* a step failed; the final call returns false */
} ty_sha256_t;

/* Starts a hash. Every init must be followed by one final call, which
 * releases what init allocated (also after a failure). */
void ty_sha256_init(ty_sha256_t *sha);
/* Adds `size` bytes at `data` (NULL is allowed when size is 0). Splitting
 * the input into any number of updates gives the same digest as one. */
void ty_sha256_update(ty_sha256_t *sha, const void *data, size_t size);
/* Finishes: writes the 32-byte digest and releases the hash. False (and 32
 * zero bytes) if any step failed. */
bool ty_sha256_final(ty_sha256_t *sha, unsigned char out_digest[32]) TY_SHA256_MUST_USE;
/* ty_sha256_final writing 64 lower-case hex digits and a NUL. */
bool ty_sha256_final_hex(ty_sha256_t *sha, char out_hex[65]) TY_SHA256_MUST_USE;

/* One-shot forms: init, one update, final. */
bool ty_sha256(const void *data, size_t size, unsigned char out_digest[32]) TY_SHA256_MUST_USE;
bool ty_sha256_hex(const void *data, size_t size, char out_hex[65]) TY_SHA256_MUST_USE;

/* A digest as 64 lower-case hex digits and a NUL. Never fails. */
void ty_sha256_to_hex(const unsigned char digest[32], char out_hex[65]);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_SHA256_H_ */
