/* /metrics of `trainyard serve`: counters, gauges and a histogram in the
 * Prometheus text exposition format (version 0.0.4). Everything is kept
 * under the server's lock by the threads that see the events. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "serve/serve.h"

const char *const ty_srv_endpoint_names[TY_SRV_ENDPOINTS] = {
    "/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/metrics", "other"};

static const double ty_ttft_bounds[11] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1,    2.5,   5,    10};

void ty_srv_metrics_request(ty_server_t *s, int endpoint, int status) {
  ty_srv_metrics_t *m = &s->metrics;
  for (int i = 0; i < TY_SRV_CODES; ++i) {
    if (m->codes[endpoint][i] == 0) m->codes[endpoint][i] = status;
    if (m->codes[endpoint][i] == status) {
      m->requests[endpoint][i]++;
      return;
    }
  }
}

/* Moves the per-second ring to the current second. */
static void ty_srv_rate_advance(ty_srv_metrics_t *m, int64_t second) {
  if (second - m->rate_second >= 64) {
    memset(m->rate_tokens, 0, sizeof(m->rate_tokens));
  } else {
    for (int64_t t = m->rate_second + 1; t <= second; ++t) m->rate_tokens[t % 64] = 0;
  }
  if (second > m->rate_second) m->rate_second = second;
}

void ty_srv_metrics_tokens(ty_server_t *s, uint64_t tokens) {
  ty_srv_metrics_t *m = &s->metrics;
  m->generation_tokens += tokens;
  int64_t second = (int64_t)ty_srv_now();
  ty_srv_rate_advance(m, second);
  m->rate_tokens[second % 64] += tokens;
}

void ty_srv_metrics_ttft(ty_server_t *s, double seconds) {
  ty_srv_metrics_t *m = &s->metrics;
  int i = 0;
  while (i < 11 && seconds > ty_ttft_bounds[i]) ++i;
  m->ttft_buckets[i]++;
  m->ttft_count++;
  m->ttft_sum += seconds;
}

