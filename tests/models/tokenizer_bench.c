/* Encode throughput of the tokenizer on the ~10 kB "long_text" case of
 * tests/fixtures/tokenizers/cases.json, for docs/performance.md. Not a test.
 *
 * usage: tokenizer_bench FIXTURES_DIR [NAME...]   (default: every fixture)
 * Prints, per tokenizer, in MB/s: "cold", the median over 21 fresh loads of
 * the first encode (empty word cache), and "warm", the best of 200 repeated
 * encodes of the same text (nearly every word from the cache). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "models/tokenizer.h"

static double ty_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ty_compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Seconds for one encode, or a negative value on error (printed). */
static double ty_time_encode(const ty_tokenizer_t *tok, const char *name, const char *text,
                             size_t size, size_t *out_count) {
  uint32_t *ids = NULL;
  double t0 = ty_now();
  ty_status_t s = ty_tokenizer_encode(tok, text, size, 0, &ids, out_count);
  double t = ty_now() - t0;
  free(ids);
  if (s) {
    fprintf(stderr, "%s: %s\n", name, ty_status_message(s));
    ty_status_free(s);
    return -1;
  }
  return t;
}

static int ty_bench(const char *dir, const char *name, const char *text, size_t size) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s/tokenizer.json", dir, name);
  enum { kCold = 21, kWarm = 200 };
  double cold[kCold], best = 1e30;
  size_t count = 0;
  for (int round = 0; round < kCold; ++round) {
    ty_tokenizer_t *tok = NULL;
    ty_status_t s = ty_tokenizer_load_file(path, &tok);
    if (s) {
      fprintf(stderr, "%s: %s\n", path, ty_status_message(s));
      ty_status_free(s);
      return 1;
    }
    cold[round] = ty_time_encode(tok, name, text, size, &count);
    for (int k = 0; round == kCold - 1 && k < kWarm && cold[round] >= 0; ++k) {
      double t = ty_time_encode(tok, name, text, size, &count);
      if (t < 0) cold[round] = -1;
      if (t < best) best = t;
    }
    ty_tokenizer_destroy(tok);
    if (cold[round] < 0) return 1;
  }
  qsort(cold, kCold, sizeof(double), ty_compare_double);
  printf("%-18s %6zu bytes -> %5zu ids   cold %7.1f MB/s   warm %7.1f MB/s\n", name, size,
         count, (double)size / cold[kCold / 2] / 1e6, (double)size / best / 1e6);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: tokenizer_bench FIXTURES_DIR [NAME...]\n");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s/cases.json", argv[1]);
  json_error_t error;
  json_t *cases = json_load_file(path, JSON_ALLOW_NUL, &error);
  if (!cases) {
    fprintf(stderr, "%s: %s\n", path, error.text);
    return 1;
  }
  const json_t *text = NULL;
  size_t i;
  const json_t *c;
  json_array_foreach(json_object_get(cases, "cases"), i, c) {
    if (strcmp(json_string_value(json_object_get(c, "name")), "long_text") == 0) {
      text = json_object_get(c, "text");
    }
  }
  int rc = text ? 0 : 1;
  static const char *const all[] = {"gpt2", "llama3", "llama2_legacy", "llama2_metaspace"};
  int n = argc > 2 ? argc - 2 : 4;
  for (int k = 0; k < n && text; ++k) {
    rc |= ty_bench(argv[1], argc > 2 ? argv[k + 2] : all[k], json_string_value(text),
                   json_string_length(text));
  }
  json_decref(cases);
  return rc;
}
