/* Optional per-node timing for the host executor: with the environment
 * variable TRAINYARD_PROFILE set (to anything but "" or "0") when a graph is
 * compiled, every node's wall time is summed over the runs after the first
 * (which pays for first touches and JIT compiles), and destroying the
 * executor prints a table to stderr (time per op, then the slowest nodes with
 * their shapes). A diagnostic for benchmarks; off, it costs one branch per
 * node. Not thread-safe (neither is the executor). */
#ifndef TY_BACKENDS_COMMON_HOST_PROFILE_H_
#define TY_BACKENDS_COMMON_HOST_PROFILE_H_

#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_host_profile_t ty_host_profile_t;

/* NULL when profiling is off or out of memory (profiling is then skipped). */
ty_host_profile_t *ty_host_profile_create(uint32_t node_count);
/* Monotonic seconds. */
double ty_host_profile_now(void);
/* Adds `seconds` to node `node` (UINT32_MAX: the state-update copies). */
void ty_host_profile_add(ty_host_profile_t *p, uint32_t node, double seconds);
void ty_host_profile_end_run(ty_host_profile_t *p);
/* Prints the table for `graph` to stderr (when any run was timed) and frees
 * `p`. `reference` marks nodes run by the reference kernel (may be NULL). */
void ty_host_profile_report_and_free(ty_host_profile_t *p, const char *plugin,
                                     const ty_abi_graph_t *graph, const uint8_t *reference);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_HOST_PROFILE_H_ */
