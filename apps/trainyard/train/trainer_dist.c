/* Data-parallel training (README "Many devices"): the world, the device of
 * each rank, and the host path of the gradient all-reduce for backends
 * without collectives of their own. Each rank runs the gradient graph on
 * its slice of the global batch into the "<param>.grad_accum" states; the
 * host path reads them, sums them over the ranks (MPI, or the TCP
 * transport of a launch without MPI) and writes them
 * back before the optimizer graph runs. Every rank then applies the same
 * update to the same weights, so the replicas never drift. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#include "distributed/dist.h"
#include "distributed/launch_env.h"
#include "hal/comm.h"
#include "graph/runtime/preflight.h"
#include "hal/dtype.h"
#include "hal/device_uri.h"
#include "hal/file.h"
#include "pipeline/trainer_pp.h"
#include "train_graph.h"
#include "train_plan.h"
#include "trainer.h"

static void ty_trainer_dist_fault_at(const ty_trainer_t *t, long long at);

ty_status_t ty_trainer_dist_open(ty_trainer_t *t) {
  ty_dist_mode_t mode;
  TY_RETURN_IF_ERROR(ty_dist_mode_parse(t->cfg.distributed, &mode));
  char shim_dir[sizeof(t->app->exe_dir) + 32];
  snprintf(shim_dir, sizeof(shim_dir), "%s%s", t->app->exe_dir,
           t->app->exe_dir[0] ? "/../lib/trainyard" : "");
  ty_status_t s = ty_dist_open(mode, shim_dir, t->cfg.dist_timeout, &t->par.dist);
  if (s) {
    char which[64];
    bool launched = ty_dist_launched(which, sizeof(which));
    if (!launched) launched = ty_launch_env_present(environ, which, sizeof(which));
    return ty_status_annotate(s, "%s asks for a distributed run",
                              mode == TY_DIST_MPI   ? "--distributed mpi"
                              : mode == TY_DIST_ENV ? "--distributed env"
                              : launched            ? which
                                                    : "the environment");
  }
  t->par.rank = ty_dist_rank(t->par.dist);
  t->par.world = ty_dist_size(t->par.dist);
  t->cfg.world = t->par.world;
  t->cfg.rank = t->par.rank;
  /* Before any other collective (the layout's groups are split next): ranks
   * started differently would exchange buffers of different sizes. */
  ty_trainer_dist_fault_at(t, 0);
  TY_RETURN_IF_ERROR(ty_trainer_agree(t));
  TY_RETURN_IF_ERROR(ty_trainer_tp_open(t)); /* the layout: dp = world without --tp */
  if (t->cfg.zero && t->par.world == 1) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "--zero %lld shards the optimizer state over the ranks of a "
                          "distributed run, and this run is one process: start it with mpirun "
                          "-np N (or drop --zero)",
                          (long long)t->cfg.zero);
  }
  if (t->cfg.zero && ty_trainer_zero_shares(t) == 1 && t->cfg.pp <= 1) {
    /* Under --tp the shares are the replicas' (ty_trainer_dist_owners),
     * under --cp every cp rank's too; --pp checks its own layout
     * (ty_trainer_pp_layout). */
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "--zero %lld shards the optimizer state over the data-parallel "
                          "replicas, and --tp %d on %d ranks makes one replica (dp 1): start it "
                          "with mpirun -np %d (2 replicas of tp %d) or more, or drop --zero",
                          (long long)t->cfg.zero, t->par.tp, t->par.world, 2 * t->par.world,
                          t->par.tp);
  }
  if (t->par.world > 1 && t->cfg.fused_optimizer) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--fused-optimizer updates each parameter inside the backward pass, "
                          "before the gradients of the other %d ranks are summed; it cannot "
                          "run data parallel (drop it, or use --recompute to save memory)",
                          t->par.world - 1);
  }
  return TY_OK;
}

/* A device communicator of process group `name` ("world", "tp", "dp") on
 * a backend with collectives of its own (NCCL on cuda), made as soon as
 * every rank has its device: a backend that cannot make one (no NCCL)
 * stops the run before any graph is built or compiled. The group's rank 0
 * makes the id, which reaches the group's other ranks over the group's
 * broadcast (MPI); every rank calls this for the same groups in the same
 * order, since each creation blocks until its group's ranks have joined. */
