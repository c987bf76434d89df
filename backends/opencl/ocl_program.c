/* Programs: the OpenCL C sources embedded at build time (the kernels/ folder, see
 * embed_sources.cmake), assembled per kernel family as common.cl + the
 * family's file, built at run time on first use and cached as binaries.
 *
 * The binary cache lives in $TRAINYARD_OPENCL_CACHE_DIR, else
 * $XDG_CACHE_HOME/trainyard/opencl, else ~/.cache/trainyard/opencl. An entry
 * is keyed by the SHA-256 of: platform and device name and version, driver
 * version, build options and the SHA-256 of the exact source text; the file
 * repeats the key, which is checked on load. Entries are written atomically
 * (temporary file, fsync, rename), so concurrent processes at worst build
 * the same program twice. A cache that cannot be read or written only costs
 * a rebuild, never an error.
 *
 * Test hook: TRAINYARD_OPENCL_KERNEL_OVERRIDE="file.cl=/path/x.cl[:...]"
 * replaces an embedded file's text (how the test of build errors feeds a
 * deliberately broken kernel). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocl_internal.h"
#include "trainyard/file.h"
#include "trainyard/sha256.h"
#include "ocl_sources.h"

static const char *const ty_ocl_family_files[TY_OCL_FAM_COUNT_] = {
    [TY_OCL_FAM_ELEMENTWISE] = "elementwise.cl", [TY_OCL_FAM_REDUCE] = "reduce.cl",
    [TY_OCL_FAM_MATMUL] = "matmul.cl",           [TY_OCL_FAM_NORM] = "norm.cl",
    [TY_OCL_FAM_SOFTMAX] = "softmax.cl",         [TY_OCL_FAM_ROPE] = "rope.cl",
    [TY_OCL_FAM_ATTENTION] = "attention.cl",     [TY_OCL_FAM_EMBEDDING] = "embedding.cl",
    [TY_OCL_FAM_VIEWS] = "views.cl",             [TY_OCL_FAM_OPTIM] = "optim.cl",
    [TY_OCL_FAM_SAMPLE] = "sample.cl",
};

#define TY_OCL_CACHE_MAGIC "trainyard-opencl-binary 1\n"
#define TY_OCL_LOG_MAX 12000

const char *ty_ocl_family_file(ty_ocl_family_t family) { return ty_ocl_family_files[family]; }

void ty_ocl_programs_release(ty_ocl_api_t *api, ty_ocl_slot_t *slot) {
  for (int f = 0; f < TY_OCL_FAM_COUNT_; ++f) {
    ty_ocl_program_release(api, slot->programs[f]);
    slot->programs[f] = NULL;
  }
}

/* A growable string. */
typedef struct {
  char *data;
  size_t len, cap;
  bool oom;
} ty_ocl_text_t;

static void ty_text_add(ty_ocl_text_t *t, const char *s, size_t n) {
  if (t->oom) return;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + n + 1) cap *= 2;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->oom = true;
      return;
    }
    t->data = grown;
    t->cap = cap;
  }
  memcpy(t->data + t->len, s, n);
  t->len += n;
  t->data[t->len] = '\0';
}

static void ty_text_str(ty_ocl_text_t *t, const char *s) { ty_text_add(t, s, strlen(s)); }

/* Kernel overrides are OpenCL C text; cache entries are what a driver built
 * (hal/file.h caps both reads). */
static const ty_file_kind_t ty_ocl_source_kind = {
    .what = "OpenCL C source", .max_bytes = 16 * TY_MIB, .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT};
static const ty_file_kind_t ty_ocl_binary_kind = {
    .what = "OpenCL binary cache entry", .max_bytes = TY_GIB, .bad_code = TY_CODE_DATA_LOSS};

/* The text of embedded file `name`, or of its override. *out_owned is the
 * allocation to free (NULL for embedded text). */
