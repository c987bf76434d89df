/* The paged KV cache's bookkeeping: one pool of fixed-size blocks per
 * device, a block table per sequence, and a prefix cache that lets
 * sequences with the same prompt prefix hold it once.
 *
 * The pool never touches the device: it hands out block numbers. The engine
 * (models/engine.h) keeps one tensor per layer of [blocks, block_size, Hkv,
 * D] keys and values on the device and writes a sequence's position p into
 * block table[p / block_size], row p % block_size (the paged_kv_write and
 * paged_attention ops, docs/ops.md).
 *
 * Blocks are reference counted. A block is
 *   - free:      in no table and holding nothing anyone may look up;
 *   - in use:    in one or more tables (refs >= 1);
 *   - cached:    in no table, but full and registered in the prefix cache,
 *                so a later sequence with the same tokens up to and
 *                including this block can take it back without recomputing
 *                it. Cached blocks count as available: when the free list
 *                runs out, the least recently released cached block is
 *                evicted (unregistered) and reused.
 *
 * Prefix sharing: a full block is registered under the chain of every token
 * from position 0 to its end (a 64-bit hash of the chain, confirmed by
 * comparing the tokens themselves, so a hash collision never hands out
 * another prompt's keys). ty_kv_pool_seq_begin takes the longest chain of
 * registered blocks that matches a new prompt, stopping so that at least
 * one prompt token is left to compute (the engine needs its logits).
 *
 * Copy-on-write: a block shared by several tables (refs > 1) is never
 * written. ty_kv_pool_seq_reserve gives a sequence that must write into a
 * shared block a private copy and reports (source, destination) pairs that
 * the caller copies on the device before the step writes. Prompt sharing
 * never needs it (shared blocks are full and below the first computed
 * position); ty_kv_pool_seq_fork (n > 1 samples of one prompt) does.
 *
 * Ownership: the pool owns its tables' storage through ty_kv_seq_t, which
 * the caller embeds and passes back; end every sequence before destroying
 * the pool. Threads: not thread-safe; the engine's thread drives it.
 * Errors: RESOURCE_EXHAUSTED when there are not enough blocks (nothing is
 * taken: every call is all-or-nothing), INVALID_ARGUMENT for bad sizes. */
#ifndef TY_MODELS_KV_POOL_H_
#define TY_MODELS_KV_POOL_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ty_kv_pool_options_t {
  int64_t blocks;      /* >= 1 */
  int64_t block_size;  /* tokens per block, >= 1 (16 is usual) */
  bool prefix_sharing; /* register full blocks for reuse (default on in the engine) */
} ty_kv_pool_options_t;

typedef struct ty_kv_pool_t ty_kv_pool_t;

/* A sequence's block table: blocks[i] holds positions [i * block_size,
 * (i + 1) * block_size). Zero-initialize before ty_kv_pool_seq_begin. */
typedef struct ty_kv_seq_t {
  int32_t *blocks;
  int64_t count;    /* blocks in the table */
  int64_t capacity; /* allocated entries of `blocks` */
  int64_t tokens;   /* positions [0, tokens) hold computed keys and values */
  int64_t registered; /* leading blocks whose chain the prefix cache holds
                         (this sequence's block, or an equal one: chain_block) */
  uint64_t chain;     /* the prefix hash up to the end of block `registered` - 1 */
  /* The registered block that ends that chain (-1 for none) and its
   * registration count: a block registers under its parent's identity, not
   * only the parent's hash, so a hash collision cannot join two prompts'
   * chains. It is this sequence's own block unless an equal block was
   * already registered when this one completed (then that one, and this
   * sequence's copy stays unregistered). Set by the pool. */
  int32_t chain_block;
  uint64_t chain_gen;
} ty_kv_seq_t;

typedef struct ty_kv_copy_t {
  int32_t from, to; /* copy block `from` into block `to` before writing */
} ty_kv_copy_t;

typedef struct ty_kv_pool_stats_t {
  int64_t blocks;       /* the pool's size */
  int64_t block_size;
  int64_t free;         /* available now: never used or released, plus cached */
  int64_t cached;       /* of which hold a registered prefix nobody uses */
  int64_t in_use;       /* in at least one table */
  int64_t shared;       /* of which in more than one table */
  uint64_t prefix_hits; /* prompt tokens taken from the prefix cache */
  uint64_t evictions;   /* cached blocks reused for new data */
  uint64_t copies;      /* copy-on-write copies handed out */
} ty_kv_pool_stats_t;