static ty_status_t ty_trainer_group_comm_create(ty_trainer_t *t, const char *name,
                                                ty_comm_t **out_comm) {
  ty_dist_group_t *group = NULL;
  TY_RETURN_IF_ERROR(ty_dist_group(t->par.dist, name, &group));
  const int rank = ty_dist_group_rank(group), size = ty_dist_group_size(group);
  char what[96];
  snprintf(what, sizeof(what), "the id of the '%s' group's communicator", name);
  ty_abi_comm_id_t id;
  memset(&id, 0, sizeof(id));
  ty_status_t s = rank == 0 ? ty_comm_unique_id(t->device, &id) : TY_OK;
  s = ty_dist_agree(t->par.dist, s, what);
  if (!s) s = ty_dist_group_broadcast(group, 0, &id, sizeof(id), what);
  if (!s) {
    s = ty_comm_create_group(t->device, &id, (uint32_t)rank, (uint32_t)size, name, out_comm);
  }
  snprintf(what, sizeof(what), "creating the '%s' group's communicator", name);
  return ty_dist_agree(t->par.dist, s, what);
}

/* The device communicators of a tensor-, pipeline- or context-parallel
 * run (ABI 1.7 group communicators): "tp" for the step's tp_copy /
 * tp_reduce ops, "dp" (t->par.comm) for the gradient sum over the replicas
 * (without --pp between the gradient and optimizer graphs, with --pp in
 * each chunk's reduce graph) and ZeRO-1's broadcasts; under --cp "cp"
 * for the attention's gathers and "dp_cp" (t->par.grad_comm) for the
 * gradient sum instead, since every rank of it holds the same weights; and
 * with --pp of a tied model "embed" on the first and the last stage for the
 * sum of the embedding's two copies (pipeline/pp_stage.c). */
static ty_status_t ty_trainer_group_comms(ty_trainer_t *t) {
  if (t->par.tp > 1) TY_RETURN_IF_ERROR(ty_trainer_group_comm_create(t, "tp", &t->par.tp_comm));
  if (t->par.dp > 1) TY_RETURN_IF_ERROR(ty_trainer_group_comm_create(t, "dp", &t->par.comm));
  if (t->par.cp > 1) {
    TY_RETURN_IF_ERROR(ty_trainer_group_comm_create(t, "cp", &t->par.cp_comm));
    TY_RETURN_IF_ERROR(ty_trainer_group_comm_create(t, "dp_cp", &t->par.grad_comm));
  }
  if (t->par.pp > 1 && t->model_config.tie_word_embeddings &&
      (t->par.pp_rank == 0 || t->par.pp_rank == t->par.pp - 1)) {
    TY_RETURN_IF_ERROR(ty_trainer_group_comm_create(t, "embed", &t->par.embed_comm));
  }
  /* the stages' activations on the device (ABI 1.8), unless
   * TRAINYARD_PP_P2P=host keeps them on the host path (to compare) */
  const char *p2p = getenv("TRAINYARD_PP_P2P");
  if (p2p && p2p[0] && strcmp(p2p, "host") != 0 && strcmp(p2p, "device") != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "TRAINYARD_PP_P2P=%s: expected 'host' (activations between pipeline "
                          "stages through host memory) or 'device' (on the devices' "
                          "communicator)", p2p);
  }
  const bool host = p2p && !strcmp(p2p, "host");
  if (t->par.pp > 1 && !host && ty_backend_has_p2p(ty_device_backend(t->device))) {
    TY_RETURN_IF_ERROR(ty_trainer_group_comm_create(t, "pp", &t->par.pp_comm));
  }
  return TY_OK;
}

