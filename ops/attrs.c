/* Node attributes. Items are kept sorted by name so that two sets with the
 * same contents are byte-for-byte comparable and hash the same. */
#include "ops/attrs.h"

#include <string.h>

static ty_status_t ty_attrs_slot(ty_attrs_t *attrs, const char *name,
                                 ty_attr_kind_t kind, ty_attr_t **out) {
  if (!name || !*name || strlen(name) >= TY_ATTR_NAME_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attribute name '%s' is empty or longer than %d bytes",
                          name ? name : "(null)", TY_ATTR_NAME_MAX - 1);
  }
  uint32_t i = 0;
  while (i < attrs->count && strcmp(attrs->items[i].name, name) < 0) ++i;
  if (i == attrs->count || strcmp(attrs->items[i].name, name) != 0) {
    if (attrs->count == TY_ATTRS_MAX) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "too many attributes (max %d) adding '%s'",
                            TY_ATTRS_MAX, name);
    }
    memmove(&attrs->items[i + 1], &attrs->items[i],
            (attrs->count - i) * sizeof(attrs->items[0]));
    attrs->count++;
  }
  ty_attr_t *a = &attrs->items[i];
  memset(a, 0, sizeof(*a));
  memcpy(a->name, name, strlen(name) + 1);
  a->kind = kind;
  *out = a;
  return TY_OK;
}

ty_status_t ty_attrs_set_int(ty_attrs_t *attrs, const char *name, int64_t value) {
  ty_attr_t *a;
  TY_RETURN_IF_ERROR(ty_attrs_slot(attrs, name, TY_ATTR_INT, &a));
  a->i = value;
  return TY_OK;
}

ty_status_t ty_attrs_set_float(ty_attrs_t *attrs, const char *name, double value) {
  ty_attr_t *a;
  TY_RETURN_IF_ERROR(ty_attrs_slot(attrs, name, TY_ATTR_FLOAT, &a));
  a->f = value;
  return TY_OK;
}

ty_status_t ty_attrs_set_string(ty_attrs_t *attrs, const char *name,
                                const char *value) {
  if (!value || strlen(value) >= TY_ATTR_STRING_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attribute '%s': string value longer than %d bytes",
                          name, TY_ATTR_STRING_MAX - 1);
  }
  ty_attr_t *a;
  TY_RETURN_IF_ERROR(ty_attrs_slot(attrs, name, TY_ATTR_STRING, &a));
  memcpy(a->s, value, strlen(value) + 1);
  return TY_OK;
}

ty_status_t ty_attrs_set_ints(ty_attrs_t *attrs, const char *name,
                              const int64_t *values, uint32_t count) {
  if (count > TY_ATTR_LIST_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attribute '%s': %u values exceed the maximum of %d",
                          name, count, TY_ATTR_LIST_MAX);
  }
  ty_attr_t *a;
  TY_RETURN_IF_ERROR(ty_attrs_slot(attrs, name, TY_ATTR_INTS, &a));
  a->count = count;
  if (count) memcpy(a->ints, values, count * sizeof(*values));
  return TY_OK;
}

ty_status_t ty_attrs_set_floats(ty_attrs_t *attrs, const char *name,
                                const double *values, uint32_t count) {
  if (count > TY_ATTR_LIST_MAX) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "attribute '%s': %u values exceed the maximum of %d",
                          name, count, TY_ATTR_LIST_MAX);
  }
  ty_attr_t *a;
  TY_RETURN_IF_ERROR(ty_attrs_slot(attrs, name, TY_ATTR_FLOATS, &a));
  a->count = count;
  if (count) memcpy(a->floats, values, count * sizeof(*values));
  return TY_OK;
}

const ty_attr_t *ty_attrs_find(const ty_attrs_t *attrs, const char *name) {
  if (!attrs) return NULL;
  for (uint32_t i = 0; i < attrs->count; ++i) {
    if (strcmp(attrs->items[i].name, name) == 0) return &attrs->items[i];
  }
  return NULL;
}

static const char *ty_attr_kind_name(ty_attr_kind_t kind) {
  switch (kind) {
    case TY_ATTR_INT: return "int";
    case TY_ATTR_FLOAT: return "float";
    case TY_ATTR_STRING: return "string";
    case TY_ATTR_INTS: return "int list";
    case TY_ATTR_FLOATS: return "float list";
  }
  return "unknown";
}

