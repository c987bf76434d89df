/* The host meter (host_meter.h): a header (one alignment unit, at least 64
 * bytes) before each block keeps its size and the header's own, so that a
 * free subtracts exactly what the allocation added. */
#include "backends/common/host_meter.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t ty_meter_in_use;
static _Atomic uint64_t ty_meter_peak;

static void ty_meter_raise_peak(uint64_t now) {
  uint64_t peak = atomic_load(&ty_meter_peak);
  while (now > peak && !atomic_compare_exchange_weak(&ty_meter_peak, &peak, now)) {
  }
}

void *ty_host_mem_alloc_aligned(uint64_t bytes, uint64_t alignment) {
  if (alignment < 64) alignment = 64;
  if (bytes > (UINT64_C(1) << 62) || alignment > 4096 || (alignment & (alignment - 1))) {
    return NULL;
  }
  uint64_t total = alignment + ((bytes + alignment - 1) & ~(alignment - 1));
  unsigned char *base = aligned_alloc((size_t)alignment, (size_t)total);
  if (!base) return NULL;
  unsigned char *block = base + alignment;
  uint64_t header[2] = {bytes, alignment};
  memcpy(block - sizeof(header), header, sizeof(header));
  ty_meter_raise_peak(atomic_fetch_add(&ty_meter_in_use, bytes) + bytes);
  return block;
}

void *ty_host_mem_alloc(uint64_t bytes) { return ty_host_mem_alloc_aligned(bytes, 64); }

void ty_host_mem_free(void *block) {
  if (!block) return;
  uint64_t header[2];
  memcpy(header, (unsigned char *)block - sizeof(header), sizeof(header));
  unsigned char *base = (unsigned char *)block - header[1];
  uint64_t bytes = header[0];
  atomic_fetch_sub(&ty_meter_in_use, bytes);
  free(base);
}

void ty_host_meter_read(uint64_t *out_in_use, uint64_t *out_peak) {
  *out_in_use = atomic_load(&ty_meter_in_use);
  *out_peak = atomic_load(&ty_meter_peak);
}

void ty_host_meter_reset_peak(void) { atomic_store(&ty_meter_peak, atomic_load(&ty_meter_in_use)); }
