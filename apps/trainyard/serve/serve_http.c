/* libmicrohttpd glue of `trainyard serve` (see serve.h): one thread per
 * connection; the message framing, routing, the bearer key and body limits
 * before any body is read; requests checked, tokenized and queued; JSON
 * responses and server-sent events; a client that goes away cancels its
 * request. */
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/serve.h"

enum { TY_EP_COMPLETIONS, TY_EP_CHAT, TY_EP_MODELS, TY_EP_HEALTH, TY_EP_METRICS, TY_EP_OTHER };

typedef struct {
  ty_server_t *server;
  struct MHD_Connection *connection;
  int endpoint;
  const char *model_id; /* GET /v1/models/<id> */
  ty_srv_buf_t body;
  bool too_large, responded;
  bool close;        /* the answer ends the connection (framing not trusted) */
  const char *allow; /* a 405's Allow header */
  ty_srv_sock_t *sock; /* the connection's record (serve_conn.c) */
} ty_srv_conn_t;

/* A streaming response's state (the reader's and free callback's). */
typedef struct {
  ty_server_t *server;
  ty_srv_request_t *request;
  struct MHD_Connection *connection;
} ty_srv_stream_t;

static ssize_t ty_srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
static void ty_srv_stream_free(void *cls);

/* Whether the peer closed the connection (or it broke): a zero-byte peek
 * is an orderly close. */
static bool ty_srv_client_gone(struct MHD_Connection *connection) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!info) return false;
  char byte;
  ssize_t n = recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void ty_srv_wait(pthread_cond_t *cond, pthread_mutex_t *lock, int ms) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += (long)ms * 1000000L;
  while (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_cond_timedwait(cond, lock, &until);
}

