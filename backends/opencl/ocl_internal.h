/* Shared state of the opencl plugin's files: the objects behind the ABI's
 * opaque handles, the kernel-source families, and the entry points each file
 * provides to the table in ocl_backend.c.
 *
 * Ownership: the backend owns one ty_ocl_slot_t per OpenCL device found at
 * create. A slot's context and built programs are created at the first
 * device_open and kept until backend_destroy (like a driver's primary
 * context), so reopening a device costs a command queue, not a rebuild. A
 * device handle owns its in-order queue; buffers own their cl_mem. */
#ifndef TY_BACKENDS_OPENCL_OCL_INTERNAL_H_
#define TY_BACKENDS_OPENCL_OCL_INTERNAL_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "trainyard/plugin_status.h"
#include "ocl_api.h"
#include "trainyard/backend_abi.h"
#include "trainyard/device_backend.h"
#include "trainyard/device_exec.h"

/* One program per kernel family: common.cl followed by the family's file.
 * Programs are built lazily, so a graph only pays for the families it
 * uses. Keep in step with ty_ocl_family_files in ocl_program.c. */
typedef enum ty_ocl_family_e {
  TY_OCL_FAM_ELEMENTWISE = 0, /* binary ops, scale, activations, dropout */
  TY_OCL_FAM_REDUCE,          /* reduce_*, clip_by_global_norm */
  TY_OCL_FAM_MATMUL,          /* tiled matmul */
  TY_OCL_FAM_NORM,            /* layernorm, rmsnorm (+ backward) */
  TY_OCL_FAM_SOFTMAX,         /* softmax, cross-entropy (+ backward) */
  TY_OCL_FAM_ROPE,            /* rope (+ backward) */
  TY_OCL_FAM_ATTENTION,       /* fused causal GQA attention (+ backward) */
  TY_OCL_FAM_EMBEDDING,       /* gather, deterministic scatter-add */
  TY_OCL_FAM_VIEWS,           /* strided copies, casts, kv-cache writes */
  TY_OCL_FAM_OPTIM,           /* adamw, sgd */
  TY_OCL_FAM_SAMPLE,          /* sample, top_logprobs (issue 29) */
  TY_OCL_FAM_COUNT_
} ty_ocl_family_t;

/* Work-group sizes baked into the programs (-D options, part of the cache
 * key). Fixed local sizes also keep PoCL from compiling a work-group
 * function per launch shape. */
#define TY_OCL_WG 256u      /* 1-D kernels and row reductions */
#define TY_OCL_ATT_WG 64u   /* attention: keys per chunk, lanes per row */
#define TY_OCL_ATT_MAXD 512 /* largest head_dim attention accepts */

typedef struct ty_ocl_slot_t {
  ty_dev_slot_t base; /* info; lock: guards what the first device_open makes */
  cl_platform_id platform;
  cl_device_id device;
  char platform_name[128];
  char platform_version[128];
  char device_version[128];
  char c_version[64];
  char extensions[2048];
  bool fp64;            /* cl_khr_fp64 */
  size_t max_work_group;
  uint64_t max_alloc;   /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
  uint64_t local_mem;
  /* Created at the first device_open, kept until backend_destroy. */
  cl_context context;
  cl_program programs[TY_OCL_FAM_COUNT_];
  uint64_t builds_from_source;
  uint64_t builds_from_cache;
} ty_ocl_slot_t;

struct ty_abi_backend_s {
  ty_dev_backend_t base; /* host, the slots (ty_ocl_slot_t) */
  ty_ocl_api_t api;
};

static inline ty_ocl_slot_t *ty_ocl_slot(const ty_abi_backend_t *b, uint32_t index) {
  return (ty_ocl_slot_t *)(void *)ty_dev_backend_slot(&b->base, index);
}

struct ty_abi_device_s {
  ty_abi_backend_t *backend;
  ty_ocl_slot_t *slot;
  uint32_t index;
  char label[32];         /* "opencl:0", for messages */
  cl_command_queue queue; /* in order */
  ty_ocl_api_t *api;      /* == &backend->api */
};

struct ty_abi_buffer_s {
  cl_mem mem; /* NULL for a zero-size buffer */
  uint64_t size;
};

/* INTERNAL naming the device, what failed and the CL error. */
ty_abi_status_t ty_ocl_cl_error(const ty_abi_device_t *device, const char *what, cl_int err);

/* ocl_program.c: the program of `family` for the device, built (or loaded
 * from the binary cache) on first use. Thread-safe per slot. */
ty_abi_status_t ty_ocl_program_get(ty_abi_device_t *device, ty_ocl_family_t family,
                                   cl_program *out_program);
/* Releases every program of a slot (backend_destroy). */
void ty_ocl_programs_release(ty_ocl_api_t *api, ty_ocl_slot_t *slot);
const char *ty_ocl_family_file(ty_ocl_family_t family);

/* ocl_graph.c: the graph entries (supports, compile, destroy, execute). */
TY_DEV_GRAPH_ENTRIES(ty_ocl);

#endif /* TY_BACKENDS_OPENCL_OCL_INTERNAL_H_ */
