/* `trainyard train` reporting: banner, step lines, metrics.jsonl,
 * TensorBoard scalars and summary.txt. Formatting lives in metrics/; this
 * file decides what is reported and where. */
#include "train_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "graph/runtime/preflight.h"
#include "hal/file.h"
#include "metrics/jsonl.h"
#include "metrics/progress.h"
#include "metrics/tensorboard.h"
#include "models/presets.h"
#include "train_eval.h"
#include "trainer.h"

ty_status_t ty_train_metrics_open(ty_trainer_t *t, bool resuming) {
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/metrics.jsonl", t->cfg.out);
  if (resuming) {
    size_t kept = 0, dropped = 0;
    ty_status_t s = ty_jsonl_truncate_to_step(path, t->progress.step, &kept, &dropped);
    if (s && ty_status_code(s) != TY_CODE_NOT_FOUND) return s;
    ty_status_free(s);
  } /* else the run folder holds no metrics.jsonl (ty_trainer_open_run) */
  ty_jsonl_writer_t *w = NULL;
  TY_RETURN_IF_ERROR(ty_jsonl_writer_open(path, &w));
  t->report.metrics = w;
  snprintf(path, sizeof(path), "%s/tensorboard", t->cfg.out);
  ty_tensorboard_writer_t *tb = NULL;
  TY_RETURN_IF_ERROR(ty_tensorboard_writer_open(path, &tb));
  t->report.tensorboard = tb;
  return TY_OK;
}

void ty_train_metrics_close(ty_trainer_t *t) {
  ty_status_free(ty_jsonl_writer_close(t->report.metrics));
  ty_status_free(ty_tensorboard_writer_close(t->report.tensorboard));
  t->report.metrics = NULL;
  t->report.tensorboard = NULL;
}

/* FLOPs of one trained token: 6 per parameter (forward + backward) plus
 * the attention scores and values (PaLM's 12 * layers * width * seq). */
static double ty_flops_per_token(const ty_trainer_t *t) {
  const ty_model_config_t *c = &t->model_config;
  return 6.0 * (double)ty_llm_parameter_count(&t->graphs.m_train) +
         12.0 * (double)(c->num_layers * c->num_heads * c->head_dim) * (double)t->shape.T;
}

void ty_train_metrics_banner(ty_trainer_t *t, const char *resume_dir) {
  FILE *e = stderr;
  fprintf(e, "trainyard train: resolved configuration\n");
  ty_train_config_print(&t->cfg, e);
  const ty_abi_device_info_t *info = ty_device_info(t->device);
  fprintf(e, "model: %s, %lld parameters (%lld layers, width %lld, %lld heads, vocab %lld), %s\n",
          t->model_config.model_type, (long long)ty_llm_parameter_count(&t->graphs.m_train),
          (long long)t->model_config.num_layers, (long long)t->model_config.hidden_size,
          (long long)t->model_config.num_heads, (long long)t->model_config.vocab_size,
          t->cfg.model[0] ? t->cfg.model : "initialized from scratch");
  fprintf(e, "data: %llu train rows, %llu val rows of %lld tokens; %lld steps of %lld rows "
             "(%lld per epoch)\n",
          (unsigned long long)ty_dataset_row_count(t->feed.train_data),
          (unsigned long long)(t->feed.val_data ? ty_dataset_row_count(t->feed.val_data) : 0),
          (long long)t->shape.T, (long long)t->shape.total_steps, (long long)t->shape.rows_per_step,
          (long long)t->shape.steps_per_epoch);
  fprintf(e, "device: %s (%s)%s\n", ty_device_uri(t->device), info->name,
          info->emulated ? " [emulated]" : "");
  ty_session_stats_t stats = ty_session_stats(t->graphs.s_train);
  fprintf(e, "train step: %s%s%s (host wall time %.3f s)\n", ty_session_source_name(stats.source),
          stats.cache_entry[0] ? ": " : "", stats.cache_entry, stats.compile_seconds);
  if (t->fallback) {
    const char *partition = ty_session_partition(t->graphs.s_train);
    if (partition) {
      fprintf(e, "train step partition: %s", partition);
    } else {
      fprintf(e, "fallback %s unused: %s runs every node of the train step\n",
              ty_device_label(t->fallback), ty_device_label(t->device));
    }
    for (int k = 0; k < 2; ++k) {
      ty_session_t *other = k ? t->graphs.s_eval : t->graphs.s_opt;
      const char *p = other ? ty_session_partition(other) : NULL;
      if (p) fprintf(e, "%s partition: %s", k ? "validation" : "optimizer step", p);
    }
  }
  if (resume_dir && resume_dir[0]) {
    fprintf(e, "resuming from %s at step %lld (epoch %lld, row %lld)\n", resume_dir,
            (long long)t->progress.step, (long long)t->progress.epoch + 1,
            (long long)t->progress.cursor);
  }
  /* The resolved configuration beside the outputs, too. */
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/train_config.json", t->cfg.out);
  json_t *j = ty_train_config_to_json(&t->cfg);
  if (j) json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS);
  json_decref(j);
}