ty_status_t ty_trainer_dist_device_open(ty_trainer_t *t) {
  const char *fallback = t->cfg.fallback[0] ? t->cfg.fallback : NULL;
  if (t->par.world == 1) {
    return ty_app_device_open_fallback("train", t->registry, t->cfg.backend, fallback,
                                       &t->device, &t->fallback);
  }
  if (fallback) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--fallback %s: a mixed run is for bring-up on one process, not data "
                          "parallel", fallback);
  }
  if (ty_device_uri_has_option(t->cfg.backend, "fallback")) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--backend %s: a mixed run (fallback=) is for bring-up on one "
                          "process, not data parallel",
                          t->cfg.backend);
  }
  ty_status_t s = ty_app_device_open_rank("train", t->registry, t->cfg.backend,
                                          (uint32_t)ty_dist_local_rank(t->par.dist), &t->device);
  if (s) return s;
  /* --deterministic: the host tree (trainer_det.c) sums the gradients on
   * every backend, never a device communicator or an in-graph all_reduce
   * (their order depends on the world size). */
  if (t->cfg.deterministic) {
    if (ty_device_info(t->device)->whole_graphs_only) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--deterministic: --backend %s runs the whole step in one call, and "
                            "the fixed summation tree needs each row's gradients between the "
                            "gradient and the optimizer graph (drop --deterministic)",
                            t->cfg.backend);
    }
    return TY_OK;
  }
  /* A device that runs whole steps only cannot take the split step: its
   * fused step all-reduces the gradients itself, with all_reduce ops it
   * executes through the host's collectives (ABI 1.5). */
  uint32_t major = 0, minor = 0;
  ty_backend_abi_version(ty_device_backend(t->device), &major, &minor);
  if (ty_device_info(t->device)->whole_graphs_only && major == TY_ABI_MAJOR && minor >= 5) {
    if (t->cfg.zero) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--zero %lld: --backend %s runs the whole step in one call, "
                            "all_reduce ops included, so its optimizer state cannot be sharded "
                            "over the ranks (drop --zero)",
                            (long long)t->cfg.zero, t->cfg.backend);
    }
    if (t->par.cp > 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--cp %d: --backend %s runs the whole step in one call, and context "
                            "parallel sums the gradients over dp x cp between the gradient and "
                            "the optimizer graphs (not implemented for whole-step devices yet)",
                            t->par.cp, t->cfg.backend);
    }
    if (t->par.tp > 1) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "--tp %d: --backend %s runs the whole step in one call, and tensor "
                            "parallel needs its step split where the gradients are summed over "
                            "the replicas (not implemented for whole-step devices yet)",
                            t->par.tp, t->cfg.backend);
    }
    t->cfg.world_in_graph = true;
  } else if (ty_backend_has_collectives(ty_device_backend(t->device)) && major == TY_ABI_MAJOR &&
             minor >= 5 && t->cfg.grad_accum <= 1 && t->cfg.pp <= 1 && t->cfg.tp <= 1 &&
             t->cfg.cp <= 1 && !getenv("TRAINYARD_DEBUG_DIST_SPLIT")) {
    /* A device with collectives of its own that runs all_reduce ops (cuda
     * on NCCL): one fused step, the gradients summed inside it on the
     * device's communicator, with no host round trip between backward and
     * the optimizer; under ZeRO-1 the step updates this rank's share and
     * the owners broadcast their parameters after it. Accumulation keeps
     * the split step; TRAINYARD_DEBUG_DIST_SPLIT=1 forces it (to compare
     * the two). */
    t->cfg.world_in_graph = true;
  } else if (t->cfg.artifact[0]) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "--artifact %s: an artifact runs the whole step on one device, and a "
                          "data-parallel run of %d ranks on %s splits the step at the gradient "
                          "all-reduce: run it as one process, or drop --artifact (artifacts "
                          "for several ranks are for whole-step devices: trainyard compile "
                          "--data-parallel N)",
                          t->cfg.artifact, t->par.world, t->cfg.backend);
  }
  const char *p2p = getenv("TRAINYARD_PP_P2P");
  if (t->par.pp > 1 && p2p && !strcmp(p2p, "device") &&
      !ty_backend_has_p2p(ty_device_backend(t->device))) {
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "TRAINYARD_PP_P2P=device: backend '%s' (ABI %u.%u) has no point to "
                          "point on its devices (ABI 1.8 comm_send/comm_recv); unset it to move "
                          "the activations through host memory",
                          ty_backend_name(ty_device_backend(t->device)), major, minor);
  }
  if (!ty_backend_has_collectives(ty_device_backend(t->device))) return TY_OK;
  if (t->par.tp <= 1 && t->par.pp <= 1 && t->par.cp <= 1)
    return ty_trainer_group_comm_create(t, "world", &t->par.comm);
  /* A backend before 1.7 has one communicator, the world's: its tp, pp and
   * cp runs reduce through the host (and it refuses group collectives). */
  if (major == TY_ABI_MAJOR && minor >= 7) return ty_trainer_group_comms(t);
  return TY_OK;
}

ty_status_t ty_trainer_grad_accum(const ty_trainer_t *t, uint32_t i, char *name,
                                  size_t capacity, ty_tensor_desc_t *out_desc) {
  snprintf(name, capacity, "%s.grad_accum", t->graphs.m_train.params[i].name);
  return ty_session_value_desc(t->graphs.s_train, name, out_desc);
}

/* The one walk over the accumulators, in parameter order: with dst, read
 * them into it (packed); otherwise bind each from src, packed, or (zeros)
 * from src's start every time. */
