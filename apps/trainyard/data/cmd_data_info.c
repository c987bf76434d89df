/* `trainyard data info`: a dataset's description (dataset.json), checked
 * against its shards' headers and sizes, or with --verify every byte. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cmd_data.h"
#include "models/dataset.h"

static const char *const ty_info_usage =
    "usage: trainyard data info DIR [--verify]\n"
    "\n"
    "Prints what dataset.json says about a dataset and checks every shard's\n"
    "header and size against it. A split that dataset.json lists but whose\n"
    "shards are missing is an error, never \"no such split\".\n"
    "\n"
    "  --verify    also read every byte: each shard's SHA-256 and each row's\n"
    "              CRC-32, tokens and weights\n"
    "  -h, --help  this help\n"
    "\n"
    "Exit codes: 0 the dataset is sound, 1 it is not (the message names the\n"
    "file and row), 2 usage error.\n";

int ty_cmd_data_info(ty_app_t *app, int argc, char **argv) {
  (void)app;
  const char *dir = NULL;
  bool verify = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      fputs(ty_info_usage, stdout);
      return TY_EXIT_OK;
    } else if (strcmp(argv[i], "--verify") == 0) {
      verify = true;
    } else if (argv[i][0] == '-') {
      return ty_app_usage_error("data info", "unknown option '%s'", argv[i]);
    } else if (dir) {
      return ty_app_usage_error("data info", "give one dataset folder");
    } else {
      dir = argv[i];
    }
  }
  if (!dir) return ty_app_usage_error("data info", "give a dataset folder");
  ty_dataset_t *splits[TY_DATASET_SPLIT_COUNT] = {NULL};
  ty_status_t s = TY_OK;
  for (int i = 0; i < TY_DATASET_SPLIT_COUNT && !s; ++i) {
    /* The val split is optional only where dataset.json declares none. */
    uint32_t flags = (verify ? TY_DATASET_OPEN_VERIFY : 0) |
                     (i > 0 ? TY_DATASET_OPEN_IF_DECLARED : 0);
    s = ty_dataset_open(dir, ty_dataset_split_name((ty_dataset_split_t)i), flags, &splits[i]);
  }
  if (!s) {
    const ty_dataset_t *d = splits[0];
    printf("dataset %s\n", dir);
    printf("  seq_len %u, vocab_size %u, eos_id %u, input %s, loss weights %s\n",
           ty_dataset_seq_len(d), ty_dataset_vocab_size(d), ty_dataset_eos_id(d),
           ty_dataset_input_format(d), ty_dataset_has_loss_weights(d) ? "yes" : "no");
    printf("  tokenizer sha256 %s\n", ty_dataset_tokenizer_sha256(d));
    for (int i = 0; i < TY_DATASET_SPLIT_COUNT; ++i) {
      if (!splits[i]) continue;
      printf("  %-5s %llu rows, %llu tokens\n", ty_dataset_split_name((ty_dataset_split_t)i),
             (unsigned long long)ty_dataset_row_count(splits[i]),
             (unsigned long long)ty_dataset_token_count(splits[i]));
    }
    printf("  check %s\n", verify ? "every byte verified (SHA-256, row CRCs, tokens)"
                                  : "headers and sizes match dataset.json (--verify reads every "
                                    "byte)");
  }
  for (int i = 0; i < TY_DATASET_SPLIT_COUNT; ++i) ty_dataset_close(splits[i]);
  return s ? ty_app_fail("data info", s) : TY_EXIT_OK;
}
