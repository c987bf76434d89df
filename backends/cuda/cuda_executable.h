/* The cuda executable's state, private to the four files that make it:
 * cuda_emit.c (the emit API of cuda_exec.h that op builders call),
 * cuda_compile.c (compile and its passes), cuda_execute.c (bind, capture,
 * run, report) and cuda_errors.c (device data errors, command errors, the
 * TRAINYARD_CUDA_FAULT test hook). Op builders never include this header:
 * they reach the executable through cuda_exec.h only. */
#ifndef TY_BACKENDS_CUDA_CUDA_EXECUTABLE_H_
#define TY_BACKENDS_CUDA_CUDA_EXECUTABLE_H_

#include <stdbool.h>
#include <stdint.h>

#include "trainyard/device_errors.h"
#include "trainyard/host_profile.h"
#include "cuda_exec.h"

#define TY_CU_ALIGN 256u

/* A bf16 weight copy kept across runs (cuda_fuse.h ty_cu_weight_copy_plan;
 * cuda_weights.c). */
typedef struct ty_cu_wcopy_t {
  uint32_t param;  /* the f32 STATE value */
  uint32_t value;  /* its first cast's output, which names the copy */
  uint64_t offset; /* in the executable's copies */
  uint64_t bytes;
  /* What the copy was made from, as of the end of the last run: the
   * parameter's buffer, its write generation then, and its address. */
  const ty_abi_buffer_t *buffer;
  uint64_t gen;
  uint64_t address;
} ty_cu_wcopy_t;

struct ty_abi_executable_s {
  ty_dev_exec_t core; /* graph, plan, layout, named values, per-value locations */
  ty_abi_device_t *device;
  ty_cu_api_t *api;
  CUdeviceptr arena, constants, aux, scratch, err; /* unbound outputs: core.fallback */
  uint64_t arena_bytes, const_bytes, aux_bytes_dev, scratch_alloc, fallback_alloc;
  ty_cu_cmd_t *cmds;
  uint32_t cmd_count, cmd_cap;
  int32_t *err_host; /* pinned */
  /* CUDA graph replay. */
  CUgraph cu_graph;
  CUgraphExec cu_exec;
  uint64_t captures, replays, runs;
  bool sync_each; /* TRAINYARD_CUDA_SYNC */
  bool deterministic; /* the compile option deterministic=1 (ty_cu_compile_options) */
  /* Profiling (TRAINYARD_PROFILE): one event before every node and one at
   * the end. */
  ty_host_profile_t *profile;
  CUevent *events;
  uint32_t *first_cmd; /* per node: its first command (cmd_count when none) */
  int64_t *row_stride; /* per value: padded row length in elements, 0 = dense */
  int64_t *zero_rows;  /* per value: rows allocated (>= dims[0]) whose extra rows
                          are zeros, 0 = none */
  bool *zero_cols;     /* per value: the padding of its rows holds zeros */
  /* Address tables (ty_cu_ptr_table): one device array of u64, its
   * references, and the addresses last uploaded. */
  ty_dev_ref_t *table_refs;
  uint64_t *table_host;
  uint32_t table_count, table_cap;
  CUdeviceptr tables;
  bool tables_uploaded;
  bool *fused; /* per node: its work is done by another node's commands */
  ty_cu_fuse_t *fuse; /* per node: the fusion it heads (cuda_fuse.h) */
  uint32_t *extra_read; /* per node: a value its command reads beyond its inputs
                           (ty_cu_xent_plan: the forward's loss), UINT32_MAX = none */
  /* Test hooks (TRAINYARD_CUDA_FAULT). */
  int fault_kind;
  uint64_t fault_run;
  /* The ranks the all_reduce commands sum over in the current run (the
   * execute args' world_size; 1: they are copies). A CUDA graph captured
   * for one world is captured again for another. */
  uint32_t world;
  bool collectives_ran; /* a run over several ranks has completed */
  /* Over several ranks the commands are captured in segments, the runs of
   * commands between all_reduce commands, each its own CUDA graph; the
   * all_reduce commands run eagerly between them. NCCL's collectives are
   * kept out of the captured graphs: a graph holding them pins the
   * communicator (ncclCommDestroy then waits for the graph), and NCCL
   * connects peers on first use, host work a capture cannot hold. */
  CUgraph *seg_graph;
  CUgraphExec *seg_exec;
  uint32_t seg_count;
  /* The bf16 weight copies (cuda_weights.c): one allocation, a table of
   * them, per value the copy a cast output reads (UINT32_MAX: none), per
   * node the cast's role (cuda_fuse.h), and whether every copy holds the
   * cast of its parameter as the parameter was at the end of the last run
   * (false until a run made them). `written` lists the values a run
   * writes (state updates' targets, outputs): their buffers get a new
   * generation after every run. */
  CUdeviceptr wcopy_mem;
  uint64_t wcopy_bytes;
  ty_cu_wcopy_t *wcopies;
  uint32_t wcopy_count;
  uint32_t *wcopy_of;
  uint8_t *wcopy_role;
  bool wcopies_valid;
  uint64_t wcopy_refreshes; /* runs that made the copies */
  bool wcopies_dropped;     /* planned, but compiled without: they did not fit */
  uint32_t *written;
  uint32_t written_count;
};

