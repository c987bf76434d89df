/* What the control files share below control.h: addresses, lines. */
#ifndef TY_APPS_TRAINYARD_CONTROL_CONTROL_INTERNAL_H_
#define TY_APPS_TRAINYARD_CONTROL_CONTROL_INTERNAL_H_

#include <jansson.h>
#include <stddef.h>
#include <sys/un.h>

#include "hal/status.h"

#define TY_CONTROL_MAX_REQUEST 4096
#define TY_CONTROL_MAX_REPLY (1u << 20)

/* The address of socket `path`; a path too long for sun_path goes through
 * a descriptor of its folder, returned in *out_dirfd (-1 when none; close it
 * after bind/connect). */
ty_status_t ty_control_sockaddr(const char *path, struct sockaddr_un *addr, int *out_dirfd);

/* One JSON object and a newline (no SIGPIPE). */
ty_status_t ty_control_send_line(int fd, const json_t *message);

/* One line of at most max_bytes, parsed as a JSON object. */
ty_status_t ty_control_read_line(int fd, int timeout_ms, size_t max_bytes, json_t **out);

#endif /* TY_APPS_TRAINYARD_CONTROL_CONTROL_INTERNAL_H_ */
