/* The pipeline's device path (pp_internal.h; docs/design-notes.md
 * "Pipeline activations on the device"): activations and their gradients
 * go from a session's output straight to the next stage's device over the
 * "pp" communicator (ABI 1.8 point to point: NCCL on cuda), into a device
 * stash per micro-batch, and into the next session's input by a device
 * copy. Sends and receives follow the plan of pp_schedule.c
 * (TY_PP_P2P_GLOBAL), which cannot deadlock under NCCL's blocking sends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hal/buffer.h"
#include "hal/comm.h"
#include "hal/dtype.h"
#include "pp_internal.h"

typedef struct ty_pp_pending_t {
  ty_pp_message_t msg;
  ty_session_t *source;       /* whose output it is, until moved */
  ty_buffer_t *buffer;        /* the output's buffer, or an outbox */
  uint64_t offset;
  ty_abi_executable_t *executable;
  int outbox;                 /* its outbox, or -1 */
} ty_pp_pending_t;

struct ty_pp_p2p_t {
  ty_comm_t *comm;
  ty_pp_p2p_op_t *plan;       /* this rank's ops, in order */
  size_t plan_count, at;      /* the next op to issue */
  ty_buffer_t **stash;        /* per local chunk: micro x hidden_bytes (NULL: first chunk) */
  ty_buffer_t *grad;          /* one received gradient */
  ty_pp_pending_t *pending;   /* sends computed, not issued */
  size_t pending_count, pending_capacity;
  ty_buffer_t **outbox;       /* copies of outputs a run would overwrite */
  bool *outbox_busy;
  size_t outbox_count;
  size_t hidden_bytes;
};

static double ty_pp_p2p_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Makes every connection the schedule will use, in one batch that is the
 * same on both ends of each: a message's size each way with both ring
 * neighbours (the interleaved schedule wraps from the last stage to the
 * first). NCCL sets up a pair's point-to-point connections lazily, in the
 * batch that first needs them, and fails ("Message truncated") when the
 * two ends' batches ask for different directions, as the plan's first
 * batches do (a stage's sends with a receive, its peer's receive alone):
 * seen on NCCL 2.28, 4 x H100. After this batch no later one connects. */
static ty_status_t ty_pp_p2p_connect(ty_pp_runner_t *t, struct ty_pp_p2p_t *d) {
  ty_buffer_t *into = NULL;
  TY_RETURN_IF_ERROR(ty_buffer_alloc(*t->device, 2 * (uint64_t)d->hidden_bytes, &into));
  const uint32_t next = (uint32_t)((t->par->pp_rank + 1) % t->par->pp);
  const uint32_t prev = (uint32_t)((t->par->pp_rank + t->par->pp - 1) % t->par->pp);
  const uint64_t count = d->hidden_bytes / ty_dtype_size(t->shape->dtype);
  ty_status_t s = ty_comm_send(d->comm, d->grad, 0, count, t->shape->dtype, next, NULL, true);
  if (!s) s = ty_comm_recv(d->comm, into, 0, count, t->shape->dtype, prev, NULL, true);
  if (!s) s = ty_comm_send(d->comm, d->grad, 0, count, t->shape->dtype, prev, NULL, true);
  if (!s)
    s = ty_comm_recv(d->comm, into, d->hidden_bytes, count, t->shape->dtype, next, NULL, false);
  if (!s) s = ty_device_synchronize(*t->device);
  ty_buffer_free(into);
  return s;
}

ty_status_t ty_pp_p2p_open(ty_pp_runner_t *t) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  if (!t->par->pp_comm) return TY_OK;
  struct ty_pp_p2p_t *d = calloc(1, sizeof(*d));
  if (!d) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  p->p2p = d;
  d->comm = t->par->pp_comm;
  d->hidden_bytes = p->chunk[0].hidden_bytes;
  TY_RETURN_IF_ERROR(ty_pp_p2p_plan(p->kind, t->par->pp_rank, t->par->pp, p->v,
                                    (int)t->shape->accum, TY_PP_P2P_GLOBAL, &d->plan,
                                    &d->plan_count));
  const size_t most = 2 * (size_t)p->v * (size_t)t->shape->accum + 1;
  d->stash = calloc((size_t)p->v, sizeof(*d->stash));
  d->pending = calloc(most, sizeof(*d->pending));
  d->outbox = calloc(most, sizeof(*d->outbox));
  d->outbox_busy = calloc(most, sizeof(bool));
  if (!d->stash || !d->pending || !d->outbox || !d->outbox_busy) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  d->pending_capacity = most;
  for (int j = 0; j < p->v; ++j) {
    if (p->chunk[j].first) continue;
    TY_RETURN_IF_ERROR(ty_status_annotate(
        ty_buffer_alloc(*t->device, (uint64_t)t->shape->accum * d->hidden_bytes, &d->stash[j]),
        "the device stash of pipeline chunk %d (%lld micro-batches)", p->chunk[j].global,
        (long long)t->shape->accum));
  }
  TY_RETURN_IF_ERROR(
      ty_status_annotate(ty_buffer_alloc(*t->device, d->hidden_bytes, &d->grad),
                         "the pipeline's device buffer of one received gradient"));
  return ty_status_annotate(ty_pp_p2p_connect(t, d),
                            "pipeline: connecting the stages on the devices' pp communicator");
}

