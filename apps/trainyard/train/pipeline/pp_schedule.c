/* Pipeline schedules and the stage partition (pp_schedule.h). */
#include "pp_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ty_status_t ty_pp_kind_parse(const char *text, ty_pp_kind_t *out) {
  if (!strcmp(text, "1f1b")) {
    *out = TY_PP_1F1B;
  } else if (!strcmp(text, "interleaved")) {
    *out = TY_PP_INTERLEAVED;
  } else {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "--pp-schedule '%s': expected 1f1b or interleaved", text);
  }
  return TY_OK;
}

/* Forward or backward number k (0-based, in the rank's own order) of the
 * interleaved schedule: its micro-batch and local chunk (Megatron-LM's
 * get_model_chunk_id: pp micro-batches through one chunk, then the next). */
static ty_pp_action_t ty_pp_interleaved_at(int k, bool backward, int pp, int v) {
  int group = k / (pp * v), in_group = k % (pp * v);
  int chunk = in_group / pp;
  if (backward) chunk = v - 1 - chunk;
  return (ty_pp_action_t){.backward = backward, .micro = group * pp + in_group % pp,
                          .chunk = chunk};
}

ty_status_t ty_pp_schedule(ty_pp_kind_t kind, int rank, int pp, int v, int micro,
                           ty_pp_action_t **out, size_t *out_count) {
  *out = NULL;
  *out_count = 0;
  if (pp < 1 || micro < 1 || v < 1 || rank < 0 || rank >= pp) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "pipeline schedule of rank %d of %d stages, %d chunks each, %d "
                          "micro-batches",
                          rank, pp, v, micro);
  }
  if (kind == TY_PP_1F1B && v != 1) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "the 1F1B schedule runs one chunk per rank, not %d", v);
  }
  if (kind == TY_PP_INTERLEAVED && micro % pp != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "the interleaved schedule takes micro-batches (--grad-accum) in groups "
                          "of --pp: %d micro-batches are not a multiple of %d stages",
                          micro, pp);
  }
  int total = micro * v;
  ty_pp_action_t *a = malloc((size_t)total * 2 * sizeof(*a));
  if (!a) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  int warmup;
  if (kind == TY_PP_1F1B) {
    warmup = pp - rank - 1;
  } else {
    warmup = micro == pp ? total : (pp - rank - 1) * 2 + (v - 1) * pp;
  }
  if (warmup > total) warmup = total;
  size_t n = 0;
  int f = 0, b = 0;
#define TY_PP_AT(k, bwd)                                                              \
  (kind == TY_PP_1F1B ? (ty_pp_action_t){.backward = (bwd), .micro = (k), .chunk = 0} \
                      : ty_pp_interleaved_at((k), (bwd), pp, v))
  for (; f < warmup; ++f) a[n++] = TY_PP_AT(f, false);
  while (f < total) {
    a[n++] = TY_PP_AT(f, false);
    ++f;
    a[n++] = TY_PP_AT(b, true);
    ++b;
  }
  for (; b < total; ++b) a[n++] = TY_PP_AT(b, true);
#undef TY_PP_AT
  *out = a;
  *out_count = n;
  return TY_OK;
}

double ty_pp_ideal_bubble(int pp, int v, int micro) {
  return (double)(pp - 1) / ((double)v * micro + pp - 1);
}

