/* `trainyard serve`: the parts of the OpenAI-compatible server and what they
 * share.
 *
 *   cmd_serve.c      options, start-up (model, tokenizer, chat template,
 *                    engine), signals and the graceful shutdown
 *   serve_http.c     libmicrohttpd glue: framing checks, routing, bearer
 *                    key, body limits, JSON and server-sent-event
 *                    responses, disconnects
 *   serve_conn.c     open connections: the read deadline (--read-timeout)
 *                    that a watchdog thread enforces, and their count
 *   serve_sched.c    the scheduler thread: the bounded queue, admission into
 *                    engine slots, one engine step after another, tokens to
 *                    text, timeouts and cancellation
 *   serve_api.c      OpenAI response objects (completions, chat, chunks,
 *                    errors, usage)
 *   serve_metrics.c  /metrics in Prometheus text format
 *   serve_request.c  request bodies, parsed and checked (a fuzz target)
 *
 * Threads: libmicrohttpd runs one thread per connection; those threads
 * parse, tokenize and queue requests and then wait for their output. A
 * thread that waits for a slow client's bytes costs a stack and no more:
 * what keeps idle sockets from starving the server is the read deadline
 * (serve_conn.c), the per-client and total connection limits, and /health
 * and /metrics never waiting on the scheduler. One
 * scheduler thread owns the engine and the per-choice text streams. A
 * request's shared part (its output buffer, state and reference count) is
 * guarded by the server's mutex; everything else of it is written once
 * before it is queued, or touched by the scheduler only. */
#ifndef TY_APPS_TRAINYARD_SERVE_SERVE_H_
#define TY_APPS_TRAINYARD_SERVE_SERVE_H_

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/status.h"
#include "models/chat_template.h"
#include "models/config.h"
#include "models/engine.h"
#include "models/text_stream.h"
#include "models/tokenizer.h"
#include "serve/serve_request.h"

typedef struct ty_srv_buf_t {
  char *data;
  size_t size, capacity;
} ty_srv_buf_t;

/* Appends; false when memory runs out. */
bool ty_srv_buf_append(ty_srv_buf_t *b, const char *data, size_t size);
void ty_srv_buf_free(ty_srv_buf_t *b);

typedef struct ty_srv_request_t ty_srv_request_t;

/* One choice of a request: one engine sequence (scheduler-owned). */
typedef struct ty_srv_choice_t {
  ty_srv_request_t *request;
  uint32_t index;  /* the choice's index in the response */
  uint32_t prompt; /* which prompt it continues */
  uint64_t sequence;
  uint64_t seed;
  bool started; /* it was added to the engine */
  bool live;    /* the engine still holds it (a slot) */
  bool done;    /* it makes no more output */
  ty_text_stream_t *text;
  ty_srv_buf_t content;     /* the whole text (non-streaming responses) */
  void *token_ids;          /* json_t list (return_token_ids, non-streaming) */
  void *logprobs;           /* json_t: the response's logprobs list(s) */
  size_t text_offset;       /* completions logprobs: text offset of the next token */
  int64_t tokens;           /* completion tokens made */
  const char *finish;       /* "stop", "length" */
  bool role_sent;           /* chat stream: the first delta carried the role */
} ty_srv_choice_t;

typedef enum {
  TY_SRV_QUEUED = 0,
  TY_SRV_RUNNING,
  TY_SRV_FINISHED, /* the output is complete */
} ty_srv_state_t;

