/* Shared state of the dataflow plugin: an emulated compile-then-run chip of
 * tiles with on-chip memory, to which a whole train step (or inference
 * graph) is compiled as a static schedule of fused sections, placed on
 * tiles, costed by a cycle model, serialized as an artifact and executed in
 * one call with the cpu plugin's kernels on memory the plugin owns.
 * docs/dataflow.md describes the chip, the placement, the cost model, the
 * artifact format and every rejection. */
#ifndef TY_BACKENDS_DATAFLOW_DATAFLOW_INTERNAL_H_
#define TY_BACKENDS_DATAFLOW_DATAFLOW_INTERNAL_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/host_executor.h"
#include "trainyard/backend_abi.h"
#include "trainyard/file.h"

#define DF_NAME "dataflow"
/* The cost model's fixed per-tile throughput: f32 multiply-accumulates per
 * cycle (a 16x32 systolic array). */
#define DF_MACS_PER_TILE 512u
#define DF_MAX_TILES 4u

/* The chip an executable is compiled for (device URI options). */
typedef struct df_target_t {
  uint32_t tiles;        /* 1, 2 or 4 */
  uint32_t clock_mhz;
  uint64_t mem_per_tile; /* on-chip bytes per tile */
  double bandwidth_gbs;  /* device DRAM bandwidth, GB/s (1e9 bytes) */
  uint64_t dram_bytes;   /* device DRAM: what buffers may hold */
} df_target_t;

struct ty_abi_backend_s {
  const ty_host_api_t *host;
  ty_abi_device_info_t info; /* of the default target */
};

struct ty_abi_device_s {
  ty_abi_backend_t *backend;
  df_target_t target;
  uint32_t threads;        /* host threads the emulator's kernels use */
  uint64_t allocated;      /* DRAM bytes held by buffers and executables */
  uint64_t peak_allocated;
};

struct ty_abi_buffer_s {
  uint64_t size;
  unsigned char *data;
};

typedef enum df_section_e {
  DF_FWD = 0,
  DF_BWD = 1,
  DF_GRADNORM = 2,
  DF_OPT = 3,
  DF_SECTION_COUNT = 4,
} df_section_t;

typedef enum df_kind_e {
  DF_KIND_TRAIN = 1,
  DF_KIND_INFERENCE = 2,
} df_kind_t;

typedef enum df_role_e {
  DF_ROLE_INPUT = 0,
  DF_ROLE_OUTPUT = 1,
  DF_ROLE_PARAMETER = 2,
  DF_ROLE_OPTIMIZER_STATE = 3,
  DF_ROLE_LOSS_SEED = 4,
  DF_ROLE_HYPERPARAMETER = 5,
  DF_ROLE_STATE = 6, /* other resident state: KV caches */
  DF_ROLE_COUNT = 7,
} df_role_t;

typedef struct df_slot_t {
  char *name;
  df_role_t role;
  ty_dtype_t dtype;
  uint32_t rank;
  int64_t dims[8];
  uint64_t bytes;
} df_slot_t;

typedef struct df_section_stats_t {
  uint32_t nodes;
  double flops;
  uint64_t dram_bytes;
  uint64_t compute_cycles;
  uint64_t dram_cycles;
} df_section_stats_t;

typedef struct df_tile_stats_t {
  uint32_t nodes;
  double flops;
  uint64_t state_bytes;           /* resident parameters and optimizer state */
  uint64_t peak_activation_bytes; /* live intermediates at their peak */
  uint64_t spill_bytes;           /* what does not fit on chip: lives in DRAM */
} df_tile_stats_t;

/* Everything compile decides; serialized in the artifact. Node arrays are
 * indexed by position in the schedule (the executable's graph is stored in
 * schedule order). */
typedef struct df_plan_t {
  df_kind_t kind;
  df_target_t target;
  char graph_hash[65];
  uint32_t node_count;
  uint8_t *section; /* per scheduled node */
  uint16_t *tile;   /* per scheduled node */
  df_section_stats_t sections[DF_SECTION_COUNT];
  df_tile_stats_t tiles[DF_MAX_TILES];
  uint64_t cycles_per_step;
  uint64_t tokens_per_step; /* elements of the token-id input; 0 if none */
  uint32_t slot_count;
  df_slot_t *slots;
  uint32_t dropout_count; /* distinct dropout probabilities, fixed at compile */
  double *dropout_p;
  /* Ranks the step was compiled for: the graph's data_parallel lever
   * (`trainyard compile --data-parallel N`), 1 without it. */
  uint32_t world_size;
  /* Compiled with deterministic=1 (ABI 1.10): the cpu kernels' batch-
   * invariant paths, kept in the artifact so a loaded one runs them too. */
  bool deterministic;
} df_plan_t;

