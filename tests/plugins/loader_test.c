/* The plugin registry against rogue plugins (tests/plugins/rogue_plugin.c),
 * a file that is not a library, duplicate and shadowing search paths,
 * missing paths, and TRAINYARD_BACKEND_PATH. Every rogue candidate must be
 * rejected exactly once, with the right kind and a reason naming the fault,
 * while cpu and template still load. */
#include "common/test_util.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hal/device.h"
#include "hal/path_trust.h"
#include "hal/registry.h"
#include "rogue_plugin.h"

/* ---- helpers ---- */

/* In-tree plugins that are built only where their headers are found and
 * whose runtime a machine may lack (then rejected as unavailable). The
 * folder checks here are about cpu and template, so every count and index
 * below leaves these out; tests/backends checks them. */
static bool optional_backend(const char *name) {
  return strcmp(name, "opencl") == 0 || strcmp(name, "cuda") == 0;
}

static bool core_rejection(const ty_rejected_candidate_t *c) {
  return !(c->kind == TY_REJECT_UNAVAILABLE && optional_backend(c->name));
}

static size_t core_backend_count(const ty_registry_t *r) {
  size_t n = 0;
  for (size_t i = 0; i < ty_registry_backend_count(r); ++i) {
    n += !optional_backend(ty_backend_name(ty_registry_backend_at(r, i)));
  }
  return n;
}

static ty_backend_t *core_backend_at(const ty_registry_t *r, size_t index) {
  for (size_t i = 0; i < ty_registry_backend_count(r); ++i) {
    ty_backend_t *b = ty_registry_backend_at(r, i);
    if (!optional_backend(ty_backend_name(b)) && index-- == 0) return b;
  }
  return NULL;
}

static size_t core_rejected_count(const ty_registry_t *r) {
  size_t n = 0;
  for (size_t i = 0; i < ty_registry_rejected_count(r); ++i) {
    n += core_rejection(ty_registry_rejected_at(r, i));
  }
  return n;
}

static const ty_rejected_candidate_t *core_rejected_at(const ty_registry_t *r, size_t index) {
  for (size_t i = 0; i < ty_registry_rejected_count(r); ++i) {
    const ty_rejected_candidate_t *c = ty_registry_rejected_at(r, i);
    if (core_rejection(c) && index-- == 0) return c;
  }
  return NULL;
}