static ty_status_t ty_trainer_grads_io(ty_trainer_t *t, float *dst, const float *src,
                                       bool zeros) {
  size_t offset = 0;
  for (uint32_t i = 0; i < t->graphs.m_train.param_count; ++i) {
    char name[TY_LLM_NAME_MAX + 16];
    ty_tensor_desc_t desc;
    TY_RETURN_IF_ERROR(ty_trainer_grad_accum(t, i, name, sizeof(name), &desc));
    size_t n = (size_t)ty_tensor_desc_element_count(&desc);
    if (dst) {
      TY_RETURN_IF_ERROR(ty_session_read(t->graphs.s_train, name, dst + offset, n * 4));
    } else {
      TY_RETURN_IF_ERROR(ty_session_bind(t->graphs.s_train, name, desc.dtype, desc.rank, desc.dims,
                                         zeros ? src : src + offset, n * 4));
    }
    offset += n;
  }
  return TY_OK;
}

ty_status_t ty_trainer_read_grads(ty_trainer_t *t, float *dst) {
  return ty_trainer_grads_io(t, dst, NULL, false);
}

ty_status_t ty_trainer_write_grads(ty_trainer_t *t, const float *src) {
  return ty_trainer_grads_io(t, NULL, src, false);
}

ty_status_t ty_trainer_zero_grads(ty_trainer_t *t, const float *zeros) {
  return ty_trainer_grads_io(t, NULL, zeros, true);
}

ty_status_t ty_trainer_grad_sizes(const ty_trainer_t *t, const char *user, size_t *out_total,
                                  size_t *out_largest) {
  *out_total = 0;
  if (out_largest) *out_largest = 0;
  for (uint32_t i = 0; i < t->graphs.m_train.param_count; ++i) {
    char name[TY_LLM_NAME_MAX + 16];
    ty_tensor_desc_t desc;
    TY_RETURN_IF_ERROR(ty_trainer_grad_accum(t, i, name, sizeof(name), &desc));
    if (desc.dtype != TY_DTYPE_F32) {
      return ty_status_make(TY_CODE_INTERNAL, "%s is %s; %s sums f32", name,
                            ty_dtype_name(desc.dtype), user);
    }
    size_t n = (size_t)ty_tensor_desc_element_count(&desc);
    *out_total += n;
    if (out_largest && n > *out_largest) *out_largest = n;
  }
  return TY_OK;
}

ty_status_t ty_trainer_dist_comm_open(ty_trainer_t *t) {
  if (t->cfg.deterministic) return ty_trainer_det_banner(t);
  if (t->par.world == 1 || t->par.pp > 1) return TY_OK; /* --pp: its own path (trainer_pp.c) */
  /* Tensor parallel reduces through the host (the step's tp ops, the
   * gradient sum over dp): no device communicator of the world. */
  if (t->par.tp > 1 || t->par.cp > 1) return ty_trainer_tp_print_layout(t);
  ty_backend_t *backend = ty_device_backend(t->device);
  if (t->cfg.world_in_graph && !ty_backend_has_collectives(backend)) {
    if (t->par.rank == 0) {
      fprintf(stderr, "data parallel: %d ranks (%s; --dist-timeout %g s); gradients all-reduced "
                      "inside the fused step by all_reduce ops, which %s runs through the "
                      "host's collectives (ABI 1.5)\n",
              t->par.world, ty_dist_library(t->par.dist), ty_dist_timeout(t->par.dist),
              ty_backend_name(backend));
    }
    return TY_OK;
  }
  if (!ty_backend_has_collectives(backend)) {
    if (t->par.rank == 0) {
      fprintf(stderr, "data parallel: %d ranks (%s; --dist-timeout %g s); gradients all-reduced "
                      "through host memory over %s (%s has no collectives of its own)%s\n",
              t->par.world, ty_dist_library(t->par.dist), ty_dist_timeout(t->par.dist),
              ty_dist_transport(t->par.dist), ty_backend_name(backend),
              ty_trainer_zero2(t) ? ", each by an all_reduce op of the gradient graph as "
                                    "backward completes it (ZeRO-2: kept by its owner alone)"
                                  : "");
    }
    return TY_OK;
  }
  /* the communicator was made with the device (ty_trainer_dist_device_open) */
  if (t->par.rank == 0) {
    fprintf(stderr, "data parallel: %d ranks (%s; --dist-timeout %g s); gradients all-reduced "
                    "on the devices by %s's collectives%s\n",
            t->par.world, ty_dist_library(t->par.dist), ty_dist_timeout(t->par.dist),
            ty_backend_name(backend),
            t->cfg.world_in_graph ? ", as all_reduce ops inside the fused step (ABI 1.5)"
            : ty_trainer_zero2(t)
                ? ", each by an all_reduce op of the gradient graph as backward completes it "
                  "(ZeRO-2: kept by its owner alone)"
                : " between the gradient and optimizer graphs (ABI 1.4)");
  }
  return TY_OK;
}