static enum MHD_Result ty_srv_reply(ty_srv_conn_t *ctx, int status, const char *type,
                                    const char *data, size_t size) {
  ty_server_t *s = ctx->server;
  struct MHD_Response *r =
      MHD_create_response_from_buffer(size, (void *)data, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
  if (status == 429 || status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
  if (status == 405 && ctx->allow) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, ctx->allow);
  if (ctx->close) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result result = MHD_queue_response(ctx->connection, (unsigned)status, r);
  MHD_destroy_response(r);
  pthread_mutex_lock(&s->lock);
  ty_srv_metrics_request(s, ctx->endpoint, status);
  pthread_mutex_unlock(&s->lock);
  ctx->responded = true;
  return result;
}

static enum MHD_Result ty_srv_reply_error(ty_srv_conn_t *ctx, const ty_api_error_t *e) {
  ty_srv_buf_t out = {0};
  enum MHD_Result r = ty_srv_api_error_json(e, &out)
                          ? ty_srv_reply(ctx, e->status, "application/json", out.data, out.size)
                          : MHD_NO;
  ty_srv_buf_free(&out);
  return r;
}

/* How long an early answer's connection reads and drops what the client
 * still sends before it closes (see ty_srv_reply_raw). */
#define TY_SRV_LINGER_MS 2000

/* A chunked body that runs past --max-body is noticed while libmicrohttpd
 * reads it, when it no longer takes a response; the declared chunk size
 * (FFFFFFFFFFFFFFFF fits its 64 bits) is not shown to the application.
 * This connection's thread owns the socket and nothing else writes to it
 * while a body is read, so the 413 goes out here, at once, and the
 * connection closes (MHD_NO) instead of waiting for the rest. */
static enum MHD_Result ty_srv_reply_raw(ty_srv_conn_t *ctx, const ty_api_error_t *e) {
  ty_server_t *s = ctx->server;
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(ctx->connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  ty_srv_buf_t body = {0}, out = {0};
  bool ok = info && ty_srv_api_error_json(e, &body);
  if (ok) {
    char head[256];
    const char *reason = MHD_get_reason_phrase_for((unsigned)e->status);
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: "
                     "%zu\r\nConnection: close\r\n\r\n",
                     e->status, reason ? reason : "", body.size);
    ok = n > 0 && (size_t)n < sizeof(head) && ty_srv_buf_append(&out, head, (size_t)n) &&
         ty_srv_buf_append(&out, body.data, body.size);
  }
  for (size_t sent = 0; ok && sent < out.size;) {
    ssize_t n = send(info->connect_fd, out.data + sent, out.size - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    struct pollfd p = {.fd = info->connect_fd, .events = POLLOUT};
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && poll(&p, 1, 1000) > 0) continue;
    break; /* the client is gone or does not read: closing is all that is left */
  }
  /* A lingering close (RFC 9112 9.6): a client still sending its body would
   * get a reset, and lose the answer with it, if the socket closed with its
   * bytes unread; so stop writing and read what still comes, for at most
   * TY_SRV_LINGER_MS or until the client closes. */
  if (info && shutdown(info->connect_fd, SHUT_WR) == 0) {
    double until = ty_srv_now() + TY_SRV_LINGER_MS / 1000.0;
    char sink[4096];
    for (double left; (left = until - ty_srv_now()) > 0;) {
      struct pollfd p = {.fd = info->connect_fd, .events = POLLIN};
      int ready = poll(&p, 1, (int)(left * 1000) + 1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) break;
      ssize_t n = recv(info->connect_fd, sink, sizeof(sink), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break; /* the client closed (or is gone) */
    }
  }
  ty_srv_buf_free(&body);
  ty_srv_buf_free(&out);
  pthread_mutex_lock(&s->lock);
  ty_srv_metrics_request(s, ctx->endpoint, e->status);
  pthread_mutex_unlock(&s->lock);
  ctx->responded = true;
  return MHD_NO;
}

static enum MHD_Result ty_srv_reply_json(ty_srv_conn_t *ctx, int status, ty_srv_buf_t *out,
                                         bool ok) {
  enum MHD_Result r = ok ? ty_srv_reply(ctx, status, "application/json", out->data, out->size)
                         : MHD_NO;
  ty_srv_buf_free(out);
  return r;
}

/* ---- building a request ---- */

static void ty_srv_new_id(ty_server_t *s, const char *prefix, char *out, size_t size) {
  pthread_mutex_lock(&s->lock);
  uint64_t x = ++s->next_id * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL);
  pthread_mutex_unlock(&s->lock);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  snprintf(out, size, "%s-%016llx", prefix, (unsigned long long)x);
}

/* Token ids of each prompt: text through the tokenizer, ids as given. */
static bool ty_srv_prompts(ty_server_t *s, const ty_api_request_t *q, ty_srv_request_t *r,
                           ty_api_error_t *e) {
  const char *param = q->kind == TY_API_CHAT ? "messages" : "prompt";
  r->prompt_count = q->kind == TY_API_CHAT ? 1 : q->prompt_count;
  r->prompts = calloc(r->prompt_count, sizeof(int64_t *));
  r->prompt_lens = calloc(r->prompt_count, sizeof(int64_t));
  if (!r->prompts || !r->prompt_lens) {
    return ty_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  for (size_t i = 0; i < r->prompt_count; ++i) {
    uint32_t *ids = NULL;
    size_t n = 0;
    ty_status_t st = TY_OK;
    if (q->kind == TY_API_CHAT) {
      if (!s->chat) {
        return ty_api_fail(e, 400, "invalid_request_error", NULL, param,
                           "this model has no chat template (its tokenizer_config.json has "
                           "none); use /v1/completions, or start the server with "
                           "--chat-template FILE");
      }
      ty_chat_message_t *m = calloc(q->message_count, sizeof(*m));
      char *text = NULL;
      size_t text_size = 0;
      if (!m) return ty_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
      for (size_t k = 0; k < q->message_count; ++k) {
        m[k] = (ty_chat_message_t){q->messages[k].role, q->messages[k].content,
                                   q->messages[k].content_size};
      }
      st = ty_chat_template_render(s->chat, m, q->message_count, true, &text, &text_size);
      free(m);
      if (!st) {
        st = ty_tokenizer_encode(s->tokenizer, text, text_size,
                                 TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS, &ids, &n);
      }
      free(text);
    } else if (q->prompts[i].text) {
      st = ty_tokenizer_encode(s->tokenizer, q->prompts[i].text, q->prompts[i].text_size, 0,
                               &ids, &n);
    }
    if (st) {
      bool bad = ty_status_code(st) == TY_CODE_INVALID_ARGUMENT;
      ty_api_fail(e, bad ? 400 : 500, bad ? "invalid_request_error" : "server_error", NULL,
                  bad ? param : NULL, "%s", ty_status_message(st));
      ty_status_free(st);
      return false;
    }
    bool from_ids = q->kind == TY_API_COMPLETIONS && !q->prompts[i].text;
    size_t count = from_ids ? q->prompts[i].id_count : n;
    r->prompts[i] = malloc((count ? count : 1) * sizeof(int64_t));
    if (!r->prompts[i]) {
      free(ids);
      return ty_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    for (size_t k = 0; k < count; ++k) r->prompts[i][k] = from_ids ? q->prompts[i].ids[k] : ids[k];
    free(ids);
    r->prompt_lens[i] = (int64_t)count;
    r->prompt_tokens += (int64_t)count;
    if (count == 0) {
      return ty_api_fail(e, 400, "invalid_request_error", NULL, param,
                         "the prompt%s encodes to no tokens", r->prompt_count > 1 ? "s" : "");
    }
    for (size_t k = 0; k < count; ++k) {
      if (r->prompts[i][k] >= s->config.vocab_size) {
        return ty_api_fail(e, 400, "invalid_request_error", NULL, param,
                           "token id %lld (prompt %zu, position %zu) is not below the model's "
                           "vocabulary size %lld",
                           (long long)r->prompts[i][k], i, k, (long long)s->config.vocab_size);
      }
    }
  }
  return true;
}

/* The engine settings and the choices (with their text streams). */
static bool ty_srv_generation(ty_server_t *s, const ty_api_request_t *q, ty_srv_request_t *r,
                              ty_api_error_t *e) {
  int64_t longest = 0;
  for (size_t i = 0; i < r->prompt_count; ++i) {
    longest = r->prompt_lens[i] > longest ? r->prompt_lens[i] : longest;
  }
  const char *param = q->kind == TY_API_CHAT ? "messages" : "prompt";
  int64_t room = s->context - longest;
  int64_t max_new = q->max_tokens;
  if (max_new < 0) {
    max_new = q->kind == TY_API_CHAT ? room : s->options.default_max_tokens;
    if (max_new > room) max_new = room;
  } else {
    param = "max_tokens";
  }
  if (room < 1 || max_new > room) {
    return ty_api_fail(e, 400, "invalid_request_error", "context_length_exceeded", param,
                       "This model's maximum context length is %lld tokens. However, you "
                       "requested %lld tokens (%lld in the %s, %lld in the completion). Please "
                       "reduce the length of the %s or of the completion.",
                       (long long)s->context, (long long)(longest + (max_new > 0 ? max_new : 1)),
                       (long long)longest, q->kind == TY_API_CHAT ? "messages" : "prompt",
                       (long long)(max_new > 0 ? max_new : 1),
                       q->kind == TY_API_CHAT ? "messages" : "prompt");
  }
  ty_engine_request_t *g = &r->engine;
  g->max_new = max_new;
  g->sampling.greedy = q->temperature == 0;
  g->sampling.temperature = q->temperature > 0 ? q->temperature : 1.0;
  g->sampling.top_p = q->top_p;
  g->sampling.top_k = q->top_k;
  g->sampling.min_p = q->min_p;
  g->sampling.presence_penalty = q->presence_penalty;
  g->sampling.frequency_penalty = q->frequency_penalty;
  g->sampling.repetition_penalty = q->repetition_penalty;
  uint64_t seed = q->seed;
  if (!q->has_seed) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    seed = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)r;
  }
  g->logprobs = q->logprobs;
  g->top_logprobs = q->top_logprobs;
  if (s->eos_id >= 0 && !q->ignore_eos) g->stop_ids[g->stop_id_count++] = s->eos_id;
  const char *stops[TY_API_MAX_STOP + 4];
  size_t stop_count = 0;
  for (size_t i = 0; i < q->stop_count; ++i) stops[stop_count++] = q->stop[i];
  if (q->kind == TY_API_CHAT) {
    for (uint32_t i = 0; i < s->chat_stop_id_count; ++i) {
      if (g->stop_id_count < TY_ENGINE_MAX_STOP_IDS) {
        g->stop_ids[g->stop_id_count++] = s->chat_stop_ids[i];
      }
    }
    for (size_t i = 0; i < s->chat_stop_text_count; ++i) stops[stop_count++] = s->chat_stop_text[i];
  }
  r->choice_count = r->prompt_count * (size_t)q->n;
  r->choices = calloc(r->choice_count, sizeof(*r->choices));
  if (!r->choices) return ty_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
  for (size_t i = 0; i < r->choice_count; ++i) {
    ty_srv_choice_t *c = &r->choices[i];
    c->request = r;
    c->index = (uint32_t)i;
    c->prompt = (uint32_t)(i / (size_t)q->n);
    /* Each choice its own draw: the seed, the seed + 1, ... */
    c->seed = seed + i;
    ty_status_t st = ty_text_stream_create(s->tokenizer, TY_TOKENIZER_DECODE_SKIP_SPECIAL, stops,
                                           stop_count, &c->text);
    if (st) {
      ty_status_free(st);
      return ty_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    }
  }
  return true;
}

/* Parses, checks and queues a generation request; answers it. */
static enum MHD_Result ty_srv_generate(ty_srv_conn_t *ctx) {
  ty_server_t *s = ctx->server;
  ty_api_kind_t kind = ctx->endpoint == TY_EP_CHAT ? TY_API_CHAT : TY_API_COMPLETIONS;
  ty_api_request_t q = {0};
  ty_api_error_t e;
  ty_srv_request_t *r = calloc(1, sizeof(*r));
  bool ok = r != NULL;
  if (!ok) ty_api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
  ok = ok && ty_api_request_parse(ctx->body.data ? ctx->body.data : "", ctx->body.size, kind,
                                  &q, &e);
  if (ok && strcmp(q.model, s->options.model_name) != 0) {
    ok = ty_api_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                     "The model '%s' does not exist (this server serves '%s')", q.model,
                     s->options.model_name);
  }
  if (r) {
    pthread_cond_init(&r->changed, NULL);
    r->refs = 1;
    r->kind = kind;
  }
  ok = ok && ty_srv_prompts(s, &q, r, &e) && ty_srv_generation(s, &q, r, &e);
  if (ok) {
    r->stream = q.stream;
    r->include_usage = q.include_usage;
    r->return_token_ids = q.return_token_ids;
    r->model = strdup(q.model);
    r->created = (int64_t)time(NULL);
    ty_srv_new_id(s, kind == TY_API_CHAT ? "chatcmpl" : "cmpl", r->id, sizeof(r->id));
    r->arrived = ty_srv_now();
    r->deadline = r->arrived + s->options.request_timeout;
    if (!r->model) ok = ty_api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
  }
  ty_api_request_free(&q);
  if (ok) {
    pthread_mutex_lock(&s->lock);
    ok = ty_srv_submit(s, r, &e);
    if (ok) {
      s->metrics.prompt_tokens += (uint64_t)r->prompt_tokens;
      s->live_requests++;
    }
    pthread_mutex_unlock(&s->lock);
  }
  if (!ok) {
    ty_srv_request_free(r);
    return ty_srv_reply_error(ctx, &e);
  }
  if (r->stream) {
    ty_srv_stream_t *st = calloc(1, sizeof(*st));
    if (!st) return MHD_NO; /* the completion callback cancels the request */
    *st = (ty_srv_stream_t){s, r, ctx->connection};
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16 * 1024, ty_srv_stream_read, st, ty_srv_stream_free);
    if (!resp) {
      ty_srv_stream_free(st);
      return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result result = MHD_queue_response(ctx->connection, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    pthread_mutex_lock(&s->lock);
    ty_srv_metrics_request(s, ctx->endpoint, 200);
    pthread_mutex_unlock(&s->lock);
    ctx->responded = true;
    return result;
  }
  /* Not streaming: this connection's thread waits for the whole answer,
   * watching for the client to leave. */
  pthread_mutex_lock(&s->lock);
  while (r->state != TY_SRV_FINISHED) {
    ty_srv_wait(&r->changed, &s->lock, 50);
    if (r->state != TY_SRV_FINISHED && ty_srv_client_gone(ctx->connection)) {
      r->cancel = true;
      pthread_cond_signal(&s->work);
      ty_srv_request_release(s, r);
      pthread_mutex_unlock(&s->lock);
      return MHD_NO;
    }
  }
  ty_srv_buf_t out = r->out;
  int status = r->status;
  memset(&r->out, 0, sizeof(r->out));
  ty_srv_request_release(s, r);
  pthread_mutex_unlock(&s->lock);
  return ty_srv_reply_json(ctx, status, &out, true);
}

static ssize_t ty_srv_stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  ty_srv_stream_t *st = cls;
  ty_server_t *s = st->server;
  ty_srv_request_t *r = st->request;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    if (r->out.size > 0) {
      size_t n = r->out.size < max ? r->out.size : max;
      memcpy(buf, r->out.data, n);
      memmove(r->out.data, r->out.data + n, r->out.size - n);
      r->out.size -= n;
      pthread_mutex_unlock(&s->lock);
      return (ssize_t)n;
    }
    if (r->state == TY_SRV_FINISHED) {
      pthread_mutex_unlock(&s->lock);
      return MHD_CONTENT_READER_END_OF_STREAM;
    }
    ty_srv_wait(&r->changed, &s->lock, 50);
    if (r->out.size == 0 && r->state != TY_SRV_FINISHED && ty_srv_client_gone(st->connection)) {
      r->cancel = true;
      pthread_cond_signal(&s->work);
      pthread_mutex_unlock(&s->lock);
      return MHD_CONTENT_READER_END_WITH_ERROR;
    }
  }
}

