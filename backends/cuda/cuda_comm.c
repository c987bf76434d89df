/* Collectives of the cuda plugin (ABI 1.4) on NCCL.
 *
 * NCCL is loaded with dlopen on first use (libnccl.so.2, then the CUDA
 * prefix the plugin was built against; TRAINYARD_CUDA_NCCL names another
 * file), as the driver and cuBLASLt are (cuda_api.c): a machine without NCCL
 * still loads the plugin and runs everything but a multi-device run, which
 * fails at comm_create with UNAVAILABLE naming the missing library. nccl.h
 * is used for its types only; the plugin is built without NCCL support when
 * the toolkit has no nccl.h (the entries then report UNAVAILABLE).
 *
 * NCCL drives the device through the CUDA runtime, which uses the device's
 * primary context: the plugin's own context (cuDevicePrimaryCtxRetain), so
 * the plugin's stream is valid for NCCL and the collectives queue on it in
 * order with the executables' work (one stream per device handle).
 *
 * Errors: NCCL's result and its last error text, the device, the
 * collective and its size. A failed or aborted communicator stays failed:
 * the host ends the run (a rank that died makes the others' NCCL calls fail
 * or hang; the host's --dist-timeout watchdog covers hangs). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "trainyard/dtype.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
#define TY_CU_HAVE_NCCL 1
#endif
#endif

typedef enum {
  TY_NCCL_ALL_REDUCE,
  TY_NCCL_REDUCE_SCATTER,
  TY_NCCL_ALL_GATHER,
  TY_NCCL_BROADCAST,
  TY_NCCL_SEND, /* ABI 1.8 point to point: bytes to / from rank `root` */
  TY_NCCL_RECV
} ty_nccl_kind_t;

#ifdef TY_CU_HAVE_NCCL
#include <nccl.h>

#define TY_NCCL_FUNCTIONS(X)                                                               \
  X(ncclGetVersion) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy)              \
  X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclGetErrorString) X(ncclGetLastError)      \
  X(ncclAllReduce) X(ncclReduceScatter) X(ncclAllGather) X(ncclBroadcast) X(ncclGroupStart)  \
  X(ncclGroupEnd) X(ncclSend) X(ncclRecv)

#define TY_NCCL_MEMBER(name) __typeof__(&name) name;
typedef struct ty_nccl_api_t {
  void *handle;
  char path[1100];
  int version;
  TY_NCCL_FUNCTIONS(TY_NCCL_MEMBER)
} ty_nccl_api_t;

static ty_nccl_api_t ty_nccl;
static pthread_once_t ty_nccl_once = PTHREAD_ONCE_INIT;
static char ty_nccl_why[2048]; /* why NCCL could not be loaded ("" if it was) */

/* Copies at most capacity - 1 bytes of `text` and a NUL. */
static void ty_nccl_copy(char *out, size_t capacity, const char *text) {
  size_t n = strnlen(text, capacity - 1);
  memcpy(out, text, n);
  out[n] = '\0';
}

