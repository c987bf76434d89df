/* SHA-256 over OpenSSL's EVP interface (see hal/sha256.h). The low-level
 * SHA256_Init family is deprecated in OpenSSL 3, and EVP contexts are opaque
 * and heap-allocated, hence the pointer in ty_sha256_t. */
#include "hal/sha256.h"

#include <openssl/evp.h>
#include <string.h>

void ty_sha256_init(ty_sha256_t *sha) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(ctx);
    ctx = NULL;
  }
  sha->ctx = ctx;
  sha->failed = ctx == NULL;
}

void ty_sha256_update(ty_sha256_t *sha, const void *data, size_t size) {
  if (sha->failed || size == 0) return;
  if (EVP_DigestUpdate((EVP_MD_CTX *)sha->ctx, data, size) != 1) sha->failed = true;
}

bool ty_sha256_final(ty_sha256_t *sha, unsigned char out_digest[32]) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  bool ok = !sha->failed && EVP_DigestFinal_ex((EVP_MD_CTX *)sha->ctx, digest, &size) == 1 &&
            size == 32;
  EVP_MD_CTX_free((EVP_MD_CTX *)sha->ctx);
  sha->ctx = NULL;
  sha->failed = true; /* a second final is a caller's bug; it gets false */
  if (ok) {
    memcpy(out_digest, digest, 32);
  } else {
    memset(out_digest, 0, 32);
  }
  return ok;
}

void ty_sha256_to_hex(const unsigned char digest[32], char out_hex[65]) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) {
    out_hex[2 * i] = hex[digest[i] >> 4];
    out_hex[2 * i + 1] = hex[digest[i] & 15];
  }
  out_hex[64] = '\0';
}

bool ty_sha256_final_hex(ty_sha256_t *sha, char out_hex[65]) {
  unsigned char digest[32];
  bool ok = ty_sha256_final(sha, digest);
  ty_sha256_to_hex(digest, out_hex);
  return ok;
}

bool ty_sha256(const void *data, size_t size, unsigned char out_digest[32]) {
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  ty_sha256_update(&sha, data, size);
  return ty_sha256_final(&sha, out_digest);
}

bool ty_sha256_hex(const void *data, size_t size, char out_hex[65]) {
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  ty_sha256_update(&sha, data, size);
  return ty_sha256_final_hex(&sha, out_hex);
}
