/* `trainyard tokenize`: text on stdin -> token ids on stdout, or with
 * --decode ids on stdin -> text, through a Hugging Face tokenizer.json.
 * Stdin is read byte for byte (a trailing newline is part of the text), and
 * decoded text is written as it is, with no newline added. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app.h"
#include "hal/file.h"
#include "models/json_input.h"
#include "models/tokenizer.h"

static const char *const ty_tokenize_usage =
    "usage: trainyard tokenize --tokenizer FILE [--decode] [--json] [--no-special]\n"
    "\n"
    "Encodes the text read from stdin (every byte, a final newline included)\n"
    "into token ids with a Hugging Face tokenizer.json (BPE models: GPT-2,\n"
    "Llama-2/3, Mistral families) and prints them separated by spaces.\n"
    "With --decode, reads ids (separated by spaces, commas or newlines, or a\n"
    "JSON list, or {\"ids\": [...]}) and writes the text bytes exactly.\n"
    "\n"
    "  --tokenizer FILE  the tokenizer.json to use\n"
    "  --decode          ids to text instead of text to ids\n"
    "  --json            print {\"ids\": [...]} or {\"text\": \"...\"} (in JSON, bytes\n"
    "                    that are not UTF-8 become U+FFFD)\n"
    "  --no-special      encode: add no BOS/EOS (add_special_tokens=False);\n"
    "                    decode: leave special tokens out of the text\n"
    "  -h, --help        this help\n"
    "\n"
    "Exit codes: 0 success, 1 unreadable tokenizer or input, ids outside the\n"
    "vocabulary, 2 usage error.\n";

/* The text (or ids) on stdin is held whole, with its ids: capped. */
static const ty_file_kind_t ty_stdin_kind = {
    .what = "input",
    .max_bytes = TY_GIB,
    .limit_env = "TRAINYARD_MAX_INPUT_BYTES",
    .text = true,
    .bad_code = TY_CODE_INVALID_ARGUMENT,
};

static ty_status_t ty_read_stdin(char **out_data, size_t *out_size) {
  return ty_file_read_fd(STDIN_FILENO, "stdin", &ty_stdin_kind, out_data, out_size);
}

static ty_status_t ty_push_id(uint32_t **ids, size_t *count, size_t *capacity, uint32_t id) {
  if (*count == *capacity) {
    size_t grown_capacity = *capacity ? *capacity * 2 : 256;
    uint32_t *grown = realloc(*ids, grown_capacity * sizeof(uint32_t));
    if (!grown) return ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory reading ids");
    *ids = grown;
    *capacity = grown_capacity;
  }
  (*ids)[(*count)++] = id;
  return TY_OK;
}

/* A JSON list of ids, or an object with one under "ids". */
static ty_status_t ty_parse_json_ids(const char *text, size_t size, uint32_t **ids, size_t *count) {
  json_error_t error;
  json_t *root = json_loadb(text, size, 0, &error);
  if (!root) {
    return ty_status_make(TY_CODE_INVALID_ARGUMENT, "the ids on stdin are not valid JSON: %s",
                          error.text);
  }
  const json_t *list = json_is_object(root) ? json_object_get(root, "ids") : root;
  ty_status_t status = TY_OK;
  if (!json_is_array(list)) {
    status = ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "the JSON on stdin is not a list of ids nor {\"ids\": [...]}");
  }
  size_t capacity = 0, i;
  const json_t *value;
  json_array_foreach(list, i, value) {
    if (status) break;
    int64_t id = 0;
    status = ty_json_token_id(value, 0, &id);
    if (status) {
      const char *field = json_is_object(root) ? "\"ids\"" : "ids";
      status = ty_status_annotate(status, "%s[%zu] on stdin", field, i);
      break;
    }
    status = ty_push_id(ids, count, &capacity, (uint32_t)id);
  }
  json_decref(root);
  return status;
}

