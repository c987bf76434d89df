/* metrics.jsonl: the exact text of a line, reals that read back bit for bit
 * (random doubles and floats, seeded, and the edge values), appending,
 * truncation on resume (torn last line, malformed lines, file mode, no temp
 * file left), and write errors that leave the file whole. */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test_util.h"
#include "metrics/jsonl.h"
#include "metrics_test_util.h"

static char *format(const ty_jsonl_field_t *fields, size_t count) {
  char *line = NULL;
  TY_EXPECT_OK(ty_jsonl_line_format(fields, count, &line));
  assert_non_null(line);
  return line;
}

static void test_line_text(void **state) {
  (void)state;
  ty_jsonl_field_t f[] = {
      ty_jsonl_int("step", 120),         ty_jsonl_real("loss", 3.412),
      ty_jsonl_real("lr", 0.00024),      ty_jsonl_real32("loss32", 3.412f),
      ty_jsonl_real("big", 1e22),        ty_jsonl_real("whole", 5.0),
      ty_jsonl_string("note", "a\"b\n\xc3\xa9"), ty_jsonl_bool("eval", 1),
      ty_jsonl_real("nan", NAN),         ty_jsonl_real("inf", -INFINITY),
      ty_jsonl_int("min", INT64_MIN),
  };
  char *line = format(f, sizeof(f) / sizeof(f[0]));
  assert_string_equal(line,
                      "{\"step\": 120, \"loss\": 3.412, \"lr\": 0.00024, \"loss32\": 3.412, "
                      "\"big\": 1e22, \"whole\": 5.0, \"note\": \"a\\\"b\\n\xc3\xa9\", "
                      "\"eval\": true, \"nan\": null, \"inf\": null, "
                      "\"min\": -9223372036854775808}\n");
  free(line);
  line = format(NULL, 0);
  assert_string_equal(line, "{}\n");
  free(line);
  /* token ids of a training sample */
  const int64_t ids[] = {95, 0, -1, INT64_MAX};
  ty_jsonl_field_t g[] = {ty_jsonl_int("step", 3), ty_jsonl_ints("sample_ids", ids, 4),
                          ty_jsonl_ints("none", NULL, 0)};
  line = format(g, 3);
  assert_string_equal(line, "{\"step\": 3, \"sample_ids\": [95, 0, -1, 9223372036854775807], "
                            "\"none\": []}\n");
  free(line);
}

static void test_line_refusals(void **state) {
  (void)state;
  char *line = (char *)&line;
  ty_jsonl_field_t dup[] = {ty_jsonl_int("step", 1), ty_jsonl_real("step", 2)};
  TY_EXPECT_STATUS(ty_jsonl_line_format(dup, 2, &line), TY_CODE_INVALID_ARGUMENT,
                   "'step' appears twice");
  assert_null(line);
  ty_jsonl_field_t nokey[] = {ty_jsonl_int(NULL, 1)};
  TY_EXPECT_STATUS(ty_jsonl_line_format(nokey, 1, &line), TY_CODE_INVALID_ARGUMENT, "no key");
  ty_jsonl_field_t badkey[] = {ty_jsonl_int("caf\xe9", 1)};
  TY_EXPECT_STATUS(ty_jsonl_line_format(badkey, 1, &line), TY_CODE_INVALID_ARGUMENT, "UTF-8");
  ty_jsonl_field_t badstr[] = {ty_jsonl_string("s", "\xff")};
  TY_EXPECT_STATUS(ty_jsonl_line_format(badstr, 1, &line), TY_CODE_INVALID_ARGUMENT,
                   "'s' is not valid UTF-8");
  ty_jsonl_field_t nullstr[] = {ty_jsonl_string("s", NULL)};
  TY_EXPECT_STATUS(ty_jsonl_line_format(nullstr, 1, &line), TY_CODE_INVALID_ARGUMENT, "NULL");
  ty_jsonl_field_t kind = {.key = "k", .kind = (ty_jsonl_kind_t)42};
  TY_EXPECT_STATUS(ty_jsonl_line_format(&kind, 1, &line), TY_CODE_INVALID_ARGUMENT, "kind 42");
}