/* The device path: every accumulator summed in place by the backend's
 * collective, ordered after the gradient graph; the device is synchronized
 * before the optimizer graph (another executable) reads them. */
static ty_status_t ty_trainer_device_reduce(ty_trainer_t *t, ty_comm_t *comm) {
  for (uint32_t i = 0; i < t->graphs.m_train.param_count; ++i) {
    char name[TY_LLM_NAME_MAX + 16];
    ty_tensor_desc_t desc;
    ty_buffer_t *buffer = NULL;
    uint64_t offset = 0;
    ty_abi_executable_t *exec = NULL;
    TY_RETURN_IF_ERROR(ty_trainer_grad_accum(t, i, name, sizeof(name), &desc));
    TY_RETURN_IF_ERROR(ty_session_device_tensor(t->graphs.s_train, name, &buffer, &offset, &exec));
    /* One batch (an NCCL group on cuda): ~150 tensors, most of them small,
     * cost ~5 ms per step on 4 H100s one by one. */
    TY_RETURN_IF_ERROR(ty_comm_all_reduce(comm, buffer, offset,
                                          (uint64_t)ty_tensor_desc_element_count(&desc),
                                          desc.dtype, TY_ABI_REDUCE_SUM, exec,
                                          i + 1 < t->graphs.m_train.param_count));
  }
  return ty_device_synchronize(t->device);
}

void ty_trainer_dist_close(ty_trainer_t *t) {
  ty_trainer_tp_close(t);
  free(t->par.grad_host);
  t->par.grad_host = NULL;
  free(t->par.owner);
  free(t->par.updates);
  t->par.owner = NULL;
  t->par.updates = NULL;
  ty_dist_close(t->par.dist);
  t->par.dist = NULL;
}

/* The gradient accumulators' total f32 element count, once. */
static ty_status_t ty_trainer_grad_layout(ty_trainer_t *t) {
  if (t->par.grad_host) return TY_OK;
  size_t total = 0;
  TY_RETURN_IF_ERROR(ty_trainer_grad_sizes(t, "the host all-reduce", &total, NULL));
  t->par.grad_host = malloc((total ? total : 1) * sizeof(float));
  if (!t->par.grad_host) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                          "out of host memory for the %zu gradients of the all-reduce", total);
  }
  t->par.grad_count = total;
  return TY_OK;
}

ty_status_t ty_trainer_dist_reduce_grads(ty_trainer_t *t) {
  /* one replica (tensor parallel alone: no sum); ZeRO-2: summed in the
   * gradient graph already */
  if ((t->par.dp == 1 && t->par.cp <= 1) || ty_trainer_zero2(t)) return TY_OK;
  /* on the device: over "dp_cp" under --cp, else the "dp" (or world) group */
  if (t->par.grad_comm) return ty_trainer_device_reduce(t, t->par.grad_comm);
  if (t->par.comm && t->par.cp <= 1) return ty_trainer_device_reduce(t, t->par.comm);
  TY_RETURN_IF_ERROR(ty_trainer_grad_layout(t));
  TY_RETURN_IF_ERROR(ty_trainer_read_grads(t, t->par.grad_host));
  char what[96];
  snprintf(what, sizeof(what), "the gradient all-reduce of step %lld",
           (long long)t->progress.step + 1);
  /* Over the ranks that hold the same weights: the dp group (the world
   * without tensor parallel), with context parallel dp x cp (each cp rank's
   * gradient covers its chunks only). */
  ty_dist_group_t *dp = NULL;
  TY_RETURN_IF_ERROR(ty_dist_group(t->par.dist, t->par.cp > 1 ? "dp_cp" : "dp", &dp));
  TY_RETURN_IF_ERROR(ty_dist_group_all_reduce(dp, TY_DIST_REDUCE_SUM, TY_DTYPE_F32,
                                              t->par.grad_host, t->par.grad_count, what));
  return ty_trainer_write_grads(t, t->par.grad_host);
}

ty_status_t ty_trainer_dist_sum(ty_trainer_t *t, double *values, size_t count,
                                const char *what) {
  if (t->par.world == 1) return TY_OK;
  char text[96];
  snprintf(text, sizeof(text), "%s of step %lld", what, (long long)t->progress.step + 1);
  return ty_dist_all_reduce_sum(t->par.dist, TY_DTYPE_F64, values, count, text);
}