struct ty_srv_request_t {
  /* Written before queueing, read-only afterwards. */
  ty_api_kind_t kind;
  bool stream, include_usage, return_token_ids;
  char id[40];
  int64_t created;
  char *model;
  int64_t **prompts; /* token ids of each prompt */
  int64_t *prompt_lens;
  size_t prompt_count;
  int64_t prompt_tokens; /* usage: every prompt once */
  ty_engine_request_t engine; /* max_new, sampling, stop ids, logprobs (per choice: seed) */
  char *stop[TY_API_MAX_STOP];
  size_t stop_count;
  double arrived, deadline; /* monotonic seconds */
  /* Scheduler-owned. */
  /* A token chunk's head, `{"id":...,"model":...` (the compact dump of the
   * chunk object without its closing brace), made at the first token:
   * token chunks without log-probabilities are written around it instead
   * of built as JSON objects (serve_api.c, ty_api_token_chunk). */
  ty_srv_buf_t chunk_head;
  ty_srv_choice_t *choices;
  size_t choice_count, next_choice, done_choices;
  double first_token;
  struct ty_srv_request_t *next; /* queue link */
  /* Shared, under the server's mutex. */
  ty_srv_state_t state;
  int refs;
  bool cancel;        /* the client went away: stop and free the slots */
  ty_srv_buf_t out;   /* response bytes not yet taken by the HTTP thread */
  int status;         /* HTTP status of a non-streaming response */
  pthread_cond_t changed;
};

#define TY_SRV_ENDPOINTS 6 /* completions, chat, models, health, metrics, other */
#define TY_SRV_CODES 16

typedef struct ty_srv_metrics_t {
  int codes[TY_SRV_ENDPOINTS][TY_SRV_CODES]; /* HTTP status codes seen (0: free) */
  uint64_t requests[TY_SRV_ENDPOINTS][TY_SRV_CODES];
  uint64_t prompt_tokens, generation_tokens;
  uint64_t ttft_buckets[12], ttft_count;
  double ttft_sum;
  uint64_t rate_tokens[64]; /* generated tokens per second, a ring */
  int64_t rate_second;      /* the second rate_tokens[rate_second % 64] counts */
  uint64_t cancelled, timed_out, engine_errors;
  uint64_t read_timeouts; /* connections cut by --read-timeout */
  ty_engine_stats_t engine; /* a copy the scheduler makes after each step */
} ty_srv_metrics_t;

typedef struct ty_server_options_t {
  const char *host;
  int port;
  const char *api_key; /* NULL: none */
  const char *model_name;
  size_t max_body;
  int64_t max_queue;
  double request_timeout, shutdown_timeout;
  double read_timeout;      /* a request's head and body must arrive within it */
  int64_t max_connections;  /* open connections in all */
  int64_t max_per_client;   /* open connections of one client address (0: any) */
  int64_t default_max_tokens; /* completions without max_tokens */
  int verbosity;
  /* --deterministic: the engine runs batch-invariant kernels, so a request's
   * tokens and logprobs do not depend on the others (reported by /metrics). */
  bool deterministic;
} ty_server_options_t;

typedef struct ty_server_t {
  ty_server_options_t options;
  ty_model_config_t config;
  const ty_tokenizer_t *tokenizer;
  const ty_chat_template_t *chat; /* NULL: chat is refused */
  int64_t chat_stop_ids[TY_ENGINE_MAX_STOP_IDS];
  uint32_t chat_stop_id_count;
  const char *chat_stop_text[4]; /* turn ends that are not single tokens */
  size_t chat_stop_text_count;
  int64_t eos_id; /* -1: none */
  ty_engine_t *engine;
  int64_t context, slots;
  int64_t kv_blocks, kv_block_size; /* the engine's paged KV cache */
  double started;  /* monotonic seconds */
  int64_t created; /* Unix time of start-up (the model's "created") */
  pthread_mutex_t lock;
  pthread_cond_t work; /* the scheduler waits here */
  ty_srv_request_t *queue_head, *queue_tail;
  int64_t queued;
  ty_srv_request_t **running; /* requests holding engine slots (scheduler-owned) */
  size_t running_count;
  bool draining;  /* SIGTERM: no new requests */
  bool abort_all; /* the drain deadline passed: cancel what is left */
  bool quit;      /* the scheduler thread ends */
  int64_t in_flight; /* requests queued or running */
  int64_t live_requests; /* queued requests not yet freed (responses being sent) */
  ty_srv_metrics_t metrics;
  uint64_t next_id;
  pthread_t thread;
  void *daemon; /* struct MHD_Daemon */
  /* serve_conn.c, under the lock: connections open, and the watchdog. */
  struct ty_srv_sock_t *socks;
  int64_t open_connections;
  bool watchdog_quit;
  bool watchdog_running;
  pthread_t watchdog;
  int bound_port;
} ty_server_t;

