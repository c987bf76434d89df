/* The emit API (cuda_exec.h) the op builders call while compile walks the
 * graph: operand references, kernel launches and their packed parameters,
 * grids, memsets, copies, all-reduces, matmul commands, and the executable's
 * scratch, aux and address tables. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_executable.h"

/* ---- builder helpers ---- */

int64_t ty_cu_row_stride(const ty_cu_build_t *b, uint32_t value) {
  const ty_abi_value_t *v = &b->g->values[value];
  const int64_t padded = b->exec->row_stride ? b->exec->row_stride[value] : 0;
  return padded ? padded : (v->rank ? v->dims[v->rank - 1] : 1);
}

int64_t ty_cu_zero_rows(const ty_cu_build_t *b, uint32_t value) {
  return b->exec->zero_rows ? b->exec->zero_rows[value] : 0;
}

bool ty_cu_zero_cols(const ty_cu_build_t *b, uint32_t value) {
  return b->exec->zero_cols && b->exec->zero_cols[value];
}

ty_dev_ref_t ty_cu_weight_copy(const ty_cu_build_t *b, uint32_t param) {
  const ty_cu_exec_t *e = b->exec;
  for (uint32_t k = 0; k < e->wcopy_count; ++k) {
    if (e->wcopies[k].param == param) return ty_dev_value(e->wcopies[k].value);
  }
  return ty_dev_none();
}

uint32_t ty_cu_extra_read(const ty_cu_build_t *b) {
  return b->exec->extra_read ? b->exec->extra_read[b->n] : UINT32_MAX;
}

uint32_t ty_cu_sm_count(const ty_cu_build_t *b) {
  return b->device->slot->sm_count > 0 ? (uint32_t)b->device->slot->sm_count : 1u;
}

ty_dev_ref_t ty_cu_ptr_table(ty_cu_build_t *b, const ty_dev_ref_t *refs, uint32_t count) {
  ty_cu_exec_t *e = b->exec;
  ty_dev_ref_t r = {TY_DEV_REF_TABLE, 0, (uint64_t)e->table_count * 8u};
  if (b->status) return r;
  if (e->table_count + count > e->table_cap) {
    uint32_t cap = e->table_cap ? e->table_cap : 256;
    while (cap < e->table_count + count) cap *= 2;
    ty_dev_ref_t *grown = realloc(e->table_refs, (size_t)cap * sizeof(*grown));
    if (!grown) {
      ty_dev_fail(b, TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      return r;
    }
    e->table_refs = grown;
    e->table_cap = cap;
  }
  memcpy(e->table_refs + e->table_count, refs, (size_t)count * sizeof(*refs));
  e->table_count += count;
  return r;
}

void ty_cu_mark_fused(ty_cu_build_t *b, uint32_t node) {
  if (node < b->g->node_count) b->exec->fused[node] = true;
}

static ty_cu_cmd_t *ty_cu_cmd_add(ty_cu_build_t *b, ty_cu_cmd_kind_t kind) {
  ty_cu_exec_t *e = b->exec;
  ty_cu_cmd_t *c = ty_dev_push(b, (void **)&e->cmds, &e->cmd_count, &e->cmd_cap, sizeof(*c));
  if (!c) return NULL;
  c->kind = kind;
  c->node = b->n;
  return c;
}

ty_cu_cmd_t *ty_cu_launch(ty_cu_build_t *b, ty_cu_family_t family, const char *kernel) {
  if (b->status) return NULL;
  CUmodule module = NULL;
  ty_abi_status_t s = ty_cu_module_get(b->device, family, &module);
  if (s) {
    b->status = s;
    return NULL;
  }
  CUfunction f = NULL;
  CUresult r = b->device->api->cuModuleGetFunction(&f, module, kernel);
  if (r != CUDA_SUCCESS) {
    char text[256];
    ty_cu_error_text(b->device->api, r, text, sizeof(text));
    ty_dev_fail(b, TY_CODE_INTERNAL, "kernel %s is not in kernels/%s.cu's module: %s", kernel,
               ty_cu_family_file(family), text);
    return NULL;
  }
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_KERNEL);
  if (!c) return NULL;
  c->function = f;
  c->name = kernel;
  c->block[0] = c->block[1] = c->block[2] = 1;
  c->grid[0] = c->grid[1] = c->grid[2] = 1;
  return c;
}