/* Parses the one value of a {"v": ...} line with jansson. */
static double parse_value(const char *line) {
  json_error_t error;
  json_t *obj = json_loads(line, 0, &error);
  if (!obj) fail_msg("jansson cannot read %s: %s", line, error.text);
  json_t *v = json_object_get(obj, "v");
  assert_true(json_is_number(v));
  double d = json_number_value(v);
  json_decref(obj);
  return d;
}

static void expect_double_round_trip(double d) {
  ty_jsonl_field_t f = ty_jsonl_real("v", d);
  char *line = format(&f, 1);
  double back = parse_value(line);
  if (memcmp(&back, &d, sizeof(d)) != 0) fail_msg("%.17g wrote %s read %.17g", d, line, back);
  free(line);
}

static void test_doubles_round_trip(void **state) {
  (void)state;
  const double edges[] = {0.0,     -0.0,    0.1,      1.0 / 3.0, 2.4e-4, 1e-300,
                          5e-324,  DBL_MIN, DBL_MAX,  -DBL_MAX,  1e16,   123456789012345678.0,
                          9007199254740993.0, 0.30000000000000004, 1e-5, 100000.0};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); ++i) expect_double_round_trip(edges[i]);
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = ty_test_rng_next(&rng);
    double d;
    memcpy(&d, &bits, sizeof(d));
    if (!isfinite(d)) continue;
    expect_double_round_trip(d);
    /* Values of training-metric size too, not only random exponents. */
    expect_double_round_trip((double)(bits >> 11) * 0x1p-53 * 10.0);
  }
}

static void test_floats_round_trip(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed() ^ 7);
  for (int i = 0; i < 20000; ++i) {
    uint32_t bits = (uint32_t)ty_test_rng_next(&rng);
    float f;
    memcpy(&f, &bits, sizeof(f));
    if (!isfinite(f)) continue;
    ty_jsonl_field_t field = ty_jsonl_real32("v", f);
    char *line = format(&field, 1);
    float back = (float)parse_value(line);
    if (memcmp(&back, &f, sizeof(f)) != 0) fail_msg("%.9g wrote %s", (double)f, line);
    /* At most 9 significant digits (a float's shortest form). */
    assert_true(strlen(line) <= strlen("{\"v\": -1.23456789e-45}\n"));
    free(line);
  }
  ty_jsonl_field_t pi = ty_jsonl_real32("v", 3.14159265f);
  char *line = format(&pi, 1);
  assert_string_equal(line, "{\"v\": 3.1415927}\n");
  free(line);
}