static void ty_srv_stream_free(void *cls) {
  ty_srv_stream_t *st = cls;
  ty_server_t *s = st->server;
  pthread_mutex_lock(&s->lock);
  if (st->request->state != TY_SRV_FINISHED) {
    st->request->cancel = true;
    pthread_cond_signal(&s->work);
  }
  ty_srv_request_release(s, st->request);
  pthread_mutex_unlock(&s->lock);
  free(st);
}

/* ---- routing ---- */

static int ty_srv_route(const char *url, const char **model_id) {
  *model_id = NULL;
  if (!strcmp(url, "/v1/completions")) return TY_EP_COMPLETIONS;
  if (!strcmp(url, "/v1/chat/completions")) return TY_EP_CHAT;
  if (!strcmp(url, "/v1/models")) return TY_EP_MODELS;
  if (!strncmp(url, "/v1/models/", 11) && url[11]) {
    *model_id = url + 11;
    return TY_EP_MODELS;
  }
  if (!strcmp(url, "/health")) return TY_EP_HEALTH;
  if (!strcmp(url, "/metrics")) return TY_EP_METRICS;
  return TY_EP_OTHER;
}

/* The bearer key, compared in constant time (in the key's length). The
 * scheme's name is case-insensitive (RFC 9110 11.1), so "bearer KEY" is as
 * good as "Bearer KEY". */
