/* Plugin identity (GNU build-id or file hash) and half-set entry pairs (see
 * plugin_check.h). */
#include "hal/plugin_check.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "hal/sha256.h"

typedef struct {
  ElfW(Addr) base;
  char *out;
} ty_build_id_search_t;

/* dl_iterate_phdr callback: the build-id note of the object loaded at
 * search->base, as "build-id:<hex>". Returns 1 (stop) once found. */
static int ty_find_build_id(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  ty_build_id_search_t *search = data;
  if (info->dlpi_addr != search->base) return 0;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
    const unsigned char *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *note = (const ElfW(Nhdr) *)(const void *)p;
      size_t name_size = (note->n_namesz + 3u) & ~3u, desc_size = (note->n_descsz + 3u) & ~3u;
      const unsigned char *name = p + sizeof(*note), *desc = name + name_size;
      if (desc + desc_size > end) break;
      if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 &&
          memcmp(name, "GNU", 4) == 0 && note->n_descsz > 0 &&
          note->n_descsz <= (TY_PLUGIN_IDENTITY_MAX - 10) / 2) {
        int used = snprintf(search->out, TY_PLUGIN_IDENTITY_MAX, "build-id:");
        for (uint32_t b = 0; b < note->n_descsz; ++b) {
          used += snprintf(search->out + used, TY_PLUGIN_IDENTITY_MAX - (size_t)used, "%02x",
                           desc[b]);
        }
        return 1;
      }
      p = desc + desc_size;
    }
  }
  return 0;
}

static ty_status_t ty_file_sha256(const char *path, char out[TY_PLUGIN_IDENTITY_MAX]) {
  FILE *f = fopen(path, "rb");
  if (!f) return ty_status_from_errno(errno, "cannot read plugin %s", path);
  ty_sha256_t sha;
  ty_sha256_init(&sha);
  unsigned char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) ty_sha256_update(&sha, chunk, n);
  bool bad = ferror(f) != 0;
  fclose(f);
  char hex[65];
  bool hashed = ty_sha256_final_hex(&sha, hex);
  if (bad) return ty_status_make(TY_CODE_DATA_LOSS, "cannot read plugin %s: read error", path);
  if (!hashed) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing plugin %s", path);
  }
  snprintf(out, TY_PLUGIN_IDENTITY_MAX, "sha256:%s", hex);
  return TY_OK;
}

ty_status_t ty_plugin_identity(void *dl, const char *path, char out[TY_PLUGIN_IDENTITY_MAX]) {
  out[0] = '\0';
  struct link_map *map = NULL;
  if (dlinfo(dl, RTLD_DI_LINKMAP, &map) == 0 && map) {
    ty_build_id_search_t search = {.base = map->l_addr, .out = out};
    dl_iterate_phdr(ty_find_build_id, &search);
  }
  return out[0] ? TY_OK : ty_file_sha256(path, out);
}

/* The pairs: each entry of a pair is useless, or leaks, without the other. */
static const struct {
  size_t first, second;
  const char *first_name, *second_name, *why;
} ty_entry_pairs[] = {
#define TY_PAIR(a, b, why) \
  {offsetof(ty_backend_api_t, a), offsetof(ty_backend_api_t, b), #a, #b, why}
    TY_PAIR(device_open, device_close, "every opened device leaks"),
    TY_PAIR(buffer_alloc, buffer_free, "every buffer leaks"),
    TY_PAIR(buffer_write, buffer_read, "buffers can be filled but not read back, or the reverse"),
    TY_PAIR(graph_supports, graph_compile, "the host runs a graph only with both"),
    TY_PAIR(graph_compile, executable_execute, "a compiled graph can never run"),
    TY_PAIR(graph_compile, executable_destroy, "every compiled executable leaks"),
    TY_PAIR(executable_serialize, executable_deserialize,
            "artifacts can be written but not loaded, or the reverse"),
    /* ABI 1.4: collectives are all or none (docs/plugin-abi.md) */
    TY_PAIR(comm_create, comm_unique_id, "no communicator can be made without an id"),
    TY_PAIR(comm_create, comm_destroy, "every communicator leaks"),
    TY_PAIR(comm_create, comm_all_reduce, "data parallel needs the gradient all-reduce"),
    TY_PAIR(comm_create, comm_reduce_scatter, "ZeRO-1 needs reduce-scatter"),
    TY_PAIR(comm_create, comm_all_gather, "ZeRO-1 needs all-gather"),
    TY_PAIR(comm_create, comm_broadcast, "a run starts by broadcasting rank 0's weights"),
    /* ABI 1.8: point to point */
    TY_PAIR(comm_send, comm_recv, "a pipeline's sends would never be received"),
#undef TY_PAIR
};

bool ty_backend_api_has_entry(const ty_backend_api_t *api, size_t offset) {
  if (api->struct_size < offset + sizeof(void *)) return false;
  void *entry;
  memcpy(&entry, (const char *)api + offset, sizeof(entry));
  return entry != NULL;
}

bool ty_plugin_check_pairs(const ty_backend_api_t *api, ty_plugin_warn_fn_t warn, void *user) {
  for (size_t i = 0; i < sizeof(ty_entry_pairs) / sizeof(ty_entry_pairs[0]); ++i) {
    bool a = ty_backend_api_has_entry(api, ty_entry_pairs[i].first);
    bool b = ty_backend_api_has_entry(api, ty_entry_pairs[i].second);
    if (a == b) continue;
    char message[256];
    snprintf(message, sizeof(message), "%s is set but %s is not: %s; set both or neither",
             a ? ty_entry_pairs[i].first_name : ty_entry_pairs[i].second_name,
             a ? ty_entry_pairs[i].second_name : ty_entry_pairs[i].first_name,
             ty_entry_pairs[i].why);
    if (!warn(user, message)) return false;
  }
  return true;
}