static void ty_nccl_load(void) {
  const char *env = getenv("TRAINYARD_CUDA_NCCL");
  char candidates[2][1100];
  int count = 0;
  if (env && env[0]) {
    ty_nccl_copy(candidates[count++], sizeof(candidates[0]), env);
  } else {
    ty_nccl_copy(candidates[count++], sizeof(candidates[0]), "libnccl.so.2");
    if (TY_CUDA_LIBDIR[0] && strlen(TY_CUDA_LIBDIR) < sizeof(candidates[0]) - 16) {
      snprintf(candidates[count++], sizeof(candidates[0]), "%.1080s/libnccl.so.2",
               TY_CUDA_LIBDIR);
    }
  }
  char first_error[256] = "";
  for (int i = 0; i < count && !ty_nccl.handle; ++i) {
    ty_nccl.handle = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (ty_nccl.handle) {
      ty_nccl_copy(ty_nccl.path, sizeof(ty_nccl.path), candidates[i]);
    } else if (!first_error[0]) {
      ty_nccl_copy(first_error, sizeof(first_error), dlerror());
    }
  }
  if (!ty_nccl.handle) {
    snprintf(ty_nccl_why, sizeof(ty_nccl_why),
             "no NCCL (%s): a multi-device run on cuda needs libnccl.so.2 (install NCCL or "
             "set TRAINYARD_CUDA_NCCL)",
             first_error);
    return;
  }
#define TY_NCCL_RESOLVE(name)                                                              \
  if (!ty_nccl_why[0]) {                                                                  \
    void *fn = dlsym(ty_nccl.handle, #name);                                              \
    if (!fn) {                                                                            \
      snprintf(ty_nccl_why, sizeof(ty_nccl_why), "NCCL %s has no %s (too old?)",          \
               ty_nccl.path, #name);                                                      \
    }                                                                                     \
    *(void **)&ty_nccl.name = fn;                                                         \
  }
  TY_NCCL_FUNCTIONS(TY_NCCL_RESOLVE)
#undef TY_NCCL_RESOLVE
  /* ncclAvg and bf16 came in 2.10. */
  if (!ty_nccl_why[0] &&
      (ty_nccl.ncclGetVersion(&ty_nccl.version) != ncclSuccess || ty_nccl.version < 21000)) {
    snprintf(ty_nccl_why, sizeof(ty_nccl_why), "NCCL %s is version %d; 2.10 or newer is needed",
             ty_nccl.path, ty_nccl.version);
  }
  if (ty_nccl_why[0]) {
    dlclose(ty_nccl.handle);
    memset(&ty_nccl, 0, sizeof(ty_nccl));
  }
}

static ty_abi_status_t ty_nccl_ready(void) {
  pthread_once(&ty_nccl_once, ty_nccl_load);
  return ty_nccl_why[0] ? ty_plugin_error(TY_CODE_UNAVAILABLE, "%s", ty_nccl_why) : NULL;
}

struct ty_abi_comm_s {
  ty_abi_device_t *device;
  ncclComm_t comm;
  uint32_t rank, size;
  int slot; /* its group's slot in device->comms */
  /* A batch of collectives (TY_ABI_COLLECTIVE_MORE) is one NCCL group:
   * ncclGroupStart before its first, ncclGroupEnd after its last, which
   * launches them together (one fused launch where NCCL can). */
  bool group_open;
};

static ty_abi_status_t ty_nccl_error(const ty_abi_comm_t *c, const char *what, ncclResult_t r) {
  const char *last = c && c->comm ? ty_nccl.ncclGetLastError(c->comm) : NULL;
  ty_code_t code = r == ncclInvalidArgument || r == ncclInvalidUsage
                       ? TY_CODE_INVALID_ARGUMENT
                       : r == ncclSystemError || r == ncclRemoteError ? TY_CODE_UNAVAILABLE
                                                                      : TY_CODE_INTERNAL;
  return ty_plugin_error(code, "%s: NCCL %s failed (rank %u of %u): %s%s%s",
                     c ? c->device->label : "cuda", what, c ? c->rank : 0, c ? c->size : 0,
                     ty_nccl.ncclGetErrorString(r), last && last[0] ? ": " : "",
                     last ? last : "");
}

ty_abi_status_t ty_cu_comm_unique_id(ty_abi_backend_t *backend, ty_abi_comm_id_t *out_id) {
  (void)backend;
  ty_abi_status_t st = ty_nccl_ready();
  if (st) return st;
  ncclUniqueId id;
  ncclResult_t r = ty_nccl.ncclGetUniqueId(&id);
  if (r != ncclSuccess) return ty_nccl_error(NULL, "ncclGetUniqueId", r);
  _Static_assert(sizeof(id) <= TY_ABI_COMM_ID_MAX, "ncclUniqueId must fit a comm id");
  memcpy(out_id->bytes, &id, sizeof(id));
  out_id->size = (uint32_t)sizeof(id);
  return NULL;
}

ty_abi_status_t ty_cu_comm_create(ty_abi_device_t *device, const ty_abi_comm_create_args_t *args,
                                  ty_abi_comm_t **out_comm) {
  *out_comm = NULL;
  const char *group = TY_ABI_HAS_FIELD(args, ty_abi_comm_create_args_t, group) && args->group
                          ? args->group
                          : "world";
  const int slot = ty_cu_comm_slot(group);
  if (slot < 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: a communicator of process group '%s': the groups are 'world', "
                       "'tp', 'dp', 'pp', 'embed', 'cp' and 'dp_cp'",
                       device->label, group);
  }
  ty_abi_status_t st = ty_nccl_ready();
  if (st) return st;
  if (args->id->size != sizeof(ncclUniqueId)) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT,
                       "%s: a communicator id of %u bytes is not NCCL's (%zu bytes)",
                       device->label, args->id->size, sizeof(ncclUniqueId));
  }
  if ((st = ty_cu_enter(device))) return st;
  ty_abi_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", device->label);
  c->device = device;
  c->rank = args->rank;
  c->size = args->size;
  c->slot = slot;
  ncclUniqueId id;
  memcpy(&id, args->id->bytes, sizeof(id));
  ncclResult_t r = ty_nccl.ncclCommInitRank(&c->comm, (int)args->size, id, (int)args->rank);
  if (r != ncclSuccess) {
    st = ty_nccl_error(c, "ncclCommInitRank", r);
    free(c);
    return st;
  }
  /* The device's communicator of its group for its executables'
   * collective ops: the first one made on it (a run makes one per group). */
  if (!device->comms[slot]) device->comms[slot] = c;
  *out_comm = c;
  return NULL;
}