double ty_srv_now(void);

/* serve_sched.c */
ty_status_t ty_srv_sched_start(ty_server_t *server);
void ty_srv_sched_stop(ty_server_t *server);
/* Queues a request (taking a reference for the scheduler). false with *e
 * filled (429 queue full, 503 draining). Call with the lock held. */
bool ty_srv_submit(ty_server_t *server, ty_srv_request_t *request, ty_api_error_t *e);
/* Drops a reference (lock held); frees the request at zero. */
void ty_srv_request_release(ty_server_t *server, ty_srv_request_t *request);
void ty_srv_request_free(ty_srv_request_t *request);

/* serve_api.c: response JSON, appended to `out` (false: out of memory). */
bool ty_srv_api_error_json(const ty_api_error_t *e, ty_srv_buf_t *out);
bool ty_srv_api_models_json(const ty_server_t *server, const char *only, ty_srv_buf_t *out);
/* Output for a choice, as the request wants it: an SSE chunk appended to
 * `out` (streaming), or the content, logprobs and ids kept in the choice.
 * `text` is the text that became final; `token` the new token it came with
 * (its logprob and id are reported), NULL for text flushed at the end. */
bool ty_srv_api_token(const ty_server_t *server, ty_srv_choice_t *choice, const char *text,
                      size_t size, const ty_engine_token_t *token, ty_srv_buf_t *out);
/* A choice ended (`finish` "stop" or "length"): the last chunk (streaming). */
bool ty_srv_api_choice_end(const ty_server_t *server, ty_srv_choice_t *choice, ty_srv_buf_t *out);
/* Every choice ended: the whole response (non-streaming) or the usage
 * chunk and "data: [DONE]" (streaming). */
bool ty_srv_api_finish(const ty_server_t *server, ty_srv_request_t *request, ty_srv_buf_t *out);
/* A stream that cannot go on: an error event and "data: [DONE]". */
bool ty_srv_api_stream_error(const ty_api_error_t *e, ty_srv_buf_t *out);

/* serve_metrics.c (lock held). `endpoint` indexes ty_srv_endpoint_names. */
extern const char *const ty_srv_endpoint_names[TY_SRV_ENDPOINTS];
void ty_srv_metrics_request(ty_server_t *server, int endpoint, int status);
void ty_srv_metrics_tokens(ty_server_t *server, uint64_t tokens);
void ty_srv_metrics_ttft(ty_server_t *server, double seconds);
bool ty_srv_metrics_text(ty_server_t *server, ty_srv_buf_t *out);

/* serve_conn.c: one record per open connection (libmicrohttpd's socket
 * context), from accept to close. A connection is "reading" while it owes
 * the server a request head or body; the watchdog shuts down the socket of
 * one that has been reading for longer than --read-timeout, so its thread
 * ends and its slot frees. Responses (streams included) are never cut by
 * it. Each function takes the lock itself. */
typedef struct ty_srv_sock_t ty_srv_sock_t;
/* NULL when memory runs out (the connection is then not watched). */
ty_srv_sock_t *ty_srv_conn_opened(ty_server_t *server, int fd);
void ty_srv_conn_closed(ty_server_t *server, ty_srv_sock_t *sock);
/* Starts (true: the clock restarts) or ends (false) a reading phase;
 * NULL sock: nothing. */
void ty_srv_conn_reading(ty_server_t *server, ty_srv_sock_t *sock, bool reading);
ty_status_t ty_srv_watchdog_start(ty_server_t *server);
void ty_srv_watchdog_stop(ty_server_t *server);

/* serve_http.c */
ty_status_t ty_srv_http_start(ty_server_t *server);
void ty_srv_http_quiesce(ty_server_t *server);
void ty_srv_http_stop(ty_server_t *server);

#endif /* TY_APPS_TRAINYARD_SERVE_SERVE_H_ */
