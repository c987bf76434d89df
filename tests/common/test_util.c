/* Helpers shared by the C tests; see test_util.h. */
#include "common/test_util.h"

#include "hal/registry.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void ty_test_expect_status(ty_status_t status, ty_code_t code,
                           const char *substring, const char *expr,
                           const char *file, int line) {
  ty_code_t actual = ty_status_code(status);
  const char *message = ty_status_message(status);
  bool ok = actual == code && (!substring || strstr(message, substring));
  if (!ok) {
    print_error("%s\n  expected %s%s%s%s\n  got      %s: %s\n", expr,
                ty_code_name(code), substring ? " with message containing '" : "",
                substring ? substring : "", substring ? "'" : "",
                ty_code_name(actual), message);
  }
  ty_status_free(status);
  if (!ok) _fail(file, line);
}

void ty_test_expect_contains(const char *haystack, const char *needle,
                             const char *file, int line) {
  if (haystack && needle && strstr(haystack, needle)) return;
  print_error("expected '%s'\n  to contain '%s'\n", haystack ? haystack : "(null)",
              needle ? needle : "(null)");
  _fail(file, line);
}

uint64_t ty_test_seed(void) {
  static bool have_seed = false;
  static uint64_t seed = 0;
  if (!have_seed) {
    const char *env = getenv("TY_TEST_SEED");
    if (env && *env) {
      seed = strtoull(env, NULL, 0);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      seed = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec ^
             ((uint64_t)getpid() << 32);
    }
    have_seed = true;
    printf("random seed %" PRIu64 " (replay with TY_TEST_SEED=%" PRIu64 ")\n",
           seed, seed);
    fflush(stdout);
  }
  return seed;
}

void ty_test_rng_init(ty_test_rng_t *rng, uint64_t seed) { rng->state = seed; }

uint64_t ty_test_rng_next(ty_test_rng_t *rng) {
  uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t ty_test_rng_range(ty_test_rng_t *rng, int64_t lo, int64_t hi) {
  return lo + (int64_t)(ty_test_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

float ty_test_rng_unit(ty_test_rng_t *rng) {
  return (float)((double)(ty_test_rng_next(rng) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

float *ty_test_rng_floats(ty_test_rng_t *rng, int64_t n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  assert_non_null(p);
  for (int64_t i = 0; i < n; ++i) p[i] = ty_test_rng_unit(rng);
  return p;
}

void ty_test_fill_random(ty_test_rng_t *rng, void *dst, size_t n) {
  unsigned char *p = dst;
  bool any_nonzero = false;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = ty_test_rng_next(rng);
    size_t chunk = n - i < 8 ? n - i : 8;
    memcpy(p + i, &v, chunk);
    for (size_t k = 0; k < chunk; ++k) any_nonzero |= p[i + k] != 0;
  }
  if (n && !any_nonzero) p[0] = 1; /* a zero buffer proves nothing */
}

static bool ty_test_optional_plugin(const char *name) {
  return strcmp(name, "opencl") == 0 || strcmp(name, "cuda") == 0;
}

size_t ty_test_intree_plugins(const char *csv, const ty_registry_t *registry,
                              char (*names)[32], size_t max) {
  size_t count = 0;
  const char *p = csv;
  while (*p && count < max) {
    size_t len = strcspn(p, ",");
    char name[32];
    snprintf(name, sizeof(name), "%.*s", (int)len, p);
    bool loaded = false;
    for (size_t i = 0; i < ty_registry_backend_count(registry); ++i) {
      loaded |= strcmp(ty_backend_name(ty_registry_backend_at(registry, i)), name) == 0;
    }
    if (loaded || !ty_test_optional_plugin(name)) memcpy(names[count++], name, sizeof(name));
    p += len + (p[len] == ',');
  }
  return count;
}

void ty_test_loaded_message(const char *csv, const ty_registry_t *registry,
                            const char *name, char *out, size_t out_size) {
  char names[16][32];
  size_t count = ty_test_intree_plugins(csv, registry, names, 16);
  size_t used = (size_t)snprintf(out, out_size, "no backend named '%s' (loaded: ", name);
  for (size_t i = 0; i < count && used < out_size; ++i) {
    used += (size_t)snprintf(out + used, out_size - used, "%s%s", i ? ", " : "", names[i]);
  }
  if (used < out_size) snprintf(out + used, out_size - used, ")");
}

ty_registry_t *ty_test_open_registry(const char *plugin_dir) {
  const char *paths[] = {plugin_dir};
  ty_registry_options_t options = {.explicit_paths = paths, .explicit_path_count = 1};
  ty_registry_t *r = NULL;
  TY_EXPECT_OK(ty_registry_create(&options, &r));
  return r;
}
