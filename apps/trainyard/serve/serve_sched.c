/* The scheduler thread of `trainyard serve` (see serve.h): admission from
 * the bounded queue into engine slots, engine steps, tokens to response
 * bytes, cancellation, timeouts and the drain at shutdown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "serve/serve.h"

double ty_srv_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void ty_srv_request_free(ty_srv_request_t *r) {
  if (!r) return;
  for (size_t i = 0; i < r->choice_count; ++i) {
    ty_text_stream_destroy(r->choices[i].text);
    ty_srv_buf_free(&r->choices[i].content);
    json_decref(r->choices[i].logprobs);
    json_decref(r->choices[i].token_ids);
  }
  free(r->choices);
  for (size_t i = 0; i < r->prompt_count; ++i) free(r->prompts ? r->prompts[i] : NULL);
  free(r->prompts);
  free(r->prompt_lens);
  for (size_t i = 0; i < r->stop_count; ++i) free(r->stop[i]);
  free(r->model);
  ty_srv_buf_free(&r->chunk_head);
  ty_srv_buf_free(&r->out);
  pthread_cond_destroy(&r->changed);
  free(r);
}

void ty_srv_request_release(ty_server_t *s, ty_srv_request_t *r) {
  if (--r->refs > 0) return;
  ty_srv_request_free(r);
  s->live_requests--;
}

bool ty_srv_submit(ty_server_t *s, ty_srv_request_t *r, ty_api_error_t *e) {
  if (s->draining) {
    return ty_api_fail(e, 503, "server_error", "shutting_down", NULL,
                       "the server is shutting down and takes no new requests");
  }
  /* The queue is what waits beyond the slots. */
  if (s->in_flight >= s->slots + s->options.max_queue) {
    return ty_api_fail(e, 429, "rate_limit_error", "queue_full", NULL,
                       "the server's queue is full (%lld requests for %lld slots and "
                       "--max-queue %lld); retry later",
                       (long long)s->in_flight, (long long)s->slots,
                       (long long)s->options.max_queue);
  }
  r->refs++;
  r->state = TY_SRV_QUEUED;
  r->next = NULL;
  if (s->queue_tail) s->queue_tail->next = r;
  else s->queue_head = r;
  s->queue_tail = r;
  s->queued++;
  s->in_flight++;
  pthread_cond_signal(&s->work);
  return true;
}

/* Ends a request that will make no more tokens (lock held): frees its
 * slots, writes `e` as its response unless the client is gone, and drops
 * the scheduler's reference. The caller unlinks it from the queue or the
 * running list. */
static void ty_srv_end(ty_server_t *s, ty_srv_request_t *r, const ty_api_error_t *e) {
  for (size_t i = 0; i < r->choice_count; ++i) {
    ty_srv_choice_t *c = &r->choices[i];
    if (c->live) ty_engine_cancel(s->engine, c->sequence);
    c->live = false;
    c->done = true;
  }
  if (r->state != TY_SRV_FINISHED) {
    if (e && !r->cancel) {
      r->out.size = 0;
      bool ok = r->stream ? ty_srv_api_stream_error(e, &r->out) : ty_srv_api_error_json(e, &r->out);
      r->status = ok ? e->status : 500;
    }
    r->state = TY_SRV_FINISHED;
    s->in_flight--;
    pthread_cond_broadcast(&r->changed);
  }
  ty_srv_request_release(s, r);
}

/* Starts as many of the request's choices as there are free slots. false
 * when the engine refuses one (checked before queueing: a defect). */
static bool ty_srv_start_choices(ty_server_t *s, ty_srv_request_t *r) {
  while (r->next_choice < r->choice_count && ty_engine_free_slots(s->engine) > 0) {
    ty_srv_choice_t *c = &r->choices[r->next_choice];
    ty_engine_request_t q = r->engine;
    q.prompt = r->prompts[c->prompt];
    q.prompt_len = r->prompt_lens[c->prompt];
    q.sampling.seed = c->seed;
    q.user = c;
    ty_status_t st = ty_engine_add(s->engine, &q, &c->sequence);
    if (st) {
      fprintf(stderr, "trainyard serve: request %s: %s\n", r->id, ty_status_message(st));
      ty_status_free(st);
      return false;
    }
    c->started = c->live = true;
    r->next_choice++;
  }
  return true;
}