static ty_registry_t *registry_from(const char *const *paths, size_t count, bool use_env) {
  ty_registry_options_t options = {
      .explicit_paths = paths,
      .explicit_path_count = count,
      .use_env = use_env,
  };
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  assert_non_null(r);
  return r;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* How many in-tree plugins `r` should have loaded. */
static size_t intree_count(const ty_registry_t *r) {
  char names[16][32];
  return ty_test_intree_plugins(TY_TEST_INTREE_PLUGINS, r, names, 16);
}

/* Asserts the loaded backends are exactly the in-tree plugins (cpu,
 * template, ... in name order: TY_TEST_INTREE_PLUGINS, less an optional
 * plugin this machine cannot run), loaded from `dir` (as given). */
static void expect_cpu_and_template_from(const ty_registry_t *r, const char *dir) {
  char names[16][32];
  size_t count = ty_test_intree_plugins(TY_TEST_INTREE_PLUGINS, r, names, 16);
  assert_true(count >= 2);
  assert_int_equal(ty_registry_backend_count(r), count);
  for (size_t i = 0; i < count; ++i) {
    ty_backend_t *b = ty_registry_backend_at(r, i);
    assert_non_null(b);
    assert_string_equal(ty_backend_name(b), names[i]);
    char expected_path[PATH_MAX];
    snprintf(expected_path, sizeof(expected_path), "%s/libty_backend_%s.so", dir, names[i]);
    char real_expected[PATH_MAX], real_got[PATH_MAX];
    assert_non_null(realpath(expected_path, real_expected));
    assert_non_null(realpath(ty_backend_path(b), real_got));
    assert_string_equal(real_got, real_expected);
  }
  assert_null(ty_registry_backend_at(r, count));
}

/* The one rejected candidate whose file name is `file`; fails if there is
 * none or more than one. */
static const ty_rejected_candidate_t *rejected_once(const ty_registry_t *r,
                                                    const char *file) {
  const ty_rejected_candidate_t *found = NULL;
  size_t hits = 0;
  for (size_t i = 0; i < core_rejected_count(r); ++i) {
    const ty_rejected_candidate_t *c = core_rejected_at(r, i);
    if (strcmp(base_name(c->path), file) == 0) {
      found = c;
      ++hits;
    }
  }
  if (hits != 1) {
    print_error("%s was rejected %zu times, expected once\n", file, hits);
    fail();
  }
  return found;
}

typedef struct expected_rejection_t {
  const char *file;
  const char *name;
  ty_reject_kind_t kind;
  const char *facts[3]; /* each must appear in the reason; NULL ends */
} expected_rejection_t;

static void expect_rejection(const ty_registry_t *r, const expected_rejection_t *e) {
  const ty_rejected_candidate_t *c = rejected_once(r, e->file);
  if (c->kind != e->kind) {
    print_error("%s: rejected as %s, expected %s (reason: %s)\n", e->file,
                ty_reject_kind_name(c->kind), ty_reject_kind_name(e->kind), c->reason);
    fail();
  }
  assert_string_equal(c->name, e->name);
  char expected_path[PATH_MAX];
  snprintf(expected_path, sizeof(expected_path), "%s/%s", TY_TEST_ROGUE_DIR, e->file);
  assert_string_equal(c->path, expected_path);
  for (size_t i = 0; i < 3 && e->facts[i]; ++i) {
    TY_EXPECT_CONTAINS(c->reason, e->facts[i]);
  }
}

static char small_size_fact[64];
static char min_size_fact[64];

static const expected_rejection_t kRogues[] = {
    {"libty_backend_rogue_abi.so", "rogue_abi", TY_REJECT_ABI_MISMATCH,
     {"plugin ABI major 99", "host ABI major 1", "ABI 99.0"}},
    {"libty_backend_rogue_noentry.so", "rogue_noentry", TY_REJECT_NO_ENTRY_POINT,
     {"no exported entry point ty_backend_query", "TY_BACKEND_EXPORT", NULL}},
    {"libty_backend_rogue_small.so", "rogue_small", TY_REJECT_TABLE_TOO_SMALL,
     {small_size_fact, min_size_fact, NULL}},
    {"libty_backend_rogue_null.so", "rogue_null", TY_REJECT_QUERY_NULL,
     {"returned NULL: the plugin cannot serve host ABI major 1", "ty_backend_query(1, ", NULL}},
    {"libty_backend_rogue_unavailable.so", "rogue_unavailable", TY_REJECT_UNAVAILABLE,
     {"UNAVAILABLE: ", ROGUE_UNAVAILABLE_MESSAGE, NULL}},
    {"libty_backend_rogue_create_failed.so", "rogue_create_failed",
     TY_REJECT_CREATE_FAILED, {"INTERNAL: ", ROGUE_CREATE_FAILED_MESSAGE, NULL}},
    {"libty_backend_rogue_mismatch.so", "rogue_mismatch", TY_REJECT_INVALID_TABLE,
     {"named '" ROGUE_MISMATCH_TABLE_NAME "'", "named for 'rogue_mismatch'", NULL}},
    {"libty_backend_rogue_missing.so", "rogue_missing", TY_REJECT_INVALID_TABLE,
     {"lacks required entry 'device_info'", NULL, NULL}},
    {"libty_backend_garbage.so", "garbage", TY_REJECT_DLOPEN,
     {"dlopen failed: ", "libty_backend_garbage.so", NULL}},
};
#define kRogueCount (sizeof(kRogues) / sizeof(kRogues[0]))

static void expect_every_rogue_rejected_once(const ty_registry_t *r) {
  for (size_t i = 0; i < kRogueCount; ++i) expect_rejection(r, &kRogues[i]);
  /* dlerror's own words, whichever way glibc puts it. */
  const ty_rejected_candidate_t *garbage = rejected_once(r, "libty_backend_garbage.so");
  if (!strstr(garbage->reason, "invalid ELF header") &&
      !strstr(garbage->reason, "file too short")) {
    print_error("garbage reason lacks dlerror text: %s\n", garbage->reason);
    fail();
  }
}

static int setup_facts(void **state) {
  (void)state;
  snprintf(small_size_fact, sizeof(small_size_fact), "struct_size %zu is smaller",
           (size_t)ROGUE_SMALL_STRUCT_SIZE);
  snprintf(min_size_fact, sizeof(min_size_fact), "the %zu bytes of entries required",
           (size_t)TY_BACKEND_API_MIN_SIZE);
  setenv("TRAINYARD_BACKEND_PATH", "", 1);
  return 0;
}

/* A temporary folder for copies of plugins and links to folders. */
typedef struct temp_dir_t {
  char path[256];
  char files[4][512];
  size_t file_count;
} temp_dir_t;

/* Formats `dir`/`name` into `out`, failing on truncation. */
static void join_path(char *out, size_t capacity, const char *dir, const char *name) {
  int n = snprintf(out, capacity, "%s/%s", dir, name);
  assert_true(n > 0 && (size_t)n < capacity);
}

static void temp_dir_create(temp_dir_t *t) {
  memset(t, 0, sizeof(*t));
  const char *tmp = getenv("TMPDIR");
  join_path(t->path, sizeof(t->path), tmp && *tmp ? tmp : "/tmp", "ty_loader_test_XXXXXX");
  assert_non_null(mkdtemp(t->path));
}

/* Adds `name` to the folder's list of entries; returns its full path. */
static const char *temp_dir_entry(temp_dir_t *t, const char *name) {
  assert_true(t->file_count < 4);
  char full[512];
  join_path(full, sizeof(full), t->path, name);
  memcpy(t->files[t->file_count], full, sizeof(full));
  return t->files[t->file_count++];
}

static void temp_dir_copy_in(temp_dir_t *t, const char *src_path) {
  const char *dst_path = temp_dir_entry(t, base_name(src_path));
  FILE *in = fopen(src_path, "rb");
  assert_non_null(in);
  FILE *out = fopen(dst_path, "wb");
  assert_non_null(out);
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0) {
    assert_int_equal(fwrite(chunk, 1, n, out), n);
  }
  fclose(in);
  assert_int_equal(fclose(out), 0);
}

