/* Trainyard backend plugin ABI: the ONLY header a backend plugin includes.
 *
 * A plugin is a shared object named libty_backend_<name>.so that exports one
 * symbol, ty_backend_query(), returning a const table of function pointers.
 * Everything crossing the boundary is a plain C type, a plain descriptor, or
 * an opaque handle; the plugin never links the Trainyard core and never sees
 * core structs. docs/plugin-abi.md explains the rules and keeps the changelog.
 *
 * Versioning rules (see docs/plugin-abi.md, "Versioning"):
 *  - TY_ABI_MAJOR must match between host and plugin, or the plugin is rejected.
 *  - Within a major, new fields are only ever APPENDED to the end of a struct and
 *    TY_ABI_MINOR is bumped. Every table and argument struct begins with
 *    `size_t struct_size`; a reader never touches a field that lies beyond the
 *    writer's struct_size (use TY_ABI_HAS_FIELD).
 *  - A NULL function pointer means "not implemented": the host reports
 *    UNIMPLEMENTED for it and never calls it.
 */
#ifndef TY_HAL_BACKEND_ABI_H_
#define TY_HAL_BACKEND_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TY_ABI_MAJOR 1u
#define TY_ABI_MINOR 11u

/* True when `ptr` (a struct whose first member is struct_size) is large
 * enough to contain `field`. Use it before reading any field that was added
 * after minor 0 of the struct's major. */
#define TY_ABI_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type *)0)->field))

/* Plugins export exactly this symbol (use TY_BACKEND_EXPORT on it). */
#define TY_BACKEND_QUERY_SYMBOL "ty_backend_query"
#if defined(__GNUC__) || defined(__clang__)
#define TY_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define TY_BACKEND_EXPORT
#endif

/* ------------------------------------------------------------------------ */
/* Canonical status codes (numerically equal to absl/gRPC canonical codes).  */
/* ------------------------------------------------------------------------ */
typedef enum ty_code_e {
  TY_CODE_OK = 0,
  TY_CODE_CANCELLED = 1,
  TY_CODE_UNKNOWN = 2,
  TY_CODE_INVALID_ARGUMENT = 3,
  TY_CODE_DEADLINE_EXCEEDED = 4,
  TY_CODE_NOT_FOUND = 5,
  TY_CODE_ALREADY_EXISTS = 6,
  TY_CODE_PERMISSION_DENIED = 7,
  TY_CODE_RESOURCE_EXHAUSTED = 8,
  TY_CODE_FAILED_PRECONDITION = 9,
  TY_CODE_ABORTED = 10,
  TY_CODE_OUT_OF_RANGE = 11,
  TY_CODE_UNIMPLEMENTED = 12,
  TY_CODE_INTERNAL = 13,
  TY_CODE_UNAVAILABLE = 14,
  TY_CODE_DATA_LOSS = 15,
} ty_code_t;

/* ------------------------------------------------------------------------ */
/* Element types. Values are stable within a major; new ones are appended.  */
/* ------------------------------------------------------------------------ */
typedef enum ty_dtype_e {
  TY_DTYPE_INVALID = 0,
  TY_DTYPE_F32 = 1,
  TY_DTYPE_BF16 = 2,
  TY_DTYPE_F16 = 3,
  TY_DTYPE_F64 = 4,
  TY_DTYPE_I32 = 5,
  TY_DTYPE_I64 = 6,
  TY_DTYPE_U8 = 7, /* also used for bool */
  TY_DTYPE_COUNT_ = 8,
} ty_dtype_t;

/* Bit for `dtype` in a dtype mask (see ty_abi_device_info_t.dtype_mask). */
#define TY_DTYPE_BIT(dtype) (1u << (uint32_t)(dtype))

/* ------------------------------------------------------------------------ */
/* Status objects.                                                           */
/*                                                                           */
/* A fallible plugin entry returns ty_abi_status_t: NULL means OK; anything  */
/* else is a status created by the host's status_make() and owned by whoever */
/* holds it. A plugin that receives a non-OK status from a host service and  */
/* gives up must either return it or release it with status_free().          */
/* ------------------------------------------------------------------------ */
typedef struct ty_abi_status_s *ty_abi_status_t;