/* Ids separated by whitespace and/or commas, or JSON. */
static ty_status_t ty_parse_ids(const char *text, size_t size, uint32_t **ids, size_t *count) {
  /* A byte-order mark is skipped, as every JSON input skips it. */
  size_t i = ty_text_bom_size(text, size);
  text += i;
  size -= i;
  i = 0;
  while (i < size && strchr(" \t\r\n", text[i])) ++i;
  if (i < size && (text[i] == '[' || text[i] == '{')) {
    return ty_parse_json_ids(text, size, ids, count);
  }
  size_t capacity = 0;
  while (i < size) {
    if (strchr(" \t\r\n,", text[i]) && text[i] != '\0') {
      ++i;
      continue;
    }
    size_t start = i;
    unsigned long long value = 0;
    bool ok = true;
    while (i < size && !(strchr(" \t\r\n,", text[i]) && text[i] != '\0')) {
      char c = text[i++];
      if (c < '0' || c > '9' || value > UINT32_MAX) {
        ok = false;
      } else {
        value = value * 10 + (unsigned)(c - '0');
      }
    }
    if (!ok || value > UINT32_MAX) {
      return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                            "'%.*s' on stdin (byte %zu) is not a token id (an integer from 0 "
                            "to %u)",
                            (int)(i - start > 40 ? 40 : i - start), text + start, start,
                            UINT32_MAX);
    }
    TY_RETURN_IF_ERROR(ty_push_id(ids, count, &capacity, (uint32_t)value));
  }
  return TY_OK;
}

/* Copies `text` with each byte that does not start valid UTF-8 replaced by
 * U+FFFD, so jansson can hold it. */
