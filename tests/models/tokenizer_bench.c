/* Encode throughput of the tokenizer on the ~10 kB "long_text" case of
 * tests/fixtures/tokenizers/cases.json, for docs/performance.md. Not a test.
 *
 * usage: tokenizer_bench FIXTURES_DIR [NAME...]   (default: every fixture)
 * Prints, per tokenizer, the first encode after loading (empty word cache)
 * and the best of 200 repeated encodes (warm cache), in MB/s. */
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

static int ty_bench(const char *dir, const char *name, const char *text, size_t size) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/%s/tokenizer.json", dir, name);
  ty_tokenizer_t *tok = NULL;
  ty_status_t s = ty_tokenizer_load_file(path, &tok);
  if (s) {
    fprintf(stderr, "%s: %s\n", path, ty_status_message(s));
    ty_status_free(s);
    return 1;
  }
  double cold = 0, best = 1e30;
  size_t count = 0;
  for (int round = 0; round <= 200; ++round) {
    uint32_t *ids = NULL;
    double t0 = ty_now();
    s = ty_tokenizer_encode(tok, text, size, 0, &ids, &count);
    double t = ty_now() - t0;
    free(ids);
    if (s) {
      fprintf(stderr, "%s: %s\n", name, ty_status_message(s));
      ty_status_free(s);
      ty_tokenizer_destroy(tok);
      return 1;
    }
    if (round == 0) {
      cold = t;
    } else if (t < best) {
      best = t;
    }
  }
  printf("%-18s %6zu bytes -> %5zu ids   first %7.1f MB/s   warm %7.1f MB/s\n", name, size, count,
         (double)size / cold / 1e6, (double)size / best / 1e6);
  ty_tokenizer_destroy(tok);
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