static void ty_srv_unqueue(ty_server_t *s, ty_srv_request_t *r) {
  for (ty_srv_request_t **link = &s->queue_head; *link; link = &(*link)->next) {
    if (*link == r) {
      *link = r->next;
      s->queued--;
      break;
    }
  }
  s->queue_tail = s->queue_head;
  while (s->queue_tail && s->queue_tail->next) s->queue_tail = s->queue_tail->next;
}

/* Why a request must end now, or NULL. */
static const ty_api_error_t *ty_srv_must_end(ty_server_t *s, ty_srv_request_t *r, double now,
                                             const ty_api_error_t *timeout,
                                             const ty_api_error_t *shutdown, bool *out_end) {
  *out_end = true;
  if (r->cancel) {
    s->metrics.cancelled++;
    return NULL;
  }
  if (now > r->deadline) {
    s->metrics.timed_out++;
    return timeout;
  }
  if (s->abort_all) return shutdown;
  *out_end = false;
  return NULL;
}

/* Cancels, deadlines and the drain, then admission (lock held). */
static void ty_srv_schedule(ty_server_t *s) {
  double now = ty_srv_now();
  ty_api_error_t timeout, shutdown;
  ty_api_fail(&timeout, 504, "server_error", "timeout", NULL,
              "the request did not finish within --request-timeout %g s",
              s->options.request_timeout);
  ty_api_fail(&shutdown, 503, "server_error", "shutting_down", NULL,
              "the server shut down before the request finished");
  /* Running requests (some may also wait in the queue for more slots). */
  size_t kept = 0;
  for (size_t i = 0; i < s->running_count; ++i) {
    ty_srv_request_t *r = s->running[i];
    bool end = r->state == TY_SRV_FINISHED;
    const ty_api_error_t *why = end ? NULL : ty_srv_must_end(s, r, now, &timeout, &shutdown, &end);
    if (!end) {
      s->running[kept++] = r;
      continue;
    }
    if (r->next_choice < r->choice_count) ty_srv_unqueue(s, r);
    ty_srv_end(s, r, why);
  }
  s->running_count = kept;
  for (ty_srv_request_t *r = s->queue_head, *next; r; r = next) {
    next = r->next;
    bool end;
    const ty_api_error_t *why = ty_srv_must_end(s, r, now, &timeout, &shutdown, &end);
    if (!end) continue;
    ty_srv_unqueue(s, r);
    ty_srv_end(s, r, why);
  }
  /* Admission, first come first served. */
  while (s->queue_head && ty_engine_free_slots(s->engine) > 0) {
    ty_srv_request_t *r = s->queue_head;
    if (!ty_srv_start_choices(s, r)) {
      ty_api_error_t e;
      ty_api_fail(&e, 500, "server_error", "internal_error", NULL,
                  "request %s could not start; the server log has the cause", r->id);
      ty_srv_unqueue(s, r);
      for (size_t i = 0; i < s->running_count; ++i) {
        if (s->running[i] == r) s->running[i] = s->running[--s->running_count];
      }
      ty_srv_end(s, r, &e);
      continue;
    }
    if (r->state == TY_SRV_QUEUED) {
      r->state = TY_SRV_RUNNING;
      s->running[s->running_count++] = r;
    }
    if (r->next_choice < r->choice_count) break; /* waits for more slots */
    ty_srv_unqueue(s, r);
  }
}

/* A token's response bytes, made during the step (no lock), handed to its
 * request after the step (ty_srv_hand_out, one lock for all). */
typedef struct {
  ty_srv_choice_t *choice;
  size_t offset, size; /* in the step's scratch */
  ty_status_t status;
  bool ends; /* this token ended its choice (speculative decoding hands out
                several tokens of a choice in one step: only the last may end it) */
} ty_srv_pending_t;

/* Tokens held before they are handed out (more in one step: handed out in
 * turns of this many; TRAINYARD_SERVE_HAND_OUT_TURN=N makes the turns
 * smaller, for the tests). */
#define TY_SRV_PENDING 256

typedef struct {
  ty_server_t *server;
  ty_srv_buf_t scratch;
  ty_srv_pending_t pending[TY_SRV_PENDING];
  size_t pending_count, turn;
} ty_srv_step_t;

static void ty_srv_hand_out(ty_server_t *s, ty_srv_step_t *step);

/* A turn-end or EOS token: it ends the choice and is not text. */
static bool ty_srv_is_stop_id(const ty_srv_request_t *r, int64_t id) {
  for (uint32_t i = 0; i < r->engine.stop_id_count; ++i) {
    if (r->engine.stop_ids[i] == id) return true;
  }
  return false;
}

