/* Dataflow artifacts and the on-disk compile cache: a round trip runs
 * identically (with and without the graph); a flipped byte, a truncation, a
 * bad magic or version, an edited target (hash fixed or not), another graph
 * and an inference artifact asked to train are each refused with their own
 * code and message; the cache misses, then hits in a fresh process-like
 * device, replaces a corrupt entry, remembers failures until retry_failed,
 * and keeps only failure records for a backend that cannot serialize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/test_util.h"

#include "hal/sha256.h"
#include "dataflow_test_util.h"
#include "graph/runtime/compile_cache.h"

typedef struct {
  ty_registry_t *registry;
  char tmp[512];
} fixture_t;

static int setup(void **state) {
  fixture_t *f = calloc(1, sizeof(*f));
  f->registry = df_test_registry();
  df_test_tmpdir(f->tmp, sizeof(f->tmp));
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture_t *f = *state;
  ty_registry_destroy(f->registry);
  df_test_rmtree(f->tmp);
  free(f);
  return 0;
}

/* Compiles the fixture's train step (or inference graph) on `uri` and
 * writes its artifact to <tmp>/<name>; returns one step's loss. */
static float compile_to(fixture_t *f, const char *uri, df_test_kind_t kind, const char *name) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(f->registry, uri, &d));
  df_test_graph_t g;
  df_test_graph_build(kind, 0.1, &g);
  ty_session_t *s = NULL;
  TY_EXPECT_OK(ty_session_create(d, g.graph, NULL, &s));
  void *bytes = NULL;
  size_t size = 0;
  TY_EXPECT_OK(ty_session_serialize(s, &bytes, &size));
  char path[1024];
  snprintf(path, sizeof(path), "%s/%s", f->tmp, name);
  TY_EXPECT_OK(ty_file_write_atomic(path, bytes, size));
  free(bytes);
  df_test_bind_step(&g, s, kind, true);
  TY_EXPECT_OK(ty_session_run(s));
  float loss = df_test_loss(s);
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
  return loss;
}

/* Loads <tmp>/<name> on `uri` for the fixture graph of `kind` (NULL graph
 * when !with_graph). */
static ty_status_t load(fixture_t *f, const char *uri, df_test_kind_t kind, bool with_graph,
                        float *out_loss) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(f->registry, uri, &d));
  df_test_graph_t g;
  df_test_graph_build(kind, 0.1, &g);
  char path[1024];
  snprintf(path, sizeof(path), "%s/art", f->tmp);
  ty_session_t *s = NULL;
  ty_status_t st =
      ty_session_create_from_artifact(d, with_graph ? g.graph : NULL, path, NULL, &s);
  if (!st && out_loss) {
    df_test_bind_step(&g, s, kind, true);
    TY_EXPECT_OK(ty_session_run(s));
    *out_loss = df_test_loss(s);
    assert_int_equal(ty_session_stats(s).source, TY_SESSION_ARTIFACT);
  }
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
  return st;
}

static unsigned char *read_art(fixture_t *f, size_t *size) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/art", f->tmp);
  char *data = NULL;
  TY_EXPECT_OK(ty_file_read(path, &ty_artifact_file_kind, &data, size));
  return (unsigned char *)data;
}

static void write_art(fixture_t *f, const unsigned char *data, size_t size) {
  char path[1024];
  snprintf(path, sizeof(path), "%s/art", f->tmp);
  TY_EXPECT_OK(ty_file_write_atomic(path, data, size));
}

static void test_round_trip(void **state) {
  fixture_t *f = *state;
  float compiled = compile_to(f, "dataflow", DF_TEST_TRAIN, "art");
  float with_graph = 0, alone = 0;
  TY_EXPECT_OK(load(f, "dataflow", DF_TEST_TRAIN, true, &with_graph));
  TY_EXPECT_OK(load(f, "dataflow", DF_TEST_TRAIN, false, &alone));
  assert_memory_equal(&compiled, &with_graph, sizeof(float));
  assert_memory_equal(&compiled, &alone, sizeof(float));
  /* Serializing a loaded executable gives the same bytes. */
  size_t size = 0;
  unsigned char *bytes = read_art(f, &size);
  assert_memory_equal(bytes, "TYDFART", 8);
  free(bytes);
}

