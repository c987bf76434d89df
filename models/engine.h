/* The generation engine: continuous batching of many sequences over one
 * model on one device. It serves `trainyard generate` (one prompt, or a
 * JSONL file of them), `trainyard serve`, `trainyard eval` and the samples
 * `trainyard train` prints.
 *
 * Keys and values live in a paged KV cache (models/kv_pool.h): per layer,
 * one pool of fixed-size blocks on the device ("kv.<layer>.k/v", [blocks,
 * block_size, Hkv, D]) that every sequence draws from through a block
 * table of its own. A sequence holds only the blocks its tokens fill;
 * sequences with a common prompt prefix hold the prefix's full blocks once
 * and skip computing it (prefix sharing; a finished sequence's full blocks
 * stay cached until the pool needs them).
 *
 * Each step packs tokens of any sequences into one graph run: one token of
 * every decoding sequence, then prompt chunks (at most prefill_chunk
 * tokens of one sequence) oldest first up to the prefill budget, or up to
 * the largest bucket while nothing decodes. Graphs exist for buckets of 1,
 * 2, 4, ... tokens up to max_batch + the prefill budget; a step runs the
 * smallest that holds its tokens, padded (padding rows write and see
 * nothing). Every token attends to its own sequence's blocks up to its own
 * position (paged_kv_write and paged_attention, docs/ops.md), and the LM
 * head runs only on the last token of each sequence that completes this
 * step (with speculative decoding, options.speculate, also on each drafted
 * token of a decoding sequence, to verify the drafts). Sampling runs on the device (the sample op, docs/ops.md: only the
 * chosen ids and their log-probabilities come back) when the plugin runs
 * it, else on the host from the logits (models/sampler.h, the same
 * definition); requests with penalties or top log-probabilities always use
 * the host. One random stream per sequence (its seed and a draw counter),
 * so a seed gives the same tokens whatever else shares the batch, on either
 * path.
 *
 * When a decoding sequence needs a block and none is free, the newest
 * sequence gives its blocks back (preemption) and later recomputes its
 * prompt and the tokens it made so far (from its cached prefix blocks when
 * they survived); a new prompt waits for blocks instead of preempting. No
 * sequence ever reads another's blocks: a block is written only by the one
 * sequence holding it, and shared blocks are full and never written.
 *
 * By default greedy decoding gives the same tokens as a batch of one up to
 * the rounding of batched matmuls (a kernel may sum a row differently in a
 * step of 8 tokens than in one of 1). With options.deterministic every
 * session asks its plugin for batch-invariant kernels (docs/plugin-abi.md
 * "Deterministic mode"): a token's bits then depend on its own sequence
 * only, never on the bucket, the padding, the slot, the chunk a prompt
 * token was computed in, or whether its prefix came from the cache. So a
 * sequence's tokens and log-probabilities, greedy or seeded, are bitwise
 * those it gets alone, and its log-probabilities equal `trainyard eval`'s
 * (the same ty_sampler_logprob over bitwise-equal logits).
 *
 * Ownership: the engine owns its graphs, sessions and sequences; destroy it
 * before the device (and before the weights_from session's device). Threads:
 * not thread-safe; one thread drives it (the server's scheduler thread).
 * Errors: statuses naming the model, the device, the option or the request
 * at fault. A failed step leaves the engine usable: the caller decides
 * whether to cancel the sequences. */
#ifndef TY_MODELS_ENGINE_H_
#define TY_MODELS_ENGINE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/runtime/numerics.h"
#include "graph/runtime/session.h"
#include "hal/device.h"
#include "models/checkpoint.h"
#include "models/config.h"
#include "models/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TY_ENGINE_MAX_TOP_LOGPROBS 20
#define TY_ENGINE_MAX_STOP_IDS 8
#define TY_ENGINE_MAX_SPECULATE 16

