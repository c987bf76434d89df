/* The command line of `train` and `compare` (train_args.h). */
#include "train_args.h"

#include <stdlib.h>
#include <string.h>

#include "app.h"

/* A status of the training options as a usage error (it frees s). */
static int ty_train_args_refuse(const ty_train_args_t *a, ty_status_t s, bool hint) {
  int rc = TY_EXIT_USAGE;
  if (hint) {
    rc = ty_app_usage_error(a->command, "%s", ty_status_message(s));
  } else {
    fprintf(stderr, "%strainyard %s: %s\n", ty_app_error_prefix(), a->command,
            ty_status_message(s));
  }
  ty_status_free(s);
  return rc;
}

/* --config files first, so that the rest of the command line overrides
 * them; --help wherever it stands. */
static int ty_train_args_files(const ty_train_args_t *a, int argc, char **argv,
                               ty_train_config_t *config) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      a->usage(stdout);
      return TY_TRAIN_ARGS_HELP;
    }
    const char *file = NULL;
    if (!strcmp(argv[i], "--config")) {
      if (i + 1 == argc) return ty_app_usage_error(a->command, "--config needs a file");
      file = argv[++i];
    } else if (!strncmp(argv[i], "--config=", 9)) {
      file = argv[i] + 9;
    }
    if (file) {
      ty_status_t s = ty_train_config_load_file(config, file);
      if (s) return ty_train_args_refuse(a, s, true);
    }
  }
  return TY_EXIT_OK;
}

/* `key` as one of the command's own options: 1 taken, 0 not its own, or
 * TY_EXIT_USAGE after the message. */
static int ty_train_args_own(const ty_train_args_t *a, const char *key, const char *value) {
  for (size_t k = 0; k < a->own_count; ++k) {
    const ty_train_arg_t *o = &a->own[k];
    if (strcmp(key, o->key)) continue;
    char *end = NULL;
    switch (o->kind) {
      case TY_TRAIN_ARG_TEXT:
        snprintf((char *)o->dest, o->capacity, "%s", value);
        return 1;
      case TY_TRAIN_ARG_COUNT: {
        long long v = strtoll(value, &end, 10);
        if (!*value || *end || v < 1) {
          return ty_app_usage_error(a->command, "--%s '%s' is not a positive integer", key,
                                    value);
        }
        *(int64_t *)o->dest = v;
        return 1;
      }
      case TY_TRAIN_ARG_TOLERANCE: {
        double v = strtod(value, &end);
        if (!*value || *end || !(v >= 0)) {
          return ty_app_usage_error(a->command, "--%s '%s' is not a number >= 0", key, value);
        }
        *(double *)o->dest = v;
        return 1;
      }
      case TY_TRAIN_ARG_REFUSED:
        return ty_app_usage_error(a->command, o->refusal, key);
    }
  }
  return 0;
}

int ty_train_args_parse(const ty_train_args_t *a, int argc, char **argv,
                        ty_train_config_t *config) {
  int rc = ty_train_args_files(a, argc, argv, config);
  if (rc != TY_EXIT_OK) return rc;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    char key[128];
    const char *value = NULL;
    if (!strcmp(arg, "--config")) {
      ++i;
      continue;
    }
    if (!strncmp(arg, "--config=", 9)) continue;
    const char *eq = strchr(arg, '=');
    if (!strncmp(arg, "--", 2)) {
      size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
      if (n == 0 || n >= sizeof(key)) return ty_app_usage_error(a->command, "bad option '%s'", arg);
      memcpy(key, arg + 2, n);
      key[n] = '\0';
      if (eq) {
        value = eq + 1;
      } else if (ty_train_config_is_flag(key)) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return ty_app_usage_error(a->command, "option '%s' needs a value", arg);
      }
    } else if (eq) {
      size_t n = (size_t)(eq - arg);
      if (n == 0 || n >= sizeof(key)) {
        return ty_app_usage_error(a->command, "bad override '%s'", arg);
      }
      memcpy(key, arg, n);
      key[n] = '\0';
      value = eq + 1;
    } else {
      return ty_app_usage_error(a->command, "unexpected argument '%s'", arg);
    }
    rc = ty_train_args_own(a, key, value);
    if (rc == 1) continue;
    if (rc != 0) return rc;
    ty_status_t s = ty_train_config_set(config, key, value);
    if (s) return ty_train_args_refuse(a, s, a->hint_on_bad_value);
  }
  return TY_EXIT_OK;
}