static const char *temp_dir_symlink(temp_dir_t *t, const char *target, const char *name) {
  const char *link_path = temp_dir_entry(t, name);
  assert_int_equal(symlink(target, link_path), 0);
  return link_path;
}

static void temp_dir_remove(temp_dir_t *t) {
  for (size_t i = 0; i < t->file_count; ++i) unlink(t->files[i]);
  rmdir(t->path);
}

/* ---- tests ---- */

static void test_rogues_rejected_normal_plugins_loaded(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_ROGUE_DIR, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  expect_every_rogue_rejected_once(r);
  assert_int_equal(core_rejected_count(r), kRogueCount);
  assert_null(core_rejected_at(r, kRogueCount));
  /* Both folders are reported as searched, in order. */
  assert_int_equal(ty_registry_search_dir_count(r), 2);
  char real[PATH_MAX];
  assert_non_null(realpath(TY_TEST_ROGUE_DIR, real));
  assert_string_equal(ty_registry_search_dir_at(r, 0), real);
  assert_non_null(realpath(TY_TEST_PLUGIN_DIR, real));
  assert_string_equal(ty_registry_search_dir_at(r, 1), real);
  assert_null(ty_registry_search_dir_at(r, 2));
  ty_registry_destroy(r);
}

static void test_rogue_folder_twice_still_rejects_once(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_ROGUE_DIR, TY_TEST_ROGUE_DIR "/.", TY_TEST_PLUGIN_DIR,
                         TY_TEST_ROGUE_DIR "/libty_backend_rogue_abi.so"};
  ty_registry_t *r = registry_from(paths, 4, false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  expect_every_rogue_rejected_once(r);
  assert_int_equal(core_rejected_count(r), kRogueCount);
  ty_registry_destroy(r);
}

static void test_normal_folder_holds_no_rogues(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 1, false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  for (size_t i = 0; i < core_rejected_count(r); ++i) {
    print_error("unexpected rejection: %s: %s\n", core_rejected_at(r, i)->path,
                core_rejected_at(r, i)->reason);
  }
  assert_int_equal(core_rejected_count(r), 0);
  ty_registry_destroy(r);
}