void ty_cu_comm_destroy(ty_abi_comm_t *c) {
  if (!c) return;
  if (c->device->comms[c->slot] == c) c->device->comms[c->slot] = NULL;
  if (c->group_open) ty_nccl.ncclGroupEnd(); /* a batch an error cut short */
  ty_abi_status_t st = ty_cu_enter(c->device);
  if (st) c->device->backend->base.host->status_free(st); /* a lost device: abort below */
  /* A communicator whose peers failed cannot be destroyed collectively:
   * abort it then (ncclCommDestroy would wait for them). */
  ncclResult_t async = ncclSuccess;
  ty_nccl.ncclCommGetAsyncError(c->comm, &async);
  if (!st && async == ncclSuccess) ty_nccl.ncclCommDestroy(c->comm);
  else ty_nccl.ncclCommAbort(c->comm);
  free(c);
}

static ty_abi_status_t ty_nccl_dtype(const ty_abi_comm_t *c, ty_dtype_t dtype,
                                     ncclDataType_t *out) {
  switch (dtype) {
    case TY_DTYPE_F32: *out = ncclFloat32; return NULL;
    case TY_DTYPE_BF16: *out = ncclBfloat16; return NULL;
    case TY_DTYPE_F16: *out = ncclFloat16; return NULL;
    case TY_DTYPE_F64: *out = ncclFloat64; return NULL;
    default:
      return ty_plugin_error(TY_CODE_UNIMPLEMENTED, "%s: no NCCL collective on %s",
                         c->device->label, ty_dtype_name(dtype));
  }
}

/* Queues one collective of `kind` on the device's stream inside the
 * communicator's open NCCL group (opened here if none is), and ends the
 * group unless `more` (or on an error). `what` names it in errors. A send
 * or receive moves `count` bytes (ncclInt8) whatever the dtype: the bytes
 * travel as they are. */
static ty_abi_status_t ty_nccl_queue(ty_abi_comm_t *c, ty_nccl_kind_t kind, ty_dtype_t dtype,
                                     uint32_t reduce, uint32_t root, const void *send,
                                     void *recv, uint64_t count, bool more, const char *what) {
  const bool p2p = kind == TY_NCCL_SEND || kind == TY_NCCL_RECV;
  ncclDataType_t dt = ncclInt8;
  ty_abi_status_t st = p2p ? NULL : ty_nccl_dtype(c, dtype, &dt);
  if (st) return st;
  if (reduce != TY_ABI_REDUCE_SUM && reduce != TY_ABI_REDUCE_AVG &&
      reduce != TY_ABI_REDUCE_MAX) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: reduce op %u", c->device->label, reduce);
  }
  if (kind == TY_NCCL_BROADCAST && root >= c->size) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: broadcast root %u of %u ranks",
                       c->device->label, root, c->size);
  }
  if ((st = ty_cu_enter(c->device))) return st;
  ncclRedOp_t op = reduce == TY_ABI_REDUCE_AVG   ? ncclAvg
                   : reduce == TY_ABI_REDUCE_MAX ? ncclMax
                                                 : ncclSum;
  /* One stream per device handle: every executable's work is on it. */
  cudaStream_t stream = (cudaStream_t)c->device->stream;
  size_t n = (size_t)count;
  ncclResult_t r;
  if (!c->group_open) {
    r = ty_nccl.ncclGroupStart();
    if (r != ncclSuccess) return ty_nccl_error(c, "ncclGroupStart", r);
    c->group_open = true;
  }
  switch (kind) {
    case TY_NCCL_ALL_REDUCE:
      r = ty_nccl.ncclAllReduce(send, recv, n, dt, op, c->comm, stream);
      break;
    case TY_NCCL_REDUCE_SCATTER:
      r = ty_nccl.ncclReduceScatter(send, recv, n, dt, op, c->comm, stream);
      break;
    case TY_NCCL_ALL_GATHER:
      r = ty_nccl.ncclAllGather(send, recv, n, dt, c->comm, stream);
      break;
    case TY_NCCL_SEND:
      r = ty_nccl.ncclSend(send, n, dt, (int)root, c->comm, stream);
      break;
    case TY_NCCL_RECV:
      r = ty_nccl.ncclRecv(recv, n, dt, (int)root, c->comm, stream);
      break;
    default:
      r = ty_nccl.ncclBroadcast(send, recv, n, dt, (int)root, c->comm, stream);
      break;
  }
  if (r != ncclSuccess || !more) {
    c->group_open = false;
    ncclResult_t end = ty_nccl.ncclGroupEnd();
    if (r == ncclSuccess && end != ncclSuccess) {
      return ty_nccl_error(c, "ncclGroupEnd (launching a batch of collectives)", end);
    }
  }
  return r == ncclSuccess ? NULL : ty_nccl_error(c, what, r);
}

