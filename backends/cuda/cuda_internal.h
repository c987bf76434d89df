/* Shared state of the cuda plugin's files: the objects behind the ABI's
 * opaque handles, the kernel families, and the entry points each file gives
 * to the table in cuda_backend.c.
 *
 * Ownership: the backend owns one ty_cu_slot_t per CUDA device found at
 * create. A slot retains the device's primary context at the first
 * device_open and loads kernel modules lazily into it; both are released at
 * backend_destroy, so reopening a device costs a stream, not a module load.
 * A device handle owns its stream, its cuBLASLt handle and workspace, and a
 * pinned staging buffer for host transfers; a buffer owns its allocation.
 *
 * Every entry point makes the slot's context current on the calling thread
 * first (ty_cu_enter), so the host may call from any thread. */
#ifndef TY_BACKENDS_CUDA_CUDA_INTERNAL_H_
#define TY_BACKENDS_CUDA_CUDA_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "trainyard/plugin_status.h"
#include "cuda_api.h"
#include "trainyard/backend_abi.h"
#include "trainyard/device_backend.h"
#include "trainyard/device_exec.h"

/* One module per kernel family (kernels/<file>.cu, compiled by nvcc at
 * build time into a fatbin; cuda_families.def lists them once). */
typedef enum ty_cu_family_e {
#define TY_CU_FAMILY(id, file, build) TY_CU_FAM_##id,
#include "cuda_families.def"
#undef TY_CU_FAMILY
  TY_CU_FAM_COUNT_
} ty_cu_family_t;

typedef struct ty_cu_slot_t {
  ty_dev_slot_t base; /* info; lock: guards what the first device_open makes */
  CUdevice device;
  int cc_major, cc_minor;
  int sm_count;
  int max_shared_optin; /* bytes of shared memory a block may opt in to */
  /* Created at the first device_open, kept until backend_destroy. */
  CUcontext context; /* the primary context, retained */
  CUmodule modules[TY_CU_FAM_COUNT_];
} ty_cu_slot_t;

struct ty_abi_backend_s {
  ty_dev_backend_t base; /* host, the slots (ty_cu_slot_t) */
  ty_cu_api_t api;
};

static inline ty_cu_slot_t *ty_cu_slot(const ty_abi_backend_t *b, uint32_t index) {
  return (ty_cu_slot_t *)(void *)ty_dev_backend_slot(&b->base, index);
}

/* Device URI options (cuda:0?graphs=0&tf32=1&memory_limit=24GiB). */
typedef struct ty_cu_options_t {
  bool graphs;           /* capture each executable once as a CUDA graph */
  bool tf32;             /* f32 matmuls on TF32 tensor cores (off: exact f32) */
  uint64_t memory_limit; /* 0: the card's memory; else a cap on what this
                            device handle allocates (a smaller card) */
} ty_cu_options_t;

/* The process groups a device holds a communicator for (docs/ops.md
 * "Collectives": world, tp, dp, pp, embed, and context parallel's cp and
 * dp_cp). */
#define TY_CU_COMM_GROUPS 7

struct ty_abi_device_s {
  ty_abi_backend_t *backend;
  ty_cu_slot_t *slot;
  ty_cu_api_t *api; /* == &backend->api */
  uint32_t index;
  char label[32]; /* "cuda:0", for messages */
  ty_cu_options_t options;
  CUstream stream;
  cublasLtHandle_t blaslt;
  CUdeviceptr workspace; /* cuBLASLt's, shared by the executables */
  uint64_t workspace_bytes;
  /* Pinned host memory for buffer_read/write: transfers go through it in
   * chunks on the stream (pageable copies would block other work). */
  pthread_mutex_t staging_lock;
  void *staging;
  uint64_t staging_bytes;
  /* Small writes (a step's token ids, positions, block tables, sampling
   * parameters: a few KiB, several per step) are queued without waiting:
   * each is copied into the next free bytes of this pinned ring (after the
   * staging buffer, in the same allocation) and its copy queued on the
   * stream, which orders it before the work that reads it. Bytes are reused
   * only after a wait for the stream: when the ring is full, or at the next
   * chunked transfer (which waits anyway). Under staging_lock. */
  unsigned char *ring;
  uint64_t ring_bytes, ring_used;
  /* Bytes this handle holds on the device (buffers, arenas). */
  pthread_mutex_t alloc_lock;
  uint64_t allocated;
  uint64_t peak_allocated;
  uint64_t host_allocated; /* pinned host buffers (TY_ABI_BUFFER_HOST) */
  uint64_t host_peak_allocated;
  /* The communicators made on this device (comm_create), one per process
   * group (ABI 1.7: "world", "tp", "dp", "pp", "embed"; the first
   * made of each name), on which executables run the collective ops of a run of more than one
   * rank (ABI 1.5: the execute args' world_size) by their `group`
   * attribute; NULL slots are groups without one. */
  ty_abi_comm_t *comms[TY_CU_COMM_GROUPS];
};

struct ty_abi_buffer_s {
  CUdeviceptr ptr; /* 0 for a zero-size buffer */
  uint64_t size;
  void *host; /* TY_ABI_BUFFER_HOST: the mapped pinned memory ptr points at */
  /* The buffer's write generation: a number no other buffer or write ever
   * had, set when it is allocated and at every write through the plugin
   * (buffer_write, buffer_copy into it, a collective or receive into it,
   * an executable run that writes a value bound in it). An executable that
   * keeps something derived from a bound buffer (the bf16 weight copies,
   * cuda_weights.c) knows it is still current while the generation it
   * recorded is the buffer's. */
  _Atomic uint64_t gen;
};

