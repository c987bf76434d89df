/* config.json fields of attention (llama family): RoPE in both of its
 * forms, and which layers use a sliding window. A config may carry RoPE
 * twice (rope_theta + rope_scaling, the older form, and rope_parameters,
 * the newer one; Trainyard writes both); each form is validated alone and
 * the two must then say the same thing, because transformers versions
 * differ in which one they read. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/config_internal.h"

/* One RoPE form as read. */
typedef struct {
  const char *field; /* "rope_scaling" or "rope_parameters" */
  bool present;
  bool has_theta;
  double theta;
  const char *type; /* "default" or "llama3" */
  double factor, low, high;
  int64_t orig;
} ty_rope_form_t;

static const char *const ty_rope_supported[] = {"default", "llama3", NULL};
/* transformers' other RoPE types and their older aliases. */
static const char *const ty_rope_known[] = {"linear", "dynamic", "yarn", "longrope",
                                            "su",     "mrope",   NULL};

/* Fields of the llama3 type. */
static const char *const ty_llama3_keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                             "original_max_position_embeddings", NULL};
/* Fields of the types Trainyard does not implement. */
static const char *const ty_other_type_keys[] = {
    "attention_factor", "beta_fast",      "beta_slow",          "short_factor",
    "long_factor",      "mscale",         "mscale_all_dim",     "truncate",
    "mrope_section",    "mrope_interleaved", "short_mscale",    "long_mscale", NULL};

static bool ty_in(const char *const *list, const char *s) {
  for (size_t i = 0; list[i]; ++i) {
    if (!strcmp(list[i], s)) return true;
  }
  return false;
}

static ty_status_t ty_rope_field_error(const ty_cfg_t *c, const ty_rope_form_t *f,
                                       const char *key, ty_code_t code, const char *what) {
  return ty_status_make(code, "%s: field '%s.%s' %s", c->origin, f->field, key, what);
}

/* The type: "rope_type" or (older) "type"; both, then the same. */
static ty_status_t ty_rope_type(const ty_cfg_t *c, json_t *obj, ty_rope_form_t *f) {
  char path[64];
  const char *a = NULL, *b = NULL;
  snprintf(path, sizeof(path), "%s.rope_type", f->field);
  TY_RETURN_IF_ERROR(
      ty_cfg_enum(c, obj, "rope_type", path, "", ty_rope_supported, ty_rope_known, &a));
  snprintf(path, sizeof(path), "%s.type", f->field);
  TY_RETURN_IF_ERROR(ty_cfg_enum(c, obj, "type", path, "", ty_rope_supported, ty_rope_known, &b));
  if (*a && *b && strcmp(a, b) != 0) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                          "%s: field '%s' gives rope_type '%s' and type '%s'", c->origin,
                          f->field, a, b);
  }
  f->type = *a ? a : b;
  return TY_OK;
}

