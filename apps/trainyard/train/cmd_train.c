/* `trainyard train`: option parsing (defaults < --config file < command
 * line, where the command line takes --key value, --key=value and
 * key=value), then the training loop in trainer.c. */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "train_config.h"
#include "trainer.h"

static void ty_train_usage(FILE *out) {
  fputs("usage: trainyard train (--model HF_DIR | --preset NAME) --data DIR [--out DIR]\n"
        "                       [--config FILE] [--KEY VALUE | KEY=VALUE]...\n"
        "\n"
        "Fine-tunes a Hugging Face model or trains a preset from scratch on a dataset\n"
        "made by 'trainyard data prepare', on the device given by --backend. Writes\n"
        "checkpoint-<step>/ folders (config.json, model.safetensors, tokenizer.json,\n"
        "optimizer.safetensors, trainer_state.json), metrics.jsonl, TensorBoard events\n"
        "(tensorboard/) and summary.txt into --out. SIGINT/SIGTERM/SIGHUP finish the\n"
        "current step, save a checkpoint and exit 0; --resume latest continues exactly.\n"
        "\n"
        "Options (also as KEY=VALUE lines in --config FILE; later ones win):\n",
        out);
  ty_train_config_help(out);
  fputs("  --config FILE      read options from FILE first\n"
        "  -h, --help         this help\n",
        out);
}

int ty_cmd_train(ty_app_t *app, int argc, char **argv) {
  ty_train_config_t config;
  ty_train_config_defaults(&config);
  /* --config files first, so that the rest of the command line overrides them. */
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      ty_train_usage(stdout);
      return TY_EXIT_OK;
    }
    const char *file = NULL;
    if (!strcmp(argv[i], "--config")) {
      if (i + 1 == argc) return ty_app_usage_error("train", "--config needs a file");
      file = argv[++i];
    } else if (!strncmp(argv[i], "--config=", 9)) {
      file = argv[i] + 9;
    }
    if (file) {
      ty_status_t s = ty_train_config_load_file(&config, file);
      if (s) {
        fprintf(stderr, "trainyard train: %s; see 'trainyard train --help'\n",
                ty_status_message(s));
        ty_status_free(s);
        return TY_EXIT_USAGE;
      }
    }
  }
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i];
    char key[128];
    const char *value = NULL;
    if (!strcmp(arg, "--config")) {
      ++i;
      continue;
    }
    if (!strncmp(arg, "--config=", 9)) continue;
    if (!strncmp(arg, "--", 2)) {
      const char *eq = strchr(arg, '=');
      size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
      if (n == 0 || n >= sizeof(key)) return ty_app_usage_error("train", "bad option '%s'", arg);
      memcpy(key, arg + 2, n);
      key[n] = '\0';
      if (eq) {
        value = eq + 1;
      } else if (ty_train_config_is_flag(key)) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return ty_app_usage_error("train", "option '%s' needs a value", arg);
      }
    } else if (strchr(arg, '=')) {
      const char *eq = strchr(arg, '=');
      size_t n = (size_t)(eq - arg);
      if (n == 0 || n >= sizeof(key)) return ty_app_usage_error("train", "bad override '%s'", arg);
      memcpy(key, arg, n);
      key[n] = '\0';
      value = eq + 1;
    } else {
      return ty_app_usage_error("train", "unexpected argument '%s'", arg);
    }
    ty_status_t s = ty_train_config_set(&config, key, value);
    if (s) {
      fprintf(stderr, "trainyard train: %s\n", ty_status_message(s));
      ty_status_free(s);
      return TY_EXIT_USAGE;
    }
  }
  ty_status_t s = ty_train_config_validate(&config);
  if (s) {
    fprintf(stderr, "trainyard train: %s; see 'trainyard train --help'\n", ty_status_message(s));
    ty_status_free(s);
    return TY_EXIT_USAGE;
  }
  s = ty_trainer_run(app, &config);
  return s ? ty_app_fail("train", s) : TY_EXIT_OK;
}