void ty_pp_p2p_close(ty_pp_runner_t *t) {
  struct ty_pp_p2p_t *d = t->par->pipe ? t->par->pipe->p2p : NULL;
  if (!d) return;
  for (int j = 0; d->stash && j < t->par->pipe->v; ++j) ty_buffer_free(d->stash[j]);
  for (size_t i = 0; i < d->outbox_count; ++i) ty_buffer_free(d->outbox[i]);
  ty_buffer_free(d->grad);
  free(d->stash);
  free(d->outbox);
  free(d->outbox_busy);
  free(d->pending);
  free(d->plan);
  free(d);
  t->par->pipe->p2p = NULL;
}

/* Issues the plan's next batch (its ops up to the end of its batch
 * number), with `into` the buffer of its receive (NULL: a batch of sends
 * alone), then waits for it: the wait is idle time. */
static ty_status_t ty_pp_p2p_batch(ty_pp_runner_t *t, ty_buffer_t *into, uint64_t into_offset,
                                   const ty_pp_message_t *want) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  struct ty_pp_p2p_t *d = p->p2p;
  char what[128];
  if (d->at == d->plan_count) {
    if (!want) return TY_OK;
    ty_pp_message_text(want, what, sizeof(what));
    return ty_status_make(TY_CODE_INTERNAL, "pipeline plan: no receive left for %s", what);
  }
  const uint32_t batch = d->plan[d->at].batch;
  size_t end = d->at;
  while (end < d->plan_count && d->plan[end].batch == batch) ++end;
  /* the rank's own work first: what follows is waiting for its peers */
  TY_RETURN_IF_ERROR(ty_device_synchronize(*t->device));
  const double t0 = ty_pp_p2p_now();
  const uint64_t count = d->hidden_bytes / ty_dtype_size(t->shape->dtype);
  ty_status_t s = TY_OK;
  for (size_t i = d->at; i < end && !s; ++i) {
    const ty_pp_p2p_op_t *op = &d->plan[i];
    const bool more = i + 1 < end;
    if (!op->send) {
      if (!want || op->msg.gradient != want->gradient || op->msg.chunk != want->chunk ||
          op->msg.micro != want->micro) {
        ty_pp_message_text(&op->msg, what, sizeof(what));
        s = ty_status_make(TY_CODE_INTERNAL, "pipeline plan: receives %s out of turn", what);
        break;
      }
      s = ty_comm_recv(d->comm, into, into_offset, count, t->shape->dtype, (uint32_t)op->peer, NULL,
                       more);
      p->device_bytes += d->hidden_bytes;
      continue;
    }
    size_t k = 0;
    while (k < d->pending_count && !(d->pending[k].msg.gradient == op->msg.gradient &&
                                     d->pending[k].msg.chunk == op->msg.chunk &&
                                     d->pending[k].msg.micro == op->msg.micro)) {
      ++k;
    }
    if (k == d->pending_count) {
      ty_pp_message_text(&op->msg, what, sizeof(what));
      s = ty_status_make(TY_CODE_INTERNAL, "pipeline plan: sends %s before computing it", what);
      break;
    }
    ty_pp_pending_t *q = &d->pending[k];
    s = ty_comm_send(d->comm, q->buffer, q->offset, count, t->shape->dtype, (uint32_t)op->peer,
                     q->executable, more);
    p->device_bytes += d->hidden_bytes;
    if (q->outbox >= 0) d->outbox_busy[q->outbox] = false; /* reusable after the wait */
    d->pending[k] = d->pending[--d->pending_count];
  }
  /* the batch's end: every op of it done (the sends' outputs free again) */
  if (!s) s = ty_device_synchronize(*t->device);
  p->idle_seconds += ty_pp_p2p_now() - t0;
  d->at = end;
  return s;
}

