/* Whether a path is this user's to trust: code or data loaded from it can
 * only have been put there by this user or root. The plugin registry
 * refuses plugins that fail it (a plugin's constructor runs at load); the
 * compile cache warns (graph/runtime/compile_cache.h).
 *
 * The rule is sshd's StrictModes: the file and every folder above it, up to
 * "/", must be owned by root or this user (the effective uid) and must not
 * be writable by its group or others. A folder with the sticky bit (/tmp) is
 * the one exception to the second half: others may add entries there but
 * not rename or delete ours, and our entry below it is checked in turn.
 *
 * Thread-safety: may be called from several threads. No allocation. */
#ifndef TY_HAL_PATH_TRUST_H_
#define TY_HAL_PATH_TRUST_H_

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The variable that, set to 1, lets the registry load plugins from paths
 * that fail the rule (a shared lab folder on purpose). */
#define TY_PATH_TRUST_ENV "TRAINYARD_ALLOW_UNSAFE_PLUGIN_DIRS"

/* True when `path` passes the rule. The part of `path` that exists is
 * checked (resolved through symlinks, as what is opened is the target); a
 * path that does not exist at all passes. When it fails, *out_reason says
 * which file or folder and why, e.g. "folder /srv/p is writable by its
 * group or others (mode 0777)" or "file /srv/p/x.so belongs to uid 65534,
 * neither this user (uid 1000) nor root". */
bool ty_path_trusted(const char *path, char *out_reason, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* TY_HAL_PATH_TRUST_H_ */