static bool ty_srv_key_ok(const ty_server_t *s, struct MHD_Connection *c) {
  if (!s->options.api_key) return true;
  const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!h || strncasecmp(h, "Bearer", 6) != 0 || h[6] != ' ') return false;
  const char *given = h + 6, *key = s->options.api_key;
  while (*given == ' ') ++given;
  size_t n = strlen(given), m = strlen(key);
  unsigned char diff = (unsigned char)(n != m);
  for (size_t i = 0; i < m; ++i) diff |= (unsigned char)(key[i] ^ (i < n ? given[i] : 0));
  return diff == 0;
}

/* What the headers say about where the body ends. */
typedef struct {
  int lengths, encodings;
  const char *length, *encoding; /* the first of each */
  bool lengths_differ;
} ty_srv_framing_t;

static bool ty_srv_length_value(const char *text, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || *end || errno || text[0] == '-' || text[0] == '+') return false;
  *out = v;
  return true;
}

static enum MHD_Result ty_srv_framing_header(void *cls, enum MHD_ValueKind kind,
                                             const char *key, const char *value) {
  (void)kind;
  ty_srv_framing_t *f = cls;
  if (!value) value = "";
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
    if (f->lengths++ == 0) {
      f->length = value;
    } else {
      uint64_t a, b;
      bool numbers = ty_srv_length_value(f->length, &a) && ty_srv_length_value(value, &b);
      if (numbers ? a != b : strcmp(f->length, value) != 0) f->lengths_differ = true;
    }
  } else if (!strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
    if (f->encodings++ == 0) f->encoding = value;
  }
  return MHD_YES;
}