/* host->collective's arguments (ABI 1.5). */
typedef struct ty_abi_host_collective_args_t {
  size_t struct_size;
  uint32_t op;      /* ty_abi_reduce_op_t: 0 sum, 1 avg, 2 max (1.6) */
  ty_dtype_t dtype; /* f32, bf16, f16 or f64 */
  void *data;       /* `count` elements of `dtype` in host memory, in place */
  uint64_t count;
  /* ---- v1.6 ---- */
  /* The process group to reduce over: the op's `group` attribute ("world",
   * "tp", "dp", "pp", "embed"; docs/plugin-abi.md "Process groups").
   * NULL, or args from a 1.5 plugin, mean "world". */
  const char *group;
  /* ---- v1.11: the gathers of context parallel ---- */
  /* ty_abi_host_collective_kind_t; 0 (or args from an older plugin): the
   * in-place reduction above. For the other kinds `count` elements of
   * `data` are [outer, size, block] (size: the group's) and `part` holds
   * this rank's [outer, block]; `op` is ignored (sums):
   *   ALL_GATHER: data[o][r][:] = part[o][:] of group rank r (part read).
   *   REDUCE_SCATTER: part[o][:] = sum over the ranks of data[o][rank][:]
   *     (data read only: the host sums a copy). */
  uint32_t kind;
  uint64_t outer;
  void *part;
} ty_abi_host_collective_args_t;

typedef enum ty_abi_host_collective_kind_e {
  TY_ABI_HOST_REDUCE = 0,
  TY_ABI_HOST_ALL_GATHER = 1,     /* 1.11 */
  TY_ABI_HOST_REDUCE_SCATTER = 2, /* 1.11 */
} ty_abi_host_collective_kind_t;

/* Services the host offers a plugin; handed over in backend_create(). The
 * pointed-to table lives at least as long as the backend instance. */
typedef struct ty_host_api_t {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  /* Creates a status with `code` (not OK) and a copy of `message`, which should
   * name the root cause (device, buffer, size, ...). Never returns NULL: on
   * allocation failure it returns a static RESOURCE_EXHAUSTED status.
   * Thread-safe. */
  ty_abi_status_t (*status_make)(ty_code_t code, const char *message);
  /* Releases a status the plugin chose not to return. NULL is a no-op. */
  void (*status_free)(ty_abi_status_t status);
  /* ---- v1.1 ---- */
  /* The code and message of a status (TY_CODE_OK and "OK" for NULL). The
   * message is owned by the status. Thread-safe. */
  ty_code_t (*status_code)(ty_abi_status_t status);
  const char *(*status_message)(ty_abi_status_t status);
  /* ---- v1.5: host collectives (docs/plugin-abi.md "Host collectives") ---- */
  /* Runs one collective of the run's communicator on host memory, in place,
   * and returns when every rank has contributed: the way a plugin without
   * its own transport executes a collective op (all_reduce) DURING
   * executable_execute. `comm` is the execute args' host_comm (never NULL
   * here: NULL there means world 1, where a collective is the identity).
   * Errors name the rank that failed or did not arrive in time. Call it
   * only from the thread that called executable_execute. */
  ty_abi_status_t (*collective)(void *comm, const ty_abi_host_collective_args_t *args);
} ty_host_api_t;

/* ------------------------------------------------------------------------ */
/* Opaque plugin-side objects. The host only stores and passes them back.    */
/* ------------------------------------------------------------------------ */
typedef struct ty_abi_backend_s ty_abi_backend_t; /* one per loaded plugin */
typedef struct ty_abi_device_s ty_abi_device_t;   /* an opened device      */
typedef struct ty_abi_buffer_s ty_abi_buffer_t;   /* device memory         */

/* ------------------------------------------------------------------------ */
/* Argument and result structs. The CALLER sets struct_size to the size of   */
/* its own definition; the CALLEE reads/writes only within that size.        */
/* ------------------------------------------------------------------------ */

typedef struct ty_abi_backend_create_args_t {
  size_t struct_size;
  const ty_host_api_t *host; /* never NULL */
} ty_abi_backend_create_args_t;

/* Device kinds, for display and scheduling hints only. */
typedef enum ty_device_kind_e {
  TY_DEVICE_KIND_CPU = 0,
  TY_DEVICE_KIND_GPU = 1,
  TY_DEVICE_KIND_ACCELERATOR = 2,
  TY_DEVICE_KIND_OTHER = 3,
} ty_device_kind_t;

/* Filled by device_info(). Strings are NUL-terminated; truncate, never
 * overflow. Fields the plugin does not know are left as the host zeroed them. */
