/* `trainyard devices`: every backend found with its devices and properties,
 * then every rejected plugin candidate with the reason. The listing is built
 * once as JSON; the text form is rendered from it, so both always agree. */
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "build_info.h"
#include "hal/dtype.h"
#include "hal/registry.h"

static const char *const ty_devices_usage =
    "usage: trainyard devices [--json]\n"
    "\n"
    "Lists every backend plugin that loaded, with its devices (URI, name,\n"
    "vendor, kind, compute units, memory, dtypes, and the API version and\n"
    "extensions where the runtime reports them), plugin path and ABI\n"
    "version, and a warning for each pair of ABI entries the plugin sets\n"
    "only half of (device_open without device_close, ...); then every\n"
    "candidate that was rejected, and why. --json adds each plugin's\n"
    "identity (its build-id, or the SHA-256 of its file), which keys the\n"
    "compile cache.\n"
    "\n"
    "A plugin is loaded only when its file and every folder above it belong\n"
    "to you or root and are not writable by group or others (sticky folders\n"
    "such as /tmp excepted); others are rejected as unsafe-permissions unless\n"
    "TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS=1.\n"
    "\n"
    "  --json      print one JSON object instead of text\n"
    "  -h, --help  this help\n";

static const char *ty_kind_name(ty_device_kind_t kind) {
  switch (kind) {
    case TY_DEVICE_KIND_CPU: return "cpu";
    case TY_DEVICE_KIND_GPU: return "gpu";
    case TY_DEVICE_KIND_ACCELERATOR: return "accelerator";
    case TY_DEVICE_KIND_OTHER: break;
  }
  return "other";
}

/* jansson returns NULL on allocation failure; json_object_set_new and
 * json_array_append_new accept NULL values and fail, so checking the final
 * dump is enough to catch out-of-memory. */