/* Turns a token into response bytes in `out` (scheduler thread, no lock).
 * Marks the choice done when it ends. */
static ty_status_t ty_srv_token_output(ty_server_t *s, ty_srv_choice_t *c,
                                       const ty_engine_token_t *t, ty_srv_buf_t *out) {
  const ty_srv_request_t *r = c->request;
  bool stop_id = t->finish == TY_ENGINE_STOP && ty_srv_is_stop_id(r, t->id);
  const char *text = "";
  size_t size = 0;
  bool stopped = false;
  if (!stop_id) {
    TY_RETURN_IF_ERROR(ty_text_stream_push(c->text, (uint32_t)t->id, &text, &size, &stopped));
  }
  bool ok = ty_srv_api_token(s, c, text, size, t, out);
  if (t->finish) c->live = false;
  if (stopped || t->finish) {
    c->done = true;
    c->finish = stopped || t->finish == TY_ENGINE_STOP ? "stop" : "length";
    if (!stopped) {
      TY_RETURN_IF_ERROR(ty_text_stream_finish(c->text, &text, &size));
      if (size) ok = ok && ty_srv_api_token(s, c, text, size, NULL, out);
    }
  }
  return ok ? TY_OK : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing the "
                                     "response");
}

/* A request whose response bytes could not be made: a 500 in place of
 * what it had not sent yet (lock held). */
static void ty_srv_fail_request(ty_server_t *s, ty_srv_request_t *r, ty_status_t st) {
  ty_api_error_t e;
  ty_api_fail(&e, 500, "server_error", "internal_error", NULL, "request %s: %s", r->id,
              st ? ty_status_message(st) : "out of memory writing the response");
  fprintf(stderr, "trainyard serve: %s\n", e.message);
  r->out.size = 0;
  if (r->stream) ty_srv_api_stream_error(&e, &r->out);
  else ty_srv_api_error_json(&e, &r->out);
  r->status = 500;
  if (r->state != TY_SRV_FINISHED) s->in_flight--;
  r->state = TY_SRV_FINISHED;
}

/* The engine's callback: one token of one choice. Its bytes are made here,
 * outside the lock; ty_srv_hand_out gives them to the requests after the
 * step, so that the scheduler takes the lock (and wakes the connections)
 * once a step rather than once a token. */
static void ty_srv_on_token(void *context, const ty_engine_token_t *t) {
  ty_srv_step_t *step = context;
  ty_server_t *s = step->server;
  ty_srv_choice_t *c = t->user;
  if (c->done) return;
  if (step->pending_count == step->turn) {
    pthread_mutex_lock(&s->lock);
    ty_srv_hand_out(s, step);
    pthread_mutex_unlock(&s->lock);
  }
  c->tokens++;
  const size_t offset = step->scratch.size;
  ty_status_t st = ty_srv_token_output(s, c, t, &step->scratch);
  step->pending[step->pending_count++] =
      (ty_srv_pending_t){.choice = c, .offset = offset, .size = step->scratch.size - offset,
                         .status = st, .ends = c->done};
}

/* After a step (lock held): the tokens' bytes go to their requests, in the
 * order the engine made them; a choice that ended finishes its request's
 * response when it was the last. */
static void ty_srv_hand_out(ty_server_t *s, ty_srv_step_t *step) {
  const double now = ty_srv_now();
  ty_srv_metrics_tokens(s, step->pending_count);
  for (size_t i = 0; i < step->pending_count; ++i) {
    const ty_srv_pending_t *p = &step->pending[i];
    ty_srv_choice_t *c = p->choice;
    ty_srv_request_t *r = c->request;
    ty_status_t st = p->status;
    if (r->first_token == 0) {
      r->first_token = now;
      ty_srv_metrics_ttft(s, r->first_token - r->arrived);
    }
    if (r->state == TY_SRV_FINISHED || r->cancel) {
      ty_status_free(st);
      continue;
    }
    /* A token may say nothing yet (text held back): no bytes, maybe no
     * scratch at all. */
    const char *bytes = p->size ? step->scratch.data + p->offset : "";
    bool ok = !st && ty_srv_buf_append(&r->out, bytes, p->size);
    if (ok && p->ends) {
      ok = ty_srv_api_choice_end(s, c, &r->out);
      r->done_choices++;
      if (ok && r->done_choices == r->choice_count) {
        ok = ty_srv_api_finish(s, r, &r->out);
        r->status = 200;
        r->state = TY_SRV_FINISHED; /* the schedule drops it from running */
        s->in_flight--;
        if (s->options.verbosity) {
          fprintf(stderr, "trainyard serve: %s: %lld prompt tokens, %zu choices, %.1f ms\n",
                  r->id, (long long)r->prompt_tokens, r->choice_count,
                  (ty_srv_now() - r->arrived) * 1e3);
        }
      }
    }
    if (!ok) ty_srv_fail_request(s, r, st);
    ty_status_free(st);
    pthread_cond_broadcast(&r->changed);
  }
  step->pending_count = 0;
  step->scratch.size = 0;
}

