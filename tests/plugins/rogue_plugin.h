/* The facts each rogue plugin gets wrong, shared by the plugins and by
 * loader_test.c so that the test checks the rejection names exactly them.
 * Included by plugins: only hal/backend_abi.h may come with it. */
#ifndef TY_TESTS_PLUGINS_ROGUE_PLUGIN_H_
#define TY_TESTS_PLUGINS_ROGUE_PLUGIN_H_

#include <stddef.h>

#include "hal/backend_abi.h"

/* rogue_abi: a table built against a future, incompatible header. */
#define ROGUE_ABI_MAJOR 99u

/* rogue_null: a plugin that serves only this major and says so. */
#define ROGUE_NULL_SERVES_MAJOR 2u

/* rogue_small: holds the version fields but not the required entries. */
#define ROGUE_SMALL_STRUCT_SIZE offsetof(ty_backend_api_t, device_count)

/* rogue_unavailable: what a plugin whose vendor runtime is missing says. */
#define ROGUE_UNAVAILABLE_MESSAGE                                         \
  "rogue_unavailable: cannot load the vendor runtime libfoo.so.1: "       \
  "libfoo.so.1: cannot open shared object file: No such file or directory"

/* rogue_create_failed: backend_create fails for another reason. */
#define ROGUE_CREATE_FAILED_MESSAGE "rogue_create_failed: firmware checksum mismatch"

/* rogue_mismatch: the table's name is not the file's name. */
#define ROGUE_MISMATCH_TABLE_NAME "rogue_other"

/* rogue_noentry: exports a misspelt entry point instead. */
#define ROGUE_NO_ENTRY_SYMBOL "ty_backend_querry"

/* minimal: what its poisoned device_open (beyond struct_size) returns. */
#define ROGUE_POISON_MESSAGE "minimal: the host called device_open beyond struct_size"

#endif /* TY_TESTS_PLUGINS_ROGUE_PLUGIN_H_ */