static int64_t ty_param_elements(const ty_trainer_t *t, uint32_t i) {
  const ty_graph_value_t *v = ty_graph_value(t->graphs.g_train, t->graphs.m_train.params[i].value);
  return ty_tensor_desc_element_count(&v->desc);
}

int ty_trainer_zero_shares(const ty_trainer_t *t) { return ty_par_zero_shares(&t->par); }

int ty_trainer_zero_index(const ty_trainer_t *t) { return ty_par_zero_share(&t->par); }

const char *ty_trainer_zero_group(const ty_trainer_t *t) {
  return t->par.cp > 1 ? "dp_cp" : t->par.tp > 1 || t->par.pp > 1 ? "dp" : "world";
}

/* The shares are the zero group's (the dp group, the world without --tp;
 * dp_cp under --cp): owner[i] is a share index. The cp ranks of a replica
 * hold the same weights and, after the gradient sum over dp x cp, the same
 * gradients, so each can update a share of its own (Megatron-LM's
 * distributed optimizer shards over data x context parallel likewise):
 * the optimizer state per rank falls by another factor cp, which is what
 * makes a long-context run of a large model fit. Under --tp every rank
 * holds parts of the same shapes (the vocabulary is padded to tp x Vp
 * rows), so the tp ranks of a replica compute the same table: each owned
 * state's parts all sit in one share, whose tp ranks gather them together
 * for a checkpoint (trainer_ckpt.c). */
ty_status_t ty_trainer_dist_owners(ty_trainer_t *t) {
  uint32_t n = t->graphs.m_train.param_count;
  t->par.owner = calloc(n ? n : 1, sizeof(int));
  t->par.updates = calloc(n ? n : 1, sizeof(bool));
  int64_t *elements = calloc(n ? n : 1, sizeof(int64_t));
  ty_status_t s = t->par.owner && t->par.updates && elements
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (uint32_t i = 0; i < n && !s; ++i) elements[i] = ty_param_elements(t, i);
  /* the same shares the fused step's graph was built with (train_graph.c) */
  if (!s) {
    s = ty_train_plan_zero_owners(elements, n, ty_trainer_zero_shares(t), NULL,
                                  ty_trainer_zero_index(t), t->par.owner, t->par.updates);
  }
  free(elements);
  return s;
}

bool ty_trainer_zero2(const ty_trainer_t *t) {
  return t->cfg.zero == 2 && !t->cfg.world_in_graph && t->par.world > 1;
}

ty_status_t ty_trainer_zero2_share(const ty_trainer_t *t, ty_tensor_desc_t *descs, bool *decay,
                                   uint32_t *n, bool **out_split) {
  *out_split = NULL;
  if (!t->par.updates) return ty_status_make(TY_CODE_INTERNAL, "ZeRO-2 before its owners");
  const uint32_t all = *n;
  if (t->par.tp_split) {
    *out_split = malloc((all ? all : 1) * sizeof(bool));
    if (!*out_split) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    memcpy(*out_split, t->par.tp_split, all * sizeof(bool));
  }
  const uint32_t k = ty_train_graph_keep_params(t->par.updates, all, descs, decay, *out_split);
  if (k == 0) {
    /* ty_train_plan_zero_owners gives every share a parameter while there
     * are as many parameters as shares */
    free(*out_split);
    *out_split = NULL;
    return ty_status_make(TY_CODE_FAILED_PRECONDITION,
                          "--zero 2: %d shares of a model with %u parameters leave share %d "
                          "none; use fewer ranks or --zero 1",
                          ty_trainer_zero_shares(t), all, ty_trainer_zero_index(t));
  }
  *n = k;
  return TY_OK;
}

/* The device path of the parameter all-gather: each parameter broadcast
 * in place from its owner by the backend's collective, then the device
 * synchronized (the next step's graphs are other executables). t->par.comm is
 * the dp group's under --tp and --pp, whose ranks are the owners' dp
 * indices. */
static ty_status_t ty_trainer_device_gather(ty_trainer_t *t, ty_comm_t *comm,
                                            ty_session_t *session, const ty_graph_t *graph,
                                            const ty_llm_t *model, const int *owner) {
  for (uint32_t i = 0; i < model->param_count; ++i) {
    const ty_tensor_desc_t *d = &ty_graph_value(graph, model->params[i].value)->desc;
    ty_buffer_t *buffer = NULL;
    uint64_t offset = 0;
    ty_abi_executable_t *exec = NULL;
    TY_RETURN_IF_ERROR(
        ty_session_device_tensor(session, model->params[i].name, &buffer, &offset, &exec));
    TY_RETURN_IF_ERROR(ty_comm_broadcast(comm, buffer, offset,
                                         (uint64_t)ty_tensor_desc_element_count(d), d->dtype,
                                         (uint32_t)owner[i], exec, i + 1 < model->param_count));
  }
  return ty_device_synchronize(t->device);
}

