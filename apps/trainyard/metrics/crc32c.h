/* CRC-32C (Castagnoli; iSCSI, ext4, TFRecord): reflected polynomial
 * 0x82F63B78, initial value and final xor 0xFFFFFFFF. Check value:
 * crc32c("123456789") = 0xE3069283. Written here because Debian packages no
 * small C library for it (docs/design-notes.md, "Training metrics").
 *
 * Pure functions; thread-safe (the tables are built once, under
 * pthread_once, on first use). No errors. */
#ifndef TY_APPS_TRAINYARD_METRICS_CRC32C_H_
#define TY_APPS_TRAINYARD_METRICS_CRC32C_H_

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of `size` bytes at `data` (NULL allowed when size is 0). */
uint32_t ty_crc32c_compute(const void *data, size_t size);

/* Continues a CRC: ty_crc32c_extend(ty_crc32c_compute(a, n), b, m) is the
 * CRC of a followed by b. ty_crc32c_extend(0, ...) == ty_crc32c_compute. */
uint32_t ty_crc32c_extend(uint32_t crc, const void *data, size_t size);

/* TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8. Masking
 * keeps a CRC stored next to the data it covers from being a valid CRC of a
 * stream that contains it. */
uint32_t ty_crc32c_mask(uint32_t crc);
/* Inverse of ty_crc32c_mask. */
uint32_t ty_crc32c_unmask(uint32_t masked);

#endif /* TY_APPS_TRAINYARD_METRICS_CRC32C_H_ */