static bool ty_put(ty_srv_buf_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool ty_put(ty_srv_buf_t *out, const char *fmt, ...) {
  char line[512];
  va_list args;
  va_start(args, fmt);
  int n = vsnprintf(line, sizeof(line), fmt, args);
  va_end(args);
  size_t size = (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1;
  return n >= 0 && ty_srv_buf_append(out, line, size);
}

static bool ty_metric(ty_srv_buf_t *out, const char *name, const char *type, const char *help) {
  return ty_put(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

bool ty_srv_metrics_text(ty_server_t *s, ty_srv_buf_t *out) {
  ty_srv_metrics_t *m = &s->metrics;
  bool ok = ty_metric(out, "trainyard_requests_total", "counter",
                      "HTTP requests answered, by endpoint and status code.");
  for (int e = 0; e < TY_SRV_ENDPOINTS; ++e) {
    for (int i = 0; i < TY_SRV_CODES && m->codes[e][i]; ++i) {
      ok = ok && ty_put(out, "trainyard_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
                        ty_srv_endpoint_names[e], m->codes[e][i],
                        (unsigned long long)m->requests[e][i]);
    }
  }
  ok = ok && ty_metric(out, "trainyard_prompt_tokens_total", "counter", "Prompt tokens read.") &&
       ty_put(out, "trainyard_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
  ok = ok && ty_metric(out, "trainyard_generation_tokens_total", "counter", "Tokens generated.") &&
       ty_put(out, "trainyard_generation_tokens_total %llu\n",
              (unsigned long long)m->generation_tokens);
  int64_t now = (int64_t)ty_srv_now();
  ty_srv_rate_advance(m, now);
  uint64_t recent = 0;
  for (int64_t t = now - 10; t < now; ++t) recent += m->rate_tokens[t % 64];
  ok = ok && ty_metric(out, "trainyard_generation_tokens_per_second", "gauge",
                       "Tokens generated per second over the last 10 whole seconds.") &&
       ty_put(out, "trainyard_generation_tokens_per_second %.1f\n", (double)recent / 10.0);
  ok = ok && ty_metric(out, "trainyard_queue_depth", "gauge",
                       "Requests waiting for a slot of the engine.") &&
       ty_put(out, "trainyard_queue_depth %lld\n", (long long)s->queued);
  ok = ok && ty_metric(out, "trainyard_requests_in_flight", "gauge",
                       "Requests queued or running.") &&
       ty_put(out, "trainyard_requests_in_flight %lld\n", (long long)s->in_flight);
  ok = ok &&
       ty_metric(out, "trainyard_batch_slots", "gauge", "Slots of the engine (--max-batch).") &&
       ty_put(out, "trainyard_batch_slots %lld\n", (long long)s->slots);
  ok = ok && ty_metric(out, "trainyard_deterministic", "gauge",
                       "1 with --deterministic (batch-invariant kernels), else 0.") &&
       ty_put(out, "trainyard_deterministic %d\n", s->options.deterministic ? 1 : 0);
  ok = ok && ty_metric(out, "trainyard_batch_slots_busy", "gauge",
                       "Slots holding a sequence after the last engine step.") &&
       ty_put(out, "trainyard_batch_slots_busy %lld\n", (long long)m->engine.busy);
  ok = ok && ty_metric(out, "trainyard_batch_occupancy", "gauge",
                       "Busy slots over all slots after the last engine step.") &&
       ty_put(out, "trainyard_batch_occupancy %.4f\n", (double)m->engine.busy / (double)s->slots);
  ok = ok && ty_metric(out, "trainyard_engine_steps_total", "counter", "Engine steps run.") &&
       ty_put(out, "trainyard_engine_steps_total %llu\n", (unsigned long long)m->engine.steps);
  ok = ok && ty_metric(out, "trainyard_engine_step_seconds_total", "counter",
                       "Wall time of the engine steps.") &&
       ty_put(out, "trainyard_engine_step_seconds_total %.6f\n", m->engine.step_seconds);
  ok = ok && ty_metric(out, "trainyard_engine_run_seconds_total", "counter",
                       "Of the steps' time: the graph runs (inputs written, the device's work "
                       "and the wait for it).") &&
       ty_put(out, "trainyard_engine_run_seconds_total %.6f\n", m->engine.run_seconds);
  ok = ok && ty_metric(out, "trainyard_engine_read_seconds_total", "counter",
                       "Of the steps' time: reading the sampled ids or the logits back.") &&
       ty_put(out, "trainyard_engine_read_seconds_total %.6f\n", m->engine.read_seconds);
  ok = ok && ty_metric(out, "trainyard_decode_rows_total", "counter",
                       "Rows of the decode graphs run, padding included (decode tokens over "
                       "this is the decode graphs' occupancy).") &&
       ty_put(out, "trainyard_decode_rows_total %llu\n", (unsigned long long)m->engine.decode_rows);
  ok = ok && ty_metric(out, "trainyard_decode_tokens_total", "counter",
                       "Tokens made by decode steps.") &&
       ty_put(out, "trainyard_decode_tokens_total %llu\n",
              (unsigned long long)m->engine.decode_tokens);
  ok = ok && ty_metric(out, "trainyard_kv_cache_blocks", "gauge",
                       "Blocks of the paged KV cache (--kv-cache-memory).") &&
       ty_put(out, "trainyard_kv_cache_blocks %lld\n", (long long)m->engine.kv_blocks);
  ok = ok && ty_metric(out, "trainyard_kv_cache_blocks_free", "gauge",
                       "KV-cache blocks free or holding a cached prefix nobody uses, after the "
                       "last engine step.") &&
       ty_put(out, "trainyard_kv_cache_blocks_free %lld\n", (long long)m->engine.kv_free);
  ok = ok && ty_metric(out, "trainyard_kv_cache_blocks_cached", "gauge",
                       "Of the free blocks, those holding a cached prompt prefix.") &&
       ty_put(out, "trainyard_kv_cache_blocks_cached %lld\n", (long long)m->engine.kv_cached);
  ok = ok && ty_metric(out, "trainyard_prefix_cache_hit_tokens_total", "counter",
                       "Prompt tokens taken from the prefix cache instead of computed.") &&
       ty_put(out, "trainyard_prefix_cache_hit_tokens_total %llu\n",
              (unsigned long long)m->engine.prefix_hits);
  ok = ok && ty_metric(out, "trainyard_preemptions_total", "counter",
                       "Sequences that gave back their KV-cache blocks to be recomputed later.") &&
       ty_put(out, "trainyard_preemptions_total %llu\n", (unsigned long long)m->engine.preemptions);
  ok = ok && ty_metric(out, "trainyard_speculative_draft_tokens_total", "counter",
                       "Tokens drafted by prompt lookup (--speculate).") &&
       ty_put(out, "trainyard_speculative_draft_tokens_total %llu\n",
              (unsigned long long)m->engine.draft_tokens);
  ok = ok && ty_metric(out, "trainyard_speculative_accepted_tokens_total", "counter",
                       "Drafted tokens the model confirmed (each saved a step).") &&
       ty_put(out, "trainyard_speculative_accepted_tokens_total %llu\n",
              (unsigned long long)m->engine.draft_accepted);
  ok = ok && ty_metric(out, "trainyard_time_to_first_token_seconds", "histogram",
                       "From a request's arrival to its first generated token.");
  uint64_t cumulative = 0;
  for (int i = 0; i < 11 && ok; ++i) {
    cumulative += m->ttft_buckets[i];
    ok = ty_put(out, "trainyard_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n",
                ty_ttft_bounds[i], (unsigned long long)cumulative);
  }
  ok = ok &&
       ty_put(out, "trainyard_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n",
              (unsigned long long)m->ttft_count) &&
       ty_put(out, "trainyard_time_to_first_token_seconds_sum %.6f\n", m->ttft_sum) &&
       ty_put(out, "trainyard_time_to_first_token_seconds_count %llu\n",
              (unsigned long long)m->ttft_count);
  ok = ok && ty_metric(out, "trainyard_requests_cancelled_total", "counter",
                       "Requests whose client went away before the end.") &&
       ty_put(out, "trainyard_requests_cancelled_total %llu\n", (unsigned long long)m->cancelled);
  ok = ok && ty_metric(out, "trainyard_requests_timed_out_total", "counter",
                       "Requests ended by --request-timeout.") &&
       ty_put(out, "trainyard_requests_timed_out_total %llu\n", (unsigned long long)m->timed_out);
  ok = ok && ty_metric(out, "trainyard_engine_errors_total", "counter",
                       "Engine steps that failed on the device.") &&
       ty_put(out, "trainyard_engine_errors_total %llu\n", (unsigned long long)m->engine_errors);
  ok = ok && ty_metric(out, "trainyard_connections_open", "gauge",
                       "HTTP connections open (idle and slow ones included).") &&
       ty_put(out, "trainyard_connections_open %lld\n", (long long)s->open_connections);
  ok = ok && ty_metric(out, "trainyard_connections_read_timeout_total", "counter",
                       "Connections closed because a request's head or body did not arrive "
                       "within --read-timeout.") &&
       ty_put(out, "trainyard_connections_read_timeout_total %llu\n",
              (unsigned long long)m->read_timeouts);
  ok = ok && ty_metric(out, "trainyard_uptime_seconds", "gauge", "Seconds since start-up.") &&
       ty_put(out, "trainyard_uptime_seconds %.1f\n", ty_srv_now() - s->started);
  return ok;
}
