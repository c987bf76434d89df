/* The tokenizer of a training run, checked before the first step (see
 * run_tokenizer.h). */
#include "run_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hal/sha256.h"
#include "hal/file.h"
#include "models/tokenizer.h"
#include "trainer.h"

/* dir/tokenizer.json into out, and whether it is there: anything at that
 * path is the candidate (a folder or an unreadable file is an error when it
 * is read, never skipped as "no tokenizer"). */
static ty_status_t ty_tt_candidate(const char *dir, char *out, size_t capacity, bool *found) {
  *found = false;
  if (!dir[0]) return TY_OK;
  snprintf(out, capacity, "%s/tokenizer.json", dir);
  return ty_file_probe(out, found);
}

static bool ty_tt_no_tokenizer_recorded(const char *sha) {
  for (const char *p = sha; *p; ++p) {
    if (*p != '0') return false;
  }
  return true;
}

ty_status_t ty_run_tokenizer_open(ty_trainer_t *t) {
  const ty_train_config_t *c = &t->cfg;
  char path[sizeof(t->tok.tokenizer_path)];
  const char *origin = NULL;
  bool found = false;
  if (c->tokenizer[0]) {
    snprintf(path, sizeof(path), "%s", c->tokenizer);
    origin = "--tokenizer";
  } else {
    TY_RETURN_IF_ERROR(ty_tt_candidate(c->data, path, sizeof(path), &found));
    if (found) origin = "the data folder's tokenizer";
    if (!found && c->model[0]) {
      TY_RETURN_IF_ERROR(ty_tt_candidate(c->model, path, sizeof(path), &found));
      if (found) origin = "the model folder's tokenizer";
    }
  }
  if (!origin) return TY_OK; /* none: checkpoints load by ids */
  char *bytes = NULL;
  size_t size = 0;
  TY_RETURN_IF_ERROR(ty_file_read(path, &ty_tokenizer_file_kind, &bytes, &size));
  ty_tokenizer_t *tok = NULL;
  ty_status_t s = ty_tokenizer_load_json(bytes, size, path, &tok);
  if (s) {
    free(bytes);
    return ty_status_annotate(s, "%s %s does not load, so it cannot go into checkpoints", origin,
                              path);
  }
  char sha[65];
  if (!ty_sha256_hex(bytes, size, sha)) {
    free(bytes);
    ty_tokenizer_destroy(tok);
    return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory hashing %s %s", origin, path);
  }
  const char *data_sha = ty_dataset_tokenizer_sha256(t->feed.train_data);
  uint32_t vocab = ty_tokenizer_vocab_size(tok),
           data_vocab = ty_dataset_vocab_size(t->feed.train_data);
  if (!ty_tt_no_tokenizer_recorded(data_sha) && strcmp(sha, data_sha) != 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "%s %s is not the tokenizer the data was prepared with: its SHA-256 is "
                       "%s (vocabulary %u), and %s/dataset.json records %s (vocabulary %u); "
                       "pass --tokenizer with the file given to 'trainyard data prepare'",
                       origin, path, sha, vocab, c->data, data_sha, data_vocab);
  } else if (vocab != data_vocab) {
    /* Data of pre-tokenized ids records no tokenizer, only its id range. */
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "%s %s has a vocabulary of %u tokens, but the data in %s has %u (its "
                       "ids would decode to other tokens)",
                       origin, path, vocab, c->data, data_vocab);
  } else if ((int64_t)vocab > t->model_config.vocab_size) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "%s %s has a vocabulary of %u tokens, more than the model's %lld",
                       origin, path, vocab, (long long)t->model_config.vocab_size);
  }
  if (s) {
    ty_tokenizer_destroy(tok);
    free(bytes);
    return s;
  }
  t->tok.tokenizer = tok;
  t->tok.tokenizer_json = bytes;
  t->tok.tokenizer_json_size = size;
  snprintf(t->tok.tokenizer_path, sizeof(t->tok.tokenizer_path), "%s", path);
  return TY_OK;
}

void ty_run_tokenizer_close(ty_trainer_t *t) {
  ty_tokenizer_destroy(t->tok.tokenizer);
  free(t->tok.tokenizer_json);
  t->tok.tokenizer = NULL;
  t->tok.tokenizer_json = NULL;
  t->tok.tokenizer_json_size = 0;
}