static void test_corruption_is_data_loss(void **state) {
  fixture_t *f = *state;
  compile_to(f, "dataflow", DF_TEST_TRAIN, "art");
  size_t size = 0;
  unsigned char *good = read_art(f, &size);
  unsigned char *bad = malloc(size);
  /* One flipped byte anywhere in the content. */
  size_t where[] = {48, 60, 100, size / 2, size - 1};
  for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); ++i) {
    memcpy(bad, good, size);
    bad[where[i]] ^= 0x40;
    write_art(f, bad, size);
    TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                     "the artifact's content hash does not match its content");
  }
  /* Truncated, at the end and inside the header. */
  write_art(f, good, size - 1);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                   "content hash does not match");
  write_art(f, good, 30);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                   "the artifact is truncated: 30 bytes");
  /* Not an artifact at all. */
  memcpy(bad, good, size);
  bad[0] = 'X';
  write_art(f, bad, size);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                   "not a dataflow artifact");
  /* Another format version. */
  memcpy(bad, good, size);
  bad[8] = 7;
  write_art(f, bad, size);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_FAILED_PRECONDITION,
                   "artifact format version 7; this plugin");
  /* The target edited: without fixing the hash it is corruption; with it,
   * a target the device does not have. */
  memcpy(bad, good, size);
  bad[56] = 2; /* tiles */
  write_art(f, bad, size);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                   "content hash does not match");
  assert_true(ty_sha256(bad + 48, size - 48, bad + 16));
  write_art(f, bad, size);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_FAILED_PRECONDITION,
                   "target mismatch: the artifact was compiled for tiles=2 mem_per_tile=64 MiB "
                   "clock_mhz=1000 bandwidth_gbs=200, but the device is tiles=4");
  /* On a device that has that target, the rest of the file (placed on 4
   * tiles) does not agree with it. */
  TY_EXPECT_STATUS(load(f, "dataflow?tiles=2", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                   "the artifact is malformed at byte");
  /* The options word (before "END!") with a bit no writer sets, hash
   * fixed: malformed, naming the field. */
  memcpy(bad, good, size);
  bad[size - 8] |= 0x80;
  assert_true(ty_sha256(bad + 48, size - 48, bad + 16));
  write_art(f, bad, size);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_DATA_LOSS,
                   "(options) although its content hash matches");
  /* A missing file. */
  char path[1024];
  snprintf(path, sizeof(path), "%s/art", f->tmp);
  remove(path);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_NOT_FOUND,
                   "cannot read compiled artifact");
  /* A folder where the artifact should be: the wrong kind of file, not a
   * damaged one (issue 12: it was DATA_LOSS). */
  assert_int_equal(mkdir(path, 0777), 0);
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_FAILED_PRECONDITION,
                   "is a folder, not a file");
  rmdir(path);
  free(bad);
  free(good);
}

static void test_target_and_graph_mismatch(void **state) {
  fixture_t *f = *state;
  compile_to(f, "dataflow?clock_mhz=500", DF_TEST_TRAIN, "art");
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_FAILED_PRECONDITION,
                   "clock_mhz=500");
  TY_EXPECT_STATUS(load(f, "dataflow?clock_mhz=500", DF_TEST_TRAIN_SGD, true, NULL),
                   TY_CODE_FAILED_PRECONDITION,
                   "was compiled from another graph than this run's");
  TY_EXPECT_STATUS(load(f, "dataflow?clock_mhz=500", DF_TEST_TRAIN_SGD, true, NULL),
                   TY_CODE_FAILED_PRECONDITION, "that needs a recompile");
  compile_to(f, "dataflow", DF_TEST_INFERENCE, "art");
  TY_EXPECT_STATUS(load(f, "dataflow", DF_TEST_TRAIN, true, NULL), TY_CODE_FAILED_PRECONDITION,
                   "an inference artifact asked to train");
  float loss = 0;
  TY_EXPECT_OK(load(f, "dataflow", DF_TEST_INFERENCE, true, &loss));
  /* A backend that cannot load artifacts says so. */
  TY_EXPECT_STATUS(load(f, "cpu", DF_TEST_INFERENCE, true, NULL), TY_CODE_UNIMPLEMENTED,
                   "backend 'cpu' cannot load artifacts");
}