ty_status_t ty_pp_partition(const int64_t *costs, int units, int parts, int *out_first) {
  if (parts < 1 || parts > units) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%d pipeline chunks for %d units (embedding, layers, head): every "
                          "chunk needs one",
                          parts, units);
  }
  /* best[k][i]: the smallest largest total of the first i units in k
   * parts; cut[k][i]: where the last of those parts starts. */
  size_t cells = (size_t)(parts + 1) * (size_t)(units + 1);
  int64_t *best = malloc(cells * sizeof(int64_t));
  int *cut = malloc(cells * sizeof(int));
  int64_t *prefix = malloc((size_t)(units + 1) * sizeof(int64_t));
  if (!best || !cut || !prefix) {
    free(best);
    free(cut);
    free(prefix);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  prefix[0] = 0;
  for (int i = 0; i < units; ++i) prefix[i + 1] = prefix[i] + costs[i];
#define TY_AT(k, i) ((size_t)(k) * (size_t)(units + 1) + (size_t)(i))
  for (int i = 0; i <= units; ++i) best[TY_AT(1, i)] = prefix[i], cut[TY_AT(1, i)] = 0;
  for (int k = 2; k <= parts; ++k) {
    for (int i = k; i <= units; ++i) {
      int64_t b = -1;
      int at = k - 1;
      for (int j = k - 1; j < i; ++j) { /* the last part is [j, i) */
        int64_t left = best[TY_AT(k - 1, j)], right = prefix[i] - prefix[j];
        int64_t worst = left > right ? left : right;
        if (b < 0 || worst < b) {
          b = worst;
          at = j;
        }
      }
      best[TY_AT(k, i)] = b;
      cut[TY_AT(k, i)] = at;
    }
  }
  out_first[parts] = units;
  int i = units;
  for (int k = parts; k >= 1; --k) {
    i = k == 1 ? 0 : cut[TY_AT(k, i)];
    out_first[k - 1] = i;
  }
#undef TY_AT
  free(best);
  free(cut);
  free(prefix);
  return TY_OK;
}

/* ---- point to point on a device communicator ---- */

void ty_pp_message_text(const ty_pp_message_t *m, char *out, size_t capacity) {
  snprintf(out, capacity, "the %s of micro-batch %d out of chunk %d",
           m->gradient ? "gradient" : "activations", (int)m->micro, (int)m->chunk);
}

bool ty_pp_p2p_message(ty_pp_action_t x, int c, int chunks, bool needs, ty_pp_message_t *out) {
  const bool bwd = x.backward;
  if (needs) {
    if (bwd ? c == chunks - 1 : c == 0) return false;
    *out = (ty_pp_message_t){.gradient = bwd, .chunk = bwd ? c + 1 : c - 1, .micro = x.micro};
  } else {
    if (bwd ? c == 0 : c == chunks - 1) return false;
    *out = (ty_pp_message_t){.gradient = bwd, .chunk = c, .micro = x.micro};
  }
  return true;
}