ty_status_t ty_trainer_zero_broadcast(ty_trainer_t *t, ty_session_t *session,
                                      const ty_graph_t *graph, const ty_llm_t *model,
                                      const int *owner) {
  /* the zero group's device communicator: dp_cp's under --cp, else dp's */
  ty_comm_t *comm = t->par.cp > 1 ? t->par.grad_comm : t->par.comm;
  if (comm) return ty_trainer_device_gather(t, comm, session, graph, model, owner);
  /* One broadcast per share of the parameters (under --tp: the parts) it
   * updated, over the zero group, packed in parameter order; the weights
   * stay in their own dtype. */
  ty_dist_group_t *dp = NULL;
  TY_RETURN_IF_ERROR(ty_dist_group(t->par.dist, ty_trainer_zero_group(t), &dp));
  const int shares = ty_trainer_zero_shares(t), me = ty_trainer_zero_index(t);
  if (ty_dist_group_size(dp) != shares || ty_dist_group_rank(dp) != me) {
    return ty_status_make(TY_CODE_INTERNAL,
                          "ZeRO-1: group %s has %d ranks (this one %d), the shares are %d "
                          "(this rank's %d)",
                          ty_trainer_zero_group(t), ty_dist_group_size(dp),
                          ty_dist_group_rank(dp), shares, me);
  }
  const uint32_t n = model->param_count;
  size_t largest = 0;
  for (int r = 0; r < shares; ++r) {
    size_t bytes = 0;
    for (uint32_t i = 0; i < n; ++i) {
      if (owner[i] != r) continue;
      const ty_tensor_desc_t *d = &ty_graph_value(graph, model->params[i].value)->desc;
      bytes += (size_t)ty_tensor_desc_element_count(d) * ty_dtype_size(d->dtype);
    }
    largest = bytes > largest ? bytes : largest;
  }
  char *buf = malloc(largest ? largest : 1);
  if (!buf) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  ty_status_t s = TY_OK;
  for (int r = 0; r < shares && !s; ++r) {
    size_t offset = 0;
    for (uint32_t i = 0; i < n && !s; ++i) {
      if (owner[i] != r) continue;
      const ty_tensor_desc_t *d = &ty_graph_value(graph, model->params[i].value)->desc;
      size_t bytes = (size_t)ty_tensor_desc_element_count(d) * ty_dtype_size(d->dtype);
      if (r == me)
        s = ty_session_read(session, model->params[i].name, buf + offset, bytes);
      offset += bytes;
    }
    char what[96];
    snprintf(what, sizeof(what), "the parameter all-gather (%s %d's share) of step %lld",
             t->par.tp > 1 || t->par.pp > 1 || t->par.cp > 1 ? "share" : "rank", r,
             (long long)t->progress.step + 1);
    if (!s) s = ty_dist_group_broadcast(dp, r, buf, offset, what);
    offset = 0;
    for (uint32_t i = 0; i < n && !s; ++i) {
      if (owner[i] != r) continue;
      const ty_tensor_desc_t *d = &ty_graph_value(graph, model->params[i].value)->desc;
      size_t bytes = (size_t)ty_tensor_desc_element_count(d) * ty_dtype_size(d->dtype);
      if (r != me) {
        s = ty_session_bind(session, model->params[i].name, d->dtype, d->rank, d->dims,
                            buf + offset, bytes);
      }
      offset += bytes;
    }
  }
  free(buf);
  return s;
}

ty_status_t ty_trainer_dist_gather_params(ty_trainer_t *t) {
  if (!t->par.owner) return TY_OK;
  return ty_trainer_zero_broadcast(t, t->graphs.s_train, t->graphs.g_train, &t->graphs.m_train,
                                   t->par.owner);
}

/* Test hook: TRAINYARD_DEBUG_DIST_FAULT=RANK:STEP:MODE makes rank RANK, at
 * the start of step STEP (1-based; 0: at start-up, before the rank
 * agreement), exit (status 3, no MPI goodbye), kill itself (SIGKILL) or
 * hang (sleep forever): the failures --dist-timeout and the launcher must
 * turn into a clear error on the other ranks. */