static ty_status_t ty_attr_kind_error(const ty_attr_t *a, ty_attr_kind_t want) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "attribute '%s' is a %s, expected a %s", a->name,
                        ty_attr_kind_name(a->kind), ty_attr_kind_name(want));
}

ty_status_t ty_attrs_get_int(const ty_attrs_t *attrs, const char *name,
                             int64_t default_value, int64_t *out_value) {
  const ty_attr_t *a = ty_attrs_find(attrs, name);
  *out_value = default_value;
  if (!a) return TY_OK;
  if (a->kind != TY_ATTR_INT) return ty_attr_kind_error(a, TY_ATTR_INT);
  *out_value = a->i;
  return TY_OK;
}

ty_status_t ty_attrs_get_float(const ty_attrs_t *attrs, const char *name,
                               double default_value, double *out_value) {
  const ty_attr_t *a = ty_attrs_find(attrs, name);
  *out_value = default_value;
  if (!a) return TY_OK;
  if (a->kind == TY_ATTR_INT) {
    *out_value = (double)a->i;
    return TY_OK;
  }
  if (a->kind != TY_ATTR_FLOAT) return ty_attr_kind_error(a, TY_ATTR_FLOAT);
  *out_value = a->f;
  return TY_OK;
}

ty_status_t ty_attrs_get_string(const ty_attrs_t *attrs, const char *name,
                                const char *default_value,
                                const char **out_value) {
  const ty_attr_t *a = ty_attrs_find(attrs, name);
  *out_value = default_value;
  if (!a) return TY_OK;
  if (a->kind != TY_ATTR_STRING) return ty_attr_kind_error(a, TY_ATTR_STRING);
  *out_value = a->s;
  return TY_OK;
}

ty_status_t ty_attrs_get_ints(const ty_attrs_t *attrs, const char *name,
                              const int64_t **out_values, uint32_t *out_count) {
  const ty_attr_t *a = ty_attrs_find(attrs, name);
  *out_values = NULL;
  *out_count = 0;
  if (!a) return TY_OK;
  if (a->kind != TY_ATTR_INTS) return ty_attr_kind_error(a, TY_ATTR_INTS);
  *out_values = a->ints;
  *out_count = a->count;
  return TY_OK;
}

ty_status_t ty_attrs_check_known(const ty_attrs_t *attrs, const char *op,
                                 const char *const *allowed) {
  if (!attrs) return TY_OK;
  for (uint32_t i = 0; i < attrs->count; ++i) {
    bool known = false;
    for (const char *const *p = allowed; p && *p && !known; ++p) {
      known = strcmp(*p, attrs->items[i].name) == 0;
    }
    if (!known) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "op %s has no attribute '%s'", op,
                            attrs->items[i].name);
    }
  }
  return TY_OK;
}

void ty_attrs_to_abi(const ty_attrs_t *attrs, ty_abi_attr_t *out) {
  for (uint32_t i = 0; i < attrs->count; ++i) {
    const ty_attr_t *a = &attrs->items[i];
    out[i] = (ty_abi_attr_t){
        .name = a->name,
        .kind = a->kind,
        .count = a->count,
        .i = a->i,
        .f = a->f,
        .s = a->s,
        .ints = a->ints,
        .floats = a->floats,
    };
  }
}

ty_status_t ty_attrs_from_abi(const ty_abi_attr_t *attrs, uint32_t count,
                              ty_attrs_t *out) {
  *out = TY_ATTRS_EMPTY;
  for (uint32_t i = 0; i < count; ++i) {
    const ty_abi_attr_t *a = &attrs[i];
    switch (a->kind) {
      case TY_ATTR_INT: TY_RETURN_IF_ERROR(ty_attrs_set_int(out, a->name, a->i)); break;
      case TY_ATTR_FLOAT: TY_RETURN_IF_ERROR(ty_attrs_set_float(out, a->name, a->f)); break;
      case TY_ATTR_STRING: TY_RETURN_IF_ERROR(ty_attrs_set_string(out, a->name, a->s)); break;
      case TY_ATTR_INTS:
        TY_RETURN_IF_ERROR(ty_attrs_set_ints(out, a->name, a->ints, a->count));
        break;
      case TY_ATTR_FLOATS:
        TY_RETURN_IF_ERROR(ty_attrs_set_floats(out, a->name, a->floats, a->count));
        break;
      default:
        return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "attribute '%s' has unknown kind %d", a->name,
                              (int)a->kind);
    }
  }
  return TY_OK;
}