typedef struct ty_abi_device_info_t {
  size_t struct_size;
  char name[128];         /* e.g. "AMD EPYC 7B13" or "NVIDIA H100 80GB HBM3" */
  char vendor[64];
  char driver_version[64];
  ty_device_kind_t kind;
  uint32_t compute_units; /* cores, SMs, compute units, tiles */
  uint64_t memory_bytes;  /* memory usable for buffers */
  uint32_t dtype_mask;    /* TY_DTYPE_BIT() of every dtype buffers may hold */
  uint32_t emulated;      /* nonzero when the device is simulated on the host */
  /* ---- v1.1 ---- */
  double peak_f32_gflops; /* theoretical dense f32 peak; 0 when unknown (used
                             for MFU; say in docs how it is derived) */
  /* ---- v1.2 ---- */
  uint32_t whole_graphs_only; /* nonzero: the device runs whole train steps and
                                 inference graphs only and refuses graphs of a
                                 single op (conform then checks it with its
                                 whole-graph tier) */
  char api_version[128];  /* the device's programming-interface version as
                             its runtime reports it, e.g. "OpenCL 3.0 PoCL
                             ..."; "" when there is none */
  char extensions[2048];  /* space-separated extensions or capabilities the
                             runtime reports (OpenCL extensions); cut at a
                             word boundary when longer */
} ty_abi_device_info_t;

/* One `key=value` from a device URI query (`cpu?threads=2`). */
typedef struct ty_abi_option_t {
  const char *key;
  const char *value;
} ty_abi_option_t;

typedef struct ty_abi_device_open_args_t {
  size_t struct_size;
  uint32_t device_index;
  uint32_t option_count;
  const ty_abi_option_t *options; /* unknown keys must be INVALID_ARGUMENT */
} ty_abi_device_open_args_t;

/* ty_abi_buffer_alloc_args_t.flags (ABI 1.3). */
#define TY_ABI_BUFFER_HOST 1u /* pinned host memory the device reaches (a
                                 TY_VALUE_FLAG_HOST_RESIDENT state); a plugin
                                 without it returns UNIMPLEMENTED */

typedef struct ty_abi_buffer_alloc_args_t {
  size_t struct_size;
  uint64_t size_bytes; /* may be 0: a valid, empty buffer */
  uint64_t alignment;  /* power of two; 0 means the device default */
  /* ---- v1.3 ---- */
  uint32_t flags;      /* TY_ABI_BUFFER_*; 0: device memory */
} ty_abi_buffer_alloc_args_t;

/* ------------------------------------------------------------------------ */
/* Graphs (ABI 1.1). A graph crosses the boundary as plain arrays: values    */
/* (tensors) and nodes in topological order, ops named by string with typed  */
/* attributes. All pointers are owned by the host and valid only during the  */
/* call that receives them; a plugin copies what it keeps.                   */
/* ------------------------------------------------------------------------ */

/* Role of a value in a graph. */
typedef enum ty_value_role_e {
  TY_VALUE_INPUT = 0,        /* bound by name at every execute */
  TY_VALUE_STATE = 1,        /* bound by name; lives on the device across
                                runs (parameters, optimizer moments) */
  TY_VALUE_INTERMEDIATE = 2, /* produced by a node */
  TY_VALUE_CONSTANT = 3,     /* data embedded in the graph (const_data) */
} ty_value_role_t;

/* Value flags. */
#define TY_VALUE_FLAG_OUTPUT 1u /* the caller may bind a buffer to read it */
/* ABI 1.2: the per-token loss-gradient seed, an INPUT (the trainer's
 * "loss_weights": loss = sum(loss_per_token * seed), so the seed scales each
 * element of the loss gradient; padding and prompt masking are zeros in it).
 * A caller may leave it unbound: the backend then uses ones and may say so in
 * its executable report. The host leaves it unbound only for plugins built
 * against ABI >= 1.2. */
#define TY_VALUE_FLAG_LOSS_SEED 2u
/* ABI 1.3: a STATE value the host asks the device to keep in pinned host
 * memory instead of its own (optimizer offload, `train --offload
 * optimizer`): the host allocates its buffer with TY_ABI_BUFFER_HOST and
 * the executable updates it on the host or streams it in. A plugin that
 * cannot (one whose device memory is host memory already: offload would
 * move nothing) refuses the graph in graph_compile with FAILED_PRECONDITION
 * naming the value; the host sets the flag only for plugins of ABI >= 1.3. */
#define TY_VALUE_FLAG_HOST_RESIDENT 4u

typedef struct ty_abi_value_t {
  const char *name;   /* unique among named values; "" for anonymous */
  ty_dtype_t dtype;
  uint32_t rank;
  const int64_t *dims; /* rank entries; row-major contiguous */
  ty_value_role_t role;
  uint32_t flags;
  const void *const_data; /* TY_VALUE_CONSTANT only: dense bytes */
} ty_abi_value_t;