typedef struct ty_engine_options_t {
  ty_dtype_t dtype;      /* parameters and activations */
  /* matmuls and attention (and so the logits and KV caches):
   * TY_DTYPE_INVALID or == dtype unless mixed precision
   * (ty_llm_options_t.compute_dtype, e.g. bf16 over f32 parameters) */
  ty_dtype_t compute_dtype;
  int64_t max_batch;     /* slots: sequences running at once, >= 1 */
  int64_t context;       /* prompt + new tokens per sequence, <= the model's positions */
  int64_t prefill_chunk; /* prompt tokens of one sequence per step, 1..context */
  /* Prompt tokens a step may prefill while other sequences decode, in whole
   * chunks (at least one): 0 is one chunk per step (running streams wait
   * least); more lets a burst of new requests reach their first tokens in
   * fewer steps. */
  int64_t prefill_budget;
  /* A session on the same device whose STATE values hold the parameters
   * under their Hugging Face names, dtype and shapes (a training step's):
   * the engine shares them without a copy. NULL: ty_engine_load_weights. */
  const ty_session_t *weights_from;
  const char *cache_dir; /* on-disk compile cache, or NULL */
  bool retry_failed;     /* compile again over a cached failure */
  /* The fallback device of a mixed run (ty_session_options_t), with which
   * weights_from was created; NULL: none. */
  ty_device_t *fallback_device;
  /* Every node output of the graphs kept and read back after each run; the
   * first run with a NaN or an infinity in any fails with ABORTED and
   * ty_engine_numerics_finding names the node (`--check-numerics`). */
  bool check_numerics;
  /* `--deterministic`: every session sets ty_session_options_t.deterministic
   * (batch-invariant kernels; a plugin that cannot promise them fails
   * ty_engine_create naming itself). See the header comment. */
  bool deterministic;
  /* The paged KV cache (models/kv_pool.h): tokens per block (0: 16) and
   * blocks in the pool. kv_blocks 0: as many as kv_cache_bytes hold (keys
   * and values of every layer in the compute dtype), or when that is 0
   * too, enough for every slot to reach the whole context (no sequence is
   * ever preempted). */
  int64_t kv_block_size;
  int64_t kv_blocks;
  int64_t kv_cache_bytes;
  /* Turn off prefix sharing (sequences with a common prompt prefix hold
   * its blocks once and skip computing it). */
  bool no_prefix_cache;
  /* Sample on the host from logits read back after every step, even when
   * the device runs the sample op (by default only requests with
   * penalties, top log-probabilities, or log-probabilities under
   * --deterministic do). */
  bool host_sampling;
  /* Speculative decoding by prompt lookup (`--speculate N`), 0..16 (0:
   * off): a decoding sequence whose last 3 (else 2, else 1) tokens occurred
   * earlier in it drafts up to N tokens that followed them, and one step
   * verifies them all: a row of logits for its last token and for each
   * draft, accepted while the token made from a row equals the next draft.
   * Every token is the one the same row and draw give without drafts, so
   * greedy and seeded outputs do not change (bitwise with deterministic);
   * a step makes 1 + accepted tokens for one weight read. Drafts take free
   * KV blocks only (never preempt) and give back what they do not keep.
   * The largest step graph grows by max_batch * N rows. */
  int64_t speculate;
  /* Overlap the host's work with the device's: ty_engine_step takes the
   * run in flight, launches the next step's run on a worker thread of the
   * engine, and only then hands the taken tokens to `emit`, so that the
   * emission and whatever the caller does until its next ty_engine_step
   * (serving them, cancelling, adding) happen while the device computes.
   * The tokens are those of the plain steps (the same runs, in the same
   * order); a sequence cancelled while a run holding it is in flight has
   * that row computed and dropped. Off under check_numerics. The engine's
   * session must then not be used by anyone else between steps (the
   * server's and generate's engines are their own; a training run's
   * samples, which share its weights, leave it off).
   * TRAINYARD_ENGINE_OVERLAP=0 in the environment turns it off. */
  bool overlap;
} ty_engine_options_t;

typedef struct ty_engine_t ty_engine_t;

/* Creates the KV pool and compiles the largest step graph (the others are
 * compiled when a step first needs them). INVALID_ARGUMENT naming the option for a context
 * beyond the model's positions, a batch < 1 or a chunk outside 1..context;
 * the session's errors when the device cannot run the graphs. */
ty_status_t ty_engine_create(ty_device_t *device, const ty_model_config_t *config,
                             const ty_engine_options_t *options, ty_engine_t **out_engine);
void ty_engine_destroy(ty_engine_t *engine);

/* Loads the weights of the model folder `dir` (safetensors) as
 * ty_llm_load_weights_with does (models/checkpoint.h): NaN/Inf weights are
 * refused unless options->allow_nonfinite (options may be NULL: refuse),
 * and counted in *out_report (may be NULL). With allow_nonfinite the
 * engine also samples from logits that are not finite instead of failing
 * the step with DATA_LOSS: the user asked to run such weights. */
ty_status_t ty_engine_load_weights(ty_engine_t *engine, const char *dir,
                                   const ty_llm_load_options_t *options,
                                   ty_llm_load_report_t *out_report);

/* Compiles every step graph and runs each once, so that
 * no request pays for a first run (kernel selection and JIT, first-touch
 * memory): a server calls it before it listens. FAILED_PRECONDITION once
 * sequences were added. */
ty_status_t ty_engine_warm_up(ty_engine_t *engine);

typedef struct ty_engine_request_t {
  const int64_t *prompt;     /* prompt_len ids, copied by ty_engine_add */
  int64_t prompt_len;        /* >= 1 */
  int64_t max_new;           /* >= 1; prompt_len + max_new <= context */
  ty_sampling_t sampling;
  int64_t stop_ids[TY_ENGINE_MAX_STOP_IDS]; /* end after one of these (kept in the output) */
  uint32_t stop_id_count;
  bool logprobs;             /* report each new token's log-probability */
  int32_t top_logprobs;      /* and the N most likely alternatives, 0..20 */
  void *user;                /* handed back with every token */
} ty_engine_request_t;

