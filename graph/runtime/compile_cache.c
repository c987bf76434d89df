/* On-disk compile cache paths and failure records (see compile_cache.h). */
#include "graph/runtime/compile_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graph/ir/lower.h"
#include "hal/path_trust.h"
#include "hal/sha256.h"

#define TY_CACHE_LAYOUT "compile-v1"
#define TY_FAILURE_MAGIC "trainyard-compile-failure 1\n"

void ty_compile_cache_default_dir(char *out, size_t capacity) {
  const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (xdg && xdg[0] == '/') {
    snprintf(out, capacity, "%s/trainyard", xdg);
  } else if (home && home[0]) {
    snprintf(out, capacity, "%s/.cache/trainyard", home);
  } else if (capacity) {
    out[0] = '\0';
  }
}

bool ty_compile_cache_dir_warning(const char *dir, char *out, size_t capacity) {
  if (capacity) out[0] = '\0';
  if (!dir || !dir[0]) return false;
  char layout[4096], why[4096 + 128];
  snprintf(layout, sizeof(layout), "%s/" TY_CACHE_LAYOUT, dir);
  if (ty_path_trusted(layout, why, sizeof(why))) return false;
  snprintf(out, capacity, "the compile cache %s is not yours alone: %s, and its entries are "
           "loaded as compiled executables; chmod go-w it, or give --cache-dir a folder of "
           "your own (or none)", dir, why);
  return true;
}

const ty_file_kind_t ty_artifact_file_kind = {
    .what = "compiled artifact",
    .max_bytes = TY_GIB,
    .limit_env = "TRAINYARD_MAX_ARTIFACT_BYTES",
    .text = false,
    .bad_code = TY_CODE_DATA_LOSS,
};

/* Failure records are a few lines that Trainyard wrote. */
static const ty_file_kind_t ty_failure_record_kind = {
    .what = "compile failure record",
    .max_bytes = TY_MIB,
    .text = true,
    .bad_code = TY_CODE_DATA_LOSS,
};

ty_status_t ty_compile_cache_path(const char *dir, const char *backend, const char *key,
                                  const char *suffix, char **out_path) {
  *out_path = NULL;
  char hex[65];
  if (!ty_sha256_hex(key, strlen(key), hex)) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing a compile-cache key");
  }
  size_t cap = strlen(dir) + strlen(backend) + strlen(suffix) + sizeof(TY_CACHE_LAYOUT) + 72;
  char *path = malloc(cap);
  if (!path) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  snprintf(path, cap, "%s/" TY_CACHE_LAYOUT "/%s/%s%s", dir, backend, hex, suffix);
  *out_path = path;
  return TY_OK;
}

void ty_compile_cache_write_failure(const char *path, const char *key, ty_status_t failure) {
  const char *message = ty_status_message(failure);
  size_t cap = strlen(key) + strlen(message) + 128;
  char *text = malloc(cap);
  if (!text) return;
  /* When it was recorded, so a replay can say how old the refusal is. */
  char when[32] = "";
  time_t now = time(NULL);
  struct tm utc;
  if (gmtime_r(&now, &utc)) strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
  int n = snprintf(text, cap, TY_FAILURE_MAGIC "code %s\ntime %s\nkey %s\nmessage %s\n",
                   ty_code_name(ty_status_code(failure)), when, key, message);
  /* One line per field: a message's own line breaks become spaces. */
  char *msg_at = n > 0 ? strstr(text, "\nmessage ") : NULL;
  for (char *p = msg_at ? msg_at + 9 : NULL; p && *p && p < text + n - 1; ++p) {
    if (*p == '\n') *p = ' ';
  }
  if (n > 0) ty_status_free(ty_file_write_atomic(path, text, (size_t)n));
  free(text);
}

ty_status_t ty_compile_cache_read_failure(const char *path) {
  char *data = NULL;
  size_t size = 0;
  ty_status_t s = ty_file_read(path, &ty_failure_record_kind, &data, &size);
  if (s) {
    ty_status_free(s); /* no record (or an unreadable one): compile */
    return TY_OK;
  }
  char *text = data;
  ty_status_t cached = TY_OK;
  if (strncmp(text, TY_FAILURE_MAGIC, strlen(TY_FAILURE_MAGIC)) == 0) {
    char *code_line = strstr(text, "\ncode "), *msg = strstr(text, "\nmessage ");
    char *time_line = strstr(text, "\ntime ");
    char when[32] = "at an unknown time"; /* records of older builds have no time */
    if (time_line && (!msg || time_line < msg)) {
      size_t len = strcspn(time_line + 6, "\n");
      if (len > 0 && len < 24) snprintf(when, sizeof(when), "%.*s", (int)len, time_line + 6);
    }
    ty_code_t code = TY_CODE_UNKNOWN;
    if (code_line) {
      code_line += 6;
      for (int c = 1; c <= TY_CODE_DATA_LOSS; ++c) {
        const char *name = ty_code_name((ty_code_t)c);
        size_t len = strlen(name);
        if (strncmp(code_line, name, len) == 0 && code_line[len] == '\n') code = (ty_code_t)c;
      }
    }
    if (msg) {
      msg += 9;
      msg[strcspn(msg, "\n")] = '\0';
      cached = ty_status_make(code,
                              "%s [a cached compile failure, recorded %s in %s: this is "
                              "the refusal the plugin gave then, replayed without "
                              "compiling; run with --retry-failed to compile again]",
                              msg, when, path);
    }
  }
  free(data);
  return cached;
}
