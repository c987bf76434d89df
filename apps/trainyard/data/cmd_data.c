/* `trainyard data`: datasets for training. `data prepare` tokenizes text,
 * JSON lines, chats or fortune files into token shards; `data info` shows
 * and checks a dataset; `data train-tokenizer` (cmd_data_tokenizer.c)
 * trains a byte-level BPE tokenizer. */
#include "cmd_data.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_info.h"
#include "data_inputs.h"
#include "files/out_paths.h"
#include "graph/ir/lower.h"
#include "models/chat.h"
#include "models/dataset.h"
#include "models/tokenizer.h"
#include "live_bar.h"
#include "metrics/progress.h"
#include "stop_signals.h"

static const char *const ty_data_usage =
    "usage: trainyard data <subcommand> [<args>]\n"
    "\n"
    "Datasets for training (docs/formats.md, \"Token shards\").\n"
    "\n"
    "Subcommands:\n"
    "  prepare          tokenize text, JSON lines, chats or fortune files into a\n"
    "                   dataset folder of token shards\n"
    "  train-tokenizer  train a byte-level BPE tokenizer.json on text\n"
    "  info             show a dataset and check it (--verify reads every byte)\n"
    "\n"
    "'trainyard data <subcommand> --help' describes each.\n";

static const char *const ty_prepare_usage =
    "usage: trainyard data prepare --tokenizer FILE --input PATH... --seq-len N --out DIR\n"
    "                              [--format text|lines|jsonl|chat|fortune|ids]\n"
    "                              [--vocab-size N --eos-id ID (ids without a tokenizer)]\n"
    "                              [--loss-weights (ids with per-target weights)]\n"
    "                              [--text-field NAME] [--chat-template chatml]\n"
    "                              [--val-fraction F] [--seed S] [--eos TOKEN]\n"
    "                              [--shard-rows N] [--force]\n"
    "\n"
    "Tokenizes documents and packs them into a dataset folder: dataset.json and\n"
    "token shards (train-00000.tyds, val-00000.tyds, ...). Each split is one\n"
    "stream, EOS doc EOS doc ... EOS, cut into rows of seq_len+1 tokens that\n"
    "overlap by one; the last row is padded with EOS that is not trained on.\n"
    "\n"
    "  --tokenizer FILE    Hugging Face tokenizer.json (its SHA-256 is recorded)\n"
    "  --input PATH...     input files, or folders (their files, sorted); also\n"
    "                      as plain arguments\n"
    "  --seq-len N         tokens per training sequence (T)\n"
    "  --out DIR           the dataset folder; must not exist or be empty\n"
    "  --format F          text     each file is one document (default)\n"
    "                      lines    each non-blank line is a document\n"
    "                      jsonl    one JSON object per line, text in --text-field\n"
    "                      chat     {\"messages\": [{\"role\", \"content\"}, ...]} per\n"
    "                               line, rendered with ChatML; only the\n"
    "                               assistant's tokens are trained on\n"
    "                      fortune  fortune(6) files: entries split at '%' lines\n"
    "                      ids      pre-tokenized: a JSON list of token ids (or\n"
    "                               {\"ids\": [...]}) per line; --tokenizer may\n"
    "                               then be left out if --vocab-size and\n"
    "                               --eos-id are given; with --loss-weights a\n"
    "                               line may be {\"ids\": [...], \"weights\":\n"
    "                               [0|1, ...]}: 0 masks the target that is\n"
    "                               that id (a prompt), as chat data does\n"
    "  --vocab-size N      ids without --tokenizer: the vocabulary (ids below N)\n"
    "  --eos-id ID         ids without --tokenizer: the document separator's id\n"
    "  --loss-weights      ids: lines may carry per-target \"weights\" (see above)\n"
    "  --text-field NAME   jsonl: the field holding the text (default text)\n"
    "  --chat-template T   chat: the template (chatml, the default and only one)\n"
    "  --val-fraction F    share of documents for the val split, in [0, 1)\n"
    "                      (default 0); chosen by a hash of each document's text\n"
    "  --seed S            seed of that hash (default 0; needs --val-fraction)\n"
    "  --eos TOKEN         the document separator, a token of --tokenizer\n"
    "                      (default: the first of\n"
    "                      <|endoftext|>, <|end_of_text|>, </s>, <eos> it has)\n"
    "  --shard-rows N      rows per shard file (default: about 128 MiB)\n"
    "  --force             replace DIR if it holds an older dataset\n"
    "  -h, --help          this help\n"
    "\n"
    "Nothing is written at DIR unless the whole run succeeds (the data is made\n"
    "in DIR.tmp.<pid> and renamed). Exit codes: 0 success, 1 unreadable or\n"
    "invalid input, no data, DIR in the way, 2 usage error.\n";