typedef enum ty_attr_kind_e {
  TY_ATTR_INT = 0,
  TY_ATTR_FLOAT = 1,
  TY_ATTR_STRING = 2,
  TY_ATTR_INTS = 3,
  TY_ATTR_FLOATS = 4,
} ty_attr_kind_t;

typedef struct ty_abi_attr_t {
  const char *name;
  ty_attr_kind_t kind;
  uint32_t count;       /* elements for INTS / FLOATS */
  int64_t i;            /* TY_ATTR_INT */
  double f;             /* TY_ATTR_FLOAT */
  const char *s;        /* TY_ATTR_STRING */
  const int64_t *ints;  /* TY_ATTR_INTS */
  const double *floats; /* TY_ATTR_FLOATS */
} ty_abi_attr_t;

typedef struct ty_abi_node_t {
  const char *op; /* op set v1 name, e.g. "matmul", "layernorm_backward" */
  uint32_t input_count;
  const uint32_t *inputs; /* value indices; UINT32_MAX = optional, absent */
  uint32_t output_count;
  const uint32_t *outputs;
  uint32_t attr_count;
  const ty_abi_attr_t *attrs;
} ty_abi_node_t;

/* After a run, state value `state` holds what value `value` held. */
typedef struct ty_abi_state_update_t {
  uint32_t state;
  uint32_t value;
} ty_abi_state_update_t;

typedef struct ty_abi_graph_t {
  size_t struct_size;
  uint32_t value_count;
  const ty_abi_value_t *values;
  uint32_t node_count;
  const ty_abi_node_t *nodes; /* topological order */
  uint32_t update_count;
  const ty_abi_state_update_t *updates;
  const char *hash_hex; /* canonical graph hash (64 hex digits) */
  /* ---- v1.3 ---- */
  /* The memory levers the host applied when it built the graph, as
   * space-separated key=value words ("recompute=layer loss_chunk=1024
   * optimizer=adafactor fused_optimizer=1 offload=optimizer"); "" for
   * none. They are already in the nodes (recomputed copies, fused ops, the
   * order of the updates) and in the hash; a plugin that executes nodes in
   * graph order needs nothing from it. A plugin that reorders or places the
   * whole graph, and so would undo a lever (the dataflow device's sections
   * run every optimizer update after the backward), refuses it here by name
   * (FAILED_PRECONDITION in graph_compile). Never NULL for 1.3 hosts. */
  const char *levers;
} ty_abi_graph_t;

/* Per-node verdict from graph_supports. The host zeroes the array. */
typedef struct ty_abi_node_support_t {
  uint32_t supported; /* nonzero when the backend can run the node */
  char reason[160];   /* when not: e.g. "bf16 not supported for rope" */
} ty_abi_node_support_t;

/* Compile options are the plugin's own keys (unknown ones are
 * INVALID_ARGUMENT), except, from ABI 1.9, keys that start with "debug.":
 * the host's debugging requests, which a plugin acts on when it can and
 * otherwise ignores (never refuses). The host sends them only to plugins
 * that declare 1.9 or newer. Defined so far (docs/plugin-abi.md "Debug
 * options"):
 *   debug.guards=SEED  fill guard gaps between the values the plugin keeps
 *                      in its own memory with a pattern seeded by SEED and
 *                      check them as the graph runs; a damaged guard fails
 *                      the run naming the node and the value (conform). */
#define TY_ABI_DEBUG_OPTION_PREFIX "debug."

/* From ABI 1.10 the host may send "deterministic=1" (`--deterministic`):
 * every reduction of the compiled graph must then run in an order fixed by
 * the problem, never by the batch, the thread count or the launch shape, so
 * a row's result is the same bits whatever else shares the batch (a matmul
 * row alone or among 256; an attention row over a cache or inside a causal
 * block), and a run repeats bit for bit. A plugin that cannot promise it
 * refuses the compile with UNIMPLEMENTED naming what is not invariant. The
 * host sends it only to plugins of 1.10 or newer and refuses the session
 * itself for older ones (docs/plugin-abi.md "Deterministic mode"). */
#define TY_ABI_DETERMINISTIC_OPTION "deterministic"

typedef struct ty_abi_compile_args_t {
  size_t struct_size;
  const ty_abi_graph_t *graph;
  uint32_t option_count; /* backend compile options, key/value (see above) */
  const ty_abi_option_t *options;
} ty_abi_compile_args_t;