static void ty_cu_arg_raw(ty_cu_build_t *b, ty_cu_cmd_t *c, const void *v, uint32_t size,
                          uint32_t align) {
  if (!c || b->status) return;
  uint32_t at = (c->param_bytes + align - 1) & ~(align - 1);
  if (at + size > TY_CU_MAX_PARAM_BYTES) {
    ty_dev_fail(b, TY_CODE_INTERNAL, "the parameters of %s exceed %u bytes", c->name,
               TY_CU_MAX_PARAM_BYTES);
    return;
  }
  memcpy(c->params + at, v, size);
  c->param_bytes = at + size;
}

static void ty_cu_arg_ptr(ty_cu_build_t *b, ty_cu_cmd_t *c, ty_dev_ref_t ref) {
  if (c->ptr_count == TY_CU_MAX_PTRS) {
    ty_dev_fail(b, TY_CODE_INTERNAL, "too many pointer parameters for %s (at most %u)", c->name,
               TY_CU_MAX_PTRS);
    return;
  }
  uint32_t at = (c->param_bytes + 7u) & ~7u;
  uint64_t null_ptr = 0;
  ty_cu_arg_raw(b, c, &null_ptr, 8, 8); /* patched at execute */
  if (b->status) return;
  ty_cu_ptrarg_t *p = &c->ptrs[c->ptr_count++];
  p->at = at;
  p->ref = ref;
}

/* The core's arg hook (device_ops.h): each kind at its CUDA ABI size and
 * alignment. */
void ty_cu_arg(ty_cu_build_t *b, void *cmd, const ty_dev_arg_t *a) {
  ty_cu_cmd_t *c = cmd;
  const int32_t i32 = (int32_t)a->i;
  const float f32 = (float)a->f;
  switch (a->kind) {
    case TY_DEV_ARG_REF: ty_cu_arg_ptr(b, c, a->ref); break;
    case TY_DEV_ARG_ERR:
      ty_cu_arg_ptr(b, c, (ty_dev_ref_t){TY_DEV_REF_ERR, 0, 0});
      ty_cu_arg_raw(b, c, &i32, 4, 4);
      break;
    case TY_DEV_ARG_I32:
    case TY_DEV_ARG_U32: ty_cu_arg_raw(b, c, &i32, 4, 4); break;
    case TY_DEV_ARG_I64:
    case TY_DEV_ARG_U64: ty_cu_arg_raw(b, c, &a->i, 8, 8); break;
    case TY_DEV_ARG_F32: ty_cu_arg_raw(b, c, &f32, 4, 4); break;
    case TY_DEV_ARG_F64: ty_cu_arg_raw(b, c, &a->f, 8, 8); break;
    case TY_DEV_ARG_DIMS8: ty_cu_arg_raw(b, c, a->dims8, 64, 8); break;
  }
}

void ty_cu_grid1(ty_cu_build_t *b, ty_cu_cmd_t *c, uint64_t items, uint32_t block) {
  if (!c) return;
  uint64_t blocks = (items + block - 1) / block;
  /* Grid-stride kernels: enough blocks to fill the card several times. */
  uint64_t cap = (uint64_t)ty_cu_sm_count(b) * 32u;
  if (blocks > cap) blocks = cap;
  if (blocks == 0) blocks = 1;
  ty_cu_grid(b, c, (uint32_t)blocks, 1, 1, block, 1, 1, 0);
}

