/* Devices: URI resolution and the host-side device object. */
#include "hal/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/device_uri.h"
#include "hal/executable.h"

struct ty_device_t {
  ty_executable_cache_t *executables; /* made at first use; see device.h */
  ty_backend_t *backend;
  uint32_t index;
  ty_abi_device_t *handle;
  ty_abi_device_info_t info;
  char *uri;
  char label[80];
};

ty_status_t ty_device_uri_for_rank(ty_registry_t *registry, ty_device_uri_t *uri,
                                   uint32_t local_rank) {
  if (uri->has_index) return TY_OK;
  ty_backend_t *backend = NULL;
  uint32_t count = 0;
  ty_status_t s = ty_registry_find(registry, uri->backend, &backend);
  if (!s) s = ty_backend_device_count(backend, &count);
  if (!s && count > 1 && local_rank >= count) {
    s = ty_status_make(TY_CODE_FAILED_PRECONDITION,
                       "local rank %u has no device: backend '%s' has %u devices on this host "
                       "(start at most %u ranks per host, or name the device in the URI)",
                       local_rank, uri->backend, count, count);
  }
  if (s) return ty_status_annotate(s, "choosing the device of '%s'", uri->typed);
  if (count > 1) ty_device_uri_set_index(uri, local_rank);
  return TY_OK;
}

ty_status_t ty_device_open(ty_registry_t *registry, const char *uri,
                           ty_device_t **out_device) {
  *out_device = NULL;
  ty_device_uri_t parsed;
  TY_RETURN_IF_ERROR(ty_device_uri_parse(uri, &parsed));
  ty_status_t s = ty_device_open_parsed(registry, &parsed, out_device);
  ty_device_uri_deinit(&parsed);
  return s;
}

ty_status_t ty_device_open_parsed(ty_registry_t *registry, const ty_device_uri_t *parsed,
                                  ty_device_t **out_device) {
  *out_device = NULL;
  char *uri = NULL;
  TY_RETURN_IF_ERROR(ty_device_uri_format(parsed, &uri));
  ty_backend_t *backend = NULL;
  ty_status_t s = ty_registry_find(registry, parsed->backend, &backend);
  if (s) {
    s = ty_status_annotate(s, "opening device '%s'", uri);
    free(uri);
    return s;
  }
  ty_device_t *d = calloc(1, sizeof(*d));
  if (!d) {
    s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory opening device '%s'", uri);
    free(uri);
    return s;
  }
  d->uri = uri; /* owned by the device from here */
  d->backend = backend;
  d->index = parsed->index;
  snprintf(d->label, sizeof(d->label), "%s:%u", parsed->backend, parsed->index);
  s = ty_backend_device_info(backend, parsed->index, &d->info);
  if (!s) {
    ty_abi_status_t (*open)(ty_abi_backend_t *, const ty_abi_device_open_args_t *,
                            ty_abi_device_t **) =
        TY_BACKEND_ENTRY(backend, device_open);
    if (!open) {
      s = ty_status_make(TY_CODE_UNIMPLEMENTED,
                         "backend '%s' does not implement device_open",
                         parsed->backend);
    } else {
      ty_abi_device_open_args_t args = {
          .struct_size = sizeof(args),
          .device_index = parsed->index,
          .option_count = parsed->option_count,
          .options = parsed->options,
      };
      s = ty_status_from_plugin(parsed->backend,
                                open(ty_backend_instance(backend), &args, &d->handle));
      if (!s && !d->handle) {
        /* Every later call would pass the plugin a NULL device. */
        s = ty_status_make(TY_CODE_INTERNAL,
                           "plugin '%s' (%s): device_open returned OK without a device (a "
                           "plugin contract error: set *out_device, or return an error "
                           "saying why the device cannot be opened)",
                           parsed->backend, ty_backend_path(backend));
      }
    }
  }
  if (s) {
    s = ty_status_annotate(s, "opening device '%s'", d->uri);
    free(d->uri);
    free(d);
    return s;
  }
  *out_device = d;
  return TY_OK;
}

void ty_device_close(ty_device_t *d) {
  if (!d) return;
  /* Its executables belong to the plugin's device: destroy them first. */
  ty_executable_cache_destroy(d->executables);
  void (*close_fn)(ty_abi_device_t *) = TY_BACKEND_ENTRY(d->backend, device_close);
  if (close_fn && d->handle) close_fn(d->handle);
  free(d->uri);
  free(d);
}

ty_backend_t *ty_device_backend(const ty_device_t *d) { return d->backend; }
uint32_t ty_device_index(const ty_device_t *d) { return d->index; }
const char *ty_device_uri(const ty_device_t *d) { return d->uri; }
const char *ty_device_label(const ty_device_t *d) { return d->label; }
const ty_abi_device_info_t *ty_device_info(const ty_device_t *d) { return &d->info; }
ty_abi_device_t *ty_device_handle(const ty_device_t *d) { return d->handle; }

ty_status_t ty_device_synchronize(ty_device_t *d) {
  ty_abi_status_t (*sync)(ty_abi_device_t *) =
      TY_BACKEND_ENTRY(d->backend, device_synchronize);
  if (!sync) return TY_OK;
  return ty_status_annotate(ty_status_from_abi(sync(d->handle)),
                            "synchronizing %s", d->label);
}

ty_status_t ty_device_memory(ty_device_t *d, bool reset_peak, ty_abi_device_memory_t *out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  ty_abi_status_t (*memory)(ty_abi_device_t *, uint32_t, ty_abi_device_memory_t *) =
      TY_BACKEND_ENTRY(d->backend, device_memory);
  if (!memory) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "backend '%s' does not measure its memory (no ABI 1.3 device_memory)",
                          ty_backend_name(d->backend));
  }
  ty_status_t s = ty_status_from_abi(memory(d->handle, reset_peak ? 1u : 0u, out));
  out->how[sizeof(out->how) - 1] = '\0';
  return ty_status_annotate(s, "measuring the memory of %s", d->label);
}

ty_status_t ty_device_executable_cache(ty_device_t *d, ty_executable_cache_t **out_cache) {
  if (!d->executables) TY_RETURN_IF_ERROR(ty_executable_cache_create(d, &d->executables));
  *out_cache = d->executables;
  return TY_OK;
}