/* The rules of one rank's own order (TY_PP_P2P_NAIVE, TY_PP_P2P_NEXT_RECV). */
static ty_status_t ty_pp_p2p_local_plan(ty_pp_kind_t kind, int rank, int pp, int v, int micro,
                                        bool deferred, ty_pp_p2p_op_t **out,
                                        size_t *out_count) {
  ty_pp_action_t *a = NULL;
  size_t n = 0;
  TY_RETURN_IF_ERROR(ty_pp_schedule(kind, rank, pp, v, micro, &a, &n));
  /* each action receives at most one message and sends at most one */
  ty_pp_p2p_op_t *ops = calloc(2 * n + 1, sizeof(*ops));
  ty_pp_p2p_op_t *pending = calloc(n + 1, sizeof(*pending));
  if (!ops || !pending) {
    free(a);
    free(ops);
    free(pending);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  const int chunks = pp * v;
  size_t count = 0, waiting = 0;
  uint32_t batch = 0;
  for (size_t i = 0; i < n; ++i) {
    const int c = a[i].chunk * pp + rank;
    ty_pp_message_t m;
    if (ty_pp_p2p_message(a[i], c, chunks, true, &m)) {
      for (size_t k = 0; k < waiting; ++k) {
        ops[count] = pending[k];
        ops[count++].batch = batch;
      }
      waiting = 0;
      ops[count++] = (ty_pp_p2p_op_t){.send = false, .peer = m.chunk % pp, .msg = m,
                                      .batch = batch++};
    }
    if (ty_pp_p2p_message(a[i], c, chunks, false, &m)) {
      const int to = m.gradient ? c - 1 : c + 1;
      pending[waiting++] = (ty_pp_p2p_op_t){.send = true, .peer = to % pp, .msg = m};
    }
    if (!deferred && waiting) { /* the naive order: each send alone, at once */
      ops[count] = pending[0];
      ops[count++].batch = batch++;
      waiting = 0;
    }
  }
  for (size_t k = 0; k < waiting; ++k) { /* the end of the schedule: one batch */
    ops[count] = pending[k];
    ops[count++].batch = batch;
  }
  free(a);
  free(pending);
  *out = ops;
  *out_count = count;
  return TY_OK;
}

/* Orders ops by round, then by message (both ends of a pair of ranks sort
 * their messages the same way: the same order on each side). */
static int ty_pp_p2p_op_compare(const void *pa, const void *pb) {
  const ty_pp_p2p_op_t *x = pa, *y = pb;
  if (x->batch != y->batch) return x->batch < y->batch ? -1 : 1; /* the round, here */
  if (x->msg.gradient != y->msg.gradient) return x->msg.gradient ? 1 : -1;
  if (x->msg.chunk != y->msg.chunk) return x->msg.chunk < y->msg.chunk ? -1 : 1;
  if (x->msg.micro != y->msg.micro) return x->msg.micro < y->msg.micro ? -1 : 1;
  return x->send == y->send ? 0 : x->send ? -1 : 1;
}

/* TY_PP_P2P_GLOBAL: every rank's schedule run at once on a clock (a
 * forward takes 1, a backward 2; an action starts when its rank is free
 * and its input has arrived: the host path, which cannot deadlock,
 * pp_schedule_test); each message travels in the round its receiver's
 * action starts. A rank issues its ops round by round (sorted by round,
 * then message), all those of the rounds up to a receiving action's start
 * in one batch before it, the rest in one batch at the end. */
static ty_status_t ty_pp_p2p_global_plan(ty_pp_kind_t kind, int rank, int pp, int v,
                                         int micro, ty_pp_p2p_op_t **out, size_t *out_count) {
  const int chunks = pp * v;
  const size_t slots = (size_t)(2 * chunks * micro);
  ty_pp_action_t **a = calloc((size_t)pp, sizeof(*a));
  size_t *n = calloc((size_t)pp, sizeof(size_t)), *next = calloc((size_t)pp, sizeof(size_t));
  int64_t *free_at = calloc((size_t)pp, sizeof(int64_t));
  int64_t *arrives = malloc(slots * sizeof(int64_t)), *round = malloc(slots * sizeof(int64_t));
  int64_t *starts = calloc(slots + 1, sizeof(int64_t)); /* this rank's actions' */
  ty_pp_p2p_op_t *ops = calloc(2 * slots + 1, sizeof(*ops));
  ty_status_t s = a && n && next && free_at && arrives && round && starts && ops
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (int r = 0; r < pp && !s; ++r) s = ty_pp_schedule(kind, r, pp, v, micro, &a[r], &n[r]);
  for (size_t i = 0; i < slots && !s; ++i) arrives[i] = round[i] = -1;
#define TY_PP_SLOT(m) ((size_t)(((m).gradient * chunks + (m).chunk) * micro + (m).micro))
  /* Each time the action that can start first (ties: the lower rank). */
  for (bool moved = !s; moved;) {
    moved = false;
    int best = -1;
    int64_t best_start = 0;
    for (int r = 0; r < pp; ++r) {
      if (next[r] == n[r]) continue;
      const ty_pp_action_t x = a[r][next[r]];
      ty_pp_message_t m;
      int64_t start = free_at[r];
      if (ty_pp_p2p_message(x, x.chunk * pp + r, chunks, true, &m)) {
        if (arrives[TY_PP_SLOT(m)] < 0) continue;
        if (arrives[TY_PP_SLOT(m)] > start) start = arrives[TY_PP_SLOT(m)];
      }
      if (best < 0 || start < best_start) {
        best = r;
        best_start = start;
      }
    }
    if (best < 0) break;
    const ty_pp_action_t x = a[best][next[best]];
    const int c = x.chunk * pp + best;
    ty_pp_message_t m;
    if (ty_pp_p2p_message(x, c, chunks, true, &m)) round[TY_PP_SLOT(m)] = best_start;
    if (best == rank) starts[next[best]] = best_start;
    free_at[best] = best_start + (x.backward ? 2 : 1);
    if (ty_pp_p2p_message(x, c, chunks, false, &m)) arrives[TY_PP_SLOT(m)] = free_at[best];
    next[best]++;
    moved = true;
  }
  for (int r = 0; r < pp && !s; ++r) {
    if (next[r] != n[r]) { /* cannot happen: the host path never deadlocks */
      s = ty_status_make(TY_CODE_INTERNAL, "pipeline schedule of stage %d stops at action %zu",
                         r, next[r]);
    }
  }
  /* This rank's ops, each with its round (in .batch until batches are cut). */
  size_t count = 0;
  for (size_t i = 0; !s && i < n[rank]; ++i) {
    const ty_pp_action_t x = a[rank][i];
    const int c = x.chunk * pp + rank;
    ty_pp_message_t m;
    if (ty_pp_p2p_message(x, c, chunks, true, &m)) {
      ops[count++] = (ty_pp_p2p_op_t){.send = false, .peer = m.chunk % pp, .msg = m,
                                      .batch = (uint32_t)round[TY_PP_SLOT(m)]};
    }
    if (ty_pp_p2p_message(x, c, chunks, false, &m)) {
      const int to = m.gradient ? m.chunk - 1 : m.chunk + 1;
      ops[count++] = (ty_pp_p2p_op_t){.send = true, .peer = to % pp, .msg = m,
                                      .batch = (uint32_t)round[TY_PP_SLOT(m)]};
    }
  }
#undef TY_PP_SLOT
  if (!s) qsort(ops, count, sizeof(*ops), ty_pp_p2p_op_compare);
  /* Cut the batches: before each receiving action, every op of a round up
   * to its start; the rest at the end. */
  size_t done = 0;
  uint32_t batch = 0;
  for (size_t i = 0; !s && i < n[rank]; ++i) {
    ty_pp_message_t m;
    const ty_pp_action_t x = a[rank][i];
    if (!ty_pp_p2p_message(x, x.chunk * pp + rank, chunks, true, &m)) continue;
    size_t end = done;
    while (end < count && (int64_t)ops[end].batch <= starts[i]) ++end;
    for (; done < end; ++done) ops[done].batch = batch;
    ++batch;
  }
  for (; done < count; ++done) ops[done].batch = batch;
  for (int r = 0; r < pp && a; ++r) free(a[r]);
  free(a);
  free(n);
  free(next);
  free(free_at);
  free(arrives);
  free(round);
  free(starts);
  if (s) {
    free(ops);
    return s;
  }
  *out = ops;
  *out_count = count;
  return TY_OK;
}

ty_status_t ty_pp_p2p_plan(ty_pp_kind_t kind, int rank, int pp, int v, int micro,
                           ty_pp_p2p_rule_t rule, ty_pp_p2p_op_t **out, size_t *out_count) {
  *out = NULL;
  *out_count = 0;
  if (rule == TY_PP_P2P_GLOBAL) {
    /* checks the arguments first, as the others do */
    ty_pp_action_t *mine = NULL;
    size_t n = 0;
    TY_RETURN_IF_ERROR(ty_pp_schedule(kind, rank, pp, v, micro, &mine, &n));
    free(mine);
    return ty_pp_p2p_global_plan(kind, rank, pp, v, micro, out, out_count);
  }
  return ty_pp_p2p_local_plan(kind, rank, pp, v, micro, rule == TY_PP_P2P_NEXT_RECV, out,
                              out_count);
}

ty_status_t ty_pp_p2p_check(ty_pp_kind_t kind, int pp, int v, int micro,
                            ty_pp_p2p_rule_t rule) {
  ty_pp_p2p_op_t **ops = calloc((size_t)pp, sizeof(*ops));
  size_t *n = calloc((size_t)pp, sizeof(size_t)), *at = calloc((size_t)pp, sizeof(size_t));
  /* per op: its partner (rank, index) and whether it completed */
  int64_t **partner = calloc((size_t)pp, sizeof(*partner));
  bool **done = calloc((size_t)pp, sizeof(*done));
  ty_status_t s = ops && n && at && partner && done
                      ? TY_OK
                      : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (int r = 0; r < pp && !s; ++r) {
    s = ty_pp_p2p_plan(kind, r, pp, v, micro, rule, &ops[r], &n[r]);
    if (!s) {
      partner[r] = calloc(n[r] + 1, sizeof(int64_t));
      done[r] = calloc(n[r] + 1, sizeof(bool));
      if (!partner[r] || !done[r]) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
  }
  char a_text[96], b_text[96];
  /* Matching: the k-th send of a to b is the k-th receive of b from a. */
  for (int a = 0; a < pp && !s; ++a) {
    for (int b = 0; b < pp && !s; ++b) {
      size_t i = 0, j = 0;
      for (;;) {
        while (i < n[a] && !(ops[a][i].send && ops[a][i].peer == b)) ++i;
        while (j < n[b] && !(!ops[b][j].send && ops[b][j].peer == a)) ++j;
        if (i == n[a] && j == n[b]) break;
        if (i == n[a] || j == n[b]) {
          s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                             "pipeline point to point: stage %d sends stage %d %s messages "
                             "than it receives", a, b, i == n[a] ? "fewer" : "more");
          break;
        }
        const ty_pp_message_t *x = &ops[a][i].msg, *y = &ops[b][j].msg;
        if (x->gradient != y->gradient || x->chunk != y->chunk || x->micro != y->micro) {
          ty_pp_message_text(x, a_text, sizeof(a_text));
          ty_pp_message_text(y, b_text, sizeof(b_text));
          s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                             "pipeline point to point out of order: stage %d sends %s where "
                             "stage %d receives %s", a, a_text, b, b_text);
          break;
        }
        partner[a][i] = (int64_t)b << 32 | (int64_t)j;
        partner[b][j] = (int64_t)a << 32 | (int64_t)i;
        ++i;
        ++j;
      }
    }
  }
  /* Progress: an op completes once its partner is posted (in its rank's
   * current batch) while it is too; a batch ends when all its ops have. */
  for (bool moved = !s; moved;) {
    moved = false;
    for (int r = 0; r < pp; ++r) {
      for (size_t i = at[r]; i < n[r] && ops[r][i].batch == ops[r][at[r]].batch; ++i) {
        if (done[r][i]) continue;
        const int q = (int)(partner[r][i] >> 32);
        const size_t j = (size_t)(partner[r][i] & 0xffffffff);
        if (at[q] < n[q] && ops[q][j].batch == ops[q][at[q]].batch) {
          done[r][i] = done[q][j] = true;
          moved = true;
        }
      }
    }
    for (int r = 0; r < pp; ++r) {
      while (at[r] < n[r]) {
        size_t end = at[r];
        bool all = true;
        for (; end < n[r] && ops[r][end].batch == ops[r][at[r]].batch; ++end) {
          all = all && done[r][end];
        }
        if (!all) break;
        at[r] = end;
        moved = true;
      }
    }
  }
  for (int r = 0; r < pp && !s; ++r) {
    if (at[r] == n[r]) continue;
    for (size_t i = at[r]; i < n[r]; ++i) {
      if (done[r][i]) continue;
      ty_pp_message_text(&ops[r][i].msg, a_text, sizeof(a_text));
      s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                         "pipeline point to point would deadlock: stage %d waits to %s %s "
                         "(stage %d), which never posts its side",
                         r, ops[r][i].send ? "send" : "receive", a_text, ops[r][i].peer);
      break;
    }
  }
  for (int r = 0; r < pp && ops && partner && done; ++r) {
    free(ops[r]);
    free(partner[r]);
    free(done[r]);
  }
  free(ops);
  free(n);
  free(at);
  free(partner);
  free(done);
  return s ? ty_status_annotate(s, "--pp %d, %s, %d chunk%s a stage, %d micro-batches", pp,
                                kind == TY_PP_1F1B ? "1f1b" : "interleaved", v,
                                v > 1 ? "s" : "", micro)
           : TY_OK;
}
