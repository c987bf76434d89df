/* Test-only entry points of the KV block pool (models/kv_pool.c): a way to
 * force hash collisions, to fail the pool's table allocations, and to read
 * its internal state. Only tests include this header; the engine never calls
 * these. Not thread-safe, like the pool. */
#ifndef TY_MODELS_KV_POOL_TEST_HOOK_H_
#define TY_MODELS_KV_POOL_TEST_HOOK_H_

#include <stdint.h>

#include "hal/status.h"
#include "models/kv_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The chain hash of a full block: `parent` is the chain up to the block
 * before (a fixed root value for block 0), `tokens` its block_size ids. */
typedef uint64_t (*ty_kv_pool_hash_fn_t)(uint64_t parent, const int64_t *tokens, int64_t count);

/* Replaces the chain hash (NULL restores the pool's own). Only while
 * nothing is registered: FAILED_PRECONDITION otherwise, since registered
 * blocks sit in the map under the old hash. */
ty_status_t ty_kv_pool_set_hash_for_test(ty_kv_pool_t *pool, ty_kv_pool_hash_fn_t fn);

/* Makes the pool's table allocations (begin, reserve, fork) fail after
 * `successes` more succeed; a negative value turns failures off. */
void ty_kv_pool_fail_allocs_for_test(ty_kv_pool_t *pool, int64_t successes);

/* Tables holding `block` (0 when free or cached); -1 for a bad number. */
int32_t ty_kv_pool_refs_for_test(const ty_kv_pool_t *pool, int32_t block);

/* Whether `block` is registered in the prefix cache. */
bool ty_kv_pool_registered_for_test(const ty_kv_pool_t *pool, int32_t block);

/* Checks the pool's internal invariants (every block with no reference in
 * exactly one of the free list and the cached list, cached blocks
 * registered, the map holding exactly the registered blocks, the counters
 * matching a recount). INTERNAL naming the first broken one. */
ty_status_t ty_kv_pool_check_for_test(const ty_kv_pool_t *pool);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_KV_POOL_TEST_HOOK_H_ */
