/* Shared state of the cpu plugin's files: the backend, device and buffer
 * objects behind the ABI's opaque handles, and the kernel interface. */
#ifndef TY_BACKENDS_CPU_CPU_INTERNAL_H_
#define TY_BACKENDS_CPU_CPU_INTERNAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/host_executor.h"
#include "cpu_kernel_table.h"
#include "trainyard/backend_abi.h"

struct ty_abi_backend_s {
  const ty_host_api_t *host;
  ty_abi_device_info_t info; /* probed once at create */
};

typedef enum cpu_kernel_mode_e {
  CPU_KERNELS_FAST = 0,      /* oneDNN + OpenMP kernels, reference for the rest */
  CPU_KERNELS_REFERENCE = 1, /* the f64 reference kernels (the oracle) */
  CPU_KERNELS_FAST_ONLY = 2, /* fast kernels; a node without one fails compile */
} cpu_kernel_mode_t;

struct ty_abi_device_s {
  ty_abi_backend_t *backend;
  uint32_t threads;
  cpu_kernel_mode_t kernels;
};

struct ty_abi_buffer_s {
  uint64_t size;
  unsigned char *data;
};

/* Graph entries (cpu_graph.c). */
ty_abi_status_t cpu_graph_supports(ty_abi_device_t *device,
                                   const ty_abi_graph_t *graph,
                                   ty_abi_node_support_t *out_support);
ty_abi_status_t cpu_graph_compile(ty_abi_device_t *device,
                                  const ty_abi_compile_args_t *args,
                                  ty_abi_executable_t **out_executable);
void cpu_executable_destroy(ty_abi_executable_t *executable);
ty_abi_status_t cpu_executable_execute(ty_abi_executable_t *executable,
                                       const ty_abi_execute_args_t *args);
ty_abi_status_t cpu_executable_memory(ty_abi_executable_t *executable,
                                      ty_abi_executable_memory_t *out);
ty_abi_status_t cpu_device_memory(ty_abi_device_t *device, uint32_t reset_peak,
                                  ty_abi_device_memory_t *out);

#endif /* TY_BACKENDS_CPU_CPU_INTERNAL_H_ */