/* RFC 9112 6.1 and 6.3: a body's end must be known one way. libmicrohttpd
 * takes the first Content-Length and lets Transfer-Encoding win over it;
 * a proxy in front may read the same message the other way (request
 * smuggling), so any doubt ends the connection with an error. */
static bool ty_srv_framing_ok(ty_srv_conn_t *ctx, ty_api_error_t *e) {
  ty_srv_framing_t f = {0};
  MHD_get_connection_values(ctx->connection, MHD_HEADER_KIND, ty_srv_framing_header, &f);
  if (f.lengths_differ) {
    return ty_api_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                       "the request has Content-Length headers with different values; send "
                       "one");
  }
  if (f.encodings && f.lengths) {
    return ty_api_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                       "the request has both Transfer-Encoding and Content-Length; send one");
  }
  if (f.encodings > 1) {
    return ty_api_fail(e, 400, "invalid_request_error", "invalid_framing", NULL,
                       "the request has %d Transfer-Encoding headers; send one "
                       "(Transfer-Encoding: chunked)", f.encodings);
  }
  if (f.encodings && strcasecmp(f.encoding, "chunked") != 0) {
    return ty_api_fail(e, 501, "invalid_request_error", "unsupported_transfer_encoding", NULL,
                       "Transfer-Encoding '%.64s' is not supported; send the body with "
                       "Content-Length or Transfer-Encoding: chunked", f.encoding);
  }
  return true;
}