static json_t *ty_device_json(ty_backend_t *backend, uint32_t index) {
  ty_abi_device_info_t info;
  json_t *d = json_object();
  char uri[96];
  snprintf(uri, sizeof(uri), "%s:%u", ty_backend_name(backend), index);
  json_object_set_new(d, "uri", json_string(uri));
  json_object_set_new(d, "index", json_integer(index));
  ty_status_t s = ty_backend_device_info(backend, index, &info);
  if (s) {
    json_object_set_new(d, "error", json_string(ty_status_message(s)));
    ty_status_free(s);
    return d;
  }
  json_object_set_new(d, "name", json_string(info.name));
  json_object_set_new(d, "vendor", json_string(info.vendor));
  json_object_set_new(d, "driver_version", json_string(info.driver_version));
  json_object_set_new(d, "kind", json_string(ty_kind_name(info.kind)));
  json_object_set_new(d, "compute_units", json_integer(info.compute_units));
  json_object_set_new(d, "memory_bytes", json_integer((json_int_t)info.memory_bytes));
  json_t *dtypes = json_array();
  for (int t = TY_DTYPE_INVALID + 1; t < TY_DTYPE_COUNT_; ++t) {
    if (info.dtype_mask & TY_DTYPE_BIT(t)) {
      json_array_append_new(dtypes, json_string(ty_dtype_name((ty_dtype_t)t)));
    }
  }
  json_object_set_new(d, "dtypes", dtypes);
  json_object_set_new(d, "emulated", json_boolean(info.emulated != 0));
  json_object_set_new(d, "peak_f32_gflops", json_real(info.peak_f32_gflops));
  json_object_set_new(d, "api_version", json_string(info.api_version));
  json_t *extensions = json_array();
  char words[sizeof(info.extensions)];
  snprintf(words, sizeof(words), "%s", info.extensions);
  char *save = NULL;
  for (char *w = strtok_r(words, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
    json_array_append_new(extensions, json_string(w));
  }
  json_object_set_new(d, "extensions", extensions);
  return d;
}

static json_t *ty_backend_json(ty_backend_t *backend) {
  json_t *b = json_object();
  uint32_t major = 0, minor = 0;
  ty_backend_abi_version(backend, &major, &minor);
  json_object_set_new(b, "name", json_string(ty_backend_name(backend)));
  json_object_set_new(b, "version", json_string(ty_backend_version(backend)));
  json_object_set_new(b, "abi", json_pack("{s:i,s:i}", "major", (int)major,
                                          "minor", (int)minor));
  json_object_set_new(b, "path", json_string(ty_backend_path(backend)));
  json_object_set_new(b, "identity", json_string(ty_backend_identity(backend)));
  json_t *warnings = json_array();
  for (size_t i = 0; i < ty_backend_warning_count(backend); ++i) {
    json_array_append_new(warnings, json_string(ty_backend_warning_at(backend, i)));
  }
  json_object_set_new(b, "warnings", warnings);
  json_t *devices = json_array();
  uint32_t count = 0;
  ty_status_t s = ty_backend_device_count(backend, &count);
  if (s) {
    json_object_set_new(b, "error", json_string(ty_status_message(s)));
    ty_status_free(s);
  }
  for (uint32_t i = 0; i < count; ++i) {
    json_array_append_new(devices, ty_device_json(backend, i));
  }
  json_object_set_new(b, "devices", devices);
  return b;
}

static json_t *ty_devices_json(const ty_registry_t *registry) {
  json_t *root = json_object();
  json_object_set_new(root, "trainyard_version", json_string(TY_VERSION_STRING));
  json_object_set_new(root, "host_abi", json_pack("{s:i,s:i}", "major",
                                                  (int)TY_ABI_MAJOR, "minor",
                                                  (int)TY_ABI_MINOR));
  json_t *dirs = json_array();
  for (size_t i = 0; i < ty_registry_search_dir_count(registry); ++i) {
    json_array_append_new(dirs, json_string(ty_registry_search_dir_at(registry, i)));
  }
  json_object_set_new(root, "search_dirs", dirs);
  json_t *backends = json_array();
  for (size_t i = 0; i < ty_registry_backend_count(registry); ++i) {
    json_array_append_new(backends,
                          ty_backend_json(ty_registry_backend_at(registry, i)));
  }
  json_object_set_new(root, "backends", backends);
  json_t *rejected = json_array();
  for (size_t i = 0; i < ty_registry_rejected_count(registry); ++i) {
    const ty_rejected_candidate_t *c = ty_registry_rejected_at(registry, i);
    json_array_append_new(
        rejected, json_pack("{s:s,s:s,s:s,s:s}", "path", c->path, "name", c->name,
                            "kind", ty_reject_kind_name(c->kind), "reason",
                            c->reason));
  }
  json_object_set_new(root, "rejected", rejected);
  return root;
}

static const char *ty_json_str(const json_t *obj, const char *key) {
  const char *s = json_string_value(json_object_get(obj, key));
  return s ? s : "";
}

static void ty_print_devices_text(const json_t *root) {
  const json_t *backends = json_object_get(root, "backends");
  size_t i, j;
  const json_t *b, *d;
  printf("Backends (%zu loaded; host plugin ABI %d.%d):\n", json_array_size(backends),
         (int)json_integer_value(json_object_get(json_object_get(root, "host_abi"), "major")),
         (int)json_integer_value(json_object_get(json_object_get(root, "host_abi"), "minor")));
  if (json_array_size(backends) == 0) printf("  (none)\n");
  json_array_foreach(backends, i, b) {
    const json_t *abi = json_object_get(b, "abi");
    printf("  %s %s (ABI %d.%d) %s\n", ty_json_str(b, "name"),
           ty_json_str(b, "version"),
           (int)json_integer_value(json_object_get(abi, "major")),
           (int)json_integer_value(json_object_get(abi, "minor")),
           ty_json_str(b, "path"));
    if (json_object_get(b, "error")) {
      printf("    error: %s\n", ty_json_str(b, "error"));
    }
    const json_t *w;
    json_array_foreach(json_object_get(b, "warnings"), j, w) {
      printf("    warning: %s\n", json_string_value(w));
    }
    json_array_foreach(json_object_get(b, "devices"), j, d) {
      if (json_object_get(d, "error")) {
        printf("    %-12s error: %s\n", ty_json_str(d, "uri"), ty_json_str(d, "error"));
        continue;
      }
      char dtypes[160] = "";
      size_t used = 0, k;
      const json_t *t;
      json_array_foreach(json_object_get(d, "dtypes"), k, t) {
        int n = snprintf(dtypes + used, sizeof(dtypes) - used, "%s%s",
                         k ? "," : "", json_string_value(t));
        if (n < 0 || (size_t)n >= sizeof(dtypes) - used) break;
        used += (size_t)n;
      }
      double gib = (double)json_integer_value(json_object_get(d, "memory_bytes")) /
                   (1024.0 * 1024.0 * 1024.0);
      printf("    %-12s %s%s\n", ty_json_str(d, "uri"), ty_json_str(d, "name"),
             json_is_true(json_object_get(d, "emulated")) ? " [emulated]" : "");
      printf("      vendor %s, kind %s, %d compute units, %.1f GiB, driver %s\n",
             ty_json_str(d, "vendor")[0] ? ty_json_str(d, "vendor") : "unknown",
             ty_json_str(d, "kind"),
             (int)json_integer_value(json_object_get(d, "compute_units")), gib,
             ty_json_str(d, "driver_version"));
      printf("      dtypes %s", dtypes);
      double peak = json_real_value(json_object_get(d, "peak_f32_gflops"));
      if (peak > 0) printf(", peak f32 %.0f GFLOP/s", round(peak));
      printf("\n");
      /* Only devices whose runtime reports them (OpenCL) get these lines. */
      if (ty_json_str(d, "api_version")[0]) printf("      api %s\n", ty_json_str(d, "api_version"));
      if (json_array_size(json_object_get(d, "extensions"))) {
        printf("      extensions");
        json_array_foreach(json_object_get(d, "extensions"), k, t) {
          printf(" %s", json_string_value(t));
        }
        printf("\n");
      }
    }
  }
  const json_t *rejected = json_object_get(root, "rejected");
  printf("Rejected candidates (%zu):\n", json_array_size(rejected));
  if (json_array_size(rejected) == 0) printf("  (none)\n");
  json_array_foreach(rejected, i, b) {
    printf("  %s [%s]\n    %s\n", ty_json_str(b, "path"), ty_json_str(b, "kind"),
           ty_json_str(b, "reason"));
  }
  printf("Search folders:");
  json_array_foreach(json_object_get(root, "search_dirs"), i, b) {
    printf("%s %s", i ? "," : "", json_string_value(b));
  }
  printf("%s\n", json_array_size(json_object_get(root, "search_dirs")) ? "" : " (none)");
}

int ty_cmd_devices(ty_app_t *app, int argc, char **argv) {
  static const struct option long_options[] = {
      {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  bool as_json = false;
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values("devices", argc, argv, "h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    switch (c) {
      case 'j': as_json = true; break;
      case 'h': fputs(ty_devices_usage, stdout); return TY_EXIT_OK;
      default:
        return ty_app_usage_error("devices", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) {
    return ty_app_usage_error("devices", "unexpected argument '%s'", argv[optind]);
  }
  ty_registry_t *registry = NULL;
  ty_status_t s = ty_app_registry_create(app, &registry);
  if (s) return ty_app_fail("devices", s);
  json_t *root = ty_devices_json(registry);
  int rc = TY_EXIT_OK;
  if (as_json) {
    char *text = root ? json_dumps(root, JSON_INDENT(2)) : NULL;
    if (!text) {
      rc = ty_app_fail("devices", ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                                 "out of memory writing JSON"));
    } else {
      puts(text);
      free(text);
    }
  } else if (root) {
    ty_print_devices_text(root);
  } else {
    rc = ty_app_fail("devices", ty_status_make(TY_CODE_RESOURCE_EXHAUSTED,
                                               "out of memory listing devices"));
  }
  json_decref(root);
  ty_registry_destroy(registry);
  return rc;
}