typedef enum ty_engine_finish_e {
  TY_ENGINE_RUNNING = 0, /* more tokens follow */
  TY_ENGINE_STOP = 1,    /* it made one of stop_ids */
  TY_ENGINE_LENGTH = 2,  /* it made max_new tokens */
} ty_engine_finish_t;

/* One new token of one sequence, handed to the step's callback. The arrays
 * belong to the engine and live until the callback returns. */
typedef struct ty_engine_token_t {
  uint64_t sequence;      /* ty_engine_add's id */
  void *user;
  int64_t id;             /* the token */
  int64_t index;          /* among the sequence's new tokens, from 0 */
  double logprob;         /* with request.logprobs, else 0 */
  int32_t top_count;      /* request.top_logprobs */
  const int64_t *top_ids;
  const double *top_logprobs;
  ty_engine_finish_t finish; /* != RUNNING: the sequence has ended and left its slot */
} ty_engine_token_t;

typedef void (*ty_engine_emit_fn_t)(void *context, const ty_engine_token_t *token);

/* Starts a sequence in the lowest free slot; its tokens come from the next
 * steps. *out_sequence (may be NULL) identifies it for ty_engine_cancel.
 * RESOURCE_EXHAUSTED when every slot is busy (add again after a step);
 * INVALID_ARGUMENT for a prompt id outside the vocabulary (naming it and
 * its position), an empty prompt, max_new < 1, prompt + max_new beyond the
 * context or beyond the whole KV pool (naming the blocks needed and held),
 * or a bad sampling setting. A sequence that fits the pool but not the
 * blocks free now is taken: it waits for blocks inside the engine. */
ty_status_t ty_engine_add(ty_engine_t *engine, const ty_engine_request_t *request,
                          uint64_t *out_sequence);

/* Ends a sequence now and frees its slot (no more tokens come). Unknown or
 * finished ids are ignored, so a late cancel is harmless. */
void ty_engine_cancel(ty_engine_t *engine, uint64_t sequence);

/* One engine step: one packed run of a token of every decoding sequence and
 * prompt chunks; `emit` gets each new token, oldest sequence first, and must not call
 * the engine (cancel after the step). OK with nothing to do. Errors: the
 * device's, and DATA_LOSS when logits hold NaN or infinity (unless the
 * weights were loaded with allow_nonfinite); tokens emitted
 * before the error stand, and the sequences keep their slots (the caller
 * cancels them or steps again). */
ty_status_t ty_engine_step(ty_engine_t *engine, ty_engine_emit_fn_t emit, void *context);

typedef struct ty_engine_stats_t {
  int64_t slots;            /* max_batch */
  int64_t busy;             /* slots holding a sequence */
  int64_t prefilling;       /* of which still reading their prompt */
  uint64_t steps;           /* ty_engine_step calls that ran a graph */
  uint64_t prefill_tokens;  /* prompt tokens processed */
  uint64_t decode_tokens;   /* tokens made by decode steps */
  uint64_t decode_rows;     /* rows of the decode graphs run (padding included) */
  uint64_t decode_runs;     /* decode graph runs */
  double last_step_seconds; /* host wall time of the last step */
  /* Where the steps' wall time went, summed over every step that ran a
   * graph: the whole step, of which the graph run (inputs written, the
   * device's work and the wait for it) and reading its results back; the
   * rest is the host's own work (planning, filling the inputs, taking
   * tokens, emitting them). With options.overlap, run_seconds is the wait
   * for the run in flight (its reads included, read_seconds stays 0): the
   * part of the device's work the host did not cover. */
  double step_seconds;
  double run_seconds;
  double read_seconds;
  bool overlapped; /* options.overlap is in effect (a worker thread runs the graphs) */
  int64_t kv_blocks;        /* the pool's blocks */
  int64_t kv_block_size;    /* tokens per block */
  int64_t kv_free;          /* blocks available (free or holding a cached prefix) */
  int64_t kv_cached;        /* of which hold a cached prefix */
  uint64_t prefix_hits;     /* prompt tokens taken from the prefix cache */
  uint64_t preemptions;     /* sequences that gave their blocks back to recompute later */
  uint64_t draft_tokens;    /* tokens drafted by prompt lookup (options.speculate) */
  uint64_t draft_accepted;  /* of which the model confirmed */
} ty_engine_stats_t;

ty_engine_stats_t ty_engine_stats(const ty_engine_t *engine);

/* The context, the slots and the vocabulary size. */
int64_t ty_engine_context(const ty_engine_t *engine);

/* After a run failed under options.check_numerics: the first node with a
 * non-finite output and (out_node_count, may be NULL) its graph's node
 * count; NULL when no run found one. Owned by the engine. */
const ty_numerics_finding_t *ty_engine_numerics_finding(const ty_engine_t *engine,
                                                        uint32_t *out_node_count);
int64_t ty_engine_free_slots(const ty_engine_t *engine);

#ifdef __cplusplus
}
#endif

#endif /* TY_MODELS_ENGINE_H_ */