struct ty_abi_executable_s {
  ty_abi_device_t *device;
  ty_host_executor_t *executor; /* runs the scheduled graph */
  df_plan_t plan;
  uint64_t device_bytes;        /* the executor's arena, charged to DRAM */
  unsigned char *artifact;      /* serialized on first request */
  uint64_t artifact_size;
  bool from_artifact;
  /* what runs did */
  uint64_t runs, seed_default_runs;
  double run_seconds;           /* host wall time of executes */
};

/* ---- dataflow_plan.c: contract, sections, placement, cost ---- */

/* Classifies `graph` (the whole-graph contract: a train step or an
 * inference graph; FAILED_PRECONDITION otherwise, with the reason), orders
 * its nodes into sections (out_order[i] = original index of the i-th
 * scheduled node) and fills plan->kind, section and slots. */
ty_abi_status_t df_classify(const ty_abi_graph_t *graph, df_plan_t *plan, uint32_t *out_order);
/* Places the scheduled graph on the target's tiles and costs it: fills
 * plan->tile, sections, tiles, cycles_per_step and tokens_per_step. */
ty_abi_status_t df_place(const ty_abi_graph_t *scheduled, df_plan_t *plan);
void df_plan_free(df_plan_t *plan);

const char *df_section_name(df_section_t section);
const char *df_role_name(df_role_t role);
const char *df_dtype_name(ty_dtype_t dtype);
/* "i64[8,16]" */
void df_format_shape(ty_dtype_t dtype, uint32_t rank, const int64_t *dims, char *out,
                     size_t capacity);
/* "tiles=4 mem_per_tile=64 MiB clock_mhz=1000 bandwidth_gbs=200" */
void df_format_target(const df_target_t *target, char *out, size_t capacity);
/* Whether an executable for `a` runs on `b` (tiles, on-chip memory, clock
 * and bandwidth agree; DRAM capacity is the device's own business). */
bool df_same_target(const df_target_t *a, const df_target_t *b);

/* ---- dataflow_artifact.c ---- */

ty_abi_status_t df_artifact_write(const ty_abi_executable_t *e, unsigned char **out_bytes,
                                  uint64_t *out_size);
/* Verifies an artifact (magic, version, content hash, then its target
 * against `device_target`) and parses it into a plan and a graph (schedule
 * order) owned by *out_graph_block (free with free()); the graph's pointers
 * point into it. */
ty_abi_status_t df_artifact_read(const unsigned char *bytes, uint64_t size,
                                 const df_target_t *device_target, df_plan_t *plan,
                                 ty_abi_graph_t *out_graph, void **out_graph_block);

/* ---- dataflow_exec.c ---- */

ty_abi_status_t df_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *graph,
                                  ty_abi_node_support_t *out_support);
ty_abi_status_t df_graph_compile(ty_abi_device_t *device, const ty_abi_compile_args_t *args,
                                 ty_abi_executable_t **out_executable);
void df_executable_destroy(ty_abi_executable_t *executable);
ty_abi_status_t df_executable_execute(ty_abi_executable_t *executable,
                                      const ty_abi_execute_args_t *args);
ty_abi_status_t df_executable_serialize(ty_abi_executable_t *executable, void *dst,
                                        uint64_t capacity, uint64_t *out_size);
ty_abi_status_t df_executable_deserialize(ty_abi_device_t *device,
                                          const ty_abi_deserialize_args_t *args,
                                          ty_abi_executable_t **out_executable);
ty_abi_status_t df_executable_report(ty_abi_executable_t *executable, char *dst,
                                     uint64_t capacity, uint64_t *out_size);
const ty_abi_graph_t *df_executable_graph(ty_abi_executable_t *executable);
ty_abi_status_t df_executable_check_binding(ty_abi_executable_t *executable,
                                            const ty_abi_binding_check_t *check);

/* Device memory accounting (dataflow_backend.c): RESOURCE_EXHAUSTED when
 * `bytes` more would exceed the device's DRAM. */
ty_abi_status_t df_device_charge(ty_abi_device_t *device, uint64_t bytes, const char *what);
void df_device_release(ty_abi_device_t *device, uint64_t bytes);

#endif /* TY_BACKENDS_DATAFLOW_DATAFLOW_INTERNAL_H_ */