static void ty_trainer_dist_fault_at(const ty_trainer_t *t, long long at) {
  const char *v = getenv("TRAINYARD_DEBUG_DIST_FAULT");
  if (!v || t->par.world == 1) return;
  int rank = -1;
  long long step = -1;
  char mode[16] = "";
  if (sscanf(v, "%d:%lld:%15s", &rank, &step, mode) != 3) return;
  if (rank != t->par.rank || step != at) return;
  fprintf(stderr, "rank %d: TRAINYARD_DEBUG_DIST_FAULT: %s at step %lld\n", rank, mode, step);
  if (!strcmp(mode, "exit")) _exit(3);
  if (!strcmp(mode, "kill")) raise(SIGKILL);
  if (!strcmp(mode, "hang")) {
    for (;;) pause();
  }
}

void ty_trainer_dist_fault(const ty_trainer_t *t) {
  ty_trainer_dist_fault_at(t, t->progress.step + 1);
}

void ty_trainer_dist_plan(const ty_trainer_t *t, FILE *out) {
  if (t->par.world == 1 || t->par.pp > 1) return;
  char p[32], g[32], o[32], h[32];
  ty_format_bytes(t->graphs.plan->bytes[TY_PLAN_PARAMETERS], p, sizeof(p));
  ty_format_bytes(t->graphs.plan->bytes[TY_PLAN_GRADIENTS], g, sizeof(g));
  ty_format_bytes(t->graphs.plan->bytes[TY_PLAN_OPTIMIZER], o, sizeof(o));
  uint64_t staging = 0;
  for (uint32_t i = 0; i < t->graphs.m_train.param_count; ++i) {
    const ty_tensor_desc_t *d =
        &ty_graph_value(t->graphs.g_train, t->graphs.m_train.params[i].value)->desc;
    staging += (uint64_t)ty_tensor_desc_element_count(d) * 4;
  }
  ty_format_bytes(staging, h, sizeof(h));
  /* --deterministic: the host tree, whatever the backend (trainer_det.c) */
  bool device = ty_backend_has_collectives(ty_device_backend(t->device)) && t->par.tp == 1 &&
                !t->cfg.deterministic;
  /* ZeRO-2 in the split step: the sums are the gradient graph's own ops */
  const bool zero2 = t->par.owner && ty_trainer_zero2(t);
  char zero[48] = "";
  if (t->par.owner) {
    snprintf(zero, sizeof(zero), ", ZeRO-%d%s", zero2 ? 2 : 1,
             t->par.cp > 1 ? " over dp x cp" : t->par.tp > 1 ? " over dp" : "");
  }
  const char *share = !t->par.owner ? "" : t->par.cp > 1 || t->par.tp <= 1 ? " (rank 0's share)"
                                                                           : " (replica 0's share)";
  const char *staged = zero2 ? "none (summed in the gradient graph)"
                       : t->par.tp > 1 && t->par.dp <= 1 && t->par.cp <= 1 ? "none (one replica)"
                       : (t->par.tp > 1 ? t->par.comm != NULL : device) ? "none (on the device)"
                                                                         : h;
  char cp_times[24] = "";
  if (t->par.cp > 1) snprintf(cp_times, sizeof(cp_times), " x cp %d", t->par.cp);
  if (t->par.tp > 1) { /* the plan is of this rank's part of the model */
    fprintf(out,
            "per rank (%d ranks, dp %d x tp %d%s%s; rank 0's part of the split tensors, all of "
            "the replicated ones): parameters %s, gradients %s%s, optimizer state %s%s; host "
            "staging of the gradient all-reduce %s\n",
            t->par.world, t->par.dp, t->par.tp, cp_times, zero, p, g, zero2 ? share : "", o,
            share, staged);
    return;
  }
  char cp_text[48] = "";
  if (t->par.cp > 1) snprintf(cp_text, sizeof(cp_text), " (dp %d x cp %d)", t->par.dp, t->par.cp);
  fprintf(out,
          "per rank (%d ranks, data parallel%s%s): parameters %s, gradients %s%s, optimizer "
          "state %s%s; host staging of the gradient all-reduce %s\n",
          t->par.world, cp_text, t->par.owner ? zero : "; every rank holds all of these", p, g,
          zero2 ? share : "", o, share, staged);
}

ty_status_t ty_trainer_save_all(ty_trainer_t *t, const char *what) {
  ty_status_t s = t->par.pp > 1 ? ty_trainer_pp_gather(&t->pp_runner, true) : TY_OK;
  if (!s && ty_trainer_saves(t)) s = ty_trainer_save(t);
  return t->par.world > 1 ? ty_dist_agree(t->par.dist, s, what) : s;
}