ty_status_t ty_kv_pool_create(const ty_kv_pool_options_t *options, ty_kv_pool_t **out_pool);
void ty_kv_pool_destroy(ty_kv_pool_t *pool);

/* Blocks needed to hold `tokens` positions. */
int64_t ty_kv_pool_blocks_for(const ty_kv_pool_t *pool, int64_t tokens);

/* Starts `seq` (zeroed) for a prompt: attaches the longest registered prefix
 * of whole blocks, leaving at least one prompt token to compute, and sets
 * seq->tokens (and *out_cached) to the positions it covers (a multiple of
 * the block size, < prompt_len). Takes no new block. */
ty_status_t ty_kv_pool_seq_begin(ty_kv_pool_t *pool, const int64_t *prompt, int64_t prompt_len,
                                 ty_kv_seq_t *seq, int64_t *out_cached);

/* Takes more registered blocks along the sequence's chain: a sequence
 * begun before another computed their common prefix catches up with it
 * (`tokens`: the sequence's token list from position 0, `len` of them; at
 * least one is left to compute, as in begin). Only when every block it
 * holds is computed and registered; otherwise, or without prefix sharing,
 * it takes nothing. *out_more (may be NULL): the positions gained.
 * RESOURCE_EXHAUSTED only if the table's memory cannot grow. */
ty_status_t ty_kv_pool_seq_extend(ty_kv_pool_t *pool, ty_kv_seq_t *seq, const int64_t *tokens,
                                  int64_t len, int64_t *out_more);

/* Makes the table cover positions [0, upto) and every block that positions
 * [seq->tokens, upto) fall in writable by this sequence alone: takes free
 * (or evicts cached) blocks, and for a shared block to be written takes a
 * private copy, appending the copy to `copies` (room for `copy_room`
 * entries, *out_copies set; may be NULL when the caller never forks).
 * RESOURCE_EXHAUSTED (naming the blocks needed and available) when there
 * are not enough blocks: then nothing changed. */
ty_status_t ty_kv_pool_seq_reserve(ty_kv_pool_t *pool, ty_kv_seq_t *seq, int64_t upto,
                                   ty_kv_copy_t *copies, int64_t copy_room, int64_t *out_copies);

/* Blocks ty_kv_pool_seq_reserve(seq, upto) would take (copies included). */
int64_t ty_kv_pool_seq_blocks_needed(const ty_kv_pool_t *pool, const ty_kv_seq_t *seq,
                                     int64_t upto);

/* Records that positions [seq->tokens, upto) now hold computed keys and
 * values for tokens[seq->tokens .. upto) (`tokens` holds the sequence's
 * whole token list from position 0) and registers every block this
 * completes in the prefix cache (with prefix_sharing; a block equal to one
 * already registered under the same parent stays private, and the chain
 * goes on through the registered one). `upto` past the reserved table is
 * taken as the table's end. */
void ty_kv_pool_seq_commit(ty_kv_pool_t *pool, ty_kv_seq_t *seq, const int64_t *tokens,
                           int64_t upto);

/* Gives back the table's blocks past the one holding position upto - 1
 * (never a block with computed positions: upto is raised to seq->tokens):
 * the blocks a step reserved for tokens it then rejected (speculative
 * drafts). Last block first, as in ty_kv_pool_seq_end. */
void ty_kv_pool_seq_trim(ty_kv_pool_t *pool, ty_kv_seq_t *seq, int64_t upto);

/* `child` (zeroed) shares every block of `parent` (refs + 1): the two then
 * diverge through copy-on-write. RESOURCE_EXHAUSTED only if the table's
 * memory cannot be allocated. */
ty_status_t ty_kv_pool_seq_fork(ty_kv_pool_t *pool, const ty_kv_seq_t *parent, ty_kv_seq_t *child);

/* Releases the sequence's blocks (finished, cancelled or preempted) and
 * zeroes *seq; registered blocks nobody else holds become cached. */
void ty_kv_pool_seq_end(ty_kv_pool_t *pool, ty_kv_seq_t *seq);

ty_kv_pool_stats_t ty_kv_pool_stats(const ty_kv_pool_t *pool);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_KV_POOL_H_ */
