/* The backend base of a device plugin (cuda, opencl): the driver loaded at
 * backend_create, the devices it finds kept as slots, and the entries
 * backend_create, backend_destroy, device_count and device_info written
 * once over a few hooks. A plugin's backend struct (struct
 * ty_abi_backend_s) embeds ty_dev_backend_t first and its slot struct
 * embeds ty_dev_slot_t first, so the core's entries take the plugin's
 * handles as they are.
 *
 * create and destroy are not thread-safe (the host calls them once); count
 * and info only read. A slot's lock guards what the plugin makes for it at
 * the first device_open (a context, programs, modules). */
#ifndef TY_BACKENDS_COMMON_DEVICE_BACKEND_H_
#define TY_BACKENDS_COMMON_DEVICE_BACKEND_H_

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "hal/backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the core keeps of one device found at create. */
typedef struct ty_dev_slot_t {
  ty_abi_device_info_t info; /* the plugin's probe fills it */
  pthread_mutex_t lock;      /* made by ty_dev_backend_slot_add */
} ty_dev_slot_t;

typedef struct ty_dev_backend_t ty_dev_backend_t;

/* What differs between device plugins at create and destroy. */
typedef struct ty_dev_backend_class_t {
  const char *name;    /* "cuda": prefixes the core's messages */
  size_t backend_size; /* sizeof(struct ty_abi_backend_s), ty_dev_backend_t first */
  size_t slot_size;    /* sizeof the plugin's slot, ty_dev_slot_t first */
  /* Loads the driver (required); nonzero with the reason in `why` (the
   * UNAVAILABLE status's whole message) when it cannot. Nothing is
   * unloaded after a failed load. */
  int (*load)(ty_dev_backend_t *b, char *why, size_t capacity);
  /* Finds the devices (required), adding each with ty_dev_backend_slot_add;
   * an error (UNAVAILABLE when there is none) fails create, which then
   * destroys the backend. */
  ty_abi_status_t (*enumerate)(ty_dev_backend_t *b);
  /* Releases what a slot holds beyond the core's (NULL: nothing); the core
   * destroys its lock after. */
  void (*slot_release)(ty_dev_backend_t *b, ty_dev_slot_t *slot);
  /* Unloads the driver (required), last before the backend is freed. */
  void (*unload)(ty_dev_backend_t *b);
} ty_dev_backend_class_t;

struct ty_dev_backend_t {
  const ty_host_api_t *host;
  const ty_dev_backend_class_t *cls;
  uint32_t slot_count, slot_cap;
  unsigned char *slots; /* slot_count entries of cls->slot_size bytes */
};

/* backend_create: allocates cls->backend_size zeroed bytes, remembers the
 * host (ty_plugin_status_init), loads the driver and enumerates. Out of
 * memory is "NAME: out of memory creating backend"; a failed load is
 * UNAVAILABLE with the hook's reason. *out_backend is NULL on error. */
ty_abi_status_t ty_dev_backend_create(const ty_dev_backend_class_t *cls,
                                      const ty_abi_backend_create_args_t *args,
                                      ty_abi_backend_t **out_backend);
/* backend_destroy (NULL: nothing): releases every slot, unloads, frees. */
void ty_dev_backend_destroy(ty_abi_backend_t *backend);
/* device_count and device_info (a copy of the slot's info as
 * ty_dev_device_info_copy makes it). */
ty_abi_status_t ty_dev_backend_device_count(ty_abi_backend_t *backend, uint32_t *out_count);
ty_abi_status_t ty_dev_backend_device_info(ty_abi_backend_t *backend, uint32_t index,
                                           ty_abi_device_info_t *out_info);

/* For the enumerate hook: a new zeroed slot (its lock made) at the end,
 * returned in *out_slot; "NAME: out of memory" (RESOURCE_EXHAUSTED)
 * otherwise. Slots move while enumerate adds them: keep no pointer. */
ty_abi_status_t ty_dev_backend_slot_add(ty_dev_backend_t *b, ty_dev_slot_t **out_slot);
/* Slot `index` (< slot_count). */
ty_dev_slot_t *ty_dev_backend_slot(const ty_dev_backend_t *b, uint32_t index);

#ifdef __cplusplus
}
#endif

#endif /* TY_BACKENDS_COMMON_DEVICE_BACKEND_H_ */