void ty_cu_grid(ty_cu_build_t *b, ty_cu_cmd_t *c, uint32_t gx, uint32_t gy, uint32_t gz,
                uint32_t bx, uint32_t by, uint32_t bz, uint32_t shared_bytes) {
  if (!c || b->status) return;
  if (gy > 65535u || gz > 65535u || bx * by * bz > 1024u || gx == 0 || gy == 0 || gz == 0) {
    ty_dev_fail(b, TY_CODE_INTERNAL, "launch shape of %s out of range: grid %u x %u x %u, block "
               "%u x %u x %u", c->name, gx, gy, gz, bx, by, bz);
    return;
  }
  c->grid[0] = gx;
  c->grid[1] = gy;
  c->grid[2] = gz;
  c->block[0] = bx;
  c->block[1] = by;
  c->block[2] = bz;
  c->shared_bytes = shared_bytes;
  /* Past 48 KiB of static plus dynamic shared memory a kernel must opt in:
   * raised from 40 KiB of dynamic on, leaving room for a kernel's static
   * arrays (paged_attention's are under 5 KiB). */
  if (shared_bytes > 40u * 1024u) {
    if ((int)shared_bytes > b->device->slot->max_shared_optin) {
      ty_dev_fail(b, TY_CODE_INTERNAL, "%s needs %u bytes of shared memory; %s allows %d",
                 c->name, shared_bytes, b->device->label, b->device->slot->max_shared_optin);
      return;
    }
    CUresult r = b->device->api->cuFuncSetAttribute(
        c->function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shared_bytes);
    if (r != CUDA_SUCCESS) {
      char text[256];
      ty_cu_error_text(b->device->api, r, text, sizeof(text));
      ty_dev_fail(b, TY_CODE_INTERNAL, "raising the shared memory of %s to %u bytes: %s",
                 c->name, shared_bytes, text);
    }
  }
}

void ty_cu_fill(ty_cu_build_t *b, ty_dev_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_FILL);
  if (!c) return;
  c->name = "fill";
  c->dst = dst;
  c->size = size;
}

void ty_cu_copy(ty_cu_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t size) {
  if (size == 0) return;
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_COPY);
  if (!c) return;
  c->name = "copy";
  c->src = src;
  c->dst = dst;
  c->size = size;
}

/* A collective command (kind TY_CU_CMD_ALL_REDUCE; `coll` says which). */
static ty_cu_cmd_t *ty_cu_collective(ty_cu_build_t *b, const char *name, ty_dev_ref_t src,
                                     ty_dev_ref_t dst, uint64_t count, ty_dtype_t dtype,
                                     const char *group) {
  if (count == 0) return NULL;
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_ALL_REDUCE);
  if (!c) return NULL;
  c->name = name;
  c->group = group;
  c->src = src;
  c->dst = dst;
  c->size = count;
  c->dtype = dtype;
  return c;
}

void ty_cu_all_reduce(ty_cu_build_t *b, ty_dev_ref_t src, ty_dev_ref_t dst, uint64_t count,
                      ty_dtype_t dtype, uint32_t reduce, const char *group) {
  ty_cu_cmd_t *c = ty_cu_collective(b, "ncclAllReduce", src, dst, count, dtype, group);
  if (c) c->reduce = reduce;
}

void ty_cu_gather(ty_cu_build_t *b, bool gather, ty_dev_ref_t src, ty_dev_ref_t dst,
                  uint64_t count, ty_dtype_t dtype, uint32_t parts, const char *group) {
  ty_cu_cmd_t *c = ty_cu_collective(b, gather ? "ncclAllGather" : "ncclReduceScatter", src,
                                    dst, count, dtype, group);
  if (!c) return;
  c->coll = gather ? TY_CU_COLL_ALL_GATHER : TY_CU_COLL_REDUCE_SCATTER;
  c->parts = parts;
  c->reduce = TY_ABI_REDUCE_SUM;
}

ty_cu_cmd_t *ty_cu_gemm_cmd(ty_cu_build_t *b, const char *name) {
  ty_cu_cmd_t *c = ty_cu_cmd_add(b, TY_CU_CMD_GEMM);
  if (c) c->name = name;
  return c;
}
