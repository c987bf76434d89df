/* `trainyard data train-tokenizer`: byte-level BPE on text, written as a
 * Hugging Face tokenizer.json (the trainer is models/bpe_trainer.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd_data.h"
#include "data_inputs.h"
#include "hal/file.h"
#include "models/dataset.h"
#include "models/tokenizer.h"
#include "models/bpe_trainer.h"
#include "live_bar.h"
#include "metrics/progress.h"

static const char *const ty_train_tokenizer_usage =
    "usage: trainyard data train-tokenizer --input PATH... --vocab-size N --out FILE\n"
    "                                      [--min-frequency K] [--special TOKEN]...\n"
    "                                      [--format F] [--text-field NAME] [--force]\n"
    "\n"
    "Trains a byte-level BPE tokenizer (GPT-2 style: ByteLevel pre-tokenizer\n"
    "with the GPT-2 pattern, 256 byte tokens, merges by pair frequency, ties to\n"
    "the smaller ids) and writes it as a Hugging Face tokenizer.json that\n"
    "trainyard and the tokenizers library read and encode alike.\n"
    "\n"
    "  --input PATH...    input files or folders (also as plain arguments)\n"
    "  --vocab-size N     the whole vocabulary: 256 bytes, merges, special tokens\n"
    "  --out FILE         the tokenizer.json to write (atomically; missing folders\n"
    "                     are made)\n"
    "  --min-frequency K  never merge a pair seen fewer than K times (default 2)\n"
    "  --special TOKEN    an extra special token (repeatable); <|endoftext|> is\n"
    "                     always the first (the EOS), after the merges\n"
    "  --format F         how inputs split into documents, as in 'data prepare'\n"
    "                     (text, lines, jsonl, chat: message contents, fortune)\n"
    "  --text-field NAME  --format jsonl: the text field (default text)\n"
    "  --force            replace FILE if it exists\n"
    "  -h, --help         this help\n";

typedef struct ty_tt_t {
  ty_tokenizer_trainer_t *trainer;
  ty_live_bar_t progress;
  uint64_t file_base;
  uint64_t documents;
} ty_tt_t;

static ty_status_t ty_tt_document(void *user, const ty_data_doc_t *doc) {
  ty_tt_t *t = user;
  if (ty_data_interrupted()) return ty_status_make(TY_CODE_CANCELLED, "interrupted");
  if (doc->messages) {
    for (size_t i = 0; i < doc->message_count; ++i) {
      TY_RETURN_IF_ERROR(ty_tokenizer_trainer_add_text(t->trainer, doc->messages[i].content,
                                                       doc->messages[i].content_size));
    }
  } else {
    TY_RETURN_IF_ERROR(ty_tokenizer_trainer_add_text(t->trainer, doc->text, doc->size));
  }
  t->documents++;
  ty_live_bar_update(&t->progress, t->file_base + doc->offset, UINT64_MAX);
  return TY_OK;
}

static void ty_tt_on_merges(void *user, uint32_t merges, uint32_t target) {
  ty_tt_t *t = user;
  t->progress.total = target;
  ty_live_bar_update(&t->progress, merges, UINT64_MAX);
}

int ty_cmd_data_train_tokenizer(ty_app_t *app, int argc, char **argv) {
  (void)app;
  static const struct option long_options[] = {
      {"input", required_argument, NULL, 'i'},      {"vocab-size", required_argument, NULL, 'V'},
      {"out", required_argument, NULL, 'o'},        {"min-frequency", required_argument, NULL, 'm'},
      {"special", required_argument, NULL, 's'},    {"format", required_argument, NULL, 'f'},
      {"text-field", required_argument, NULL, 'x'}, {"force", no_argument, NULL, 'F'},
      {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0},
  };
  const char *cmd = "data train-tokenizer";
  const char **inputs = NULL, **specials = NULL;
  size_t input_count = 0, special_count = 0;
  const char *out = NULL, *format_name = "text", *text_field = "text";
  bool has_text_field = false;
  uint64_t vocab = 0, min_frequency = 2;
  bool force = false, oom = false;
  int rc = -1;
  opterr = 0;
  optind = 1;
  if (ty_app_refuse_empty_values(cmd, argc, argv, ":h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  oom = !ty_data_inputs_push(&specials, &special_count, "<|endoftext|>");
  int c;
  while (rc < 0 && !oom && (c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    switch (c) {
      case 'i': oom = !ty_data_inputs_push(&inputs, &input_count, optarg); break;
      case 'V':
        if (!ty_data_parse_u64(optarg, 1, UINT32_MAX, &vocab)) {
          rc = ty_app_usage_error(cmd, "--vocab-size must be a positive integer, not '%s'", optarg);
        }
        break;
      case 'o': out = optarg; break;
      case 'm':
        if (!ty_data_parse_u64(optarg, 1, UINT32_MAX, &min_frequency)) {
          rc = ty_app_usage_error(cmd, "--min-frequency must be a positive integer, not '%s'",
                                  optarg);
        }
        break;
      case 's': {
        bool seen = false;
        for (size_t i = 0; i < special_count; ++i) seen = seen || strcmp(specials[i], optarg) == 0;
        if (!*optarg) rc = ty_app_usage_error(cmd, "--special needs a non-empty token");
        if (!seen && !oom) oom = !ty_data_inputs_push(&specials, &special_count, optarg);
        break;
      }
      case 'f': format_name = optarg; break;
      case 'x':
        text_field = optarg;
        has_text_field = true;
        break;
      case 'F': force = true; break;
      case 'h': fputs(ty_train_tokenizer_usage, stdout); rc = TY_EXIT_OK; break;
      case ':': rc = ty_app_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]); break;
      default: rc = ty_app_usage_error(cmd, "unknown option '%s'", argv[optind - 1]); break;
    }
  }
  for (int i = optind; rc < 0 && !oom && i < argc; ++i) {
    oom = !ty_data_inputs_push(&inputs, &input_count, argv[i]);
  }
  ty_data_format_t format = TY_DATA_FORMAT_TEXT;
  if (rc >= 0 || oom) {
  } else if (!input_count) {
    rc = ty_app_usage_error(cmd, "give at least one --input PATH");
  } else if (!vocab) {
    rc = ty_app_usage_error(cmd, "--vocab-size N is required");
  } else if (vocab < 256 + special_count) {
    rc = ty_app_usage_error(cmd, "--vocab-size %llu is below 256 byte tokens + %zu special tokens",
                            (unsigned long long)vocab, special_count);
  } else if (!out || !*out) {
    rc = ty_app_usage_error(cmd, "--out FILE is required");
  } else if (!ty_data_format_parse(format_name, &format) || format == TY_DATA_FORMAT_IDS) {
    rc = ty_app_usage_error(cmd, "--format must be text, lines, jsonl, chat or fortune, not '%s'%s",
                            format_name,
                            format == TY_DATA_FORMAT_IDS ? " (ids are not text to learn from)"
                                                         : "");
  } else if (has_text_field && format != TY_DATA_FORMAT_JSONL) {
    rc = ty_app_usage_error(cmd, "--text-field is for --format jsonl");
  }
  if (rc >= 0 || oom) {
    free(inputs);
    free(specials);
    return oom ? ty_app_fail(cmd, ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory"))
               : rc;
  }

  double t0 = ty_live_bar_now();
  char **files = NULL;
  uint64_t *sizes = NULL;
  size_t file_count = 0;
  ty_tt_t t = {0};
  char *json = NULL;
  size_t json_size = 0;
  struct stat st;
  ty_status_t s = ty_data_check_out(out, "tokenizer", false, inputs, input_count, NULL);
  if (!s && !force && stat(out, &st) == 0) {
    s = ty_status_make(TY_CODE_ALREADY_EXISTS, "%s exists; pass --force to replace it", out);
  }
  if (!s) s = ty_data_files_expand(inputs, input_count, &files, &sizes, &file_count);
  ty_tokenizer_trainer_options_t options = {
      .vocab_size = (uint32_t)vocab,
      .min_frequency = (uint32_t)min_frequency,
      .special_tokens = specials,
      .special_count = special_count,
  };
  if (!s) s = ty_tokenizer_trainer_create(&options, &t.trainer);
  uint64_t total = 0;
  for (size_t i = 0; i < file_count; ++i) total += sizes[i];
  if (!s) {
    ty_data_catch_interrupts();
    ty_live_bar_start(&t.progress, "train-tokenizer: reading", true, NULL, total, true);
  }
  for (size_t i = 0; i < file_count && !s; ++i) {
    s = ty_data_read_file(files[i], format, text_field, ty_tt_document, &t);
    t.file_base += sizes[i];
    if (!s && !t.progress.active) {
      fprintf(stderr, "data train-tokenizer: read [%zu/%zu] %s\n", i + 1, file_count, files[i]);
    }
  }
  ty_live_bar_finish(&t.progress);
  double t1 = ty_live_bar_now();
  ty_tokenizer_trainer_stats_t read_stats = {0};
  if (!s) ty_tokenizer_trainer_stats(t.trainer, &read_stats);
  if (!s && read_stats.bytes == 0) {
    /* A tokenizer of bytes alone learned from nothing is not what was
     * asked for; say so instead of writing it. */
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "the input (%zu file%s, %llu documents) holds no text to learn a "
                       "tokenizer from",
                       file_count, file_count == 1 ? "" : "s", (unsigned long long)t.documents);
  }
  if (!s) {
    ty_live_bar_start(&t.progress, "train-tokenizer: merging", false, "merges",
                      vocab - 256 - special_count, true);
    s = ty_tokenizer_trainer_train(t.trainer, ty_tt_on_merges, &t);
    ty_live_bar_finish(&t.progress);
  }
  double t2 = ty_live_bar_now();
  ty_tokenizer_trainer_stats_t trained = {0};
  if (!s) ty_tokenizer_trainer_stats(t.trainer, &trained);
  uint64_t wanted = vocab - 256 - special_count;
  if (!s && wanted > 0 && trained.merges == 0) {
    s = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                       "the input is too small to learn any merge: %llu bytes in %llu words "
                       "(%llu distinct), and no pair of tokens occurs %llu times; give more "
                       "text or a lower --min-frequency (--vocab-size %llu asks for %llu "
                       "merges)",
                       (unsigned long long)trained.bytes, (unsigned long long)trained.words,
                       (unsigned long long)trained.distinct_words,
                       (unsigned long long)min_frequency, (unsigned long long)vocab,
                       (unsigned long long)wanted);
  }
  if (!s) s = ty_tokenizer_trainer_to_json(t.trainer, &json, &json_size);
  if (!s) {
    /* What is written must be usable as 'data prepare' uses it: it loads
     * and has the end-of-text token data prepare looks for. */
    ty_tokenizer_t *check = NULL;
    uint32_t eos = 0;
    const char *eos_name = NULL;
    s = ty_tokenizer_load_json(json, json_size, out, &check);
    if (!s) s = ty_data_tokenizer_eos(check, NULL, &eos, &eos_name);
    if (s) s = ty_status_annotate(s, "the trained tokenizer would not load in 'data prepare' (a bug)");
    ty_tokenizer_destroy(check);
  }
  if (!s) s = ty_file_write_atomic(out, json, json_size);
  if (!s) {
    ty_tokenizer_trainer_stats_t st2;
    ty_tokenizer_trainer_stats(t.trainer, &st2);
    char b[32];
    ty_progress_format_bytes((double)st2.bytes, b, sizeof(b));
    printf("tokenizer %s\n", out);
    printf("  text    %s in %llu documents, %llu words (%llu distinct)\n", b,
           (unsigned long long)t.documents, (unsigned long long)st2.words,
           (unsigned long long)st2.distinct_words);
    printf("  vocab   %u = 256 bytes + %u merges + %zu special (eos <|endoftext|> = %u)\n",
           st2.vocab_size, st2.merges, special_count,
           st2.vocab_size - (uint32_t)special_count);
    printf("  time    %.2f s (reading %.2f s, merging %.2f s)\n", t2 - t0, t1 - t0, t2 - t1);
    if (st2.vocab_size < vocab) {
      fprintf(stderr,
              "data train-tokenizer: note: the vocabulary has %u tokens, not %llu: no pair "
              "occurs %llu times any more; give more text or a lower --min-frequency\n",
              st2.vocab_size, (unsigned long long)vocab, (unsigned long long)min_frequency);
    }
  }
  free(json);
  ty_tokenizer_trainer_destroy(t.trainer);
  ty_data_files_free(files, sizes, file_count);
  free(inputs);
  free(specials);
  return s ? ty_app_fail(cmd, s) : TY_EXIT_OK;
}
