/* Test backends of a plugin author's bring-up, built from this one source
 * against the plugin SDK (never installed):
 *
 *   BRINGUP_REFUSE "op,op,..."  graph_supports refuses these ops ("not
 *                               implemented yet"): a partial backend, for
 *                               `trainyard check`, refusals, the compile
 *                               cache's plugin identity and the fallback;
 *   BRINGUP_BUG_OP "op"         a planted bug in that op's f32 kernel (gelu:
 *                               the cubic coefficient 0.05 instead of
 *                               0.044715), for `trainyard conform --bisect`;
 *   BRINGUP_MPI_COMM            the collectives of ABI 1.4 (1.7's group
 *                               communicators, 1.8's point to point
 *                               with NCCL's blocking semantics), done
 *                               with MPI on
 *                               its host-memory buffers: a device with a
 *                               collective library of its own (as cuda has
 *                               NCCL), for the core's device path of data
 *                               parallel (tests/apps/test_distributed_cli.py);
 *   BRINGUP_ABI_MINOR n         declares ABI 1.n (a plugin built before
 *                               1.6's process groups, for the host's
 *                               refusal of group collectives; with
 *                               BRINGUP_MPI_COMM and n = 7, a device
 *                               without 1.8's point to point, whose
 *                               pipeline runs keep the host path).
 *
 * Every other node runs the SDK's reference kernels on host memory, so apart
 * from what is planted the backend is correct. The version string is the same
 * in every build, as an author's is while writing kernels. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <trainyard/abi_graph.h>
#include <trainyard/backend_abi.h>
#include <trainyard/host_buffers.h>
#include <trainyard/host_executor.h>
#include <trainyard/plugin_status.h>

#ifndef BRINGUP_NAME
#error "BRINGUP_NAME (the name in the file name) must be defined"
#endif
#ifndef BRINGUP_REFUSE
#define BRINGUP_REFUSE ""
#endif
#ifndef BRINGUP_BUG_OP
#define BRINGUP_BUG_OP ""
#endif
#ifndef BRINGUP_ABI_MINOR
#define BRINGUP_ABI_MINOR TY_ABI_MINOR
#endif

struct ty_abi_backend_s {
  int unused;
};
struct ty_abi_device_s {
  int unused;
};
struct ty_abi_executable_s {
  ty_host_executor_t *executor;
};

/* Whether `op` is an element of the comma-separated `list`. */
static int bringup_listed(const char *list, const char *op) {
  size_t n = strlen(op);
  for (const char *p = list; *p;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, op, n) == 0) return 1;
    p += len + (comma ? 1 : 0);
  }
  return 0;
}

/* The planted bug: gelu with 0.05 where the tanh form has 0.044715. */
static ty_abi_status_t bringup_buggy_gelu(const ty_host_node_ctx_t *ctx) {
  const float *x = ctx->data[ctx->node->inputs[0]];
  float *y = ctx->data[ctx->node->outputs[0]];
  int64_t n = ty_desc_value_elements(&ctx->graph->values[ctx->node->outputs[0]]);
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.05f * v * v * v)));
  }
  return NULL;
}

static ty_host_kernel_fn_t bringup_finder(void *user, const ty_abi_graph_t *graph, uint32_t n,
                                          ty_abi_status_t *out_error) {
  (void)user;
  (void)out_error;
  const ty_abi_node_t *node = &graph->nodes[n];
  if (strcmp(node->op, BRINGUP_BUG_OP) == 0 && strcmp(node->op, "gelu") == 0 &&
      graph->values[node->outputs[0]].dtype == TY_DTYPE_F32) {
    return bringup_buggy_gelu;
  }
  return NULL; /* the reference kernel */
}

static const uint32_t bringup_dtypes =
    TY_DTYPE_BIT(TY_DTYPE_F32) | TY_DTYPE_BIT(TY_DTYPE_BF16) | TY_DTYPE_BIT(TY_DTYPE_F16) |
    TY_DTYPE_BIT(TY_DTYPE_F64) | TY_DTYPE_BIT(TY_DTYPE_I32) | TY_DTYPE_BIT(TY_DTYPE_I64) |
    TY_DTYPE_BIT(TY_DTYPE_U8);

