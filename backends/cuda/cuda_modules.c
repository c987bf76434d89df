/* Kernel modules: the embedded fatbin of each family, loaded into a slot's
 * primary context on first use (cuda_internal.h). A test hook,
 * TRAINYARD_CUDA_FATBIN_DIR, loads <dir>/<family>.fatbin files instead, so
 * tests can offer a fatbin built for other chips, and the test-only
 * families (cuda_families.def), which the plugin does not embed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_fatbins.h"
#include "cuda_internal.h"

static const char *const ty_cu_family_names[TY_CU_FAM_COUNT_] = {
#define TY_CU_FAMILY(id, file, build) #file,
#include "cuda_families.def"
#undef TY_CU_FAMILY
};

/* Families whose kernels only tests launch (BUILD TEST in the list): the
 * plugin does not embed them. */
#define TY_CU_TEST_ONLY_ALL false
#define TY_CU_TEST_ONLY_SM90A false
#define TY_CU_TEST_ONLY_TEST true
static const bool ty_cu_family_test_only[TY_CU_FAM_COUNT_] = {
#define TY_CU_FAMILY(id, file, build) TY_CU_TEST_ONLY_##build,
#include "cuda_families.def"
#undef TY_CU_FAMILY
};

const char *ty_cu_family_file(ty_cu_family_t family) {
  return (unsigned)family < TY_CU_FAM_COUNT_ ? ty_cu_family_names[family] : "?";
}

const char *ty_cu_fatbin_targets(void) { return ty_cu_fatbin_targets_text; }

/* A fatbin file of the test hook, read whole (the caller frees). */
static unsigned char *ty_cu_read_override(const char *dir, const char *family, char *path,
                                          size_t path_cap) {
  snprintf(path, path_cap, "%s/%s.fatbin", dir, family);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char *data = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long size = ftell(f);
    if (size > 0 && size < (1L << 30) && fseek(f, 0, SEEK_SET) == 0) {
      data = malloc((size_t)size);
      if (data && fread(data, 1, (size_t)size, f) != (size_t)size) {
        free(data);
        data = NULL;
      }
    }
  }
  fclose(f);
  return data;
}

ty_abi_status_t ty_cu_module_get(ty_abi_device_t *d, ty_cu_family_t family,
                                 CUmodule *out_module) {
  ty_cu_slot_t *s = d->slot;
  *out_module = NULL;
  pthread_mutex_lock(&s->base.lock);
  if (s->modules[family]) {
    *out_module = s->modules[family];
    pthread_mutex_unlock(&s->base.lock);
    return NULL;
  }
  const char *name = ty_cu_family_file(family);
  const unsigned char *image = NULL;
  for (unsigned i = 0; i < ty_cu_fatbin_count; ++i) {
    if (!strcmp(ty_cu_fatbins[i].family, name)) image = ty_cu_fatbins[i].start;
  }
  unsigned char *override = NULL;
  char path[512] = "";
  const char *dir = getenv("TRAINYARD_CUDA_FATBIN_DIR");
  if (dir && dir[0]) {
    override = ty_cu_read_override(dir, name, path, sizeof(path));
    if (override) image = override;
  }
  ty_abi_status_t st = NULL;
  if (!image && ty_cu_family_test_only[family]) {
    st = ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                     "%s: the kernels of kernels/%s.cu are test-only, and the plugin does not "
                     "embed them: point TRAINYARD_CUDA_FATBIN_DIR at the folder of %s.fatbin "
                     "(tests/cuda-fatbin-test in the build folder)%s%s",
                     d->label, name, name, dir && dir[0] ? "; not found in " : "",
                     dir && dir[0] ? dir : "");
  } else if (!image) {
    st = ty_plugin_error(TY_CODE_INTERNAL, "%s: no fatbin for kernel family '%s' in the plugin",
                     d->label, name);
  } else {
    CUmodule m = NULL;
    CUresult r = d->api->cuModuleLoadData(&m, image);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION ||
        r == CUDA_ERROR_INVALID_PTX) {
      char text[256];
      ty_cu_error_text(d->api, r, text, sizeof(text));
      st = ty_plugin_error(TY_CODE_FAILED_PRECONDITION,
                       "%s (%s, sm_%d%d): the kernels of kernels/%s.cu%s%s cannot run on this "
                       "card: %s. The plugin was built for %s; rebuild with "
                       "-DTY_CUDA_ARCHS=\"...;%d%d\"",
                       d->label, s->base.info.name, s->cc_major, s->cc_minor, name,
                       override ? " from " : "", override ? path : "", text,
                       override ? "(the override file's targets)" : ty_cu_fatbin_targets(),
                       s->cc_major, s->cc_minor);
    } else if (r != CUDA_SUCCESS) {
      char what[96];
      snprintf(what, sizeof(what), "loading the kernels of kernels/%s.cu", name);
      st = ty_cu_driver_error(d, what, r);
    } else {
      s->modules[family] = m;
      *out_module = m;
    }
  }
  free(override);
  pthread_mutex_unlock(&s->base.lock);
  return st;
}

void ty_cu_modules_unload(ty_cu_api_t *api, ty_cu_slot_t *slot) {
  for (int f = 0; f < TY_CU_FAM_COUNT_; ++f) {
    if (slot->modules[f] && api->cuModuleUnload) api->cuModuleUnload(slot->modules[f]);
    slot->modules[f] = NULL;
  }
}