void ty_data_catch_interrupts(void) {
  ty_stop_signals_clear();
  ty_stop_signals_arm();
}

bool ty_data_interrupted(void) { return ty_stop_signals_received() != 0; }

bool ty_data_inputs_push(const char ***paths, size_t *count, const char *path) {
  const char **grown = realloc(*paths, (*count + 1) * sizeof(char *));
  if (!grown) return false;
  grown[(*count)++] = path;
  *paths = grown;
  return true;
}

ty_status_t ty_data_check_out(const char *out, const char *what, bool replaces_folder,
                              const char *const *inputs, size_t input_count,
                              const char *tokenizer) {
  ty_path_arg_t *args = calloc(input_count + 1, sizeof(ty_path_arg_t));
  if (!args) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  for (size_t i = 0; i < input_count; ++i) args[i] = (ty_path_arg_t){"--input", inputs[i]};
  args[input_count] = (ty_path_arg_t){"--tokenizer", tokenizer};
  ty_out_path_t o = {
      .option = "--out", .path = out, .what = what, .replaces_folder = replaces_folder};
  ty_status_t s = ty_out_path_check(&o, args, input_count + 1);
  free(args);
  return s;
}

bool ty_data_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out) {
  if (!text || !*text || *text == '-' || *text == '+') return false;
  errno = 0;
  char *end = NULL;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || *end || v < min || v > max) return false;
  *out = v;
  return true;
}

/* ---- prepare ---- */

typedef struct ty_prepare_t {
  const ty_tokenizer_t *tok;
  uint32_t vocab_size;
  ty_dataset_writer_t *writer;
  ty_data_format_t format;
  bool loss_weights; /* ids: rows carry per-target weights */
  double val_fraction;
  uint64_t seed;
  ty_live_bar_t progress;
  uint64_t file_base; /* bytes of the files before this one */
  uint64_t tokens;    /* document tokens so far */
  uint64_t file_documents, file_tokens;
} ty_prepare_t;

static ty_status_t ty_prepare_document(void *user, const ty_data_doc_t *doc) {
  ty_prepare_t *p = user;
  if (ty_data_interrupted()) return ty_status_make(TY_CODE_CANCELLED, "interrupted");
  ty_dataset_split_t split =
      ty_dataset_assign_split(p->seed, p->val_fraction, doc->raw, doc->raw_size);
  uint32_t *ids = NULL;
  uint8_t *weights = NULL;
  size_t count = 0;
  ty_status_t status;
  if (doc->ids) {
    status = TY_OK;
    if (doc->weights && !p->loss_weights) {
      status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                              "a line has \"weights\": pass --loss-weights to store per-target "
                              "weights");
    } else if (!(ids = malloc(doc->id_count * sizeof(*ids)))) {
      status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
    }
    if (!status && doc->weights) {
      if (!(weights = malloc(doc->id_count))) {
        status = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
      } else {
        memcpy(weights, doc->weights, doc->id_count);
      }
    }
    for (size_t i = 0; !status && i < doc->id_count; ++i) {
      if (doc->ids[i] >= (int64_t)p->vocab_size) {
        status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                                "token id %lld (element %zu) is not below the vocabulary "
                                "size %u",
                                (long long)doc->ids[i], i, p->vocab_size);
      } else {
        ids[i] = (uint32_t)doc->ids[i];
      }
    }
    count = doc->id_count;
  } else if (doc->messages) {
    status = ty_chat_chatml_render(p->tok, doc->messages, doc->message_count, &ids, &weights,
                                   &count);
  } else {
    status = ty_tokenizer_encode(p->tok, doc->text, doc->size,
                                 TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS, &ids, &count);
  }
  if (!status) status = ty_dataset_writer_add_document(p->writer, split, ids, weights, count);
  free(ids);
  free(weights);
  if (status) return status;
  p->tokens += count;
  p->file_tokens += count;
  p->file_documents++;
  ty_live_bar_update(&p->progress, p->file_base + doc->offset, p->tokens);
  return TY_OK;
}