/* After a step (lock held): sequences that ended by a stop string, or
 * whose request finished, still hold slots. */
static void ty_srv_free_slots(ty_server_t *s) {
  for (size_t i = 0; i < s->running_count; ++i) {
    ty_srv_request_t *r = s->running[i];
    for (size_t k = 0; k < r->choice_count; ++k) {
      ty_srv_choice_t *c = &r->choices[k];
      if (c->live && (c->done || r->state == TY_SRV_FINISHED)) {
        ty_engine_cancel(s->engine, c->sequence);
        c->live = false;
      }
    }
  }
}

static void *ty_srv_sched_main(void *arg) {
  ty_server_t *s = arg;
  ty_srv_step_t step = {.server = s, .turn = TY_SRV_PENDING};
  const char *env = getenv("TRAINYARD_SERVE_HAND_OUT_TURN");
  const int turn = env ? atoi(env) : 0;
  if (turn >= 1 && turn < TY_SRV_PENDING) step.turn = (size_t)turn;
  pthread_mutex_lock(&s->lock);
  while (!s->quit) {
    ty_srv_schedule(s);
    /* Cancellations free KV blocks between steps: /metrics sees them. */
    s->metrics.engine = ty_engine_stats(s->engine);
    if (s->running_count == 0) {
      /* Idle: wake for new work, or to check the queue's deadlines. */
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_nsec += 200 * 1000 * 1000;
      if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
      }
      pthread_cond_timedwait(&s->work, &s->lock, &until);
      continue;
    }
    pthread_mutex_unlock(&s->lock);
    ty_status_t st = ty_engine_step(s->engine, ty_srv_on_token, &step);
    pthread_mutex_lock(&s->lock);
    ty_srv_hand_out(s, &step);
    ty_srv_free_slots(s);
    s->metrics.engine = ty_engine_stats(s->engine);
    if (st) {
      /* The device failed: every running request gets a 500 with an id to
       * find this line by; the engine stays usable for the next ones. */
      char id[32];
      snprintf(id, sizeof(id), "err-%llx-%llu", (unsigned long long)time(NULL),
               (unsigned long long)++s->next_id);
      fprintf(stderr, "trainyard serve: %s: %s: %s\n", id, ty_code_name(ty_status_code(st)),
              ty_status_message(st));
      ty_status_free(st);
      ty_api_error_t e;
      ty_api_fail(&e, 500, "server_error", "internal_error", NULL,
                  "internal error %s: the model failed to run; the server log has the cause",
                  id);
      s->metrics.engine_errors++;
      for (size_t i = 0; i < s->running_count; ++i) {
        ty_srv_request_t *r = s->running[i];
        if (r->next_choice < r->choice_count) ty_srv_unqueue(s, r);
        ty_srv_end(s, r, &e);
      }
      s->running_count = 0;
    }
  }
  pthread_mutex_unlock(&s->lock);
  ty_srv_buf_free(&step.scratch);
  return NULL;
}

ty_status_t ty_srv_sched_start(ty_server_t *s) {
  s->running = calloc((size_t)s->slots, sizeof(*s->running));
  if (!s->running) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  if (pthread_create(&s->thread, NULL, ty_srv_sched_main, s) != 0) {
    free(s->running);
    s->running = NULL;
    return ty_status_make(TY_CODE_INTERNAL, "cannot start the scheduler thread");
  }
  return TY_OK;
}

void ty_srv_sched_stop(ty_server_t *s) {
  if (!s->running) return;
  pthread_mutex_lock(&s->lock);
  s->quit = true;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  free(s->running);
  s->running = NULL;
}
