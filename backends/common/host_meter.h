/* Device-memory accounting for plugins whose device memory is host memory
 * (cpu, template, the emulated dataflow device): every allocation that
 * stands for device memory — buffers, a compiled graph's activation arena,
 * the large per-run scratch of kernels — goes through ty_host_mem_alloc,
 * which keeps the bytes in use and their high-water mark. That is what a
 * GPU allocator reports (the "measured peak" of ABI 1.3 device_memory), as
 * opposed to the process's resident set, which also holds the program, its
 * libraries and the host's own data. Depends only on the C library.
 *
 * One meter per plugin (each plugin links its own copy of this static
 * library). Thread-safe. */
#ifndef TY_BACKENDS_COMMON_HOST_METER_H_
#define TY_BACKENDS_COMMON_HOST_METER_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 64-byte aligned, counted; NULL when out of memory (or bytes > 2^62). A
 * zero-byte request still returns a block that ty_host_mem_free takes. */
void *ty_host_mem_alloc(uint64_t bytes);
/* The same with a power-of-two alignment up to 4096 (64 at least). */
void *ty_host_mem_alloc_aligned(uint64_t bytes, uint64_t alignment);
/* Frees a block of either (NULL is a no-op). */
void ty_host_mem_free(void *block);

/* Bytes counted now and their high-water mark since the last reset. */
void ty_host_meter_read(uint64_t *out_in_use, uint64_t *out_peak);
/* Starts a new high-water mark at the bytes in use now. */
void ty_host_meter_reset_peak(void);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_HOST_METER_H_ */
