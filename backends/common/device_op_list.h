/* The ops every GPU backend (cuda, opencl) builds, kept once: an X-macro
 * list (as IREE's dynamic_symbol_tables.h) that a backend expands with its
 * own prefix, for its op table and for its builders' prototypes, so "which
 * ops a GPU backend builds" is said here and nowhere else. A backend lists
 * the ops only it builds after this list.
 *
 * Define before including (this header undefines both at its end, and has
 * no include guard, so it can be expanded several times):
 *   TY_DEV_OP(op, builder, accept)       the backend's builder
 *                                        <prefix>_build_<builder>
 *   TY_DEV_CORE_OP(op, function, accept) a builder of the core (device_views.c)
 * `op` is the op's name as an identifier (#op is the string), `accept` the
 * tail of a TY_DESC_ACCEPT_* rule (abi_graph.h). Order does not matter
 * (ty_dev_op_find looks ops up by name). Included with neither macro
 * defined (as the SDK check compiles every header alone), it expands to
 * nothing. */
#ifndef TY_DEV_OP
#define TY_DEV_OP(op, builder, accept)
#endif
#ifndef TY_DEV_CORE_OP
#define TY_DEV_CORE_OP(op, function, accept)
#endif

TY_DEV_OP(embedding, embedding, COMPUTE)
TY_DEV_OP(embedding_backward, embedding_backward, COMPUTE)
TY_DEV_OP(matmul, matmul, COMPUTE)
TY_DEV_OP(add, binary, COMPUTE)
TY_DEV_OP(sub, binary, COMPUTE)
TY_DEV_OP(mul, binary, COMPUTE)
TY_DEV_OP(div, binary, COMPUTE)
TY_DEV_OP(scale, scale, COMPUTE)
TY_DEV_OP(reduce_sum, reduce, COMPUTE)
TY_DEV_OP(reduce_mean, reduce, COMPUTE)
TY_DEV_OP(reduce_sumsq, reduce, COMPUTE)
TY_DEV_OP(layernorm, norm, COMPUTE)
TY_DEV_OP(layernorm_backward, norm_backward, COMPUTE)
TY_DEV_OP(rmsnorm, norm, COMPUTE)
TY_DEV_OP(rmsnorm_backward, norm_backward, COMPUTE)
TY_DEV_OP(gelu, map, COMPUTE)
TY_DEV_OP(gelu_backward, map, COMPUTE)
TY_DEV_OP(silu, map, COMPUTE)
TY_DEV_OP(silu_backward, map, COMPUTE)
TY_DEV_OP(swiglu, map, COMPUTE)
TY_DEV_OP(swiglu_backward, map, COMPUTE)
TY_DEV_OP(softmax, softmax, COMPUTE)
TY_DEV_OP(softmax_backward, softmax, COMPUTE)
TY_DEV_OP(rope, rope, COMPUTE)
TY_DEV_OP(rope_backward, rope, COMPUTE)
TY_DEV_OP(attention, attention, COMPUTE)
TY_DEV_OP(attention_backward, attention, COMPUTE)
TY_DEV_OP(cross_entropy, cross_entropy, COMPUTE)
TY_DEV_OP(cross_entropy_backward, cross_entropy, COMPUTE)
TY_DEV_OP(dropout, dropout, COMPUTE)
TY_DEV_OP(dropout_backward, dropout, COMPUTE)
TY_DEV_OP(cast, cast, CAST)
TY_DEV_OP(adamw_update, adamw, COMPUTE)
TY_DEV_OP(sgd_update, sgd, COMPUTE)
TY_DEV_OP(clip_by_global_norm, clip, COMPUTE)
TY_DEV_OP(kv_cache_write, kv_cache_write, MOVE)
TY_DEV_OP(paged_kv_write, paged_kv_write, MOVE) /* issue 29 */
TY_DEV_OP(paged_attention, paged_attention, COMPUTE)
TY_DEV_OP(sample, sample, COMPUTE) /* issue 29: token selection */
TY_DEV_OP(top_logprobs, top_logprobs, COMPUTE)
TY_DEV_CORE_OP(broadcast_to, ty_dev_build_broadcast_to, MOVE)
TY_DEV_CORE_OP(reshape, ty_dev_build_reshape, MOVE)
TY_DEV_CORE_OP(transpose, ty_dev_build_transpose, MOVE)
TY_DEV_CORE_OP(slice, ty_dev_build_slice, MOVE)
TY_DEV_CORE_OP(slice_backward, ty_dev_build_slice_backward, MOVE)
TY_DEV_CORE_OP(concat, ty_dev_build_concat, MOVE)

#undef TY_DEV_OP
#undef TY_DEV_CORE_OP