ty_status_t ty_data_tokenizer_eos(const ty_tokenizer_t *tok, const char *name, uint32_t *out_id,
                                  const char **out_name) {
  static const char *const candidates[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"};
  if (name) {
    if (!ty_tokenizer_token_to_id(tok, name, strlen(name), out_id)) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT, "the tokenizer has no token \"%s\" (--eos)",
                            name);
    }
    *out_name = name;
    return TY_OK;
  }
  for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); ++i) {
    if (ty_tokenizer_token_to_id(tok, candidates[i], strlen(candidates[i]), out_id)) {
      *out_name = candidates[i];
      return TY_OK;
    }
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "the tokenizer has none of <|endoftext|>, <|end_of_text|>, </s>, <eos>; "
                        "name the document separator with --eos TOKEN");
}

static char *ty_prepare_json(const char *tokenizer, const char *eos, ty_data_format_t format,
                             const char *text_field, double val_fraction, uint64_t seed,
                             char **files, const uint64_t *sizes, size_t count) {
  json_t *inputs = json_array();
  for (size_t i = 0; inputs && i < count; ++i) {
    json_array_append_new(inputs, json_pack("{s:s, s:I}", "file", files[i], "bytes",
                                            (json_int_t)sizes[i]));
  }
  json_t *root = json_pack("{s:s, s:s, s:s, s:s*, s:f, s:I, s:o*}", "tokenizer_file", tokenizer,
                           "eos_token", eos, "format", ty_data_format_name(format), "text_field",
                           format == TY_DATA_FORMAT_JSONL ? text_field : NULL, "val_fraction",
                           val_fraction, "seed", (json_int_t)seed, "inputs", inputs);
  char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
  json_decref(root);
  return text;
}

static void ty_prepare_summary(const ty_dataset_writer_t *w, const char *dir, double seconds,
                               uint64_t bytes, uint64_t tokens) {
  printf("dataset %s\n", dir);
  for (int s = 0; s < TY_DATASET_SPLIT_COUNT; ++s) {
    ty_dataset_split_stats_t st;
    ty_dataset_writer_stats(w, (ty_dataset_split_t)s, &st);
    printf("  %-5s %llu documents, %llu tokens, %llu rows (%llu padding), %llu shard%s\n",
           ty_dataset_split_name((ty_dataset_split_t)s), (unsigned long long)st.documents,
           (unsigned long long)st.tokens, (unsigned long long)st.rows,
           (unsigned long long)st.padding, (unsigned long long)st.shards,
           st.shards == 1 ? "" : "s");
  }
  char b[32], t[32];
  ty_progress_format_bytes((double)bytes / (seconds > 0 ? seconds : 1), b, sizeof(b));
  ty_progress_format_si((double)tokens / (seconds > 0 ? seconds : 1), t, sizeof(t));
  printf("  time  %.2f s (%s/s, %s tokens/s)\n", seconds, b, t);
}

typedef struct ty_prepare_args_t {
  const char *tokenizer, *out, *format, *text_field, *chat_template, *eos;
  uint64_t vocab_size, eos_id; /* ids without a tokenizer */
  bool has_vocab_size, has_eos_id;
  const char **inputs;
  size_t input_count;
  uint64_t seq_len, seed, shard_rows;
  double val_fraction;
  bool force, has_seq_len, loss_weights;
  bool has_text_field, has_seed; /* given on the command line */
} ty_prepare_args_t;