static ty_abi_status_t ty_ocl_source_text(const char *name, const char **out_text,
                                          size_t *out_size, char **out_owned) {
  *out_owned = NULL;
  const char *overrides = getenv("TRAINYARD_OPENCL_KERNEL_OVERRIDE");
  size_t name_len = strlen(name);
  for (const char *p = overrides; p && *p;) {
    const char *end = strchr(p, ':');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len > name_len + 1 && strncmp(p, name, name_len) == 0 && p[name_len] == '=') {
      char path[1024];
      snprintf(path, sizeof(path), "%.*s", (int)(len - name_len - 1), p + name_len + 1);
      char *data = NULL;
      ty_status_t s = ty_file_read(path, &ty_ocl_source_kind, &data, out_size);
      if (s) {
        ty_abi_status_t e = ty_plugin_error(ty_status_code(s),
                                         "opencl: TRAINYARD_OPENCL_KERNEL_OVERRIDE names %s for "
                                         "%s, which cannot be read: %s",
                                         path, name, ty_status_message(s));
        ty_status_free(s);
        return e;
      }
      *out_owned = data;
      *out_text = data;
      return NULL;
    }
    p = end ? end + 1 : NULL;
  }
  for (size_t i = 0; i < ty_ocl_source_count; ++i) {
    if (strcmp(ty_ocl_sources[i].name, name) == 0) {
      *out_text = ty_ocl_sources[i].text;
      *out_size = ty_ocl_sources[i].size;
      return NULL;
    }
  }
  return ty_plugin_error(TY_CODE_INTERNAL, "opencl: no embedded kernel source %s", name);
}

/* "ty_a, ty_b": the kernels a source file defines, for messages. */
static void ty_ocl_kernel_names(const char *text, char *out, size_t capacity) {
  out[0] = '\0';
  size_t used = 0;
  for (const char *p = text; (p = strstr(p, "__kernel")) != NULL;) {
    p += 8;
    const char *q = p;
    while (*q == ' ' || *q == '\n') ++q;
    if (strncmp(q, "void", 4) != 0) continue;
    q += 4;
    while (*q == ' ' || *q == '\n') ++q;
    size_t n = 0;
    while (q[n] == '_' || (q[n] >= 'a' && q[n] <= 'z') || (q[n] >= 'A' && q[n] <= 'Z') ||
           (q[n] >= '0' && q[n] <= '9')) {
      ++n;
    }
    if (n == 0) continue;
    int w = snprintf(out + used, capacity - used, "%s%.*s", used ? ", " : "", (int)n, q);
    if (w < 0 || (size_t)w >= capacity - used) break;
    used += (size_t)w;
  }
  if (!used) snprintf(out, capacity, "none found");
}

static void ty_ocl_build_options(const ty_ocl_slot_t *s, char *out, size_t capacity) {
  snprintf(out, capacity,
           "-cl-std=CL1.2 -DTY_WG=%u -DTY_ATT_WG=%u -DTY_ATT_MAXD=%d%s", TY_OCL_WG,
           TY_OCL_ATT_WG, TY_OCL_ATT_MAXD, s->fp64 ? " -DTY_FP64=1" : "");
}

/* The cache folder, created if needed; "" when there is none. */
static void ty_ocl_cache_dir(char *out, size_t capacity) {
  const char *dir = getenv("TRAINYARD_OPENCL_CACHE_DIR");
  const char *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  if (dir && *dir) {
    snprintf(out, capacity, "%s", dir);
  } else if (xdg && *xdg) {
    snprintf(out, capacity, "%s/trainyard/opencl", xdg);
  } else if (home && *home) {
    snprintf(out, capacity, "%s/.cache/trainyard/opencl", home);
  } else {
    out[0] = '\0';
    return;
  }
  /* mkdir -p */
  char path[1024];
  snprintf(path, sizeof(path), "%s", out);
  for (char *p = path + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    mkdir(path, 0755);
    *p = '/';
  }
  if (mkdir(path, 0755) != 0 && errno != EEXIST) out[0] = '\0';
}

/* Loads a cached binary whose stored key equals `key`. */
static unsigned char *ty_ocl_cache_load(const char *path, const char *key, size_t *out_size) {
  size_t size = 0;
  char *data = NULL;
  ty_status_t s = ty_file_read(path, &ty_ocl_binary_kind, &data, &size);
  if (s) {
    ty_status_free(s); /* unreadable or too large: a miss, built again */
    return NULL;
  }
  size_t magic = strlen(TY_OCL_CACHE_MAGIC), key_len = strlen(key);
  if (size < magic + key_len + 1 || memcmp(data, TY_OCL_CACHE_MAGIC, magic) != 0 ||
      memcmp(data + magic, key, key_len) != 0 || data[magic + key_len] != '\0') {
    free(data);
    return NULL;
  }
  size_t skip = magic + key_len + 1;
  memmove(data, data + skip, size - skip);
  *out_size = size - skip;
  return (unsigned char *)data;
}