static char *path_in(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  assert_non_null(p);
  snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static void write_steps(ty_jsonl_writer_t *w, int from, int to) {
  for (int s = from; s <= to; ++s) {
    ty_jsonl_field_t f[] = {ty_jsonl_int("step", s), ty_jsonl_real("loss", 10.0 / s)};
    TY_EXPECT_OK(ty_jsonl_writer_write(w, f, 2));
  }
}

static int count_lines(const char *text) {
  int n = 0;
  for (const char *p = text; *p; ++p) n += *p == '\n';
  return n;
}

static void test_append_and_reopen(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  char *path = path_in(dir, "metrics.jsonl");
  ty_jsonl_writer_t *w = NULL;
  TY_EXPECT_OK(ty_jsonl_writer_open(path, &w));
  assert_string_equal(ty_jsonl_writer_path(w), path);
  write_steps(w, 1, 5);
  /* Each line is in the file as soon as the call returns. */
  char *text = ty_mt_read_file(path, NULL);
  assert_int_equal(count_lines(text), 5);
  free(text);
  TY_EXPECT_OK(ty_jsonl_writer_close(w));
  TY_EXPECT_OK(ty_jsonl_writer_open(path, &w));
  write_steps(w, 6, 7);
  TY_EXPECT_OK(ty_jsonl_writer_close(w));
  TY_EXPECT_OK(ty_jsonl_writer_close(NULL));
  text = ty_mt_read_file(path, NULL);
  assert_int_equal(count_lines(text), 7);
  assert_non_null(strstr(text, "{\"step\": 4, \"loss\": 2.5}\n{\"step\": 5, \"loss\": 2.0}\n"));
  free(text);
  free(path);
  ty_mt_remove_tree(dir);
  free(dir);
}

static void test_truncate_to_step(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  char *path = path_in(dir, "metrics.jsonl");
  ty_jsonl_writer_t *w = NULL;
  TY_EXPECT_OK(ty_jsonl_writer_open(path, &w));
  write_steps(w, 1, 10);
  TY_EXPECT_OK(ty_jsonl_writer_close(w));
  char *full = ty_mt_read_file(path, NULL);
  assert_int_equal(chmod(path, 0640), 0);

  size_t kept = 99, removed = 99;
  struct stat before, after;
  assert_int_equal(stat(path, &before), 0);
  /* Nothing past step 10: the file is not rewritten. */
  TY_EXPECT_OK(ty_jsonl_truncate_to_step(path, 10, &kept, &removed));
  assert_int_equal(kept, 10);
  assert_int_equal(removed, 0);
  assert_int_equal(stat(path, &after), 0);
  assert_int_equal(before.st_ino, after.st_ino);

  TY_EXPECT_OK(ty_jsonl_truncate_to_step(path, 6, &kept, &removed));
  assert_int_equal(kept, 6);
  assert_int_equal(removed, 4);
  char *text = ty_mt_read_file(path, NULL);
  const char *cut = strstr(full, "{\"step\": 7,");
  assert_non_null(cut);
  assert_int_equal(strlen(text), (size_t)(cut - full));
  assert_memory_equal(text, full, strlen(text));
  free(text);
  assert_int_equal(stat(path, &after), 0);
  assert_int_equal(after.st_mode & 0777, 0640);
  assert_int_not_equal(before.st_ino, after.st_ino); /* replaced by rename */
  /* No temporary file stays behind. */
  free(ty_mt_only_file(dir, "metrics.jsonl"));

  /* Appending after a resume goes on from there. */
  TY_EXPECT_OK(ty_jsonl_writer_open(path, &w));
  write_steps(w, 7, 8);
  TY_EXPECT_OK(ty_jsonl_writer_close(w));
  text = ty_mt_read_file(path, NULL);
  assert_int_equal(count_lines(text), 8);
  free(text);

  TY_EXPECT_OK(ty_jsonl_truncate_to_step(path, 0, &kept, &removed));
  assert_int_equal(kept, 0);
  assert_int_equal(removed, 8);
  text = ty_mt_read_file(path, NULL);
  assert_string_equal(text, "");
  free(text);
  free(full);

  /* A missing file has nothing to truncate. */
  char *missing = path_in(dir, "none.jsonl");
  TY_EXPECT_OK(ty_jsonl_truncate_to_step(missing, 3, &kept, &removed));
  assert_int_equal(kept + removed, 0);
  free(missing);
  free(path);
  ty_mt_remove_tree(dir);
  free(dir);
}

static void test_torn_and_malformed_lines(void **state) {
  (void)state;
  char *dir = ty_mt_temp_dir();
  char *path = path_in(dir, "metrics.jsonl");
  /* A run that stopped mid-write. */
  ty_mt_write_file(path, "{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"loss\": 1.5}\n{\"step\": 3, \"lo");
  ty_jsonl_writer_t *w = (ty_jsonl_writer_t *)&w;
  TY_EXPECT_STATUS(ty_jsonl_writer_open(path, &w), TY_CODE_FAILED_PRECONDITION,
                   "incomplete line");
  assert_null(w);
  size_t kept, removed;
  TY_EXPECT_OK(ty_jsonl_truncate_to_step(path, 100, &kept, &removed));
  assert_int_equal(kept, 2);
  assert_int_equal(removed, 1);
  TY_EXPECT_OK(ty_jsonl_writer_open(path, &w));
  TY_EXPECT_OK(ty_jsonl_writer_close(w));

  /* Complete lines that are not metrics: refused, the file left alone. */
  static const char *const bad[] = {
      "{\"step\": 1}\n{\"step\": 2}\nnot json\n",
      "{\"step\": 1}\n{\"step\": 2}\n[1, 2]\n",
      "{\"step\": 1}\n{\"step\": 2}\n{\"loss\": 3.0}\n",
      "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3.5}\n",
      "{\"step\": 1}\n{\"step\": 2}\n\n",
      /* Binary data where the cut-off line would be: refused, as a bad line
       * is (it used to be dropped as a torn line, the whole file with it
       * when it held no newline at all). */
      "{\"step\": 1}\n{\"step\": 2}\n\177ELF\002\001",
      "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3, \"lo\x01ss",
  };
  char where[600];
  snprintf(where, sizeof(where), "%s:3", path);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    ty_mt_write_file(path, bad[i]);
    TY_EXPECT_STATUS(ty_jsonl_truncate_to_step(path, 1, &kept, &removed), TY_CODE_DATA_LOSS,
                     where);
    char *text = ty_mt_read_file(path, NULL);
    assert_string_equal(text, bad[i]);
    free(text);
  }
  free(path);
  ty_mt_remove_tree(dir);
  free(dir);
}