static ty_abi_status_t bringup_graph_supports(ty_abi_device_t *device, const ty_abi_graph_t *graph,
                                              ty_abi_node_support_t *out_support) {
  (void)device;
  ty_abi_status_t s = ty_host_supports(graph, bringup_dtypes, out_support);
  for (uint32_t n = 0; n < graph->node_count && !s; ++n) {
    if (!bringup_listed(BRINGUP_REFUSE, graph->nodes[n].op)) continue;
    out_support[n].supported = 0;
    snprintf(out_support[n].reason, sizeof(out_support[n].reason),
             "%s: %s is not implemented yet", BRINGUP_NAME, graph->nodes[n].op);
  }
  return s;
}

static ty_abi_status_t bringup_graph_compile(ty_abi_device_t *device,
                                             const ty_abi_compile_args_t *args,
                                             ty_abi_executable_t **out) {
  (void)device;
  *out = NULL;
  ty_abi_executable_t *e = calloc(1, sizeof(*e));
  if (!e) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", BRINGUP_NAME);
  ty_host_executor_options_t options;
  const ty_abi_option_t *other = NULL; /* an author's bring-up takes any option */
  ty_abi_status_t s = ty_host_executor_read_options(args, BRINGUP_NAME, &options, &other);
  if (!s) {
    s = ty_host_executor_create_opts(args->graph, BRINGUP_NAME, bringup_finder, NULL, &options,
                                     &e->executor);
  }
  if (s) {
    free(e);
    return s;
  }
  *out = e;
  return NULL;
}

static void bringup_executable_destroy(ty_abi_executable_t *e) {
  if (!e) return;
  ty_host_executor_destroy(e->executor);
  free(e);
}

static ty_abi_status_t bringup_execute(ty_abi_executable_t *e, const ty_abi_execute_args_t *args) {
  return ty_host_executor_run(e->executor, args, ty_host_buffer_view, 1);
}

static ty_abi_status_t bringup_backend_create(const ty_abi_backend_create_args_t *args,
                                              ty_abi_backend_t **out) {
  ty_plugin_status_init(args->host);
  *out = calloc(1, sizeof(**out));
  return *out ? NULL : ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

static void bringup_backend_destroy(ty_abi_backend_t *b) { free(b); }

static ty_abi_status_t bringup_device_count(ty_abi_backend_t *b, uint32_t *out) {
  (void)b;
  *out = 1;
  return NULL;
}

static ty_abi_status_t bringup_device_info(ty_abi_backend_t *b, uint32_t index,
                                           ty_abi_device_info_t *info) {
  (void)b;
  (void)index;
  snprintf(info->name, sizeof(info->name), "%s test device (host memory)", BRINGUP_NAME);
  info->kind = TY_DEVICE_KIND_OTHER;
  info->compute_units = 1;
  info->memory_bytes = ty_host_memory_bytes();
  info->dtype_mask = bringup_dtypes;
  info->emulated = 1;
  return NULL;
}

static ty_abi_status_t bringup_device_open(ty_abi_backend_t *b, const ty_abi_device_open_args_t *args,
                                           ty_abi_device_t **out) {
  (void)b;
  *out = NULL;
  if (args->option_count) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: unknown device option '%s'",
                           BRINGUP_NAME, args->options[0].key);
  }
  *out = calloc(1, sizeof(**out));
  return *out ? NULL : ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
}

static void bringup_device_close(ty_abi_device_t *d) { free(d); }

#ifdef BRINGUP_MPI_COMM
#include <mpi.h>

/* The communicator is MPI's world, already started by the host's MPI shim
 * (the same libmpi in this process), or under ABI 1.7 a process group's
 * part of it; the id proves the bootstrap: the magic, then the world rank
 * of the rank that made it (the group's rank 0), which picks the group's
 * part (MPI_Comm_split: every world rank creates each group's communicator
 * at the same time, as the host does). */
struct ty_abi_comm_s {
  MPI_Comm comm;
  /* ABI 1.8: the open batch of sends and receives (TY_ABI_COLLECTIVE_MORE),
   * waited for together at the call without the flag, as an NCCL group. */
  MPI_Request *batch;
  uint32_t batch_count, batch_capacity;
};