static void ty_ocl_cache_store(const char *path, const char *key, const unsigned char *binary,
                               size_t size) {
  char tmp[1100];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  bool ok = true;
  const char *parts[3] = {TY_OCL_CACHE_MAGIC, key, (const char *)binary};
  size_t sizes[3] = {strlen(TY_OCL_CACHE_MAGIC), strlen(key) + 1, size};
  for (int i = 0; i < 3 && ok; ++i) {
    size_t done = 0;
    while (done < sizes[i]) {
      ssize_t w = write(fd, parts[i] + done, sizes[i] - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        ok = false;
        break;
      }
      done += (size_t)w;
    }
  }
  ok = ok && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

/* The build log of a failed build (owned by the caller). */
static char *ty_ocl_build_log(ty_ocl_api_t *api, cl_program program, cl_device_id device) {
  size_t size = 0;
  if (api->clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) !=
      CL_SUCCESS) {
    return NULL;
  }
  char *log = malloc(size + 1);
  if (!log) return NULL;
  if (api->clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log, NULL) !=
      CL_SUCCESS) {
    free(log);
    return NULL;
  }
  log[size] = '\0';
  if (size > TY_OCL_LOG_MAX) strcpy(log + TY_OCL_LOG_MAX, "\n[... log cut]");
  return log;
}

static unsigned char *ty_ocl_program_binary(ty_ocl_api_t *api, cl_program program,
                                            size_t *out_size) {
  size_t size = 0;
  if (api->clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, NULL) !=
          CL_SUCCESS ||
      size == 0) {
    return NULL;
  }
  unsigned char *binary = malloc(size);
  if (!binary) return NULL;
  unsigned char *binaries[1] = {binary};
  if (api->clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(binaries), binaries, NULL) !=
      CL_SUCCESS) {
    free(binary);
    return NULL;
  }
  *out_size = size;
  return binary;
}

