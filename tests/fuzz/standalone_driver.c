/* Runs a libFuzzer target without libFuzzer (gcc builds): replays every
 * file of the corpus folders or files given, then, with -mutations=N
 * (default 200), N deterministic mutants of each (byte flips, truncations,
 * length-field edits), so a build without clang still exercises the target
 * beyond its seeds. Prints one summary line; a failing input aborts. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t drv_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static unsigned long drv_runs = 0;

static void drv_run(const uint8_t *data, size_t size) {
  /* An exact-size heap copy, so sanitizers see any overread. */
  uint8_t *copy = malloc(size ? size : 1);
  if (!copy) abort();
  if (size) memcpy(copy, data, size);
  LLVMFuzzerTestOneInput(copy, size);
  free(copy);
  ++drv_runs;
}

static void drv_mutate(const uint8_t *seed, size_t size, unsigned mutations, uint64_t *rng) {
  uint8_t *buf = malloc(size + 16);
  if (!buf) abort();
  for (unsigned i = 0; i < mutations; ++i) {
    size_t n = size;
    memcpy(buf, seed, size);
    switch (drv_next(rng) % 4) {
      case 0: /* flip a few bytes */
        for (int k = 0; k < 1 + (int)(drv_next(rng) % 4) && n; ++k) {
          buf[drv_next(rng) % n] ^= (uint8_t)(1u << (drv_next(rng) % 8));
        }
        break;
      case 1: /* truncate */
        n = size ? (size_t)(drv_next(rng) % size) : 0;
        break;
      case 2: /* rewrite the header length */
        if (n >= 8) {
          uint64_t len = drv_next(rng) % (size + 16);
          for (int k = 0; k < 8; ++k) buf[k] = (uint8_t)(len >> (8 * k));
        }
        break;
      default: /* overwrite a byte with a JSON-significant one */
        if (n) buf[drv_next(rng) % n] = (uint8_t)"{}[],:\"0-9 e\\"[drv_next(rng) % 14];
        break;
    }
    drv_run(buf, n);
  }
  free(buf);
}

static int drv_file(const char *path, unsigned mutations, uint64_t *rng) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(n > 0 ? (size_t)n : 1);
  if (!data || (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n)) {
    fclose(f);
    free(data);
    fprintf(stderr, "cannot read %s\n", path);
    return 1;
  }
  fclose(f);
  drv_run(data, (size_t)n);
  drv_mutate(data, (size_t)n, mutations, rng);
  free(data);
  return 0;
}

static int drv_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  unsigned mutations = 200;
  uint64_t rng = 0x7472616e79617264ull; /* fixed: reproducible runs */
  int failures = 0, inputs = 0;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "-mutations=", 11) == 0) {
      mutations = (unsigned)strtoul(argv[i] + 11, NULL, 10);
      continue;
    }
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "no such input: %s\n", argv[i]);
      ++failures;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      failures += drv_file(argv[i], mutations, &rng);
      ++inputs;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) {
      ++failures;
      continue;
    }
    char *names[4096];
    size_t count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && count < 4096) {
      if (e->d_name[0] == '.') continue;
      names[count] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2);
      if (!names[count]) abort();
      sprintf(names[count], "%s/%s", argv[i], e->d_name);
      ++count;
    }
    closedir(d);
    qsort(names, count, sizeof(names[0]), drv_cmp);
    for (size_t k = 0; k < count; ++k) {
      failures += drv_file(names[k], mutations, &rng);
      ++inputs;
      free(names[k]);
    }
  }
  if (inputs == 0) {
    fprintf(stderr, "usage: %s [-mutations=N] CORPUS_DIR|FILE...\n", argv[0]);
    return 2;
  }
  printf("%d inputs, %lu runs (%u mutants each), %d unreadable\n", inputs, drv_runs, mutations,
         failures);
  return failures ? 1 : 0;
}
