/* Names of the canonical status codes. Kept apart from status.c so that the
 * plugin support library (backends/common) can compile it too. */
#include "hal/status.h"

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
