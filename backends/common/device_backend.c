/* The backend base of the device plugins (device_backend.h): create,
 * destroy, count and info over the plugin's hooks, and the slot array. */
#include "backends/common/device_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/common/device_exec.h"
#include "backends/common/plugin_status.h"

/* The plugin's backend handle is its struct, whose first member is the
 * base: a pointer to it is a pointer to the base (C11 6.7.2.1p15). */
static ty_dev_backend_t *ty_dev_backend_of(ty_abi_backend_t *backend) {
  return (ty_dev_backend_t *)(void *)backend;
}

ty_abi_status_t ty_dev_backend_create(const ty_dev_backend_class_t *cls,
                                      const ty_abi_backend_create_args_t *args,
                                      ty_abi_backend_t **out_backend) {
  *out_backend = NULL;
  ty_dev_backend_t *b = calloc(1, cls->backend_size);
  if (!b) {
    /* Before ty_plugin_status_init: the host's own status maker. */
    char text[96];
    snprintf(text, sizeof(text), "%s: out of memory creating backend", cls->name);
    return args->host->status_make(TY_CODE_RESOURCE_EXHAUSTED, text);
  }
  b->host = args->host;
  b->cls = cls;
  ty_plugin_status_init(args->host);
  char why[512];
  if (cls->load(b, why, sizeof(why)) != 0) {
    free(b);
    return args->host->status_make(TY_CODE_UNAVAILABLE, why);
  }
  ty_abi_status_t st = cls->enumerate(b);
  if (st) {
    ty_dev_backend_destroy((ty_abi_backend_t *)(void *)b);
    return st;
  }
  *out_backend = (ty_abi_backend_t *)(void *)b;
  return NULL;
}

void ty_dev_backend_destroy(ty_abi_backend_t *backend) {
  ty_dev_backend_t *b = ty_dev_backend_of(backend);
  if (!b) return;
  for (uint32_t i = 0; i < b->slot_count; ++i) {
    ty_dev_slot_t *s = ty_dev_backend_slot(b, i);
    if (b->cls->slot_release) b->cls->slot_release(b, s);
    pthread_mutex_destroy(&s->lock);
  }
  free(b->slots);
  b->cls->unload(b);
  free(b);
}

ty_abi_status_t ty_dev_backend_device_count(ty_abi_backend_t *backend, uint32_t *out_count) {
  *out_count = ty_dev_backend_of(backend)->slot_count;
  return NULL;
}

ty_abi_status_t ty_dev_backend_device_info(ty_abi_backend_t *backend, uint32_t index,
                                           ty_abi_device_info_t *out_info) {
  ty_dev_device_info_copy(&ty_dev_backend_slot(ty_dev_backend_of(backend), index)->info,
                          out_info);
  return NULL;
}

ty_abi_status_t ty_dev_backend_slot_add(ty_dev_backend_t *b, ty_dev_slot_t **out_slot) {
  *out_slot = NULL;
  const size_t size = b->cls->slot_size;
  if (b->slot_count == b->slot_cap) {
    const uint32_t cap = b->slot_cap ? b->slot_cap * 2 : 8;
    unsigned char *grown = realloc(b->slots, (size_t)cap * size);
    if (!grown) {
      return ty_plugin_error(TY_CODE_RESOURCE_EXHAUSTED, "%s: out of memory", b->cls->name);
    }
    b->slots = grown;
    b->slot_cap = cap;
  }
  ty_dev_slot_t *s = (ty_dev_slot_t *)(void *)(b->slots + (size_t)b->slot_count * size);
  memset(s, 0, size);
  pthread_mutex_init(&s->lock, NULL);
  b->slot_count++;
  *out_slot = s;
  return NULL;
}

ty_dev_slot_t *ty_dev_backend_slot(const ty_dev_backend_t *b, uint32_t index) {
  return (ty_dev_slot_t *)(void *)(b->slots + (size_t)index * b->cls->slot_size);
}
