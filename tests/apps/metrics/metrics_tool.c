/* Test driver of the Python metrics tests: writes a TensorBoard event file
 * (and, with a second argument, a metrics.jsonl) from events read on stdin.
 *
 *   metrics_tool LOGDIR [METRICS_JSONL]
 *
 * Prints {"path": "<event file>"} once the file is open, then reads one
 * JSON object per line, {"step": N, "wall_time": T, "scalars": {"tag": v,
 * ...}}, writes it (add_scalar for one value, add_scalars for several) and
 * answers "ok" on stdout, so the caller can read the file while the writer
 * is still open. Closes at end of input. Exit 0, or 1 with the error on
 * stderr. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/jsonl.h"
#include "metrics/tensorboard.h"

#define MAX_SCALARS 16

static int fail(ty_status_t status) {
  fprintf(stderr, "metrics_tool: %s: %s\n", ty_code_name(ty_status_code(status)),
          ty_status_message(status));
  ty_status_free(status);
  return 1;
}

static ty_status_t write_event(ty_tensorboard_writer_t *tb, ty_jsonl_writer_t *jsonl,
                               json_t *event) {
  json_t *scalars = json_object_get(event, "scalars");
  json_t *step = json_object_get(event, "step");
  json_t *wall = json_object_get(event, "wall_time");
  if (!json_is_object(scalars) || !json_is_integer(step) || !json_is_number(wall) ||
      json_object_size(scalars) > MAX_SCALARS) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "bad event line");
  }
  ty_tensorboard_scalar_t values[MAX_SCALARS];
  ty_jsonl_field_t fields[MAX_SCALARS + 1];
  size_t n = 0;
  fields[0] = ty_jsonl_int("step", json_integer_value(step));
  const char *key;
  json_t *value;
  json_object_foreach(scalars, key, value) {
    values[n].tag = key;
    values[n].value = json_number_value(value);
    fields[n + 1] = ty_jsonl_real(key, values[n].value);
    ++n;
  }
  int64_t s = json_integer_value(step);
  double t = json_number_value(wall);
  TY_RETURN_IF_ERROR(n == 1 ? ty_tensorboard_writer_add_scalar(tb, values[0].tag, s,
                                                               values[0].value, t)
                            : ty_tensorboard_writer_add_scalars(tb, s, values, n, t));
  if (jsonl) TY_RETURN_IF_ERROR(ty_jsonl_writer_write(jsonl, fields, n + 1));
  return TY_OK;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: metrics_tool LOGDIR [METRICS_JSONL] < events\n");
    return 2;
  }
  ty_tensorboard_writer_t *tb = NULL;
  ty_jsonl_writer_t *jsonl = NULL;
  ty_status_t status = ty_tensorboard_writer_open(argv[1], &tb);
  if (!status && argc == 3) status = ty_jsonl_writer_open(argv[2], &jsonl);
  if (status) {
    ty_tensorboard_writer_close(tb);
    return fail(status);
  }
  json_t *path = json_pack("{s:s}", "path", ty_tensorboard_writer_path(tb));
  char *text = path ? json_dumps(path, JSON_COMPACT) : NULL;
  printf("%s\n", text ? text : "{}");
  fflush(stdout);
  free(text);
  json_decref(path);

  char line[65536];
  while (!status && fgets(line, sizeof(line), stdin)) {
    json_error_t error;
    json_t *event = json_loads(line, 0, &error);
    if (!event) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT, "bad input line: %s", error.text);
      break;
    }
    status = write_event(tb, jsonl, event);
    json_decref(event);
    if (!status) {
      printf("ok\n");
      fflush(stdout);
    }
  }
  ty_status_t close_tb = ty_tensorboard_writer_close(tb);
  ty_status_t close_jsonl = ty_jsonl_writer_close(jsonl);
  if (status) {
    ty_status_free(close_tb);
    ty_status_free(close_jsonl);
    return fail(status);
  }
  if (close_tb) {
    ty_status_free(close_jsonl);
    return fail(close_tb);
  }
  if (close_jsonl) return fail(close_jsonl);
  return 0;
}
