/* `trainyard eval --dataset DIR`: the perplexity of a model over a token
 * dataset, every counted target of a split, through `trainyard forward`'s
 * graph sharing the scorer's parameters (eval.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "hal/dtype.h"
#include "models/dataset.h"
#include "models/llm.h"
#include "train/train_graph.h"

ty_status_t ty_eval_dataset(ty_device_t *device, const ty_model_config_t *config,
                            const ty_session_t *weights, const ty_eval_scorer_options_t *o,
                            const char *dir, ty_eval_dataset_result_t *out) {
  memset(out, 0, sizeof(*out));
  ty_dataset_t *data = NULL;
  /* The held-out rows when there are any: that is what a perplexity is for. */
  ty_status_t s = ty_dataset_open(dir, "val", TY_DATASET_OPEN_IF_DECLARED, &data);
  snprintf(out->split, sizeof(out->split), "val");
  if (!s && (!data || ty_dataset_row_count(data) == 0)) {
    ty_dataset_close(data);
    data = NULL;
    snprintf(out->split, sizeof(out->split), "train");
    s = ty_dataset_open(dir, "train", 0, &data);
  }
  if (s) return ty_status_annotate(s, "--dataset %s", dir);
  int64_t T = ty_dataset_seq_len(data), B = o->batch;
  uint64_t rows = ty_dataset_row_count(data);
  if (rows == 0) {
    ty_dataset_close(data);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--dataset %s: the %s split has no rows",
                          dir, out->split);
  }
  if (ty_dataset_vocab_size(data) > config->vocab_size) {
    ty_dataset_close(data);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--dataset %s: its vocabulary (%u) is "
                          "larger than the model's (%lld): was it prepared with this model's "
                          "tokenizer?", dir, ty_dataset_vocab_size(data),
                          (long long)config->vocab_size);
  }
  if (T > config->max_positions) {
    ty_dataset_close(data);
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "--dataset %s: rows of %lld tokens exceed "
                          "the model's %lld positions", dir, (long long)T,
                          (long long)config->max_positions);
  }
  ty_graph_t *graph = NULL;
  ty_llm_t model = {0};
  ty_session_t *session = NULL;
  size_t n = (size_t)(B * T);
  int64_t *tokens = malloc(n * sizeof(int64_t)), *targets = malloc(n * sizeof(int64_t));
  double *w64 = malloc(n * sizeof(double));
  uint32_t *row = malloc((size_t)(T + 1) * sizeof(uint32_t));
  uint8_t *row_w = malloc((size_t)T);
  if (!tokens || !targets || !w64 || !row || !row_w) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) s = ty_forward_graph_build(config, B, T, o->dtype, o->compute_dtype, false, &graph,
                                     &model);
  if (!s) {
    ty_session_options_t so = {.share_state_with = weights, .cache_dir = o->cache_dir,
                               .retry_failed = o->retry_failed,
                               .fallback_device = o->fallback_device,
                               .deterministic = o->deterministic};
    s = ty_session_create(device, graph, &so, &session);
  }
  ty_dtype_t loss_dtype = TY_DTYPE_F32;
  if (!s) {
    ty_tensor_desc_t d;
    s = ty_session_value_desc(session, "loss_weights", &d);
    loss_dtype = d.dtype;
  }
  double total = 0, counted = 0;
  for (uint64_t first = 0; !s && first < rows; first += (uint64_t)B) {
    for (int64_t b = 0; b < B && !s; ++b) {
      bool real = first + (uint64_t)b < rows;
      if (real) s = ty_dataset_read_row(data, first + (uint64_t)b, row, row_w);
      for (int64_t i = 0; i < T && !s; ++i) {
        tokens[b * T + i] = real ? row[i] : 0;
        targets[b * T + i] = real ? (int64_t)row[i + 1] : -1;
        double w = real && row_w[i] ? 1.0 : 0.0;
        counted += w;
        /* Raw 0/1 weights: the loss is the sum of the counted losses. */
        if (loss_dtype == TY_DTYPE_F64) {
          w64[b * T + i] = w;
        } else {
          ((float *)w64)[b * T + i] = (float)w;
        }
      }
    }
    int64_t bt[2] = {B, T};
    if (!s) s = ty_session_bind(session, "tokens", TY_DTYPE_I64, 2, bt, tokens, n * 8);
    if (!s) s = ty_session_bind(session, "targets", TY_DTYPE_I64, 2, bt, targets, n * 8);
    if (!s) s = ty_session_bind(session, "loss_weights", loss_dtype, 2, bt, w64,
                                n * ty_dtype_size(loss_dtype));
    if (!s) s = ty_session_run(session);
    double sum = 0;
    if (!s && loss_dtype == TY_DTYPE_F64) {
      s = ty_session_read(session, "loss", &sum, sizeof(sum));
    } else if (!s) {
      float f = 0;
      s = ty_session_read(session, "loss", &f, sizeof(f));
      sum = f;
    }
    total += sum;
  }
  if (!s && counted == 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT, "--dataset %s: the %s split counts no target "
                       "(every loss weight is 0)", dir, out->split);
  }
  if (!s) {
    out->rows = rows;
    out->tokens = counted;
    out->mean_nll = total / counted;
    out->perplexity = exp(out->mean_nll);
    if (!isfinite(out->mean_nll)) {
      s = ty_status_make(TY_CODE_DATA_LOSS, "--dataset %s: the loss is %g (the model's logits "
                         "are not finite)", dir, out->mean_nll);
    }
  }
  ty_session_destroy(session);
  ty_llm_deinit(&model);
  ty_graph_destroy(graph);
  ty_dataset_close(data);
  free(tokens);
  free(targets);
  free(w64);
  free(row);
  free(row_w);
  return s;
}