/* Builds family `f` for the slot (the caller holds the slot's lock). */
static ty_abi_status_t ty_ocl_program_build(ty_abi_device_t *d, ty_ocl_family_t f) {
  ty_ocl_api_t *api = d->api;
  ty_ocl_slot_t *s = d->slot;
  const char *file = ty_ocl_family_files[f];
  /* The shared headers (preprocessor lines only), then common.cl, then the
   * family's file. The error codes and the sample params' columns come
   * first: common.cl and the kernels use them. */
  static const char *const headers[] = {"device_errors.h", "sample_params.h"};
  enum { TY_OCL_HEADERS = sizeof(headers) / sizeof(headers[0]) };
  const char *header_text[TY_OCL_HEADERS] = {NULL}, *common_text = NULL, *family_text = NULL;
  size_t header_size[TY_OCL_HEADERS] = {0}, common_size = 0, family_size = 0;
  char *header_owned[TY_OCL_HEADERS] = {NULL}, *common_owned = NULL, *family_owned = NULL;
  ty_abi_status_t st = NULL;
  for (int h = 0; h < TY_OCL_HEADERS && !st; ++h) {
    st = ty_ocl_source_text(headers[h], &header_text[h], &header_size[h], &header_owned[h]);
  }
  if (!st) st = ty_ocl_source_text("common.cl", &common_text, &common_size, &common_owned);
  if (!st) st = ty_ocl_source_text(file, &family_text, &family_size, &family_owned);
  if (st) {
    for (int h = 0; h < TY_OCL_HEADERS; ++h) free(header_owned[h]);
    free(common_owned);
    return st;
  }
  /* #line keeps compiler messages in each file's own line numbers. */
  ty_ocl_text_t text = {0};
  for (int h = 0; h < TY_OCL_HEADERS; ++h) {
    ty_text_str(&text, h ? "\n#line 1 \"" : "#line 1 \"");
    ty_text_str(&text, headers[h]);
    ty_text_str(&text, "\"\n");
    ty_text_add(&text, header_text[h], header_size[h]);
  }
  ty_text_str(&text, "\n#line 1 \"common.cl\"\n");
  ty_text_add(&text, common_text, common_size);
  ty_text_str(&text, "\n#line 1 \"");
  ty_text_str(&text, file);
  ty_text_str(&text, "\"\n");
  ty_text_add(&text, family_text, family_size);
  char kernels[512];
  ty_ocl_kernel_names(family_text, kernels, sizeof(kernels));
  for (int h = 0; h < TY_OCL_HEADERS; ++h) free(header_owned[h]);
  free(common_owned);
  free(family_owned);
  if (text.oom) {
    free(text.data);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", d->label);
  }
  char options[256], source_hash[65], key_hash[65], dir[900], path[1100];
  ty_ocl_build_options(s, options, sizeof(options));
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  ty_sha256_update(&sha, text.data, text.len);
  bool hashed = ty_sha256_final_hex(&sha, source_hash);
  char key[2048];
  snprintf(key, sizeof(key),
           "platform: %s | %s\ndevice: %s | %s\ndriver: %s\noptions: %s\nsource: %s %s\n",
           s->platform_name, s->platform_version, s->base.info.name, s->device_version,
           s->base.info.driver_version, options, file, source_hash);
  ty_sha256_init(&sha);
  ty_sha256_update(&sha, key, strlen(key));
  hashed = ty_sha256_final_hex(&sha, key_hash) && hashed;
  if (!hashed) {
    free(text.data);
    return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory hashing %s", d->label,
                        file);
  }
  ty_ocl_cache_dir(dir, sizeof(dir));
  path[0] = '\0';
  if (dir[0]) snprintf(path, sizeof(path), "%s/%s.bin", dir, key_hash);

  cl_int err = CL_SUCCESS;
  cl_program program = NULL;
  if (path[0]) {
    size_t size = 0;
    unsigned char *binary = ty_ocl_cache_load(path, key, &size);
    if (binary) {
      program = ty_ocl_program_from_binary(api, s->context, s->device, binary, size, &err);
      if (program && api->clBuildProgram(program, 1, &s->device, options, NULL, NULL) !=
                         CL_SUCCESS) {
        ty_ocl_program_release(api, program); /* a stale entry: rebuild below */
        program = NULL;
      }
      free(binary);
      if (program) s->builds_from_cache++;
    }
  }
  if (!program) {
    program = ty_ocl_program_from_source(api, s->context, text.data, text.len, &err);
    if (!program) {
      free(text.data);
      return ty_ocl_cl_error(d, "clCreateProgramWithSource", err);
    }
    err = api->clBuildProgram(program, 1, &s->device, options, NULL, NULL);
    if (err != CL_SUCCESS) {
      char *log = ty_ocl_build_log(api, program, s->device);
      ty_ocl_program_release(api, program);
      free(text.data);
      st = ty_plugin_error(TY_CODE_INTERNAL,
                        "%s: the OpenCL C compiler of %s rejected kernel source %s (kernels %s) "
                        "with options '%s': %s (%d); build log:\n%s",
                        d->label, s->base.info.name, file, kernels, options, ty_ocl_error_name(err),
                        (int)err, log && *log ? log : "(the driver gave no log)");
      free(log);
      return st;
    }
    s->builds_from_source++;
    size_t size = 0;
    unsigned char *binary = path[0] ? ty_ocl_program_binary(api, program, &size) : NULL;
    if (binary) ty_ocl_cache_store(path, key, binary, size);
    free(binary);
  }
  free(text.data);
  s->programs[f] = program;
  return NULL;
}

ty_abi_status_t ty_ocl_program_get(ty_abi_device_t *d, ty_ocl_family_t family,
                                   cl_program *out_program) {
  ty_ocl_slot_t *s = d->slot;
  pthread_mutex_lock(&s->base.lock);
  ty_abi_status_t st = s->programs[family] ? NULL : ty_ocl_program_build(d, family);
  *out_program = s->programs[family];
  pthread_mutex_unlock(&s->base.lock);
  return st;
}