/* One named tensor bound for an execute: every INPUT and STATE value, and
 * every OUTPUT-flagged value the caller wants to read. */
typedef struct ty_abi_binding_t {
  const char *name;
  ty_abi_buffer_t *buffer;
  uint64_t offset; /* byte offset of the tensor in the buffer */
} ty_abi_binding_t;

typedef struct ty_abi_execute_args_t {
  size_t struct_size;
  uint32_t binding_count;
  const ty_abi_binding_t *bindings;
  /* ---- v1.5 ---- */
  /* The run's communicator for host->collective, or NULL for one process
   * (world 1: collective ops are the identity). `world_size` is its size
   * (1 when host_comm is NULL). A plugin that cannot execute a collective op
   * in a run of more than one rank fails the run with FAILED_PRECONDITION
   * rather than compute a one-rank result. */
  void *host_comm;
  uint32_t world_size;
} ty_abi_execute_args_t;

typedef struct ty_abi_executable_s ty_abi_executable_t;

/* executable_deserialize's arguments (ABI 1.2). */
typedef struct ty_abi_deserialize_args_t {
  size_t struct_size;
  const void *bytes; /* the artifact, as executable_serialize wrote it */
  uint64_t size;
  /* NULL, or the graph the caller means to run with it: the plugin refuses
   * an artifact made from another graph with FAILED_PRECONDITION naming the
   * difference (a changed shape, optimizer, an inference artifact asked to
   * train), since running it would need a recompile. */
  const ty_abi_graph_t *expected;
} ty_abi_deserialize_args_t;

/* executable_check_binding's arguments (ABI 1.2): what a caller is about to
 * bind under `name`. */
typedef struct ty_abi_binding_check_t {
  size_t struct_size;
  const char *name;
  ty_dtype_t dtype;
  uint32_t rank;
  const int64_t *dims;
} ty_abi_binding_check_t;

/* executable_memory's result (ABI 1.3): the device memory an executable
 * itself holds or uses, besides the buffers the host binds (parameters,
 * optimizer state, inputs, outputs). Zero where unknown. */
typedef struct ty_abi_executable_memory_t {
  size_t struct_size;
  uint64_t arena_bytes;   /* held for the executable's life: intermediates
                             (activations, gradients) as its plan places them */
  uint64_t scratch_bytes; /* the most a run allocates beyond the arena and
                             frees again (kernel workspace) */
  uint64_t host_bytes;    /* pinned host memory it holds (offload staging) */
} ty_abi_executable_memory_t;

/* device_memory's result (ABI 1.3): what the device's memory held, as the
 * plugin measures it. */
typedef struct ty_abi_device_memory_t {
  size_t struct_size;
  uint64_t in_use_bytes;      /* device memory allocated now: buffers,
                                 executables' arenas, workspace in flight */
  uint64_t peak_bytes;        /* its high-water mark since device_open or the
                                 last reset */
  uint64_t host_in_use_bytes; /* pinned host memory (TY_ABI_BUFFER_HOST) */
  uint64_t host_peak_bytes;
  char how[160];              /* how it is measured, for reports, e.g.
                                 "allocator counter: buffers, arenas and kernel
                                 scratch" or "cudaMemGetInfo, sampled" */
} ty_abi_device_memory_t;

/* ------------------------------------------------------------------------ */
/* Collectives (ABI 1.4, optional; docs/plugin-abi.md "Collectives").        */
/*                                                                           */
/* A communicator joins one device of each of `size` processes (ranks). The  */
/* host (rank 0) asks its plugin for a unique id, sends the bytes to every   */
/* rank over its own bootstrap (MPI), and every rank creates its             */
/* communicator from them with its rank. Collectives work on device buffers  */
/* and are queued on the stream of `args->executable` (after what its last   */
/* execute queued, before what the next one queues), like an execute: the    */
/* host synchronizes before reading results on the host. A backend without   */
/* these entries is still run data parallel: the host stages the gradients   */
/* through host memory and reduces them over MPI (the host path).            */
/* ------------------------------------------------------------------------ */
#define TY_ABI_COMM_ID_MAX 128 /* bytes; NCCL's ncclUniqueId is 128 */

typedef struct ty_abi_comm_id_t {
  size_t struct_size;
  uint32_t size;                      /* bytes of `bytes` used */
  uint8_t bytes[TY_ABI_COMM_ID_MAX];  /* opaque to the host */
} ty_abi_comm_id_t;

