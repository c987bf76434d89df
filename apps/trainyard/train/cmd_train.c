/* `trainyard train`: option parsing (train_args.h: defaults < --config
 * file < command line), then the training loop in trainer.c. */
#include <stdio.h>
#include <string.h>

#include "app.h"
#include "train_args.h"
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
  const ty_train_args_t args = {.command = "train", .usage = ty_train_usage};
  int rc = ty_train_args_parse(&args, argc, argv, &config);
  if (rc == TY_TRAIN_ARGS_HELP) return TY_EXIT_OK;
  if (rc != TY_EXIT_OK) return rc;
  ty_status_t s = ty_train_config_validate(&config);
  if (s) {
    fprintf(stderr, "trainyard train: %s; see 'trainyard train --help'\n", ty_status_message(s));
    ty_status_free(s);
    return TY_EXIT_USAGE;
  }
  s = ty_trainer_run(app, &config);
  return s ? ty_app_fail("train", s) : TY_EXIT_OK;
}
