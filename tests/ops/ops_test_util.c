/* Test helpers for the op set: string forms of descriptors and attributes. */
#include "ops_test_util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hal/dtype.h"

void tyt_desc_parse(const char *spec, ty_tensor_desc_t *out_desc) {
  char name[16] = {0};
  const char *bracket = strchr(spec, '[');
  if (!bracket || (size_t)(bracket - spec) >= sizeof(name)) {
    fail_msg("bad descriptor spec '%s'", spec);
  }
  memcpy(name, spec, (size_t)(bracket - spec));
  ty_dtype_t dtype;
  ty_status_t status = ty_dtype_parse(name, &dtype);
  if (status) fail_msg("%s", ty_status_message(status));
  int64_t dims[TY_TENSOR_MAX_RANK];
  uint32_t rank = 0;
  const char *p = bracket + 1;
  while (*p != ']') {
    char *end;
    if (rank == TY_TENSOR_MAX_RANK) fail_msg("rank too high in '%s'", spec);
    dims[rank++] = strtoll(p, &end, 10);
    if (end == p) fail_msg("bad dimension in '%s'", spec);
    p = *end == ',' ? end + 1 : end;
  }
  status = ty_tensor_desc_init(dtype, rank, dims, NULL, out_desc);
  if (status) fail_msg("%s", ty_status_message(status));
}

uint32_t tyt_descs_parse(const char *spec, ty_tensor_desc_t *descs,
                         const ty_tensor_desc_t **ptrs, uint32_t capacity) {
  uint32_t count = 0;
  char token[64];
  const char *p = spec ? spec : "";
  for (;;) {
    while (*p == ' ') ++p;
    if (!*p) break;
    size_t n = strcspn(p, " ");
    if (n >= sizeof(token) || count == capacity) fail_msg("bad spec '%s'", spec);
    memcpy(token, p, n);
    token[n] = '\0';
    p += n;
    if (strcmp(token, "-") == 0) {
      ptrs[count] = NULL;
    } else {
      tyt_desc_parse(token, &descs[count]);
      ptrs[count] = &descs[count];
    }
    ++count;
  }
  return count;
}

static void tyt_attr_parse_one(const char *item, ty_attrs_t *attrs) {
  const char *eq = strchr(item, '=');
  if (!eq) fail_msg("bad attribute '%s'", item);
  char name[TY_ATTR_NAME_MAX] = {0};
  memcpy(name, item, (size_t)(eq - item));
  const char *v = eq + 1;
  ty_status_t status;
  if (v[0] == '[') {
    int64_t values[TY_ATTR_LIST_MAX];
    uint32_t count = 0;
    const char *p = v + 1;
    while (*p != ']') {
      char *end;
      values[count++] = strtoll(p, &end, 10);
      if (end == p) fail_msg("bad list in '%s'", item);
      p = *end == ',' ? end + 1 : end;
    }
    status = ty_attrs_set_ints(attrs, name, values, count);
  } else if (v[0] == '\'') {
    char s[TY_ATTR_STRING_MAX] = {0};
    size_t n = strlen(v);
    if (n < 2 || n - 2 >= sizeof(s)) fail_msg("bad string in '%s'", item);
    memcpy(s, v + 1, n - 2);
    status = ty_attrs_set_string(attrs, name, s);
  } else if (strpbrk(v, ".en")) {
    status = ty_attrs_set_float(attrs, name, strtod(v, NULL));
  } else {
    status = ty_attrs_set_int(attrs, name, strtoll(v, NULL, 10));
  }
  if (status) fail_msg("%s", ty_status_message(status));
}

void tyt_attrs_parse(const char *spec, ty_attrs_t *out_attrs) {
  *out_attrs = TY_ATTRS_EMPTY;
  char item[128];
  const char *p = spec ? spec : "";
  for (;;) {
    while (*p == ' ') ++p;
    if (!*p) break;
    size_t n = strcspn(p, " ");
    if (n >= sizeof(item)) fail_msg("attribute too long in '%s'", spec);
    memcpy(item, p, n);
    item[n] = '\0';
    p += n;
    tyt_attr_parse_one(item, out_attrs);
  }
}

bool tyt_desc_equal(const ty_tensor_desc_t *a, const ty_tensor_desc_t *b) {
  if (a->dtype != b->dtype || a->rank != b->rank) return false;
  for (uint32_t i = 0; i < a->rank; ++i) {
    if (a->dims[i] != b->dims[i]) return false;
  }
  return true;
}

const char *tyt_desc_str(const ty_tensor_desc_t *d) {
  static char buf[128];
  return ty_tensor_desc_format(d, buf, sizeof(buf));
}