void ty_train_metrics_line_end(ty_trainer_t *t) {
  if (t->report.live_line) fputs(ty_progress_line_finish(TY_PROGRESS_LIVE), stderr);
}

void ty_train_metrics_step(ty_trainer_t *t, double loss, double grad_norm, double lr,
                           double tokens_per_s, double seconds_per_step) {
  const ty_abi_device_info_t *info = ty_device_info(t->device);
  /* MFU per device against the one peak a device reports, f32's: with
   * matmuls in bf16 or f16 (mixed, or such weights) that peak is not the
   * one the run is bound by (an H100's bf16 tensor cores are ~15x its f32),
   * so no MFU is printed rather than a figure of several hundred percent. */
  int world = t->par.world > 1 ? t->par.world : 1;
  bool f32_compute = t->shape.compute_dtype == TY_DTYPE_F32 ||
                     (t->shape.compute_dtype == TY_DTYPE_INVALID && t->shape.dtype == TY_DTYPE_F32);
  double mfu = info->peak_f32_gflops > 0 && f32_compute
                   ? ty_flops_per_token(t) * tokens_per_s / world /
                         (info->peak_f32_gflops * 1e9)
                   : 0;
  int64_t epochs = t->cfg.max_steps > 0 ? (t->shape.total_steps + t->shape.steps_per_epoch - 1) /
                                              t->shape.steps_per_epoch
                                        : t->cfg.epochs;
  int64_t epoch = (t->progress.step - 1) / t->shape.steps_per_epoch + 1;
  ty_progress_step_t line = {
      .epoch = epoch,
      .epoch_count = epochs,
      .step = t->progress.step,
      .step_count = t->shape.total_steps,
      .fields = TY_PROGRESS_LOSS | TY_PROGRESS_LR | TY_PROGRESS_GRAD_NORM |
                TY_PROGRESS_TOKENS_PER_S | TY_PROGRESS_ETA | (mfu > 0 ? TY_PROGRESS_MFU : 0),
      .loss = loss,
      .lr = lr,
      .grad_norm = grad_norm,
      .tokens_per_s = tokens_per_s,
      .mfu = mfu,
      .eta_s = seconds_per_step * (double)(t->shape.total_steps - t->progress.step)};
  char text[320];
  ty_progress_step_format(&line, text, sizeof(text));
  bool mixed = t->fallback && ty_session_partition(t->graphs.s_train);
  if (mixed) {
    /* A mixed run says what it moved between its devices, every step. */
    size_t n = strlen(text);
    snprintf(text + n, sizeof(text) - n, " | mixed: %.1f KiB copied",
             (double)t->graphs.step_transfer_bytes / 1024.0);
  }
  bool show = t->progress.step % t->cfg.log_every == 0 || t->progress.step == t->shape.total_steps;
  if (show) {
    char rendered[512];
    ty_progress_mode_t mode = t->report.live_line ? TY_PROGRESS_LIVE : TY_PROGRESS_PLAIN;
    ty_progress_line_render(mode, text, ty_progress_terminal_width(2), rendered, sizeof(rendered));
    fputs(rendered, stderr);
    fflush(stderr);
  }
  ty_jsonl_field_t fields[] = {
      ty_jsonl_int("step", t->progress.step),         ty_jsonl_int("epoch", epoch),
      ty_jsonl_real("loss", loss),           ty_jsonl_real("lr", lr),
      ty_jsonl_real("grad_norm", grad_norm), ty_jsonl_real("tokens_per_s", tokens_per_s),
      ty_jsonl_int("tokens", t->progress.tokens_seen), ty_jsonl_real("mfu", mfu),
      /* only in mixed runs (counted out below otherwise) */
      ty_jsonl_int("mixed_transfer_bytes", (int64_t)t->graphs.step_transfer_bytes),
  };
  size_t field_count = sizeof(fields) / sizeof(fields[0]) - !mixed;
  ty_status_free(ty_jsonl_writer_write(t->report.metrics, fields, field_count));
  ty_tensorboard_scalar_t scalars[] = {
      {"train/loss", loss}, {"train/lr", lr}, {"train/grad_norm", grad_norm},
      {"train/tokens_per_s", tokens_per_s}};
  ty_status_free(ty_tensorboard_writer_add_scalars(t->report.tensorboard, t->progress.step, scalars,
                                                   4, ty_tensorboard_now()));
}

