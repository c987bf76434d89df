/* Names of the canonical status codes and the code of an errno value. Kept
 * apart from status.c so that the plugin support library (backends/common)
 * can compile it too. */
#include "hal/status.h"

#include <errno.h>

const char *ty_code_name(ty_code_t code) {
  static const char *const names[] = {
      "OK",          "CANCELLED",          "UNKNOWN",
      "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
      "ALREADY_EXISTS",   "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION", "ABORTED",        "OUT_OF_RANGE",
      "UNIMPLEMENTED",    "INTERNAL",          "UNAVAILABLE",
      "DATA_LOSS",
  };
  if ((unsigned)code >= sizeof(names) / sizeof(names[0])) return "UNKNOWN";
  return names[code];
}

ty_code_t ty_code_from_errno(int err) {
  switch (err) {
    case ENOENT: return TY_CODE_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS: return TY_CODE_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case ENOMEM:
    case EMFILE:
    case ENFILE: return TY_CODE_RESOURCE_EXHAUSTED;
    case EEXIST:
    case ENOTEMPTY: return TY_CODE_ALREADY_EXISTS;
    /* A read that the device could not do: the bytes are lost to us. */
    case EIO: return TY_CODE_DATA_LOSS;
    /* The path names the wrong kind of thing: a folder where a file was
     * wanted (or the reverse), a device or pipe that cannot be mapped or
     * sought. Nothing is damaged; the user must point elsewhere. */
    case EISDIR:
    case ENOTDIR:
    case ENODEV:
    case ENXIO:
    case ESPIPE:
    case ETXTBSY: return TY_CODE_FAILED_PRECONDITION;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP: return TY_CODE_INVALID_ARGUMENT;
    case EOVERFLOW: return TY_CODE_OUT_OF_RANGE;
    case EAGAIN:
    case EBUSY:
    case EINTR: return TY_CODE_UNAVAILABLE;
    case ENOSYS:
    case EOPNOTSUPP: return TY_CODE_UNIMPLEMENTED;
    default: return TY_CODE_UNKNOWN;
  }
}