static ty_status_t ty_rope_form(const ty_cfg_t *c, const char *field, ty_rope_form_t *f) {
  memset(f, 0, sizeof(*f));
  f->field = field;
  json_t *obj = json_object_get(c->root, field);
  if (!obj || json_is_null(obj)) return TY_OK;
  if (!json_is_object(obj)) return ty_cfg_error(c, field, "must be an object or null");
  f->present = true;
  TY_RETURN_IF_ERROR(ty_rope_type(c, obj, f));
  bool scaling = false;
  const char *key;
  json_t *value;
  json_object_foreach(obj, key, value) {
    if (!strcmp(key, "rope_type") || !strcmp(key, "type")) continue;
    if (!strcmp(key, "rope_theta")) {
      char path[64];
      snprintf(path, sizeof(path), "%s.rope_theta", field);
      TY_RETURN_IF_ERROR(ty_cfg_positive(c, obj, key, path, true, 0, &f->theta));
      f->has_theta = true;
    } else if (!strcmp(key, "partial_rotary_factor")) {
      if (!json_is_number(value)) {
        return ty_rope_field_error(c, f, key, TY_CODE_INVALID_ARGUMENT, "must be a number");
      }
      if (json_number_value(value) != 1.0) {
        return ty_rope_field_error(c, f, key, TY_CODE_UNIMPLEMENTED,
                                   "is not 1: partial rotary embeddings are not implemented");
      }
    } else if (ty_in(ty_llama3_keys, key)) {
      scaling = true;
    } else if (ty_in(ty_other_type_keys, key)) {
      return ty_rope_field_error(c, f, key, TY_CODE_UNIMPLEMENTED,
                                 "belongs to a RoPE type Trainyard does not implement "
                                 "(implemented: default, llama3)");
    } else {
      return ty_rope_field_error(c, f, key, TY_CODE_INVALID_ARGUMENT,
                                 "is not a RoPE parameter transformers knows");
    }
  }
  if (!*f->type) {
    /* transformers cannot build a RoPE without its type either. */
    if (scaling) return ty_cfg_error(c, field, "has scaling parameters but no rope_type");
    f->type = "default";
  }
  if (!strcmp(f->type, "default")) {
    if (scaling) {
      return ty_cfg_error(c, field, "has llama3 scaling parameters but rope_type 'default'");
    }
    return TY_OK;
  }
  /* llama3 */
  char path[64];
  snprintf(path, sizeof(path), "%s.factor", field);
  TY_RETURN_IF_ERROR(ty_cfg_positive(c, obj, "factor", path, true, 0, &f->factor));
  snprintf(path, sizeof(path), "%s.low_freq_factor", field);
  TY_RETURN_IF_ERROR(ty_cfg_positive(c, obj, "low_freq_factor", path, true, 0, &f->low));
  snprintf(path, sizeof(path), "%s.high_freq_factor", field);
  TY_RETURN_IF_ERROR(ty_cfg_positive(c, obj, "high_freq_factor", path, true, 0, &f->high));
  json_t *orig = json_object_get(obj, "original_max_position_embeddings");
  if (!orig || json_is_null(orig)) {
    return ty_rope_field_error(c, f, "original_max_position_embeddings",
                               TY_CODE_INVALID_ARGUMENT, "is missing");
  }
  if (!json_is_integer(orig) || json_integer_value(orig) < 1) {
    return ty_rope_field_error(c, f, "original_max_position_embeddings",
                               TY_CODE_INVALID_ARGUMENT, "must be an integer >= 1");
  }
  f->orig = (int64_t)json_integer_value(orig);
  if (!(f->high > f->low)) {
    return ty_cfg_error(c, field, "needs high_freq_factor > low_freq_factor");
  }
  return TY_OK;
}

static ty_status_t ty_rope_conflict(const ty_cfg_t *c, const char *what, const char *a,
                                    const char *b) {
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "%s: rope_scaling and rope_parameters disagree on %s (%s vs %s); "
                        "transformers versions differ in which one they read, so make them "
                        "equal or drop one",
                        c->origin, what, a, b);
}

static ty_status_t ty_rope_same(const ty_cfg_t *c, const char *what, double a, double b) {
  if (a == b) return TY_OK;
  char x[32], y[32];
  snprintf(x, sizeof(x), "%.17g", a);
  snprintf(y, sizeof(y), "%.17g", b);
  return ty_rope_conflict(c, what, x, y);
}

ty_status_t ty_cfg_rope(const ty_cfg_t *c, ty_model_config_t *m) {
  ty_rope_form_t legacy, params;
  TY_RETURN_IF_ERROR(ty_rope_form(c, "rope_scaling", &legacy));
  TY_RETURN_IF_ERROR(ty_rope_form(c, "rope_parameters", &params));
  /* theta: wherever it is given, the same value. */
  bool has_top = false;
  double top = 0;
  json_t *t = json_object_get(c->root, "rope_theta");
  if (t && !json_is_null(t)) {
    TY_RETURN_IF_ERROR(ty_cfg_positive(c, c->root, "rope_theta", "rope_theta", true, 0, &top));
    has_top = true;
  }
  const struct {
    bool has;
    double value;
    const char *name;
  } thetas[3] = {{has_top, top, "rope_theta"},
                 {params.has_theta, params.theta, "rope_parameters.rope_theta"},
                 {legacy.has_theta, legacy.theta, "rope_scaling.rope_theta"}};
  m->rope_theta = 10000.0; /* transformers' default */
  const char *theta_from = NULL;
  for (int i = 0; i < 3; ++i) {
    if (!thetas[i].has) continue;
    if (theta_from && thetas[i].value != m->rope_theta) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "%s: %s is %.17g but %s is %.17g",
                            c->origin, theta_from, m->rope_theta, thetas[i].name,
                            thetas[i].value);
    }
    theta_from = thetas[i].name;
    m->rope_theta = thetas[i].value;
  }
  if (legacy.present && params.present) {
    if (strcmp(legacy.type, params.type) != 0) {
      return ty_rope_conflict(c, "rope_type", legacy.type, params.type);
    }
    TY_RETURN_IF_ERROR(ty_rope_same(c, "factor", legacy.factor, params.factor));
    TY_RETURN_IF_ERROR(ty_rope_same(c, "low_freq_factor", legacy.low, params.low));
    TY_RETURN_IF_ERROR(ty_rope_same(c, "high_freq_factor", legacy.high, params.high));
    TY_RETURN_IF_ERROR(ty_rope_same(c, "original_max_position_embeddings", (double)legacy.orig,
                                    (double)params.orig));
  }
  const ty_rope_form_t *f = params.present ? &params : &legacy;
  m->rope_type = f->present && !strcmp(f->type, "llama3") ? TY_ROPE_LLAMA3 : TY_ROPE_DEFAULT;
  if (m->rope_type == TY_ROPE_LLAMA3) {
    m->rope_factor = f->factor;
    m->rope_low_freq_factor = f->low;
    m->rope_high_freq_factor = f->high;
    m->rope_original_max_positions = f->orig;
  }
  return TY_OK;
}