static ty_abi_status_t ty_nccl_run(ty_abi_comm_t *c, ty_nccl_kind_t kind,
                                   const ty_abi_collective_args_t *a) {
  static const char *const names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                      "ncclBroadcast", "ncclSend", "ncclRecv"};
  bool more = a->struct_size >= offsetof(ty_abi_collective_args_t, flags) + sizeof(a->flags) &&
              (a->flags & TY_ABI_COLLECTIVE_MORE);
  /* The receive buffer changes, except at the root of a broadcast in place
   * (a ZeRO owner's own weights: its bf16 weight copies stay current). */
  if (!(kind == TY_NCCL_BROADCAST && a->root == c->rank && a->send == a->recv &&
        a->send_offset == a->recv_offset)) {
    ty_cu_buffer_written(a->recv);
  }
  char what[96];
  snprintf(what, sizeof(what), "%s of %llu %s", names[kind], (unsigned long long)a->count,
           ty_dtype_name(a->dtype));
  return ty_nccl_queue(c, kind, a->dtype, a->op, a->root,
                       (const void *)(uintptr_t)(a->send->ptr + a->send_offset),
                       (void *)(uintptr_t)(a->recv->ptr + a->recv_offset), a->count, more, what);
}

/* ABI 1.8: one ncclSend or ncclRecv of count x the dtype's bytes with rank
 * `root` of the communicator, in the communicator's batch like the
 * collectives (an unbatched one is a group of its own). NCCL blocks the
 * stream on it until the peer's matching op runs: the host batches a
 * rank's sends with its next receive (docs/design-notes.md "Pipeline
 * activations on the device"). Errors name the peer, the bytes and the
 * group. */
static ty_abi_status_t ty_nccl_p2p(ty_abi_comm_t *c, bool send,
                                   const ty_abi_collective_args_t *a) {
  static const char *const groups[TY_CU_COMM_GROUPS] = {"world", "tp",    "dp", "pp",
                                                        "embed", "cp", "dp_cp"};
  const char *group = c->slot >= 0 && c->slot < TY_CU_COMM_GROUPS ? groups[c->slot] : "?";
  const bool more = a->struct_size >= offsetof(ty_abi_collective_args_t, flags) +
                                          sizeof(a->flags) &&
                    (a->flags & TY_ABI_COLLECTIVE_MORE);
  const uint64_t bytes = a->count * ty_dtype_size(a->dtype);
  char what[160];
  snprintf(what, sizeof(what), "%s of %llu bytes %s rank %u of group '%s'%s",
           send ? "ncclSend" : "ncclRecv", (unsigned long long)bytes, send ? "to" : "from",
           a->root, group, c->group_open || more ? " (in a batch)" : "");
  if (a->root >= c->size || a->root == c->rank || bytes == 0) {
    if (c->group_open) { /* end the batch this call was part of */
      c->group_open = false;
      ty_nccl.ncclGroupEnd();
    }
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: %s: the peer must be another of the %u "
                       "ranks (this is rank %u) and the size nonzero", c->device->label, what,
                       c->size, c->rank);
  }
  ty_abi_buffer_t *buffer = send ? a->send : a->recv;
  const uint64_t offset = send ? a->send_offset : a->recv_offset;
  if (!send) ty_cu_buffer_written(buffer);
  void *ptr = (void *)(uintptr_t)(buffer->ptr + offset);
  return ty_nccl_queue(c, send ? TY_NCCL_SEND : TY_NCCL_RECV, a->dtype, TY_ABI_REDUCE_SUM,
                       a->root, send ? ptr : NULL, send ? NULL : ptr, bytes, more, what);
}

ty_abi_status_t ty_cu_comm_send(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return ty_nccl_p2p(c, true, a);
}

ty_abi_status_t ty_cu_comm_recv(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return ty_nccl_p2p(c, false, a);
}