/* Everything decided from the request line and headers alone. */
static enum MHD_Result ty_srv_early(ty_srv_conn_t *ctx, const char *url, const char *method) {
  ty_server_t *s = ctx->server;
  ty_api_error_t e;
  bool post = ctx->endpoint == TY_EP_COMPLETIONS || ctx->endpoint == TY_EP_CHAT;
  if (!ty_srv_framing_ok(ctx, &e)) {
    ctx->close = true;
    return ty_srv_reply_error(ctx, &e);
  }
  if (ctx->endpoint == TY_EP_OTHER) {
    ty_api_fail(&e, 404, "invalid_request_error", "unknown_url", NULL,
                "Unknown request URL: %s %s. The endpoints are POST /v1/completions, POST "
                "/v1/chat/completions, GET /v1/models, GET /health and GET /metrics.",
                method, url);
    return ty_srv_reply_error(ctx, &e);
  }
  /* HEAD is GET without the body (libmicrohttpd leaves the body out). */
  bool allowed = post ? !strcmp(method, "POST") : !strcmp(method, "GET") || !strcmp(method, "HEAD");
  if (!allowed) {
    ctx->allow = post ? "POST" : "GET, HEAD";
    ty_api_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                "%s is not allowed on %s; use %s", method, url, post ? "POST" : "GET or HEAD");
    return ty_srv_reply_error(ctx, &e);
  }
  if (ctx->endpoint != TY_EP_HEALTH && !ty_srv_key_ok(s, ctx->connection)) {
    ty_api_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                "Incorrect API key provided. Send it as 'Authorization: Bearer KEY' (the "
                "server's --api-key).");
    return ty_srv_reply_error(ctx, &e);
  }
  const char *length = MHD_lookup_connection_value(ctx->connection, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_CONTENT_LENGTH);
  if (length && strtoull(length, NULL, 10) > s->options.max_body) {
    ty_api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                "the request body of %s bytes is larger than the server's --max-body %zu",
                length, s->options.max_body);
    return ty_srv_reply_error(ctx, &e);
  }
  return MHD_YES;
}