/* ---- sliding windows ---- */

static const char *const ty_layer_types[] = {"full_attention", "sliding_attention", NULL};
static const char *const ty_layer_types_known[] = {"chunked_attention", "linear_attention",
                                                   NULL};

ty_status_t ty_cfg_sliding_window(const ty_cfg_t *c, ty_model_config_t *m) {
  bool qwen2 = strcmp(m->model_type, "qwen2") == 0;
  int64_t window = 0;
  json_t *w = json_object_get(c->root, "sliding_window");
  if (w && !json_is_null(w)) {
    if (!json_is_integer(w) || json_integer_value(w) < 0) {
      return ty_cfg_error(c, "sliding_window", "must be an integer >= 0 or null");
    }
    window = (int64_t)json_integer_value(w);
  }
  /* How many layers, and which, use the window: first from the family's
   * own fields (transformers' rule), then from layer_types, which is what
   * transformers actually follows when it is there. */
  int64_t first_sliding = window > 0 ? 0 : m->num_layers; /* mistral: all or none */
  if (qwen2) {
    json_t *use = json_object_get(c->root, "use_sliding_window");
    if (use && !json_is_null(use) && !json_is_boolean(use)) {
      return ty_cfg_error(c, "use_sliding_window", "must be true or false");
    }
    json_t *mwl = json_object_get(c->root, "max_window_layers");
    int64_t max_window_layers = 28; /* Qwen2Config's default */
    if (mwl && !json_is_null(mwl)) {
      if (!json_is_integer(mwl) || json_integer_value(mwl) < 0) {
        return ty_cfg_error(c, "max_window_layers", "must be an integer >= 0");
      }
      max_window_layers = (int64_t)json_integer_value(mwl);
    }
    first_sliding = use && json_is_true(use) ? max_window_layers : m->num_layers;
  }
  if (first_sliding > m->num_layers) first_sliding = m->num_layers;
  bool mixed = first_sliding > 0 && first_sliding < m->num_layers;
  bool all_sliding = first_sliding == 0;
  json_t *types = json_object_get(c->root, "layer_types");
  if (types && !json_is_null(types)) {
    if (!json_is_array(types) || (int64_t)json_array_size(types) != m->num_layers) {
      return ty_cfg_error(c, "layer_types", "must be a list with one entry per layer");
    }
    size_t full = 0, sliding = 0, i;
    json_t *entry;
    json_array_foreach(types, i, entry) {
      char path[48];
      snprintf(path, sizeof(path), "layer_types[%zu]", i);
      const char *type = NULL;
      TY_RETURN_IF_ERROR(ty_cfg_enum_value(c, entry, path, NULL, ty_layer_types,
                                           ty_layer_types_known, &type));
      if (strcmp(type, "full_attention") == 0) {
        ++full;
      } else {
        ++sliding;
      }
    }
    mixed = full && sliding;
    all_sliding = sliding == json_array_size(types) && sliding > 0;
  }
  if (mixed) {
    return ty_status_make(TY_CODE_UNIMPLEMENTED,
                          "%s: some layers use a sliding window and others full attention "
                          "(layer_types / use_sliding_window with max_window_layers); "
                          "Trainyard implements one kind for every layer",
                          c->origin);
  }
  if (all_sliding && window <= 0) {
    return ty_cfg_error(c, "sliding_window", "must be > 0 when the layers use sliding windows");
  }
  m->sliding_window = all_sliding ? window : 0;
  return TY_OK;
}