static void test_write_errors(void **state) {
  (void)state;
  ty_jsonl_writer_t *w = NULL;
  /* A full device. */
  TY_EXPECT_OK(ty_jsonl_writer_open("/dev/full", &w));
  ty_jsonl_field_t f[] = {ty_jsonl_int("step", 1), ty_jsonl_real("loss", 0.5)};
  TY_EXPECT_STATUS(ty_jsonl_writer_write(w, f, 2), TY_CODE_RESOURCE_EXHAUSTED, "/dev/full");
  ty_status_free(ty_jsonl_writer_close(w)); /* fsync of a device may or may not fail */

  char *dir = ty_mt_temp_dir();
  char *missing = path_in(dir, "no/such/metrics.jsonl");
  TY_EXPECT_STATUS(ty_jsonl_writer_open(missing, &w), TY_CODE_NOT_FOUND, missing);
  free(missing);

  /* A line cut short by a full disk is removed again (RLIMIT_FSIZE makes
   * the write stop part way, as ENOSPC would). */
  char *path = path_in(dir, "metrics.jsonl");
  TY_EXPECT_OK(ty_jsonl_writer_open(path, &w));
  write_steps(w, 1, 2);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  struct rlimit old;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  struct rlimit limited = {(rlim_t)st.st_size + 10, old.rlim_max};
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &limited), 0);
  ty_status_t status = ty_jsonl_writer_write(w, f, 2);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, old_handler);
  TY_EXPECT_STATUS(status, TY_CODE_RESOURCE_EXHAUSTED, path);
  struct stat now;
  assert_int_equal(stat(path, &now), 0);
  assert_int_equal(now.st_size, st.st_size);
  write_steps(w, 3, 3);
  TY_EXPECT_OK(ty_jsonl_writer_close(w));
  size_t kept, removed;
  TY_EXPECT_OK(ty_jsonl_truncate_to_step(path, 100, &kept, &removed));
  assert_int_equal(kept, 3);
  assert_int_equal(removed, 0);
  free(path);
  ty_mt_remove_tree(dir);
  free(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_line_text),
      cmocka_unit_test(test_line_refusals),
      cmocka_unit_test(test_doubles_round_trip),
      cmocka_unit_test(test_floats_round_trip),
      cmocka_unit_test(test_append_and_reopen),
      cmocka_unit_test(test_truncate_to_step),
      cmocka_unit_test(test_torn_and_malformed_lines),
      cmocka_unit_test(test_write_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