ty_status_t ty_pp_p2p_recv(ty_pp_runner_t *t, int j, int64_t m, bool backward) {
  struct ty_trainer_pp_t *p = t->par->pipe;
  struct ty_pp_p2p_t *d = p->p2p;
  const ty_pp_action_t x = {.backward = backward, .micro = (int32_t)m, .chunk = j};
  ty_pp_message_t want;
  if (!ty_pp_p2p_message(x, p->chunk[j].global, t->par->pp * p->v, true, &want)) {
    return ty_status_make(TY_CODE_INTERNAL, "pipeline: chunk %d receives nothing",
                          p->chunk[j].global);
  }
  char what[128];
  ty_pp_message_text(&want, what, sizeof(what));
  ty_status_t s = backward ? ty_pp_p2p_batch(t, d->grad, 0, &want)
                           : ty_pp_p2p_batch(t, d->stash[j], (uint64_t)m * d->hidden_bytes,
                                             &want);
  return ty_status_annotate(s, "pipeline: receiving %s on the devices' pp communicator", what);
}

ty_status_t ty_pp_p2p_bind(ty_pp_runner_t *t, int j, int64_t m, bool gradient,
                           ty_session_t *session) {
  struct ty_pp_p2p_t *d = t->par->pipe->p2p;
  return gradient ? ty_session_bind_device(session, "hidden_out.grad", d->grad, 0,
                                           d->hidden_bytes)
                  : ty_session_bind_device(session, "hidden_in", d->stash[j],
                                           (uint64_t)m * d->hidden_bytes, d->hidden_bytes);
}

ty_status_t ty_pp_p2p_send(ty_pp_runner_t *t, int j, int64_t m, bool backward,
                           ty_session_t *session, const char *name) {
  struct ty_pp_p2p_t *d = t->par->pipe->p2p;
  if (d->pending_count == d->pending_capacity) {
    return ty_status_make(TY_CODE_INTERNAL, "pipeline: more sends queued than the schedule has");
  }
  ty_pp_pending_t *q = &d->pending[d->pending_count];
  *q = (ty_pp_pending_t){.msg = {.gradient = backward, .chunk = t->par->pipe->chunk[j].global,
                                 .micro = (int32_t)m},
                         .source = session, .outbox = -1};
  TY_RETURN_IF_ERROR(ty_session_device_tensor(session, name, &q->buffer, &q->offset,
                                              &q->executable));
  d->pending_count++;
  return TY_OK;
}

ty_status_t ty_pp_p2p_protect(ty_pp_runner_t *t, ty_session_t *session) {
  struct ty_pp_p2p_t *d = t->par->pipe->p2p;
  for (size_t k = 0; d && k < d->pending_count; ++k) {
    ty_pp_pending_t *q = &d->pending[k];
    if (q->source != session || q->outbox >= 0) continue;
    size_t o = 0;
    while (o < d->outbox_count && d->outbox_busy[o]) ++o;
    if (o == d->outbox_count) {
      if (o == d->pending_capacity) {
        return ty_status_make(TY_CODE_INTERNAL, "pipeline: more outboxes than sends");
      }
      TY_RETURN_IF_ERROR(ty_status_annotate(
          ty_buffer_alloc(*t->device, d->hidden_bytes, &d->outbox[o]),
          "a device outbox for a pipeline send"));
      d->outbox_count++;
    }
    TY_RETURN_IF_ERROR(ty_buffer_copy(q->buffer, q->offset, d->outbox[o], 0, d->hidden_bytes));
    d->outbox_busy[o] = true;
    q->buffer = d->outbox[o];
    q->offset = 0;
    q->executable = NULL; /* ordered after the copy: all work on the device */
    q->outbox = (int)o;
    q->source = NULL;
  }
  return TY_OK;
}

ty_status_t ty_pp_p2p_flush(ty_pp_runner_t *t) {
  struct ty_pp_p2p_t *d = t->par->pipe->p2p;
  ty_status_t s = ty_pp_p2p_batch(t, NULL, 0, NULL);
  if (!s && (d->at != d->plan_count || d->pending_count)) {
    s = ty_status_make(TY_CODE_INTERNAL, "pipeline plan: %zu ops and %zu sends left at the "
                       "step's end", d->plan_count - d->at, d->pending_count);
  }
  d->at = 0; /* the next step runs the same plan */
  return ty_status_annotate(s, "pipeline: the step's last sends on the devices' pp "
                               "communicator");
}