static enum MHD_Result ty_srv_get(ty_srv_conn_t *ctx) {
  ty_server_t *s = ctx->server;
  ty_srv_buf_t out = {0};
  if (ctx->endpoint == TY_EP_MODELS) {
    if (ctx->model_id && strcmp(ctx->model_id, s->options.model_name) != 0) {
      ty_api_error_t e;
      ty_api_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                  "The model '%s' does not exist (this server serves '%s')", ctx->model_id,
                  s->options.model_name);
      return ty_srv_reply_error(ctx, &e);
    }
    return ty_srv_reply_json(ctx, 200, &out, ty_srv_api_models_json(s, ctx->model_id, &out));
  }
  if (ctx->endpoint == TY_EP_HEALTH) {
    pthread_mutex_lock(&s->lock);
    bool draining = s->draining;
    pthread_mutex_unlock(&s->lock);
    const char *body = draining ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}";
    return ty_srv_reply(ctx, draining ? 503 : 200, "application/json", body, strlen(body));
  }
  pthread_mutex_lock(&s->lock);
  bool ok = ty_srv_metrics_text(s, &out);
  pthread_mutex_unlock(&s->lock);
  enum MHD_Result r = ok ? ty_srv_reply(ctx, 200, "text/plain; version=0.0.4", out.data, out.size)
                         : MHD_NO;
  ty_srv_buf_free(&out);
  return r;
}

static enum MHD_Result ty_srv_access(void *cls, struct MHD_Connection *connection,
                                     const char *url, const char *method, const char *version,
                                     const char *upload_data, size_t *upload_data_size,
                                     void **con_cls) {
  (void)version;
  ty_server_t *s = cls;
  ty_srv_conn_t *ctx = *con_cls;
  if (!ctx) {
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) return MHD_NO;
    ctx->server = s;
    ctx->connection = connection;
    ctx->endpoint = ty_srv_route(url, &ctx->model_id);
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    ctx->sock = info ? info->socket_context : NULL;
    *con_cls = ctx;
    return ty_srv_early(ctx, url, method);
  }
  if (ctx->responded) {
    *upload_data_size = 0; /* answered early: the rest of the body is dropped */
    return ctx->too_large ? MHD_NO : MHD_YES;
  }
  if (*upload_data_size) {
    if (ctx->body.size + *upload_data_size > s->options.max_body) {
      /* A chunked body without a length: counted here, refused at once. */
      ctx->too_large = true;
      ty_srv_buf_free(&ctx->body);
      ty_api_error_t e;
      ty_api_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                  "the request body is larger than the server's --max-body %zu bytes",
                  s->options.max_body);
      return ty_srv_reply_raw(ctx, &e);
    }
    if (!ty_srv_buf_append(&ctx->body, upload_data, *upload_data_size)) return MHD_NO;
    *upload_data_size = 0;
    return MHD_YES;
  }
  /* The whole request is in: from here on, only --request-timeout and the
   * client's own patience bound the connection (streams are not cut). */
  ty_srv_conn_reading(s, ctx->sock, false);
  if (ctx->endpoint == TY_EP_COMPLETIONS || ctx->endpoint == TY_EP_CHAT) {
    return ty_srv_generate(ctx);
  }
  return ty_srv_get(ctx);
}