void ty_train_metrics_eval(ty_trainer_t *t) {
  if (isnan(t->progress.last_val_loss)) return;
  ty_train_metrics_line_end(t);
  fprintf(stderr, "step %lld: val loss %.4f\n", (long long)t->progress.step,
          t->progress.last_val_loss);
  ty_jsonl_field_t fields[] = {ty_jsonl_int("step", t->progress.step),
                               ty_jsonl_real("val_loss", t->progress.last_val_loss)};
  ty_status_free(ty_jsonl_writer_write(t->report.metrics, fields, 2));
  ty_status_free(ty_tensorboard_writer_add_scalar(t->report.tensorboard, "val/loss",
                                                  t->progress.step, t->progress.last_val_loss,
                                                  ty_tensorboard_now()));
}

/* The pre-flight plan beside what the device measured (ABI 1.3). */
static void ty_train_metrics_memory(ty_trainer_t *t, FILE *f) {
  if (!t->graphs.plan) return;
  char *plan = NULL, b[32];
  if (ty_preflight_format(t->graphs.plan, "  ", &plan) == TY_OK) {
    fprintf(f, "\nmemory plan (device bytes, computed before step 0):\n%s", plan);
  }
  free(plan);
  ty_abi_executable_memory_t em;
  ty_status_t es = ty_session_executable_memory(t->graphs.s_train, &em);
  if (!es) {
    char arena[32], scratch[32];
    ty_format_bytes(em.arena_bytes, arena, sizeof(arena));
    ty_format_bytes(em.scratch_bytes, scratch, sizeof(scratch));
    fprintf(f, "backend's plan of the train step: arena %s, scratch %s\n", arena, scratch);
  }
  ty_status_free(es);
  ty_abi_device_memory_t dm;
  ty_status_t ms = ty_device_memory(t->device, false, &dm);
  if (ms) {
    fprintf(f, "measured peak device memory: n/a (%s)\n", ty_status_message(ms));
  } else {
    ty_format_bytes(dm.peak_bytes, b, sizeof(b));
    double gap = dm.peak_bytes ? ((double)t->graphs.plan->peak - (double)dm.peak_bytes) /
                                     (double)dm.peak_bytes * 100.0
                               : 0.0;
    fprintf(f, "measured peak device memory: %s (%llu bytes; plan %+.1f%%); measured by the "
            "backend: %s\n",
            b, (unsigned long long)dm.peak_bytes, gap, dm.how);
  }
  ty_status_free(ms);
}

