/* Corpus replay for fuzz targets when libFuzzer is not available (gcc):
 * runs LLVMFuzzerTestOneInput once on every file named on the command line
 * or found in a folder named there. Exits 1 when a path cannot be read or
 * no input was found, so an empty corpus is not a silent pass. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int ty_replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t size = 0, capacity = 4096;
  uint8_t *data = malloc(capacity);
  while (data) {
    size_t n = fread(data + size, 1, capacity - size, f);
    size += n;
    if (n == 0) break;
    if (size == capacity) {
      uint8_t *grown = realloc(data, capacity * 2);
      if (!grown) {
        free(data);
        data = NULL;
        break;
      }
      data = grown;
      capacity *= 2;
    }
  }
  fclose(f);
  if (!data) {
    fprintf(stderr, "replay: out of memory reading %s\n", path);
    return -1;
  }
  /* Exact-size copy so that ASan sees reads past the end of the input. */
  uint8_t *exact = malloc(size ? size : 1);
  if (!exact) {
    free(data);
    return -1;
  }
  memcpy(exact, data, size);
  free(data);
  LLVMFuzzerTestOneInput(exact, size);
  free(exact);
  return 1;
}

static int ty_replay_path(const char *path) {
  struct stat info;
  if (stat(path, &info) != 0) {
    fprintf(stderr, "replay: cannot stat %s\n", path);
    return -1;
  }
  if (!S_ISDIR(info.st_mode)) return ty_replay_file(path);
  DIR *dir = opendir(path);
  if (!dir) {
    fprintf(stderr, "replay: cannot open folder %s\n", path);
    return -1;
  }
  int count = 0;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    char child[4096];
    snprintf(child, sizeof(child), "%s/%s", path, entry->d_name);
    int n = ty_replay_path(child);
    if (n < 0) {
      count = -1;
      break;
    }
    count += n;
  }
  closedir(dir);
  return count;
}

int main(int argc, char **argv) {
  int total = 0;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue; /* libFuzzer flags mean nothing here */
    int n = ty_replay_path(argv[i]);
    if (n < 0) return 1;
    total += n;
  }
  printf("replayed %d inputs\n", total);
  return total > 0 ? 0 : 1;
}