static const char bringup_comm_magic[] = "bringup-comm-id";

static ty_abi_status_t bringup_comm_unique_id(ty_abi_backend_t *b, ty_abi_comm_id_t *out) {
  (void)b;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  out->size = sizeof(bringup_comm_magic) + sizeof(int);
  memcpy(out->bytes, bringup_comm_magic, sizeof(bringup_comm_magic));
  memcpy(out->bytes + sizeof(bringup_comm_magic), &rank, sizeof(int));
  return NULL;
}

static ty_abi_status_t bringup_comm_create(ty_abi_device_t *d, const ty_abi_comm_create_args_t *a,
                                           ty_abi_comm_t **out) {
  (void)d;
  *out = NULL;
  int up = 0, rank = -1, size = 0, maker = -1;
  MPI_Initialized(&up);
  if (!up) return ty_plugin_error(TY_CODE_UNAVAILABLE, "%s: MPI is not running", BRINGUP_NAME);
  const char *group = TY_ABI_HAS_FIELD(a, ty_abi_comm_create_args_t, group) && a->group
                          ? a->group
                          : "world";
  if (a->id->size == sizeof(bringup_comm_magic) + sizeof(int) &&
      memcmp(a->id->bytes, bringup_comm_magic, sizeof(bringup_comm_magic)) == 0) {
    memcpy(&maker, a->id->bytes + sizeof(bringup_comm_magic), sizeof(int));
  }
  MPI_Comm comm = MPI_COMM_NULL;
  if (maker < 0) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: comm_create of group %s got an id of "
                           "%u bytes that comm_unique_id did not make", BRINGUP_NAME, group,
                           a->id->size);
  }
  int split = strcmp(group, "world") == 0
                  ? MPI_Comm_dup(MPI_COMM_WORLD, &comm)
                  : MPI_Comm_split(MPI_COMM_WORLD, maker, (int)a->rank, &comm);
  if (split != MPI_SUCCESS) {
    return ty_plugin_error(TY_CODE_UNAVAILABLE, "%s: MPI_Comm_split/dup failed", BRINGUP_NAME);
  }
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if ((int)a->rank != rank || (int)a->size != size) {
    MPI_Comm_free(&comm);
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: comm_create of group %s got rank %u "
                           "of %u; the ranks holding the id of world rank %d make rank %d of "
                           "%d", BRINGUP_NAME, group, a->rank, a->size, maker, rank, size);
  }
  ty_abi_comm_t *c = calloc(1, sizeof(*c));
  if (!c) {
    MPI_Comm_free(&comm);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  c->comm = comm;
  *out = c;
  return NULL;
}

static void bringup_comm_destroy(ty_abi_comm_t *c) {
  if (!c) return;
  /* a batch an error cut short: its peers are gone, nothing to wait for */
  for (uint32_t i = 0; i < c->batch_count; ++i) MPI_Request_free(&c->batch[i]);
  free(c->batch);
  MPI_Comm_free(&c->comm);
  free(c);
}

/* A collective inside an open batch of sends and receives: NCCL would run
 * them together; MPI cannot, and the core never asks. */
static ty_abi_status_t bringup_no_open_batch(const ty_abi_comm_t *c, const char *what) {
  return c->batch_count ? ty_plugin_error(TY_CODE_UNIMPLEMENTED, "%s: %s inside a batch of "
                                          "sends and receives", BRINGUP_NAME, what)
                        : NULL;
}

static ty_abi_status_t bringup_all_reduce(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  ty_abi_status_t st = bringup_no_open_batch(c, "an all-reduce");
  if (st) return st;
  if (a->dtype != TY_DTYPE_F32 || a->op != TY_ABI_REDUCE_SUM || a->send != a->recv ||
      a->send_offset != a->recv_offset) {
    return ty_plugin_error(TY_CODE_UNIMPLEMENTED, "%s: all-reduce of f32 sums in place only",
                           BRINGUP_NAME);
  }
  unsigned char *data = NULL;
  uint64_t size = 0;
  ty_host_buffer_view(a->recv, &data, &size);
  if (MPI_Allreduce(MPI_IN_PLACE, data + a->recv_offset, (int)a->count, MPI_FLOAT, MPI_SUM,
                    c->comm) != MPI_SUCCESS) {
    return ty_plugin_error(TY_CODE_UNAVAILABLE, "%s: MPI_Allreduce failed", BRINGUP_NAME);
  }
  return NULL;
}

