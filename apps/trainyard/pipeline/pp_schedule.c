/* Pipeline schedules and the stage partition (pp_schedule.h). */
#include "pp_schedule.h"

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
