/* SHA-256 through OpenSSL's EVP interface. */
#include "backends/common/sha256.h"

#include <openssl/evp.h>

void ty_sha256(const void *data, size_t size, unsigned char out_digest[32]) {
  unsigned int n = 0;
  EVP_Digest(data, size, out_digest, &n, EVP_sha256(), NULL);
}