ty_abi_status_t ty_cu_comm_enqueue_all_reduce(ty_abi_comm_t *c, ty_dtype_t dtype, uint32_t op,
                                              CUdeviceptr send, CUdeviceptr recv, uint64_t count,
                                              bool more, const char *what) {
  return ty_nccl_queue(c, TY_NCCL_ALL_REDUCE, dtype, op, 0, (const void *)(uintptr_t)send,
                       (void *)(uintptr_t)recv, count, more, what);
}

ty_abi_status_t ty_cu_comm_enqueue_gather(ty_abi_comm_t *c, bool gather, ty_dtype_t dtype,
                                          CUdeviceptr send, CUdeviceptr recv, uint64_t count,
                                          const char *what) {
  return ty_nccl_queue(c, gather ? TY_NCCL_ALL_GATHER : TY_NCCL_REDUCE_SCATTER, dtype,
                       TY_ABI_REDUCE_SUM, 0, (const void *)(uintptr_t)send,
                       (void *)(uintptr_t)recv, count, false, what);
}

#else /* no nccl.h at build time */

struct ty_abi_comm_s {
  int unused;
};

static ty_abi_status_t ty_nccl_missing(void) {
  return ty_plugin_error(TY_CODE_UNAVAILABLE,
                     "this cuda plugin was built without NCCL (no nccl.h in the CUDA toolkit "
                     "it was built against): a multi-device run on cuda cannot start");
}

ty_abi_status_t ty_cu_comm_unique_id(ty_abi_backend_t *backend, ty_abi_comm_id_t *out_id) {
  (void)backend;
  (void)out_id;
  return ty_nccl_missing();
}

ty_abi_status_t ty_cu_comm_create(ty_abi_device_t *device, const ty_abi_comm_create_args_t *args,
                                  ty_abi_comm_t **out_comm) {
  (void)device;
  (void)args;
  *out_comm = NULL;
  return ty_nccl_missing();
}

void ty_cu_comm_destroy(ty_abi_comm_t *c) { free(c); }

static ty_abi_status_t ty_nccl_run(ty_abi_comm_t *c, ty_nccl_kind_t kind,
                                   const ty_abi_collective_args_t *a) {
  (void)c;
  (void)kind;
  (void)a;
  return ty_nccl_missing();
}

ty_abi_status_t ty_cu_comm_send(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  (void)c, (void)a;
  return ty_nccl_missing();
}

ty_abi_status_t ty_cu_comm_recv(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  (void)c, (void)a;
  return ty_nccl_missing();
}

ty_abi_status_t ty_cu_comm_enqueue_all_reduce(ty_abi_comm_t *c, ty_dtype_t dtype, uint32_t op,
                                              CUdeviceptr send, CUdeviceptr recv, uint64_t count,
                                              bool more, const char *what) {
  (void)c, (void)dtype, (void)op, (void)send, (void)recv, (void)count, (void)more, (void)what;
  return ty_nccl_missing();
}

ty_abi_status_t ty_cu_comm_enqueue_gather(ty_abi_comm_t *c, bool gather, ty_dtype_t dtype,
                                          CUdeviceptr send, CUdeviceptr recv, uint64_t count,
                                          const char *what) {
  (void)c, (void)gather, (void)dtype, (void)send, (void)recv, (void)count, (void)what;
  return ty_nccl_missing();
}
#endif

int ty_cu_comm_slot(const char *group) {
  static const char *const names[TY_CU_COMM_GROUPS] = {"world", "tp", "dp",   "pp",
                                                       "embed", "cp", "dp_cp"};
  if (!group) return 0;
  for (int i = 0; i < TY_CU_COMM_GROUPS; ++i) {
    if (strcmp(group, names[i]) == 0) return i;
  }
  return -1;
}

ty_abi_comm_t *ty_cu_device_comm(const ty_abi_device_t *device, const char *group) {
  const int slot = ty_cu_comm_slot(group);
  return slot < 0 ? NULL : device->comms[slot];
}

uint32_t ty_cu_comm_size(const ty_abi_comm_t *c) {
#ifdef TY_CU_HAVE_NCCL
  return c ? c->size : 0;
#else
  (void)c;
  return 0;
#endif
}

ty_abi_status_t ty_cu_comm_all_reduce(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return ty_nccl_run(c, TY_NCCL_ALL_REDUCE, a);
}
ty_abi_status_t ty_cu_comm_reduce_scatter(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return ty_nccl_run(c, TY_NCCL_REDUCE_SCATTER, a);
}
ty_abi_status_t ty_cu_comm_all_gather(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return ty_nccl_run(c, TY_NCCL_ALL_GATHER, a);
}
ty_abi_status_t ty_cu_comm_broadcast(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return ty_nccl_run(c, TY_NCCL_BROADCAST, a);
}