static inline uint64_t ty_cu_round_up(uint64_t x) {
  return (x + TY_CU_ALIGN - 1) & ~(uint64_t)(TY_CU_ALIGN - 1);
}

/* TRAINYARD_CUDA_FAULT=<kind>@<run>: a test hook that makes run number
 * <run> (1-based) fail the way a real fault would. */
enum {
  TY_CU_FAULT_NONE = 0,
  TY_CU_FAULT_ILLEGAL_ADDRESS, /* a kernel writes through a wild pointer */
  TY_CU_FAULT_LAUNCH,          /* a launch with an impossible shape */
  TY_CU_FAULT_TRAP,            /* a kernel executes a trap (device assert) */
  TY_CU_FAULT_DEVICE_LOST,     /* the run reports the driver's "device
                                  unavailable" (simulated: nothing is lost) */
  TY_CU_FAULT_COPIES_OOM,      /* compile: the bf16 weight copies do not fit
                                  (not a run's fault) */
};

/* cuda_compile.c: device memory of `bytes` holding `data` when given
 * (synchronous). */
ty_abi_status_t ty_cu_upload(ty_abi_executable_t *e, uint64_t bytes, const void *data,
                             const char *what, CUdeviceptr *out);
/* cuda_weights.c: plans the weight copies of e's graph (after the fusion
 * plan: `run_at`; none unless `allowed`) and fills external[v] for the
 * memory plan; allocates nothing yet. */
ty_abi_status_t ty_cu_weights_plan(ty_abi_executable_t *e, const uint32_t *run_at, bool allowed,
                                   bool *external);
/* Lays the copies out in one allocation, once the plan gave each value its
 * bytes (compile, after the commands). */
ty_abi_status_t ty_cu_weights_alloc(ty_abi_executable_t *e);
/* The external values' places (ty_dev_hooks_t.external). */
ty_dev_loc_t ty_cu_weights_place(void *user, uint32_t v);
/* Before a run (after its bindings resolved: the core's buffer_of):
 * whether the copies must be made again. */
bool ty_cu_weights_stale(const ty_abi_executable_t *e);
/* After a run, `ok` when it completed without error: new generations for
 * the buffers it wrote, and the copies' sources recorded (or the copies
 * marked stale when it failed). */
void ty_cu_weights_ran(ty_abi_executable_t *e, bool ok);
void ty_cu_weights_free(ty_abi_executable_t *e);

/* cuda_execute.c: drops the captured CUDA graph(s). */
void ty_cu_graph_release(ty_abi_executable_t *e);
/* cuda_errors.c */
void ty_cu_fault_parse(ty_abi_executable_t *e);
ty_abi_status_t ty_cu_fault_inject(ty_abi_executable_t *e);
ty_abi_status_t ty_cu_cmd_error(const ty_abi_executable_t *e, const ty_cu_cmd_t *c,
                                const char *what, CUresult r);

#endif /* TY_BACKENDS_CUDA_CUDA_EXECUTABLE_H_ */