ty_status_t ty_train_metrics_summary(ty_trainer_t *t, double wall_seconds) {
  char path[TY_CFG_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/summary.txt", t->cfg.out);
  /* Built in memory, then written atomically: errors name summary.txt and
   * the cause (a folder in the way, a full disk), never a temporary file. */
  char *text = NULL;
  size_t text_size = 0;
  FILE *f = open_memstream(&text, &text_size);
  if (!f) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing %s", path);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  const ty_abi_device_info_t *info = ty_device_info(t->device);
  double tok_s = t->progress.train_seconds > 0
                     ? (double)t->progress.tokens_seen / t->progress.train_seconds
                     : 0;
  fprintf(f, "trainyard train summary\n\nconfiguration:\n");
  ty_train_config_print(&t->cfg, f);
  fprintf(f, "\nmodel: %s, %lld parameters\n", t->model_config.model_type,
          (long long)ty_llm_parameter_count(&t->graphs.m_train));
  fprintf(f, "backend: %s, device %s (%s)%s\n", ty_backend_name(ty_device_backend(t->device)),
          ty_device_uri(t->device), info->name, info->emulated ? " [emulated]" : "");
  const char *partition = t->fallback ? ty_session_partition(t->graphs.s_train) : NULL;
  if (partition) {
    ty_session_stats_t st = ty_session_stats(t->graphs.s_train);
    fprintf(f, "MIXED RUN: nodes %s refuses ran on %s; the speed below is not %s's\n%s",
            ty_device_label(t->device), ty_device_label(t->fallback), ty_device_label(t->device),
            partition);
    fprintf(f, "host copies between the devices: %llu bytes in all, %llu in the last step\n",
            (unsigned long long)st.transfer_bytes,
            (unsigned long long)t->graphs.step_transfer_bytes);
  }
  fprintf(f, "steps: %lld of %lld\n", (long long)t->progress.step, (long long)t->shape.total_steps);
  fprintf(f, "tokens trained: %lld\n", (long long)t->progress.tokens_seen);
  fprintf(f, "time: %.1f s training, %.1f s wall this run\n", t->progress.train_seconds,
          wall_seconds);
  fprintf(f, "final train loss: %.6f\n", t->progress.last_loss);
  if (isnan(t->progress.last_val_loss)) {
    fprintf(f, "final val loss: n/a (no validation split)\n");
  } else {
    fprintf(f, "final val loss: %.6f\n", t->progress.last_val_loss);
  }
  ty_train_eval_summary(t, f);
  fprintf(f, "throughput: %.1f tokens/s\n", tok_s);
  fprintf(f, "peak host memory (max RSS): %.1f MiB\n", (double)ru.ru_maxrss / 1024.0);
  ty_train_metrics_memory(t, f);
  /* A backend's own account of the step (the dataflow device's placement
   * and simulated figures), beside the summary. */
  char *report = NULL;
  ty_status_t rs = ty_session_report(t->graphs.s_train, &report); /* a backend may give none */
  ty_status_t report_written = TY_OK;
  if (!rs) {
    char report_path[TY_CFG_PATH_MAX + 64];
    snprintf(report_path, sizeof(report_path), "%s/device_report.txt", t->cfg.out);
    report_written = ty_file_write_atomic(report_path, report, strlen(report));
    if (!report_written) fprintf(f, "device report: %s\n", report_path);
  }
  ty_status_free(rs);
  free(report);
  bool ok = fclose(f) == 0;
  ty_status_t s = ok ? TY_OK
                     : ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing %s",
                                      path);
  if (!s) s = ty_file_write_atomic(path, text, text_size);
  free(text);
  if (!s) {
    s = report_written;
  } else {
    ty_status_free(report_written);
  }
  TY_RETURN_IF_ERROR(s);
  char val[48] = "";
  if (!isnan(t->progress.last_val_loss))
    snprintf(val, sizeof(val), ", val loss %.4f", t->progress.last_val_loss);
  fprintf(stderr, "trainyard train: %lld steps, final loss %.4f%s, %.1f tok/s; wrote %s\n",
          (long long)t->progress.step, t->progress.last_loss, val, tok_s, path);
  return TY_OK;
}