static void ty_srv_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
                             enum MHD_RequestTerminationCode toe) {
  (void)toe;
  ty_server_t *s = cls;
  /* A kept-alive connection owes the next request from now on. */
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (info) ty_srv_conn_reading(s, info->socket_context, true);
  ty_srv_conn_t *ctx = *con_cls;
  if (!ctx) return;
  ty_srv_buf_free(&ctx->body);
  free(ctx);
  *con_cls = NULL;
}

static void ty_srv_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  ty_server_t *s = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    *socket_context = ty_srv_conn_opened(s, info ? info->connect_fd : -1);
  } else {
    ty_srv_conn_closed(s, *socket_context);
    *socket_context = NULL;
  }
}

/* Set while MHD_start_daemon runs on this thread: its lines then are kept
 * back, since a failed bind is reported by ty_srv_http_start in the user's
 * terms, and MHD's own "Failed to bind to port 0" (the port of an address
 * given whole) would only mislead. */
static _Thread_local bool ty_srv_starting;

static void ty_srv_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  if (ty_srv_starting) return;
  char line[512];
  vsnprintf(line, sizeof(line), fmt, ap);
  /* Every MHD_NO this file returns is deliberate (a client gone, a body
   * refused) and already answered or counted; libmicrohttpd's line for it
   * would read as a fault. */
  if (strstr(line, "Application reported internal error")) return;
  fprintf(stderr, "trainyard serve: http: %s", line);
}

ty_status_t ty_srv_http_start(ty_server_t *s) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
  struct addrinfo *found = NULL;
  char port[16];
  snprintf(port, sizeof(port), "%d", s->options.port);
  int rc = getaddrinfo(s->options.host, port, &hints, &found);
  if (rc != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--host %s: %s", s->options.host,
                          gai_strerror(rc));
  }
  /* poll, not select: descriptors past FD_SETSIZE (1024) are served too. */
  unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                   MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
  if (found->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
  /* A response (a stream that waits for its first token included) is
   * bounded by --request-timeout; libmicrohttpd's idle timeout is only a
   * margin past it. What a client owes (head and body) is bounded by
   * --read-timeout, which the watchdog enforces. */
  unsigned timeout = (unsigned)(s->options.request_timeout + 30);
  ty_status_t st = ty_srv_watchdog_start(s);
  if (st) {
    freeaddrinfo(found);
    return st;
  }
  ty_srv_starting = true;
  struct MHD_Daemon *d = MHD_start_daemon(
      flags, 0, NULL, NULL, ty_srv_access, s, MHD_OPTION_EXTERNAL_LOGGER, ty_srv_log, s,
      MHD_OPTION_SOCK_ADDR, found->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, ty_srv_completed, s,
      MHD_OPTION_NOTIFY_CONNECTION, ty_srv_notify, s, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)s->options.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)s->options.max_per_client, MHD_OPTION_CONNECTION_TIMEOUT, timeout,
      MHD_OPTION_END);
  ty_srv_starting = false;
  freeaddrinfo(found);
  if (!d) {
    ty_srv_watchdog_stop(s);
    return ty_status_make(TY_CODE_UNAVAILABLE,
                          "cannot listen on %s port %d (in use, or not an address of this "
                          "machine)",
                          s->options.host, s->options.port);
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  s->bound_port = info ? info->port : s->options.port;
  s->daemon = d;
  return TY_OK;
}

void ty_srv_http_quiesce(ty_server_t *s) {
  if (!s->daemon) return;
  MHD_socket fd = MHD_quiesce_daemon(s->daemon);
  if (fd != MHD_INVALID_SOCKET) close(fd);
}

void ty_srv_http_stop(ty_server_t *s) {
  if (s->daemon) MHD_stop_daemon(s->daemon); /* every connection's record goes */
  s->daemon = NULL;
  ty_srv_watchdog_stop(s);
}