typedef struct ty_abi_comm_s ty_abi_comm_t;

typedef struct ty_abi_comm_create_args_t {
  size_t struct_size;
  const ty_abi_comm_id_t *id; /* from rank 0's comm_unique_id, same bytes on every rank */
  uint32_t rank;              /* 0 <= rank < size */
  uint32_t size;              /* ranks in the communicator */
  /* ---- v1.7 ---- */
  /* The process group it joins ("world", "tp", "dp", "pp", "embed";
   * docs/plugin-abi.md "Group communicators"): a device may hold one communicator per group,
   * and a collective op of a graph runs on the device's communicator of
   * its `group` attribute. NULL, or args from a 1.6 host, mean "world".
   * The string is valid for the call only. */
  const char *group;
} ty_abi_comm_create_args_t;

typedef enum ty_abi_reduce_op_e {
  TY_ABI_REDUCE_SUM = 0,
  TY_ABI_REDUCE_AVG = 1, /* the sum divided by size, in the element dtype */
  TY_ABI_REDUCE_MAX = 2, /* 1.6, host->collective only: the elementwise maximum */
} ty_abi_reduce_op_t;

/* One collective. Counts are elements of `dtype` (f32 or bf16; others may
 * be refused with UNIMPLEMENTED naming the dtype):
 *  all_reduce      send[count] -> recv[count] on every rank (send == recv at
 *                  the same offset: in place)
 *  reduce_scatter  send[size * count] -> recv[count], rank r gets block r
 *  all_gather      send[count] -> recv[size * count], block r from rank r
 *  broadcast       root's send[count] -> recv[count] on every rank
 * Every rank calls the same collectives in the same order with the same
 * count, dtype and op; a mismatch is undefined, as in NCCL and MPI. */
typedef struct ty_abi_collective_args_t {
  size_t struct_size;
  ty_dtype_t dtype;
  uint64_t count;
  uint32_t op;   /* ty_abi_reduce_op_t; all_reduce and reduce_scatter */
  uint32_t root; /* broadcast */
  ty_abi_buffer_t *send;
  uint64_t send_offset; /* bytes */
  ty_abi_buffer_t *recv;
  uint64_t recv_offset;
  /* The stream to order on: the executable whose results it reads or whose
   * next run reads it; NULL orders after all work queued on the device. */
  ty_abi_executable_t *executable;
  /* TY_ABI_COLLECTIVE_MORE: more collectives follow, and nothing else is
   * asked of the device until one without the flag: the backend may hold
   * them back and launch the batch together (NCCL's group calls) when the
   * last one comes. A backend may also run each at once. */
  uint32_t flags;
} ty_abi_collective_args_t;

#define TY_ABI_COLLECTIVE_MORE 1u

/* Point to point (ABI 1.8, comm_send / comm_recv; docs/plugin-abi.md
 * "Point to point"): the same args, where
 *  send  count elements of dtype at send + send_offset go to rank `root`
 *        of the communicator (the peer); recv is unused
 *  recv  count elements of dtype from rank `root` into recv + recv_offset;
 *        send is unused
 * Any dtype: the bytes travel as they are (count x the dtype's size). The
 * peer is never the caller's own rank. Between two ranks, the n-th send of
 * one to the other matches the other's n-th receive from it (no tags, as in
 * NCCL): both must agree on the order and the size. A send completes only
 * when its peer's receive has been posted (NCCL's semantics; a plugin may
 * complete it earlier, a caller may not count on that): an unbatched send
 * or receive blocks the stream (commfake: the host) until its peer's
 * matching op comes. TY_ABI_COLLECTIVE_MORE batches sends and receives
 * (and collectives) of one communicator with those that follow until one
 * without the flag: the batch progresses as one (NCCL group), so a send
 * and a receive of one batch cannot block each other. */