static void test_same_folder_by_other_spellings_loads_once(void **state) {
  (void)state;
  temp_dir_t t;
  temp_dir_create(&t);
  const char *via_link = temp_dir_symlink(&t, TY_TEST_PLUGIN_DIR, "plugins-link");
  const char *paths[] = {
      TY_TEST_PLUGIN_DIR,
      TY_TEST_PLUGIN_DIR "/",
      TY_TEST_PLUGIN_DIR "/./",
      TY_TEST_PLUGIN_DIR "/../backends",
      via_link,
      TY_TEST_PLUGIN_DIR "/libty_backend_cpu.so",
  };
  ty_registry_t *r = registry_from(paths, sizeof(paths) / sizeof(paths[0]), false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  assert_int_equal(core_rejected_count(r), 0);
  assert_int_equal(ty_registry_search_dir_count(r), 1);
  ty_registry_destroy(r);
  temp_dir_remove(&t);
}

static void test_copy_in_later_folder_is_shadowed(void **state) {
  (void)state;
  temp_dir_t t;
  temp_dir_create(&t);
  temp_dir_copy_in(&t, TY_TEST_PLUGIN_DIR "/libty_backend_cpu.so");

  const char *paths[] = {TY_TEST_PLUGIN_DIR, t.path};
  ty_registry_t *r = registry_from(paths, 2, false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  assert_int_equal(core_rejected_count(r), 1);
  const ty_rejected_candidate_t *c = core_rejected_at(r, 0);
  assert_string_equal(c->path, t.files[0]);
  assert_string_equal(c->name, "cpu");
  assert_int_equal(c->kind, TY_REJECT_SHADOWED);
  TY_EXPECT_CONTAINS(c->reason, "backend 'cpu' is already loaded from " TY_TEST_PLUGIN_DIR
                                "/libty_backend_cpu.so");
  /* A shadowed candidate does not hide the loaded backend. */
  ty_backend_t *b = NULL;
  TY_EXPECT_OK(ty_registry_find(r, "cpu", &b));
  assert_string_equal(ty_backend_path(b), TY_TEST_PLUGIN_DIR "/libty_backend_cpu.so");
  ty_registry_destroy(r);

  /* The other way round, the copy wins and the build tree's is shadowed. */
  const char *reversed[] = {t.path, TY_TEST_PLUGIN_DIR};
  r = registry_from(reversed, 2, false);
  assert_int_equal(ty_registry_backend_count(r), intree_count(r));
  assert_string_equal(ty_backend_path(ty_registry_backend_at(r, 0)), t.files[0]);
  assert_int_equal(core_rejected_count(r), 1);
  c = core_rejected_at(r, 0);
  assert_int_equal(c->kind, TY_REJECT_SHADOWED);
  assert_string_equal(c->path, TY_TEST_PLUGIN_DIR "/libty_backend_cpu.so");
  TY_EXPECT_CONTAINS(c->reason, t.files[0]);
  ty_registry_destroy(r);
  temp_dir_remove(&t);
}

static void test_missing_explicit_path(void **state) {
  (void)state;
  const char *missing = "/nonexistent-trainyard-test/plugins";
  const char *paths[] = {missing, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  assert_int_equal(core_rejected_count(r), 1);
  const ty_rejected_candidate_t *c = core_rejected_at(r, 0);
  assert_int_equal(c->kind, TY_REJECT_MISSING_PATH);
  assert_string_equal(c->path, missing);
  assert_string_equal(c->name, "");
  TY_EXPECT_CONTAINS(c->reason, "search path does not exist");
  TY_EXPECT_CONTAINS(c->reason, "No such file or directory");
  ty_registry_destroy(r);
}

static void test_overlong_plugin_name_is_reported(void **state) {
  (void)state;
  temp_dir_t t;
  temp_dir_create(&t);
  char name[160];
  memset(name, 0, sizeof(name));
  strcpy(name, "libty_backend_");
  memset(name + strlen(name), 'x', 80);
  strcat(name, ".so");
  FILE *f = fopen(temp_dir_entry(&t, name), "wb");
  assert_non_null(f);
  fputs("not a plugin", f);
  assert_int_equal(fclose(f), 0);
  const char *paths[] = {t.path, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  assert_int_equal(core_rejected_count(r), 1);
  const ty_rejected_candidate_t *c = core_rejected_at(r, 0);
  assert_int_equal(c->kind, TY_REJECT_INVALID_TABLE);
  TY_EXPECT_CONTAINS(c->reason, "longer than 63 characters");
  TY_EXPECT_CONTAINS(c->reason, name);
  ty_registry_destroy(r);
  temp_dir_remove(&t);
}

static void test_env_path_is_honoured(void **state) {
  (void)state;
  /* Empty entries between colons are skipped. */
  assert_int_equal(setenv("TRAINYARD_BACKEND_PATH",
                          TY_TEST_ROGUE_DIR "::" TY_TEST_PLUGIN_DIR ":", 1), 0);
  ty_registry_t *r = registry_from(NULL, 0, true);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  expect_every_rogue_rejected_once(r);
  assert_int_equal(core_rejected_count(r), kRogueCount);
  ty_registry_destroy(r);

  /* use_env = false ignores it. */
  r = registry_from(NULL, 0, false);
  assert_int_equal(core_backend_count(r), 0);
  assert_int_equal(core_rejected_count(r), 0);
  assert_int_equal(ty_registry_search_dir_count(r), 0);
  ty_registry_destroy(r);

  /* A missing entry in the variable is reported like a missing explicit path. */
  assert_int_equal(setenv("TRAINYARD_BACKEND_PATH",
                          "/nonexistent-trainyard-env:" TY_TEST_PLUGIN_DIR, 1), 0);
  r = registry_from(NULL, 0, true);
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  assert_int_equal(core_rejected_count(r), 1);
  assert_int_equal(core_rejected_at(r, 0)->kind, TY_REJECT_MISSING_PATH);
  assert_string_equal(core_rejected_at(r, 0)->path, "/nonexistent-trainyard-env");
  ty_registry_destroy(r);
  setenv("TRAINYARD_BACKEND_PATH", "", 1);
}

static void test_explicit_paths_come_before_env(void **state) {
  (void)state;
  temp_dir_t t;
  temp_dir_create(&t);
  temp_dir_copy_in(&t, TY_TEST_PLUGIN_DIR "/libty_backend_cpu.so");
  assert_int_equal(setenv("TRAINYARD_BACKEND_PATH", TY_TEST_PLUGIN_DIR, 1), 0);
  const char *paths[] = {t.path};
  ty_registry_t *r = registry_from(paths, 1, true);
  assert_int_equal(ty_registry_backend_count(r), intree_count(r));
  assert_string_equal(ty_backend_path(ty_registry_backend_at(r, 0)), t.files[0]);
  assert_int_equal(core_rejected_count(r), 1);
  assert_int_equal(core_rejected_at(r, 0)->kind, TY_REJECT_SHADOWED);
  ty_registry_destroy(r);
  setenv("TRAINYARD_BACKEND_PATH", "", 1);
  temp_dir_remove(&t);
}

static void test_exe_dir_rule(void **state) {
  (void)state;
  /* <exe dir>/../lib/trainyard/backends: the build tree has that layout. */
  ty_registry_options_t options = {.exe_dir = TY_TEST_BIN_DIR};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  expect_cpu_and_template_from(r, TY_TEST_PLUGIN_DIR);
  assert_int_equal(core_rejected_count(r), 0);
  ty_registry_destroy(r);

  /* A default folder that does not exist is skipped quietly. */
  options.exe_dir = "/nonexistent-trainyard-test/bin";
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  assert_int_equal(core_backend_count(r), 0);
  assert_int_equal(core_rejected_count(r), 0);
  assert_int_equal(ty_registry_search_dir_count(r), 0);
  ty_registry_destroy(r);
}

static void test_find(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_ROGUE_DIR, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  ty_backend_t *b = NULL;
  TY_EXPECT_OK(ty_registry_find(r, "template", &b));
  assert_non_null(b);
  assert_string_equal(ty_backend_name(b), "template");

  b = (ty_backend_t *)(uintptr_t)1;
  ty_status_t s = ty_registry_find(r, "rogue_unavailable", &b);
  assert_null(b);
  if (s) {
    TY_EXPECT_CONTAINS(ty_status_message(s),
                       "found at " TY_TEST_ROGUE_DIR "/libty_backend_rogue_unavailable.so");
  }
  TY_EXPECT_STATUS(s, TY_CODE_UNAVAILABLE, ROGUE_UNAVAILABLE_MESSAGE);

  TY_EXPECT_STATUS(ty_registry_find(r, "rogue_abi", &b), TY_CODE_FAILED_PRECONDITION,
                   "plugin ABI major 99 does not match host ABI major 1");
  TY_EXPECT_STATUS(ty_registry_find(r, "rogue_missing", &b), TY_CODE_FAILED_PRECONDITION,
                   "lacks required entry 'device_info'");
  TY_EXPECT_STATUS(ty_registry_find(r, "rogue_create_failed", &b),
                   TY_CODE_FAILED_PRECONDITION, ROGUE_CREATE_FAILED_MESSAGE);
  TY_EXPECT_STATUS(ty_registry_find(r, "garbage", &b), TY_CODE_FAILED_PRECONDITION,
                   "dlopen failed");

  s = ty_registry_find(r, "nosuch", &b);
  assert_null(b);
  if (s) TY_EXPECT_CONTAINS(ty_status_message(s), "trainyard devices");
  char loaded[320];
  ty_test_loaded_message(TY_TEST_INTREE_PLUGINS, r, "nosuch", loaded, sizeof(loaded));
  TY_EXPECT_STATUS(s, TY_CODE_NOT_FOUND, loaded);
  ty_registry_destroy(r);

  r = registry_from(NULL, 0, false);
  TY_EXPECT_STATUS(ty_registry_find(r, "cpu", &b), TY_CODE_NOT_FOUND, "(loaded: none)");
  ty_registry_destroy(r);
}

static void test_device_open_on_rejected_backend(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_ROGUE_DIR, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  ty_device_t *d = NULL;
  TY_EXPECT_STATUS(ty_device_open(r, "rogue_unavailable", &d), TY_CODE_UNAVAILABLE,
                   "opening device 'rogue_unavailable': backend 'rogue_unavailable' was "
                   "found at");
  assert_null(d);
  TY_EXPECT_STATUS(ty_device_open(r, "rogue_small:0", &d), TY_CODE_FAILED_PRECONDITION,
                   "struct_size");
  assert_null(d);
  /* The good backends are unaffected by the rogues beside them. */
  TY_EXPECT_OK(ty_device_open(r, "cpu?threads=2", &d));
  ty_device_close(d);
  ty_registry_destroy(r);
}

static void test_backend_accessors(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 1, false);
  for (size_t i = 0; i < core_backend_count(r); ++i) {
    ty_backend_t *b = core_backend_at(r, i);
    uint32_t major = 99, minor = 99;
    ty_backend_abi_version(b, &major, &minor);
    assert_int_equal(major, TY_ABI_MAJOR);
    assert_int_equal(minor, TY_ABI_MINOR);
    assert_true(strlen(ty_backend_version(b)) > 0);
    assert_non_null(ty_backend_api(b));
    assert_non_null(ty_backend_instance(b));
    assert_true(ty_backend_has_entry(b, offsetof(ty_backend_api_t, buffer_copy)));
    /* Past the plugin's struct_size there is nothing. */
    assert_false(ty_backend_has_entry(b, sizeof(ty_backend_api_t)));
    uint32_t count = 0;
    TY_EXPECT_OK(ty_backend_device_count(b, &count));
    assert_int_equal(count, 1);
    ty_abi_device_info_t info;
    TY_EXPECT_OK(ty_backend_device_info(b, 0, &info));
    assert_int_equal(info.struct_size, sizeof(info));
    assert_true(info.memory_bytes > 0);
    assert_true(strlen(info.name) > 0);
    TY_EXPECT_STATUS(ty_backend_device_info(b, 1, &info), TY_CODE_NOT_FOUND,
                     "index 1 is out of range");
  }
  ty_registry_destroy(r);
}

static void test_minimal_table_is_read_within_struct_size(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_MINIMAL_DIR};
  ty_registry_t *r = registry_from(paths, 1, false);
  assert_int_equal(core_rejected_count(r), 0);
  assert_int_equal(core_backend_count(r), 1);
  ty_backend_t *b = core_backend_at(r, 0);
  assert_string_equal(ty_backend_name(b), "minimal");
  assert_int_equal(ty_backend_api(b)->struct_size, TY_BACKEND_API_MIN_SIZE);
  /* device_open is set in memory but lies beyond struct_size. */
  assert_false(ty_backend_has_entry(b, offsetof(ty_backend_api_t, device_open)));
  assert_null(TY_BACKEND_ENTRY(b, device_open));
  assert_true(ty_backend_has_entry(b, offsetof(ty_backend_api_t, device_info)));
  ty_abi_device_info_t info;
  TY_EXPECT_OK(ty_backend_device_info(b, 0, &info));
  assert_string_equal(info.name, "minimal device");
  ty_device_t *d = (ty_device_t *)(uintptr_t)1;
  ty_status_t s = ty_device_open(r, "minimal", &d);
  assert_null(d);
  if (s) assert_null(strstr(ty_status_message(s), ROGUE_POISON_MESSAGE));
  TY_EXPECT_STATUS(s, TY_CODE_UNIMPLEMENTED, "backend 'minimal' does not implement device_open");
  ty_registry_destroy(r);
}

/* A plugin that sets one entry of a pair and not the other loads, with one
 * warning per pair naming both entries (rogue_plugin.c sets device_open,
 * graph_compile and executable_serialize alone, and every collective of ABI
 * 1.4 but comm_broadcast); the in-tree plugins have
 * none. Every
 * loaded plugin has an identity: its build-id (or, without one, the SHA-256
 * of its bytes). */
static void test_unpaired_entries_warn(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_UNPAIRED_DIR, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  ty_backend_t *b = NULL;
  TY_EXPECT_OK(ty_registry_find(r, "unpaired", &b));
  static const char *const expect[][2] = {
      {"device_open is set but device_close is not", "every opened device leaks"},
      {"graph_compile is set but graph_supports is not", "only with both"},
      {"graph_compile is set but executable_execute is not", "can never run"},
      {"graph_compile is set but executable_destroy is not", "executable leaks"},
      {"executable_serialize is set but executable_deserialize is not", "set both or neither"},
      {"comm_create is set but comm_broadcast is not", "broadcasting rank 0's weights"},
  };
  assert_int_equal(ty_backend_warning_count(b), 6);
  assert_false(ty_backend_has_collectives(b));
  for (size_t i = 0; i < 6; ++i) {
    const char *w = ty_backend_warning_at(b, i);
    assert_non_null(w);
    assert_non_null(strstr(w, expect[i][0]));
    assert_non_null(strstr(w, expect[i][1]));
  }
  assert_null(ty_backend_warning_at(b, 6));
  for (size_t i = 0; i < ty_registry_backend_count(r); ++i) {
    ty_backend_t *other = ty_registry_backend_at(r, i);
    const char *id = ty_backend_identity(other);
    assert_true(strncmp(id, "build-id:", 9) == 0 || strncmp(id, "sha256:", 7) == 0);
    assert_true(strlen(id) > 20);
    if (other != b) assert_int_equal(ty_backend_warning_count(other), 0);
  }
  ty_registry_destroy(r);
}

/* The device of each rank of a data-parallel run (hal/device.h): a URI
 * without an index on a backend of several devices (the unpaired rogue has
 * 4) takes the local rank's, keeping its options; a named index stays; a
 * backend of one device (cpu) is shared; a rank beyond the devices is an
 * error naming both counts. */
static void test_device_uri_for_rank(void **state) {
  (void)state;
  const char *paths[] = {TY_TEST_UNPAIRED_DIR, TY_TEST_PLUGIN_DIR};
  ty_registry_t *r = registry_from(paths, 2, false);
  static const struct {
    const char *uri;
    uint32_t local_rank;
    const char *want;
  } cases[] = {
      {"unpaired", 0, "unpaired:0"},       {"unpaired", 3, "unpaired:3"},
      {"unpaired?a=1", 2, "unpaired:2?a=1"}, {"unpaired:3", 1, "unpaired:3"},
      {"unpaired:0?a=1", 2, "unpaired:0?a=1"}, {"cpu", 3, "cpu"},
      {"cpu?threads=2", 1, "cpu?threads=2"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    ty_device_uri_t parsed;
    TY_EXPECT_OK(ty_device_uri_parse(cases[i].uri, &parsed));
    TY_EXPECT_OK(ty_device_uri_for_rank(r, &parsed, cases[i].local_rank));
    char *uri = NULL;
    TY_EXPECT_OK(ty_device_uri_format(&parsed, &uri));
    assert_string_equal(uri, cases[i].want);
    free(uri);
    /* the device opened from the struct is the rank's, under that URI */
    if (strncmp(cases[i].uri, "unpaired", 8) != 0) {
      ty_device_t *d = NULL;
      TY_EXPECT_OK(ty_device_open_parsed(r, &parsed, &d));
      assert_string_equal(ty_device_uri(d), cases[i].want);
      ty_device_close(d);
    }
    ty_device_uri_deinit(&parsed);
  }
  /* Errors name the URI as typed, not as the rank would have it. */
  static const struct {
    const char *uri;
    uint32_t local_rank;
    ty_code_t code;
    const char *message;
  } bad[] = {
      {"unpaired?a=1", 4, TY_CODE_FAILED_PRECONDITION,
       "choosing the device of 'unpaired?a=1': local rank 4 has no device: backend "
       "'unpaired' has 4 devices"},
      {"nosuch", 0, TY_CODE_NOT_FOUND, "nosuch"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    ty_device_uri_t parsed;
    TY_EXPECT_OK(ty_device_uri_parse(bad[i].uri, &parsed));
    TY_EXPECT_STATUS(ty_device_uri_for_rank(r, &parsed, bad[i].local_rank), bad[i].code,
                     bad[i].message);
    assert_false(parsed.has_index); /* left as it was */
    ty_device_uri_deinit(&parsed);
  }
  ty_registry_destroy(r);
}

/* ---- issue 33: plugins others could have written (sshd's StrictModes) ---- */

/* A copy of the template plugin in a fresh folder of `mode`; fills `dir`
 * and `plugin`. */
static void template_copy(mode_t mode, char dir[PATH_MAX], char plugin[PATH_MAX]) {
  snprintf(dir, PATH_MAX, "%s/ty_loader_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  assert_non_null(mkdtemp(dir));
  snprintf(plugin, PATH_MAX, "%s/libty_backend_template.so", dir);
  FILE *in = fopen(TY_TEST_PLUGIN_DIR "/libty_backend_template.so", "rb");
  FILE *out = fopen(plugin, "wb");
  assert_non_null(in);
  assert_non_null(out);
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(in);
  assert_int_equal(fclose(out), 0);
  assert_int_equal(chmod(plugin, 0755), 0);
  assert_int_equal(chmod(dir, mode), 0);
}

static void remove_copy(const char *dir, const char *plugin) {
  chmod(dir, 0700);
  unlink(plugin);
  rmdir(dir);
}

static const ty_rejected_candidate_t *rejected_at_path(const ty_registry_t *r, const char *path) {
  for (size_t i = 0; i < ty_registry_rejected_count(r); ++i) {
    const ty_rejected_candidate_t *c = ty_registry_rejected_at(r, i);
    if (strcmp(c->path, path) == 0) return c;
  }
  return NULL;
}

static void test_unsafe_plugin_folder_is_not_loaded(void **state) {
  (void)state;
  char dir[PATH_MAX], plugin[PATH_MAX], real[PATH_MAX], want[PATH_MAX + 64];
  unsetenv(TY_PATH_TRUST_ENV);
  template_copy(0777, dir, plugin);
  assert_non_null(realpath(dir, real));
  const char *paths[] = {dir};
  ty_registry_t *r = registry_from(paths, 1, false);
  assert_int_equal(core_backend_count(r), 0); /* nothing else searched */
  const ty_rejected_candidate_t *c = rejected_at_path(r, plugin);
  assert_non_null(c);
  assert_int_equal(c->kind, TY_REJECT_UNSAFE_PERMISSIONS);
  assert_string_equal(c->name, "template");
  snprintf(want, sizeof(want), "folder %s is writable by its group or others (mode 0777)", real);
  TY_EXPECT_CONTAINS(c->reason, want);
  TY_EXPECT_CONTAINS(c->reason, TY_PATH_TRUST_ENV "=1");
  ty_backend_t *b = NULL;
  TY_EXPECT_STATUS(ty_registry_find(r, "template", &b), TY_CODE_FAILED_PRECONDITION,
                   "is writable by its group or others");
  ty_registry_destroy(r);
  /* The switch: loaded as asked, and only "1" means yes. */
  setenv(TY_PATH_TRUST_ENV, "yes", 1);
  r = registry_from(paths, 1, false);
  assert_int_equal(core_backend_count(r), 0);
  ty_registry_destroy(r);
  setenv(TY_PATH_TRUST_ENV, "1", 1);
  r = registry_from(paths, 1, false);
  assert_int_equal(core_backend_count(r), 1);
  assert_string_equal(ty_backend_path(core_backend_at(r, 0)), plugin);
  ty_registry_destroy(r);
  unsetenv(TY_PATH_TRUST_ENV);
  /* The user's own folder (below the sticky /tmp): loaded. */
  assert_int_equal(chmod(dir, 0700), 0);
  r = registry_from(paths, 1, false);
  assert_int_equal(core_backend_count(r), 1);
  ty_registry_destroy(r);
  remove_copy(dir, plugin);
}

/* The rule itself, on folders made here. The owner half needs root (to
 * give a file away); without root it is said, not silently passed. */
static void test_path_trust_rule(void **state) {
  (void)state;
  char reason[PATH_MAX + 128], dir[PATH_MAX], plugin[PATH_MAX], inner[PATH_MAX + 16];
  assert_true(ty_path_trusted("/", reason, sizeof(reason)));
  assert_string_equal(reason, "");
  template_copy(0700, dir, plugin);
  assert_true(ty_path_trusted(plugin, reason, sizeof(reason)));
  /* A path not made yet: what exists of it is checked. */
  snprintf(inner, sizeof(inner), "%s/not/yet", dir);
  assert_true(ty_path_trusted(inner, reason, sizeof(reason)));
  assert_int_equal(chmod(dir, 0770), 0);
  assert_false(ty_path_trusted(inner, reason, sizeof(reason)));
  TY_EXPECT_CONTAINS(reason, "(mode 0770)");
  /* Sticky, as /tmp: others cannot replace our entries. */
  assert_int_equal(chmod(dir, 01777), 0);
  assert_true(ty_path_trusted(plugin, reason, sizeof(reason)));
  assert_int_equal(chmod(dir, 0700), 0);
  assert_int_equal(chmod(plugin, 0757), 0);
  assert_false(ty_path_trusted(plugin, reason, sizeof(reason)));
  TY_EXPECT_CONTAINS(reason, "file ");
  TY_EXPECT_CONTAINS(reason, "is writable by its group or others (mode 0757)");
  assert_int_equal(chmod(plugin, 0755), 0);
  if (geteuid() == 0) {
    assert_int_equal(chown(plugin, 65534, (gid_t)-1), 0);
    assert_false(ty_path_trusted(plugin, reason, sizeof(reason)));
    TY_EXPECT_CONTAINS(reason, "belongs to uid 65534, neither this user (uid 0) nor root");
  } else {
    printf("NOTE: not root: the owner half of the rule (a file of uid 65534) is not checked "
           "here\n");
  }
  remove_copy(dir, plugin);
}

static void test_reject_kind_names(void **state) {
  (void)state;
  static const struct {
    ty_reject_kind_t kind;
    const char *name;
  } kinds[] = {
      {TY_REJECT_MISSING_PATH, "missing-path"},
      {TY_REJECT_DLOPEN, "dlopen-failed"},
      {TY_REJECT_NO_ENTRY_POINT, "no-entry-point"},
      {TY_REJECT_QUERY_NULL, "query-returned-null"},
      {TY_REJECT_ABI_MISMATCH, "abi-mismatch"},
      {TY_REJECT_TABLE_TOO_SMALL, "table-too-small"},
      {TY_REJECT_INVALID_TABLE, "invalid-table"},
      {TY_REJECT_UNAVAILABLE, "unavailable"},
      {TY_REJECT_CREATE_FAILED, "create-failed"},
      {TY_REJECT_SHADOWED, "shadowed"},
      {TY_REJECT_UNSAFE_PERMISSIONS, "unsafe-permissions"},
  };
  for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); ++i) {
    assert_string_equal(ty_reject_kind_name(kinds[i].kind), kinds[i].name);
  }
  assert_string_equal(ty_reject_kind_name((ty_reject_kind_t)42), "unknown");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rogues_rejected_normal_plugins_loaded),
      cmocka_unit_test(test_rogue_folder_twice_still_rejects_once),
      cmocka_unit_test(test_normal_folder_holds_no_rogues),
      cmocka_unit_test(test_same_folder_by_other_spellings_loads_once),
      cmocka_unit_test(test_copy_in_later_folder_is_shadowed),
      cmocka_unit_test(test_missing_explicit_path),
      cmocka_unit_test(test_overlong_plugin_name_is_reported),
      cmocka_unit_test(test_env_path_is_honoured),
      cmocka_unit_test(test_explicit_paths_come_before_env),
      cmocka_unit_test(test_exe_dir_rule),
      cmocka_unit_test(test_find),
      cmocka_unit_test(test_device_open_on_rejected_backend),
      cmocka_unit_test(test_backend_accessors),
      cmocka_unit_test(test_minimal_table_is_read_within_struct_size),
      cmocka_unit_test(test_unpaired_entries_warn),
      cmocka_unit_test(test_device_uri_for_rank),
      cmocka_unit_test(test_reject_kind_names),
      cmocka_unit_test(test_unsafe_plugin_folder_is_not_loaded),
      cmocka_unit_test(test_path_trust_rule),
  };
  return cmocka_run_group_tests_name("loader", tests, setup_facts, NULL);
}