/* In place, bytes as they are (any dtype): ZeRO-1's parameter all-gather. */
static ty_abi_status_t bringup_broadcast(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  ty_abi_status_t st = bringup_no_open_batch(c, "a broadcast");
  if (st) return st;
  if (a->send != a->recv || a->send_offset != a->recv_offset) {
    return ty_plugin_error(TY_CODE_UNIMPLEMENTED, "%s: broadcast in place only", BRINGUP_NAME);
  }
  unsigned char *data = NULL;
  uint64_t size = 0;
  ty_host_buffer_view(a->recv, &data, &size);
  uint64_t bytes = a->count * ty_desc_dtype_size(a->dtype);
  if (bytes > (uint64_t)INT_MAX ||
      MPI_Bcast(data + a->recv_offset, (int)bytes, MPI_BYTE, (int)a->root, c->comm) !=
          MPI_SUCCESS) {
    return ty_plugin_error(TY_CODE_UNAVAILABLE, "%s: MPI_Bcast failed", BRINGUP_NAME);
  }
  return NULL;
}

/* ---- ABI 1.8 point to point, with NCCL's blocking semantics ----
 * An unbatched send is a synchronous send (MPI_Issend: complete only once
 * the peer's receive matched it), as an ncclSend outside a group holds its
 * stream until the peer's ncclRecv runs; an unbatched receive waits for its
 * send. A batch (TY_ABI_COLLECTIVE_MORE) posts each op at once and waits
 * for all of them at the op without the flag, as ncclGroupEnd launches a
 * group whose ops progress together. One tag: between two ranks the n-th
 * send matches the n-th receive, as in NCCL. So a schedule that would
 * deadlock on NCCL deadlocks here too, and is reported after
 * TRAINYARD_COMMFAKE_TIMEOUT seconds (default 60) instead of hanging. */
#include <sched.h>
#include <time.h>

#if BRINGUP_ABI_MINOR >= 8
static double bringup_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Waits for `n` requests, polling (MPI progresses inside its calls) until
 * the timeout; DEADLINE_EXCEEDED naming `what` then. */
static ty_abi_status_t bringup_wait(MPI_Request *requests, int n, const char *what) {
  const char *env = getenv("TRAINYARD_COMMFAKE_TIMEOUT");
  const double limit = env && atof(env) > 0 ? atof(env) : 60.0, start = bringup_now();
  for (;;) {
    int done = 0;
    if (MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
      return ty_plugin_error(TY_CODE_UNAVAILABLE, "%s: MPI failed in %s", BRINGUP_NAME, what);
    }
    if (done) return NULL;
    if (bringup_now() - start > limit) {
      /* the requests stay posted: the run ends on this error */
      return ty_plugin_error(TY_CODE_DEADLINE_EXCEEDED,
                             "%s: %s did not complete in %g s: its peer never posted the "
                             "matching op (a deadlock under NCCL's blocking semantics; "
                             "TRAINYARD_COMMFAKE_TIMEOUT sets the wait)",
                             BRINGUP_NAME, what, limit);
    }
    sched_yield();
  }
}