/* ------------------------------------------------------------------------ */
/* The backend table.                                                        */
/*                                                                           */
/* Threading: backend_create/destroy and device_open/close are called by one */
/* thread at a time per backend. Buffer calls on different buffers may come  */
/* from several threads at once. Offsets and sizes are validated by the host */
/* before a buffer call; plugins may assume they are in range.               */
/* ------------------------------------------------------------------------ */
typedef struct ty_backend_api_t {
  size_t struct_size; /* sizeof(ty_backend_api_t) as the plugin compiled it */
  uint32_t abi_major; /* TY_ABI_MAJOR the plugin was built against */
  uint32_t abi_minor; /* TY_ABI_MINOR the plugin was built against */
  const char *name;   /* backend name used in URIs; must match the file name */

  /* ---- v1.0, required (a table without them is rejected) ---- */
  const char *version; /* the plugin's own version string, e.g. "0.1.0" */

  /* Creates the backend instance. Returns UNAVAILABLE when the vendor
   * runtime (driver, ICD loader) is missing: the host then lists the plugin
   * as rejected with the message and carries on with the others. */
  ty_abi_status_t (*backend_create)(const ty_abi_backend_create_args_t *args,
                                    ty_abi_backend_t **out_backend);
  void (*backend_destroy)(ty_abi_backend_t *backend);

  ty_abi_status_t (*device_count)(ty_abi_backend_t *backend,
                                  uint32_t *out_count);
  ty_abi_status_t (*device_info)(ty_abi_backend_t *backend, uint32_t index,
                                 ty_abi_device_info_t *out_info);

  /* ---- v1.0, optional (NULL means UNIMPLEMENTED) ---- */
  ty_abi_status_t (*device_open)(ty_abi_backend_t *backend,
                                 const ty_abi_device_open_args_t *args,
                                 ty_abi_device_t **out_device);
  void (*device_close)(ty_abi_device_t *device);
  /* Blocks until all work queued on the device has finished. */
  ty_abi_status_t (*device_synchronize)(ty_abi_device_t *device);

  /* Huge requests must fail with RESOURCE_EXHAUSTED, never abort. */
  ty_abi_status_t (*buffer_alloc)(ty_abi_device_t *device,
                                  const ty_abi_buffer_alloc_args_t *args,
                                  ty_abi_buffer_t **out_buffer);
  void (*buffer_free)(ty_abi_device_t *device, ty_abi_buffer_t *buffer);
  /* Host memory -> buffer[offset, offset+size). Complete on return. */
  ty_abi_status_t (*buffer_write)(ty_abi_device_t *device,
                                  ty_abi_buffer_t *buffer, uint64_t offset,
                                  const void *src, uint64_t size);
  /* buffer[offset, offset+size) -> host memory. Complete on return. */
  ty_abi_status_t (*buffer_read)(ty_abi_device_t *device,
                                 ty_abi_buffer_t *buffer, uint64_t offset,
                                 void *dst, uint64_t size);
  /* Device-side copy between two buffers of this device. The host never
   * passes overlapping ranges (it rejects them within one buffer). */
  ty_abi_status_t (*buffer_copy)(ty_abi_device_t *device, ty_abi_buffer_t *src,
                                 uint64_t src_offset, ty_abi_buffer_t *dst,
                                 uint64_t dst_offset, uint64_t size);

  /* ---- v1.1, optional: graph execution ---- */

  /* Fills out_support[graph->node_count] with a verdict per node. Returns
   * an error only when the check itself fails. */
  ty_abi_status_t (*graph_supports)(ty_abi_device_t *device,
                                    const ty_abi_graph_t *graph,
                                    ty_abi_node_support_t *out_support);
  /* Compiles a graph into an executable for `device`. The graph and its
   * arrays are only valid during the call. */
  ty_abi_status_t (*graph_compile)(ty_abi_device_t *device,
                                   const ty_abi_compile_args_t *args,
                                   ty_abi_executable_t **out_executable);
  void (*executable_destroy)(ty_abi_executable_t *executable);
  /* Runs the executable once with named bindings. Buffers belong to the
   * executable's device; the host has checked each binding's name, and that
   * the buffer holds the value's bytes from `offset`. State updates are
   * written to the state bindings. May run asynchronously until
   * device_synchronize or a buffer_read. */
  ty_abi_status_t (*executable_execute)(ty_abi_executable_t *executable,
                                        const ty_abi_execute_args_t *args);

  /* ---- v1.2, optional: artifacts, reports, binding checks ---- */

  /* Writes a self-contained artifact of the executable (the plugin's own
   * format: it should carry a magic, a format version, a content hash and
   * the target it was compiled for). Always sets *out_size to the artifact's
   * size; writes it to `dst` only when dst is not NULL and capacity >=
   * *out_size (call once with dst NULL to learn the size). */
  ty_abi_status_t (*executable_serialize)(ty_abi_executable_t *executable,
                                          void *dst, uint64_t capacity,
                                          uint64_t *out_size);
  /* Loads an artifact for `device`. DATA_LOSS for a corrupt or truncated
   * artifact (bad magic, content hash mismatch); FAILED_PRECONDITION for an
   * unsupported format version, a target that differs from the device, or
   * an artifact of another graph than args->expected. The bytes are only
   * valid during the call. */
  ty_abi_status_t (*executable_deserialize)(ty_abi_device_t *device,
                                            const ty_abi_deserialize_args_t *args,
                                            ty_abi_executable_t **out_executable);
  /* A human-readable report of the executable (placement, estimates, what
   * runs did), NUL-terminated. Sets *out_size to the bytes needed including
   * the NUL; writes only when dst is not NULL and capacity >= *out_size. */
  ty_abi_status_t (*executable_report)(ty_abi_executable_t *executable,
                                       char *dst, uint64_t capacity,
                                       uint64_t *out_size);
  /* The graph the executable runs (plugin-owned, valid while the executable
   * lives), so a host can create a session from an artifact alone; NULL
   * when the plugin keeps none. */
  const ty_abi_graph_t *(*executable_graph)(ty_abi_executable_t *executable);
  /* Checks a binding before the host copies data: the plugin's own error
   * for a name it has no slot for, an undeclared hyperparameter, a wrong
   * dtype or shape (INVALID_ARGUMENT, or FAILED_PRECONDITION when the
   * binding would need a recompile). NULL (OK) when the binding is fine. */
  ty_abi_status_t (*executable_check_binding)(ty_abi_executable_t *executable,
                                              const ty_abi_binding_check_t *check);

  /* ---- v1.3, optional: memory accounting ---- */

  /* The device memory the executable holds and uses per run (its plan:
   * arena, scratch). Called right after compile, before the host allocates
   * the graph's buffers, and compared with the run's memory limit: a plugin
   * that allocates its arena lazily (at the first execute) lets the host
   * refuse a graph that cannot fit before anything is allocated. */
  ty_abi_status_t (*executable_memory)(ty_abi_executable_t *executable,
                                       ty_abi_executable_memory_t *out);
  /* The device's measured memory: bytes in use and their high-water mark;
   * with reset_peak nonzero the mark restarts at the bytes in use (after
   * filling *out). The host reads it after a run and reports it beside its
   * plan (`trainyard train` writes both into summary.txt). */
  ty_abi_status_t (*device_memory)(ty_abi_device_t *device, uint32_t reset_peak,
                                   ty_abi_device_memory_t *out);

  /* ---- v1.4, optional: collectives (all of them or none) ---- */

  /* A new unique id for a communicator (called on rank 0 only). The bytes
   * are opaque and must work in every process that receives them. */
  ty_abi_status_t (*comm_unique_id)(ty_abi_backend_t *backend, ty_abi_comm_id_t *out_id);
  /* Joins `device` to the communicator (blocks until every rank has joined
   * or fails: UNAVAILABLE naming the missing runtime, e.g. libnccl.so.2). */
  ty_abi_status_t (*comm_create)(ty_abi_device_t *device,
                                 const ty_abi_comm_create_args_t *args,
                                 ty_abi_comm_t **out_comm);
  void (*comm_destroy)(ty_abi_comm_t *comm);
  ty_abi_status_t (*comm_all_reduce)(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
  ty_abi_status_t (*comm_reduce_scatter)(ty_abi_comm_t *comm,
                                         const ty_abi_collective_args_t *args);
  ty_abi_status_t (*comm_all_gather)(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
  ty_abi_status_t (*comm_broadcast)(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);

  /* ---- v1.8, optional: point to point (both or none; needs the 1.4
   * entries). The host uses them only for a plugin of ABI >= 1.8; a plugin
   * without them moves pipeline activations through host memory (MPI). ---- */
  ty_abi_status_t (*comm_send)(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);
  ty_abi_status_t (*comm_recv)(ty_abi_comm_t *comm, const ty_abi_collective_args_t *args);

  /* New entries are appended below this line; bump TY_ABI_MINOR. */
} ty_backend_api_t;

/* The host rejects a table whose struct_size does not reach past this: the
 * required v1.0 entries. */
#define TY_BACKEND_API_MIN_SIZE \
  (offsetof(ty_backend_api_t, device_info) + sizeof(void *))

/* The one exported entry point. Returns NULL when the plugin cannot serve
 * `host_abi_major`. Must be cheap and side-effect free: the host calls it for
 * every candidate it considers, including ones it then rejects. */
typedef const ty_backend_api_t *(*ty_backend_query_fn_t)(
    uint32_t host_abi_major, uint32_t host_abi_minor);

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(
    uint32_t host_abi_major, uint32_t host_abi_minor);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TY_HAL_BACKEND_ABI_H_ */