/* A session of the train step on a fresh device with the cache folder. */
static ty_status_t cached(fixture_t *f, const char *uri, df_test_kind_t kind, bool retry,
                          ty_session_source_t *out_source) {
  ty_device_t *d = NULL;
  TY_EXPECT_OK(ty_device_open(f->registry, uri, &d));
  df_test_graph_t g;
  df_test_graph_build(kind, 0, &g);
  char dir[600];
  snprintf(dir, sizeof(dir), "%s/cache", f->tmp);
  ty_session_options_t o = {.cache_dir = dir, .retry_failed = retry};
  ty_session_t *s = NULL;
  ty_status_t st = ty_session_create(d, g.graph, &o, &s);
  if (!st) {
    *out_source = ty_session_stats(s).source;
    df_test_bind_step(&g, s, kind, false);
    TY_EXPECT_OK(ty_session_run(s));
  }
  ty_session_destroy(s);
  df_test_graph_free(&g);
  ty_device_close(d);
  return st;
}

static void test_disk_cache(void **state) {
  fixture_t *f = *state;
  char entries[700];
  snprintf(entries, sizeof(entries), "%s/cache/compile-v1/dataflow", f->tmp);
  ty_session_source_t source;
  TY_EXPECT_OK(cached(f, "dataflow", DF_TEST_TRAIN, false, &source));
  assert_int_equal(source, TY_SESSION_DISK_MISS);
  assert_int_equal(df_test_count_files(entries, ".art"), 1);
  TY_EXPECT_OK(cached(f, "dataflow", DF_TEST_TRAIN, false, &source));
  assert_int_equal(source, TY_SESSION_DISK_HIT);
  /* Another target is another key. */
  TY_EXPECT_OK(cached(f, "dataflow?tiles=1", DF_TEST_TRAIN, false, &source));
  assert_int_equal(source, TY_SESSION_DISK_MISS);
  assert_int_equal(df_test_count_files(entries, ".art"), 2);
  /* A corrupt entry is a miss that replaces it. */
  char cmd[1600];
  snprintf(cmd, sizeof(cmd), "for e in %s/*.art; do printf X | dd of=$e bs=1 seek=200 conv=notrunc "
                             "status=none; done",
           entries);
  assert_int_equal(system(cmd), 0);
  TY_EXPECT_OK(cached(f, "dataflow", DF_TEST_TRAIN, false, &source));
  assert_int_equal(source, TY_SESSION_DISK_MISS);
  TY_EXPECT_OK(cached(f, "dataflow", DF_TEST_TRAIN, false, &source));
  assert_int_equal(source, TY_SESSION_DISK_HIT);
  assert_int_equal(df_test_count_files(entries, "hidden"), 0);
  /* A failure is remembered until retry_failed. */
  TY_EXPECT_STATUS(cached(f, "dataflow", DF_TEST_ACCUMULATE, false, &source),
                   TY_CODE_FAILED_PRECONDITION, "outside an optimizer update");
  assert_int_equal(df_test_count_files(entries, ".fail"), 1);
  ty_status_t st = cached(f, "dataflow", DF_TEST_ACCUMULATE, false, &source);
  TY_EXPECT_CONTAINS(ty_status_message(st), "outside an optimizer update");
  TY_EXPECT_STATUS(st, TY_CODE_FAILED_PRECONDITION,
                   "a cached compile failure, recorded 20");
  st = cached(f, "dataflow", DF_TEST_ACCUMULATE, true, &source);
  assert_null(strstr(ty_status_message(st), "cached compile failure"));
  TY_EXPECT_STATUS(st, TY_CODE_FAILED_PRECONDITION, "outside an optimizer update");
  /* The cpu plugin cannot serialize: compiled every time, nothing stored. */
  TY_EXPECT_OK(cached(f, "cpu", DF_TEST_TRAIN, false, &source));
  assert_int_equal(source, TY_SESSION_DISK_UNSERIALIZABLE);
  snprintf(entries, sizeof(entries), "%s/cache/compile-v1/cpu", f->tmp);
  assert_int_equal(df_test_count_files(entries, ".art"), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corruption_is_data_loss, setup, teardown),
      cmocka_unit_test_setup_teardown(test_target_and_graph_mismatch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_disk_cache, setup, teardown),
  };
  return cmocka_run_group_tests_name("dataflow artifacts", tests, NULL, NULL);
}