static int ty_prepare_parse(int argc, char **argv, ty_prepare_args_t *a) {
  static const struct option long_options[] = {
      {"tokenizer", required_argument, NULL, 't'}, {"input", required_argument, NULL, 'i'},
      {"seq-len", required_argument, NULL, 'T'},   {"out", required_argument, NULL, 'o'},
      {"format", required_argument, NULL, 'f'},    {"text-field", required_argument, NULL, 'x'},
      {"chat-template", required_argument, NULL, 'c'},
      {"val-fraction", required_argument, NULL, 'v'},
      {"seed", required_argument, NULL, 's'},      {"eos", required_argument, NULL, 'e'},
      {"shard-rows", required_argument, NULL, 'r'}, {"force", no_argument, NULL, 'F'},
      {"vocab-size", required_argument, NULL, 'V'}, {"eos-id", required_argument, NULL, 'E'},
      {"loss-weights", no_argument, NULL, 'W'},
      {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
  };
  const char *cmd = "data prepare";
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values(cmd, argc, argv, ":h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, ":h", long_options, NULL)) != -1) {
    switch (c) {
      case 't': a->tokenizer = optarg; break;
      case 'i':
        if (!ty_data_inputs_push(&a->inputs, &a->input_count, optarg)) return TY_EXIT_RUNTIME;
        break;
      case 'T':
        if (!ty_data_parse_u64(optarg, 1, 1u << 24, &a->seq_len)) {
          return ty_app_usage_error(cmd, "--seq-len must be an integer from 1 to %u, not '%s'",
                                    1u << 24, optarg);
        }
        a->has_seq_len = true;
        break;
      case 'o': a->out = optarg; break;
      case 'f': a->format = optarg; break;
      case 'x':
        a->text_field = optarg;
        a->has_text_field = true;
        break;
      case 'c': a->chat_template = optarg; break;
      case 'v': {
        char *end = NULL;
        errno = 0;
        a->val_fraction = strtod(optarg, &end);
        if (errno || !*optarg || *end || !(a->val_fraction >= 0.0 && a->val_fraction < 1.0)) {
          return ty_app_usage_error(cmd, "--val-fraction must be a number in [0, 1), not '%s'",
                                    optarg);
        }
        break;
      }
      case 's':
        if (!ty_data_parse_u64(optarg, 0, UINT64_MAX, &a->seed)) {
          return ty_app_usage_error(cmd, "--seed must be a non-negative integer, not '%s'",
                                    optarg);
        }
        a->has_seed = true;
        break;
      case 'e': a->eos = optarg; break;
      case 'r':
        if (!ty_data_parse_u64(optarg, 1, UINT32_MAX, &a->shard_rows)) {
          return ty_app_usage_error(cmd, "--shard-rows must be a positive integer, not '%s'",
                                    optarg);
        }
        break;
      case 'F': a->force = true; break;
      case 'W': a->loss_weights = true; break;
      case 'V':
        if (!ty_data_parse_u64(optarg, 1, UINT32_MAX, &a->vocab_size)) {
          return ty_app_usage_error(cmd, "--vocab-size must be a positive integer, not '%s'",
                                    optarg);
        }
        a->has_vocab_size = true;
        break;
      case 'E':
        if (!ty_data_parse_u64(optarg, 0, UINT32_MAX, &a->eos_id)) {
          return ty_app_usage_error(cmd, "--eos-id must be a token id, not '%s'", optarg);
        }
        a->has_eos_id = true;
        break;
      case 'h': fputs(ty_prepare_usage, stdout); return -1;
      case ':': return ty_app_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default: return ty_app_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  for (int i = optind; i < argc; ++i) {
    if (!ty_data_inputs_push(&a->inputs, &a->input_count, argv[i])) return TY_EXIT_RUNTIME;
  }
  if (!a->input_count) return ty_app_usage_error(cmd, "give at least one --input PATH");
  if (!a->has_seq_len) return ty_app_usage_error(cmd, "--seq-len N is required");
  if (!a->out || !*a->out) return ty_app_usage_error(cmd, "--out DIR is required");
  ty_data_format_t format;
  if (!ty_data_format_parse(a->format, &format)) {
    return ty_app_usage_error(cmd,
                              "--format must be text, lines, jsonl, chat, fortune or ids, not '%s'",
                              a->format);
  }
  if (format == TY_DATA_FORMAT_IDS && !a->tokenizer) {
    if (!a->has_vocab_size || !a->has_eos_id) {
      return ty_app_usage_error(cmd, "--format ids without --tokenizer needs --vocab-size and "
                                     "--eos-id");
    }
    if (a->eos_id >= a->vocab_size) {
      return ty_app_usage_error(cmd, "--eos-id %llu is not below --vocab-size %llu",
                                (unsigned long long)a->eos_id,
                                (unsigned long long)a->vocab_size);
    }
  } else if (!a->tokenizer) {
    return ty_app_usage_error(cmd, "--tokenizer FILE is required");
  } else if (a->has_vocab_size || a->has_eos_id) {
    return ty_app_usage_error(cmd, "--vocab-size and --eos-id are for --format ids without a "
                                   "tokenizer");
  }
  if (a->loss_weights && format != TY_DATA_FORMAT_IDS) {
    return ty_app_usage_error(cmd, "--loss-weights is for --format ids (chat data is always "
                                   "weighted)");
  }
  if (a->chat_template && strcmp(a->chat_template, "chatml") != 0) {
    return ty_app_usage_error(cmd, "--chat-template '%s' is unknown (the one template is chatml)",
                              a->chat_template);
  }
  if (a->chat_template && format != TY_DATA_FORMAT_CHAT) {
    return ty_app_usage_error(cmd, "--chat-template needs --format chat");
  }
  if (!*a->text_field) return ty_app_usage_error(cmd, "--text-field must not be empty");
  /* Options this run would ignore are refused, not dropped. */
  if (a->has_text_field && format != TY_DATA_FORMAT_JSONL) {
    return ty_app_usage_error(cmd, "--text-field is for --format jsonl");
  }
  if (a->has_seed && a->val_fraction == 0) {
    return ty_app_usage_error(cmd, "--seed only chooses the val split: it has no effect without "
                                   "--val-fraction");
  }
  if (a->eos && !a->tokenizer) {
    return ty_app_usage_error(cmd, "--eos names a token of --tokenizer; without one, give the "
                                   "separator's id with --eos-id");
  }
  return TY_EXIT_OK;
}

int ty_cmd_data_prepare(ty_app_t *app, int argc, char **argv) {
  (void)app;
  ty_prepare_args_t a = {.format = "text", .text_field = "text"};
  int rc = ty_prepare_parse(argc, argv, &a);
  if (rc != TY_EXIT_OK) {
    free(a.inputs);
    return rc < 0 ? TY_EXIT_OK : rc;
  }
  ty_data_format_t format = TY_DATA_FORMAT_TEXT;
  ty_data_format_parse(a.format, &format);
  double t0 = ty_live_bar_now();
  char **files = NULL;
  uint64_t *sizes = NULL;
  size_t file_count = 0;
  ty_tokenizer_t *tok = NULL;
  ty_dataset_writer_t *writer = NULL;
  char sha[65] = "", *prepare_json = NULL;
  uint32_t eos = 0;
  const char *eos_name = NULL;
  /* The dataset folder is replaced whole: no input may live in it. */
  ty_status_t s = ty_data_check_out(a.out, "dataset folder", true, a.inputs, a.input_count, a.tokenizer);
  if (!s) s = ty_data_files_expand(a.inputs, a.input_count, &files, &sizes, &file_count);
  char eos_label[32];
  uint32_t vocab = 0;
  if (!s && a.tokenizer) {
    s = ty_tokenizer_load_file_sha256(a.tokenizer, &tok, sha);
    if (!s) s = ty_data_tokenizer_eos(tok, a.eos, &eos, &eos_name);
    if (!s) vocab = ty_tokenizer_vocab_size(tok);
  } else if (!s) {
    /* Pre-tokenized ids without a tokenizer: no tokenizer hash to record. */
    memset(sha, '0', 64);
    sha[64] = '\0';
    vocab = (uint32_t)a.vocab_size;
    eos = (uint32_t)a.eos_id;
    snprintf(eos_label, sizeof(eos_label), "id %u", eos);
    eos_name = eos_label;
  }
  if (!s && format == TY_DATA_FORMAT_CHAT) s = ty_chat_chatml_check(tok);
  if (!s) {
    prepare_json = ty_prepare_json(a.tokenizer ? a.tokenizer : "(none)", eos_name, format, a.text_field, a.val_fraction,
                                   a.seed, files, sizes, file_count);
    if (!prepare_json) s = ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory");
  }
  if (!s) {
    ty_dataset_writer_options_t options = {
        .dir = a.out,
        .seq_len = (uint32_t)a.seq_len,
        .vocab_size = vocab,
        .eos_id = eos,
        .tokenizer_sha256 = sha,
        .created_by = "trainyard " TY_VERSION_STRING,
        .input_format = ty_data_format_name(format),
        .chat_template = format == TY_DATA_FORMAT_CHAT ? "chatml" : NULL,
        .loss_weights = format == TY_DATA_FORMAT_CHAT || a.loss_weights,
        .overwrite = a.force,
        .rows_per_shard = a.shard_rows,
        .prepare_json = prepare_json,
    };
    s = ty_dataset_writer_create(&options, &writer);
  }
  uint64_t total_bytes = 0;
  for (size_t i = 0; i < file_count; ++i) total_bytes += sizes[i];
  ty_prepare_t p = {.tok = tok, .vocab_size = vocab, .writer = writer, .format = format,
                    .loss_weights = a.loss_weights, .val_fraction = a.val_fraction,
                    .seed = a.seed};
  if (!s) {
    char b[32];
    ty_progress_format_bytes((double)total_bytes, b, sizeof(b));
    fprintf(stderr,
            "data prepare: %zu file%s (%s, format %s) -> %s\n"
            "data prepare: tokenizer %s (vocab %u, eos %s = %u, sha256 %.12s...), seq_len "
            "%llu, val_fraction %g, seed %llu\n",
            file_count, file_count == 1 ? "" : "s", b, ty_data_format_name(format), a.out,
            a.tokenizer ? a.tokenizer : "(none)", vocab, eos_name, eos,
            sha, (unsigned long long)a.seq_len, a.val_fraction, (unsigned long long)a.seed);
    ty_data_catch_interrupts();
    ty_live_bar_start(&p.progress, "data prepare", true, NULL, total_bytes, true);
  }
  for (size_t i = 0; i < file_count && !s; ++i) {
    p.file_documents = p.file_tokens = 0;
    s = ty_data_read_file(files[i], format, a.text_field, ty_prepare_document, &p);
    p.file_base += sizes[i];
    ty_live_bar_update(&p.progress, p.file_base, p.tokens);
    if (!s && !p.progress.active) {
      fprintf(stderr, "data prepare: [%zu/%zu] %s: %llu documents, %llu tokens\n", i + 1,
              file_count, files[i], (unsigned long long)p.file_documents,
              (unsigned long long)p.file_tokens);
    }
  }
  if (!s) s = ty_dataset_writer_finish(writer);
  ty_live_bar_finish(&p.progress);
  if (!s) {
    ty_prepare_summary(writer, a.out, ty_live_bar_now() - t0, total_bytes, p.tokens);
    ty_dataset_split_stats_t val;
    ty_dataset_writer_stats(writer, TY_DATASET_SPLIT_VAL, &val);
    if (a.val_fraction > 0 && val.rows == 0) {
      fprintf(stderr, "data prepare: note: no document fell into the val split; use more "
                      "documents or a larger --val-fraction\n");
    }
  }
  ty_dataset_writer_destroy(writer);
  ty_tokenizer_destroy(tok);
  ty_data_files_free(files, sizes, file_count);
  free(prepare_json);
  free(a.inputs);
  return s ? ty_app_fail("data prepare", s) : TY_EXIT_OK;
}

/* ---- dispatch ---- */

int ty_cmd_data(ty_app_t *app, int argc, char **argv) {
  if (argc < 2) {
    fputs(ty_data_usage, stderr);
    return TY_EXIT_USAGE;
  }
  const char *sub = argv[1];
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
    fputs(ty_data_usage, stdout);
    return TY_EXIT_OK;
  }
  if (strcmp(sub, "prepare") == 0) return ty_cmd_data_prepare(app, argc - 1, argv + 1);
  if (strcmp(sub, "train-tokenizer") == 0) {
    return ty_cmd_data_train_tokenizer(app, argc - 1, argv + 1);
  }
  if (strcmp(sub, "info") == 0) return ty_cmd_data_info(app, argc - 1, argv + 1);
  return ty_app_usage_error("data", "'%s' is not a data subcommand (prepare, train-tokenizer, "
                                    "info)",
                            sub);
}