static char *ty_lossy_utf8(const char *text, size_t size, size_t *out_size) {
  char *out = malloc(size * 3 + 1);
  if (!out) return NULL;
  size_t n = 0;
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < size;) {
    size_t len = s[i] < 0x80                      ? 1
                 : (s[i] >= 0xC2 && s[i] <= 0xDF) ? 2
                 : (s[i] >= 0xE0 && s[i] <= 0xEF) ? 3
                 : (s[i] >= 0xF0 && s[i] <= 0xF4) ? 4
                                                  : 0;
    bool valid = len > 0 && len <= size - i;
    for (size_t k = 1; valid && k < len; ++k) valid = (s[i + k] & 0xC0) == 0x80;
    if (valid && len == 3) {
      unsigned cp = ((s[i] & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6);
      valid = cp >= 0x800 && !(cp >= 0xD800 && cp <= 0xDFFF);
    } else if (valid && len == 4) {
      unsigned cp = ((s[i] & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12);
      valid = cp >= 0x10000 && cp <= 0x10FFFF;
    }
    if (valid) {
      memcpy(out + n, s + i, len);
      n += len;
      i += len;
    } else {
      memcpy(out + n, "\xEF\xBF\xBD", 3);
      n += 3;
      i += 1;
    }
  }
  out[n] = '\0';
  *out_size = n;
  return out;
}

static double ty_tokenize_seconds(const struct timespec *t0, const struct timespec *t1) {
  return (double)(t1->tv_sec - t0->tv_sec) + 1e-9 * (double)(t1->tv_nsec - t0->tv_nsec);
}

static int ty_tokenize_encode(const ty_app_t *app, const ty_tokenizer_t *tok, bool as_json,
                              bool no_special) {
  char *text = NULL;
  size_t size = 0;
  ty_status_t s = ty_read_stdin(&text, &size);
  if (s) return ty_app_fail("tokenize", s);
  uint32_t *ids = NULL;
  size_t count = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  s = ty_tokenizer_encode(tok, text, size, no_special ? TY_TOKENIZER_ENCODE_NO_SPECIAL_TOKENS : 0,
                          &ids, &count);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  free(text);
  if (s) return ty_app_fail("tokenize", ty_status_annotate(s, "encoding stdin"));
  if (app->verbosity > 0) {
    fprintf(stderr, "trainyard tokenize: %zu bytes -> %zu ids in %.3f ms\n", size, count,
            ty_tokenize_seconds(&t0, &t1) * 1e3);
  }
  fputs(as_json ? "{\"ids\": [" : "", stdout);
  for (size_t i = 0; i < count; ++i) {
    printf("%s%u", i == 0 ? "" : as_json ? ", " : " ", ids[i]);
  }
  fputs(as_json ? "]}\n" : "\n", stdout);
  free(ids);
  return TY_EXIT_OK;
}

static int ty_tokenize_decode(const ty_app_t *app, const ty_tokenizer_t *tok, bool as_json,
                              bool no_special) {
  char *input = NULL;
  size_t size = 0;
  ty_status_t s = ty_read_stdin(&input, &size);
  if (s) return ty_app_fail("tokenize", s);
  uint32_t *ids = NULL;
  size_t count = 0;
  s = ty_parse_ids(input, size, &ids, &count);
  free(input);
  char *text = NULL;
  size_t text_size = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!s) {
    s = ty_tokenizer_decode(tok, ids, count, no_special ? TY_TOKENIZER_DECODE_SKIP_SPECIAL : 0,
                            &text, &text_size);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  free(ids);
  if (s) return ty_app_fail("tokenize", ty_status_annotate(s, "decoding stdin"));
  if (app->verbosity > 0) {
    fprintf(stderr, "trainyard tokenize: %zu ids -> %zu bytes in %.3f ms\n", count, text_size,
            ty_tokenize_seconds(&t0, &t1) * 1e3);
  }
  int rc = TY_EXIT_OK;
  if (as_json) {
    size_t clean_size = 0;
    char *clean = ty_lossy_utf8(text, text_size, &clean_size);
    json_t *root = clean ? json_pack("{s:s%}", "text", clean, clean_size) : NULL;
    char *dumped = root ? json_dumps(root, 0) : NULL;
    if (!dumped) {
      rc = ty_app_fail("tokenize",
                       ty_status_make(TY_CODE_RESOURCE_EXHAUSTED, "out of memory writing JSON"));
    } else {
      printf("%s\n", dumped);
    }
    free(dumped);
    json_decref(root);
    free(clean);
  } else if (text_size && fwrite(text, 1, text_size, stdout) != text_size) {
    rc = ty_app_fail("tokenize", ty_status_make(TY_CODE_UNAVAILABLE, "cannot write stdout: %s",
                                                strerror(errno)));
  }
  free(text);
  return rc;
}

int ty_cmd_tokenize(ty_app_t *app, int argc, char **argv) {
  static const struct option long_options[] = {
      {"tokenizer", required_argument, NULL, 't'},
      {"decode", no_argument, NULL, 'd'},
      {"json", no_argument, NULL, 'j'},
      {"no-special", no_argument, NULL, 'n'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  const char *path = NULL;
  bool decode = false, as_json = false, no_special = false;
  opterr = 0;
  optind = 1;
  int c;
  if (ty_app_refuse_empty_values("tokenize", argc, argv, "h", long_options) != TY_EXIT_OK) {
    return TY_EXIT_USAGE;
  }
  while ((c = getopt_long(argc, argv, "h", long_options, NULL)) != -1) {
    switch (c) {
      case 't': path = optarg; break;
      case 'd': decode = true; break;
      case 'j': as_json = true; break;
      case 'n': no_special = true; break;
      case 'h': fputs(ty_tokenize_usage, stdout); return TY_EXIT_OK;
      case ':':
        return ty_app_usage_error("tokenize", "option '%s' needs a value", argv[optind - 1]);
      default:
        if (optopt == 't') {
          return ty_app_usage_error("tokenize", "--tokenizer needs a tokenizer.json file");
        }
        return ty_app_usage_error("tokenize", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) {
    return ty_app_usage_error("tokenize", "unexpected argument '%s' (the text comes on stdin)",
                              argv[optind]);
  }
  if (!path || !*path) {
    return ty_app_usage_error("tokenize", "--tokenizer FILE is required");
  }
  ty_tokenizer_t *tok = NULL;
  ty_status_t s = ty_tokenizer_load_file(path, &tok);
  if (s) return ty_app_fail("tokenize", s);
  int rc = decode ? ty_tokenize_decode(app, tok, as_json, no_special)
                  : ty_tokenize_encode(app, tok, as_json, no_special);
  ty_tokenizer_destroy(tok);
  return rc;
}
