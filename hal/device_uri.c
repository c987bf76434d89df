/* Device URI parsing. */
#include "hal/device_uri.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool ty_is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static bool ty_is_key_char(char c) {
  return ty_is_name_char(c) || (c >= 'A' && c <= 'Z') || c == '-' || c == '.';
}

void ty_device_uri_deinit(ty_device_uri_t *uri) {
  free(uri->storage);
  free(uri->typed);
  memset(uri, 0, sizeof(*uri));
}

const char *ty_device_uri_option(const ty_device_uri_t *uri, const char *key) {
  for (uint32_t i = 0; i < uri->option_count; ++i) {
    if (strcmp(uri->options[i].key, key) == 0) return uri->options[i].value;
  }
  return NULL;
}

static ty_status_t ty_uri_error(const char *uri, const char *what) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "bad device URI '%s': %s (expected "
                        "backend[:index][?key=value&...], e.g. cpu?threads=2 "
                        "or cuda:0)",
                        uri, what);
}

static ty_status_t ty_uri_parse_query(const char *uri, ty_device_uri_t *out) {
  char *p = out->storage;
  while (*p) {
    if (out->option_count == TY_DEVICE_URI_MAX_OPTIONS) {
      return ty_uri_error(uri, "too many options");
    }
    char *amp = strchr(p, '&');
    if (amp) *amp = '\0';
    char *eq = strchr(p, '=');
    if (!eq) return ty_uri_error(uri, "option without '=value'");
    *eq = '\0';
    if (!*p) return ty_uri_error(uri, "option with an empty key");
    for (const char *k = p; *k; ++k) {
      if (!ty_is_key_char(*k)) return ty_uri_error(uri, "bad character in option key");
    }
    if (ty_device_uri_option(out, p)) return ty_uri_error(uri, "duplicate option key");
    out->options[out->option_count].key = p;
    out->options[out->option_count].value = eq + 1;
    out->option_count++;
    if (!amp) break;
    p = amp + 1;
    if (!*p) return ty_uri_error(uri, "trailing '&'");
  }
  return TY_OK;
}

ty_status_t ty_device_uri_parse(const char *uri, ty_device_uri_t *out_uri) {
  memset(out_uri, 0, sizeof(*out_uri));
  if (!uri || !*uri) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "empty device URI (expected e.g. cpu, cuda:0)");
  }
  size_t n = 0;
  while (ty_is_name_char(uri[n])) ++n;
  /* Backend names are lowercase, as plugins name themselves and `trainyard
   * devices` lists them; "CPU" is refused with the spelling to use rather
   * than matched, so that one backend has one name in configs and logs. */
  size_t caps = n;
  while (ty_is_name_char(uri[caps]) || (uri[caps] >= 'A' && uri[caps] <= 'Z')) ++caps;
  if (caps > n && caps < TY_BACKEND_NAME_MAX) {
    char lower[TY_BACKEND_NAME_MAX];
    for (size_t i = 0; i < caps; ++i) {
      lower[i] = uri[i] >= 'A' && uri[i] <= 'Z' ? (char)(uri[i] - 'A' + 'a') : uri[i];
    }
    lower[caps] = '\0';
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "bad device URI '%s': backend names are lowercase, as 'trainyard "
                          "devices' lists them: give '%s%s'", uri, lower, uri + caps);
  }
  if (n == 0) return ty_uri_error(uri, "missing backend name");
  if (n >= TY_BACKEND_NAME_MAX) return ty_uri_error(uri, "backend name too long");
  memcpy(out_uri->backend, uri, n);
  out_uri->typed = strdup(uri);
  if (!out_uri->typed) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory parsing '%s'", uri);
  }
  const char *p = uri + n;
  if (*p == ':') {
    ++p;
    if (*p < '0' || *p > '9') {
      ty_device_uri_deinit(out_uri);
      return ty_uri_error(uri, "device index is not a number");
    }
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno || v > UINT32_MAX) {
      ty_device_uri_deinit(out_uri);
      return ty_uri_error(uri, "device index out of range");
    }
    out_uri->index = (uint32_t)v;
    out_uri->has_index = true;
    p = end;
  }
  if (*p == '?') {
    out_uri->storage = strdup(p + 1);
    if (!out_uri->storage) {
      ty_device_uri_deinit(out_uri);
      return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory parsing '%s'", uri);
    }
    ty_status_t s = ty_uri_parse_query(uri, out_uri);
    if (s) {
      ty_device_uri_deinit(out_uri);
      return s;
    }
  } else if (*p) {
    ty_device_uri_deinit(out_uri);
    return ty_uri_error(uri, "unexpected character after the backend name");
  }
  return TY_OK;
}

bool ty_device_uri_remove_option(ty_device_uri_t *uri, const char *key) {
  for (uint32_t i = 0; i < uri->option_count; ++i) {
    if (strcmp(uri->options[i].key, key) != 0) continue;
    memmove(&uri->options[i], &uri->options[i + 1],
            (uri->option_count - i - 1) * sizeof(uri->options[0]));
    uri->option_count--;
    uri->changed = true;
    return true;
  }
  return false;
}

void ty_device_uri_set_index(ty_device_uri_t *uri, uint32_t index) {
  uri->index = index;
  uri->has_index = true;
  uri->changed = true;
}

ty_status_t ty_device_uri_format(const ty_device_uri_t *uri, char **out_text) {
  *out_text = NULL;
  if (!uri->changed && uri->typed) {
    /* As typed, so that a device's URI reads as the user wrote it
     * ("cuda:01" stays so). */
    *out_text = strdup(uri->typed);
  } else {
    size_t cap = strlen(uri->backend) + 16;
    for (uint32_t i = 0; i < uri->option_count; ++i) {
      cap += strlen(uri->options[i].key) + strlen(uri->options[i].value) + 2;
    }
    char *text = malloc(cap);
    if (text) {
      int used = snprintf(text, cap, "%s", uri->backend);
      if (uri->has_index) used += snprintf(text + used, cap - (size_t)used, ":%u", uri->index);
      for (uint32_t i = 0; i < uri->option_count; ++i) {
        used += snprintf(text + used, cap - (size_t)used, "%c%s=%s", i ? '&' : '?',
                         uri->options[i].key, uri->options[i].value);
      }
    }
    *out_text = text;
  }
  if (!*out_text) {
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory formatting device URI "
                          "'%s'", uri->typed ? uri->typed : uri->backend);
  }
  return TY_OK;
}

bool ty_device_uri_has_option(const char *uri, const char *key) {
  ty_device_uri_t parsed;
  ty_status_t s = ty_device_uri_parse(uri, &parsed);
  if (s) {
    ty_status_free(s);
    return false;
  }
  bool has = ty_device_uri_option(&parsed, key) != NULL;
  ty_device_uri_deinit(&parsed);
  return has;
}