/* Gives `buffer` a new write generation (ty_abi_buffer_s.gen). */
void ty_cu_buffer_written(ty_abi_buffer_t *buffer);

/* ---- cuda_backend.c ---- */

/* A failed driver call: RESOURCE_EXHAUSTED for out-of-memory, UNAVAILABLE
 * for a lost device, INTERNAL otherwise; the message names the device, what
 * failed and the driver's error name and text. */
ty_abi_status_t ty_cu_driver_error(const ty_abi_device_t *device, const char *what, CUresult r);
/* Makes the device's context current on this thread. */
ty_abi_status_t ty_cu_enter(ty_abi_device_t *device);
/* Device memory through the handle's accounting and memory_limit; `what`
 * names the allocation in an out-of-memory error (which also gives the
 * bytes free and the limit). */
ty_abi_status_t ty_cu_alloc(ty_abi_device_t *device, uint64_t bytes, const char *what,
                            CUdeviceptr *out);
void ty_cu_free(ty_abi_device_t *device, CUdeviceptr ptr, uint64_t bytes);

/* ---- cuda_comm.c: ABI 1.4 collectives on NCCL (dlopen'ed on first use) ---- */

ty_abi_status_t ty_cu_comm_unique_id(ty_abi_backend_t *backend, ty_abi_comm_id_t *out_id);
ty_abi_status_t ty_cu_comm_create(ty_abi_device_t *device, const ty_abi_comm_create_args_t *args,
                                  ty_abi_comm_t **out_comm);
void ty_cu_comm_destroy(ty_abi_comm_t *comm);
ty_abi_status_t ty_cu_comm_all_reduce(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
ty_abi_status_t ty_cu_comm_reduce_scatter(ty_abi_comm_t *comm,
                                          const ty_abi_collective_args_t *args);
ty_abi_status_t ty_cu_comm_all_gather(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
ty_abi_status_t ty_cu_comm_broadcast(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
/* ABI 1.8 point to point (ncclSend / ncclRecv, cuda_comm.c). */
ty_abi_status_t ty_cu_comm_send(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
ty_abi_status_t ty_cu_comm_recv(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
/* An all-reduce (sum, avg or max) of `count` elements of `dtype` from
 * device address `send` into `recv` (equal: in place) on the device's
 * stream, for an executable's all_reduce / tp_reduce op; `more` as TY_ABI_COLLECTIVE_MORE (one NCCL group until a
 * call without it). `what` names the op in errors. */
ty_abi_status_t ty_cu_comm_enqueue_all_reduce(ty_abi_comm_t *comm, ty_dtype_t dtype, uint32_t op,
                                              CUdeviceptr send, CUdeviceptr recv, uint64_t count,
                                              bool more, const char *what);
/* An executable's all_gather (`gather`: `count` elements of every rank
 * concatenated rank by rank into recv) or reduce_scatter (summed, rank r
 * keeps the r-th `count` elements of send) on the device's stream, in an
 * NCCL group of its own. */
ty_abi_status_t ty_cu_comm_enqueue_gather(ty_abi_comm_t *comm, bool gather, ty_dtype_t dtype,
                                          CUdeviceptr send, CUdeviceptr recv, uint64_t count,
                                          const char *what);
/* The communicator's size (ranks). */
uint32_t ty_cu_comm_size(const ty_abi_comm_t *comm);
/* The slot of process group `group` in device->comms (NULL: "world"), or -1
 * for a name that is not a group. */
int ty_cu_comm_slot(const char *group);
/* The device's communicator of `group` (NULL: "world"), or NULL. */
ty_abi_comm_t *ty_cu_device_comm(const ty_abi_device_t *device, const char *group);

/* ---- cuda_modules.c ---- */

/* The module of `family`, loaded on first use from the embedded fatbin.
 * FAILED_PRECONDITION naming the card's architecture and the ones the
 * fatbin holds when it has none for this card. Thread-safe per slot. */
ty_abi_status_t ty_cu_module_get(ty_abi_device_t *device, ty_cu_family_t family,
                                 CUmodule *out_module);
void ty_cu_modules_unload(ty_cu_api_t *api, ty_cu_slot_t *slot);
const char *ty_cu_family_file(ty_cu_family_t family);
/* "sm_80 sm_90 compute_90": what the embedded fatbins were built for. */
const char *ty_cu_fatbin_targets(void);

/* ---- the graph entries: cuda_compile.c (supports, compile, destroy,
 * graph, memory), cuda_execute.c (execute, report) ---- */

TY_DEV_GRAPH_ENTRIES(ty_cu);
ty_abi_status_t ty_cu_executable_report(ty_abi_executable_t *executable, char *dst,
                                        uint64_t capacity, uint64_t *out_size);
const ty_abi_graph_t *ty_cu_executable_graph(ty_abi_executable_t *executable);
ty_abi_status_t ty_cu_executable_memory(ty_abi_executable_t *executable,
                                        ty_abi_executable_memory_t *out);
ty_abi_device_t *ty_cu_exec_device(const ty_abi_executable_t *executable);
/* Whether it was compiled with deterministic=1 (cuda_exec.h). */
bool ty_cu_exec_deterministic(const ty_abi_executable_t *executable);

/* ---- cuda_artifact.c: executables as artifacts ---- */

ty_abi_status_t ty_cu_executable_serialize(ty_abi_executable_t *executable, void *dst,
                                           uint64_t capacity, uint64_t *out_size);
ty_abi_status_t ty_cu_executable_deserialize(ty_abi_device_t *device,
                                             const ty_abi_deserialize_args_t *args,
                                             ty_abi_executable_t **out_executable);

#endif /* TY_BACKENDS_CUDA_CUDA_INTERNAL_H_ */