static ty_abi_status_t bringup_p2p(ty_abi_comm_t *c, const ty_abi_collective_args_t *a,
                                   bool send) {
  unsigned char *data = NULL;
  uint64_t size = 0;
  ty_host_buffer_view(send ? a->send : a->recv, &data, &size);
  data += send ? a->send_offset : a->recv_offset;
  const uint64_t bytes = a->count * ty_desc_dtype_size(a->dtype);
  int me = 0, ranks = 0;
  MPI_Comm_rank(c->comm, &me);
  MPI_Comm_size(c->comm, &ranks);
  const bool more = TY_ABI_HAS_FIELD(a, ty_abi_collective_args_t, flags) &&
                    (a->flags & TY_ABI_COLLECTIVE_MORE);
  const bool batched = more || c->batch_count > 0;
  char what[128];
  snprintf(what, sizeof(what), "the %s%s of %llu bytes %s rank %u", batched ? "batch ending in " : "",
           send ? "send" : "receive", (unsigned long long)bytes, send ? "to" : "from", a->root);
  if (a->root >= (uint32_t)ranks || (int)a->root == me || bytes == 0 || bytes > INT_MAX) {
    return ty_plugin_error(TY_CODE_INVALID_ARGUMENT, "%s: %s: peer %u of %d ranks (this is %d), "
                           "%llu bytes", BRINGUP_NAME, what, a->root, ranks, me,
                           (unsigned long long)bytes);
  }
  if (c->batch_count == c->batch_capacity) {
    uint32_t cap = c->batch_capacity ? 2 * c->batch_capacity : 8;
    MPI_Request *grown = realloc(c->batch, cap * sizeof(*grown));
    if (!grown) return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    c->batch = grown;
    c->batch_capacity = cap;
  }
  MPI_Request *r = &c->batch[c->batch_count];
  int rc = send ? (batched ? MPI_Isend : MPI_Issend)(data, (int)bytes, MPI_BYTE, (int)a->root, 0,
                                                     c->comm, r)
                : MPI_Irecv(data, (int)bytes, MPI_BYTE, (int)a->root, 0, c->comm, r);
  if (rc != MPI_SUCCESS) {
    return ty_plugin_error(TY_CODE_UNAVAILABLE, "%s: MPI failed posting %s", BRINGUP_NAME, what);
  }
  c->batch_count++;
  if (more) return NULL;
  const int n = (int)c->batch_count;
  c->batch_count = 0;
  return bringup_wait(c->batch, n, what);
}

static ty_abi_status_t bringup_send(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return bringup_p2p(c, a, true);
}

static ty_abi_status_t bringup_recv(ty_abi_comm_t *c, const ty_abi_collective_args_t *a) {
  return bringup_p2p(c, a, false);
}
#endif

/* The core uses all-reduce and broadcast so far; the others refuse by name. */
static ty_abi_status_t bringup_collective_unimplemented(ty_abi_comm_t *c,
                                                        const ty_abi_collective_args_t *a) {
  (void)c;
  (void)a;
  return ty_plugin_error(TY_CODE_UNIMPLEMENTED, "%s: only all-reduce and broadcast",
                         BRINGUP_NAME);
}
#endif

static const ty_backend_api_t bringup_api = {
    .struct_size = sizeof(ty_backend_api_t),
    .abi_major = TY_ABI_MAJOR,
    .abi_minor = BRINGUP_ABI_MINOR,
    .name = BRINGUP_NAME,
    .version = "0.1.0",
    .backend_create = bringup_backend_create,
    .backend_destroy = bringup_backend_destroy,
    .device_count = bringup_device_count,
    .device_info = bringup_device_info,
    .device_open = bringup_device_open,
    .device_close = bringup_device_close,
    .buffer_alloc = ty_host_buffer_alloc,
    .buffer_free = ty_host_buffer_free,
    .buffer_write = ty_host_buffer_write,
    .buffer_read = ty_host_buffer_read,
    .buffer_copy = ty_host_buffer_copy,
    .graph_supports = bringup_graph_supports,
    .graph_compile = bringup_graph_compile,
    .executable_destroy = bringup_executable_destroy,
    .executable_execute = bringup_execute,
#ifdef BRINGUP_MPI_COMM
    .comm_unique_id = bringup_comm_unique_id,
    .comm_create = bringup_comm_create,
    .comm_destroy = bringup_comm_destroy,
    .comm_all_reduce = bringup_all_reduce,
    .comm_reduce_scatter = bringup_collective_unimplemented,
    .comm_all_gather = bringup_collective_unimplemented,
    .comm_broadcast = bringup_broadcast,
#if BRINGUP_ABI_MINOR >= 8
    .comm_send = bringup_send,
    .comm_recv = bringup_recv,
#endif
#endif
};

TY_BACKEND_EXPORT const ty_backend_api_t *ty_backend_query(uint32_t major, uint32_t minor) {
  (void)minor;
  return major == TY_ABI_MAJOR ? &bringup_api : NULL;
}
