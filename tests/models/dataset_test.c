/* Tests of models/dataset: random documents packed and read back (every row
 * against the stream built here, the overlap rule, padding weights, several
 * shards, threads reading at once), the split assignment, and damaged or
 * inconsistent datasets, each with its message checked. */
#include "common/test_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/dataset.h"
#include "models/dataset_internal.h" /* ty_ds_crc32, white-box corruption */

static const char ty_sha[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static char *ty_tmpdir(void) {
  const char *base = getenv("TMPDIR");
  char tmpl[1024];
  snprintf(tmpl, sizeof(tmpl), "%s/ty_dataset_test.XXXXXX", base && *base ? base : "/tmp");
  char *dir = mkdtemp(tmpl);
  assert_non_null(dir);
  return strdup(dir);
}

static void ty_rm_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
      ty_rm_tree(path);
    } else {
      unlink(path);
    }
  }
  closedir(d);
  rmdir(dir);
}

static bool ty_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* A packed split as the format defines it, built independently. */
typedef struct ty_stream_t {
  uint32_t *tokens;
  uint8_t *weights; /* weight of each token as a target */
  size_t count, capacity;
  size_t documents;
} ty_stream_t;

static void ty_stream_push(ty_stream_t *s, uint32_t token, uint8_t weight) {
  if (s->count == s->capacity) {
    s->capacity = s->capacity ? s->capacity * 2 : 1024;
    s->tokens = realloc(s->tokens, s->capacity * sizeof(uint32_t));
    s->weights = realloc(s->weights, s->capacity);
    assert_non_null(s->tokens);
    assert_non_null(s->weights);
  }
  s->tokens[s->count] = token;
  s->weights[s->count] = weight;
  s->count++;
}

typedef struct ty_case_t {
  uint32_t seq_len, vocab, eos;
  bool weights;
  uint64_t rows_per_shard;
} ty_case_t;

/* Writes random documents (lengths 0..3T, some empty) to both splits and
 * returns the streams. */
static void ty_write_random(const char *dir, const ty_case_t *c, ty_test_rng_t *rng,
                            ty_stream_t streams[2]) {
  ty_dataset_writer_options_t o = {
      .dir = dir, .seq_len = c->seq_len, .vocab_size = c->vocab, .eos_id = c->eos,
      .tokenizer_sha256 = ty_sha, .created_by = "trainyard test", .input_format = "text",
      .loss_weights = c->weights, .rows_per_shard = c->rows_per_shard,
      .prepare_json = "{\"note\": \"test\"}",
  };
  ty_dataset_writer_t *w = NULL;
  TY_EXPECT_OK(ty_dataset_writer_create(&o, &w));
  size_t docs = 1 + ty_test_rng_next(rng) % 40;
  uint32_t *tokens = malloc(3 * (size_t)c->seq_len * sizeof(uint32_t) + 4);
  uint8_t *weights = malloc(3 * (size_t)c->seq_len + 1);
  for (size_t d = 0; d < docs; ++d) {
    ty_dataset_split_t split = (ty_test_rng_next(rng) % 4 == 0) ? TY_DATASET_SPLIT_VAL
                                                                  : TY_DATASET_SPLIT_TRAIN;
    if (d == 0) split = TY_DATASET_SPLIT_TRAIN;
    size_t n = ty_test_rng_next(rng) % (3 * (size_t)c->seq_len + 1);
    if (ty_test_rng_next(rng) % 8 == 0) n = 0;
    for (size_t i = 0; i < n; ++i) {
      tokens[i] = (uint32_t)(ty_test_rng_next(rng) % c->vocab);
      weights[i] = (uint8_t)(ty_test_rng_next(rng) & 1);
    }
    ty_stream_t *s = &streams[split];
    if (s->count == 0) ty_stream_push(s, c->eos, 0);
    for (size_t i = 0; i < n; ++i) ty_stream_push(s, tokens[i], c->weights ? weights[i] : 1);
    ty_stream_push(s, c->eos, c->weights ? 0 : 1);
    s->documents++;
    TY_EXPECT_OK(ty_dataset_writer_add_document(w, split, tokens, c->weights ? weights : NULL, n));
  }
  free(tokens);
  free(weights);
  TY_EXPECT_OK(ty_dataset_writer_finish(w));
  for (int s = 0; s < 2; ++s) {
    ty_dataset_split_stats_t st;
    ty_dataset_writer_stats(w, (ty_dataset_split_t)s, &st);
    assert_int_equal(st.documents, streams[s].documents);
    assert_int_equal(st.tokens, streams[s].count);
  }
  ty_dataset_writer_destroy(w);
}

/* Every row of the split against the stream: row i = stream[i*T .. i*T+T],
 * EOS with weight 0 past its end. */
static void ty_check_split(const char *dir, const char *name, const ty_case_t *c,
                           const ty_stream_t *s) {
  ty_dataset_t *ds = NULL;
  TY_EXPECT_OK(ty_dataset_open(dir, name, TY_DATASET_OPEN_VERIFY, &ds));
  size_t t = c->seq_len;
  uint64_t expected_rows = s->count > 1 ? (s->count - 1 + t - 1) / t : 0;
  assert_int_equal(ty_dataset_row_count(ds), expected_rows);
  assert_int_equal(ty_dataset_seq_len(ds), c->seq_len);
  assert_int_equal(ty_dataset_vocab_size(ds), c->vocab);
  assert_int_equal(ty_dataset_eos_id(ds), c->eos);
  assert_int_equal(ty_dataset_has_loss_weights(ds), c->weights);
  assert_int_equal(ty_dataset_token_count(ds), s->count);
  assert_string_equal(ty_dataset_tokenizer_sha256(ds), ty_sha);
  uint32_t *row = malloc((t + 1) * sizeof(uint32_t)), *prev = malloc((t + 1) * sizeof(uint32_t));
  uint8_t *w = malloc(t);
  for (uint64_t r = 0; r < expected_rows; ++r) {
    TY_EXPECT_OK(ty_dataset_read_row(ds, r, row, w));
    for (size_t j = 0; j <= t; ++j) {
      size_t at = (size_t)r * t + j;
      uint32_t token = at < s->count ? s->tokens[at] : c->eos;
      if (row[j] != token) fail_msg("%s row %llu, position %zu: %u, expected %u", name,
                                    (unsigned long long)r, j, row[j], token);
      if (j > 0) {
        uint8_t weight = at < s->count ? s->weights[at] : 0;
        if (w[j - 1] != weight) fail_msg("%s row %llu, target %zu: weight %u, expected %u",
                                         name, (unsigned long long)r, j - 1, w[j - 1], weight);
      }
    }
    if (r > 0) assert_int_equal(prev[t], row[0]); /* rows overlap by one token */
    memcpy(prev, row, (t + 1) * sizeof(uint32_t));
  }
  TY_EXPECT_STATUS(ty_dataset_read_row(ds, expected_rows, row, w), TY_CODE_OUT_OF_RANGE,
                   "has");
  free(row);
  free(prev);
  free(w);
  ty_dataset_close(ds);
}

static void test_round_trip(void **state) {
  (void)state;
  ty_test_rng_t rng;
  ty_test_rng_init(&rng, ty_test_seed());
  const ty_case_t cases[] = {
      {1, 7, 6, false, 0},   {1, 50, 0, true, 3},   {4, 300, 299, false, 5},
      {5, 70000, 3, true, 2}, {16, 1000, 999, true, 0}, {33, 50257, 50256, false, 4},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    char *root = ty_tmpdir();
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/ds", root);
    ty_stream_t streams[2];
    memset(streams, 0, sizeof(streams));
    ty_write_random(dir, &cases[i], &rng, streams);
    ty_check_split(dir, "train", &cases[i], &streams[0]);
    ty_check_split(dir, "val", &cases[i], &streams[1]);
    char tmp[1200];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", dir, (long)getpid());
    assert_false(ty_exists(tmp));
    for (int s = 0; s < 2; ++s) {
      free(streams[s].tokens);
      free(streams[s].weights);
    }
    ty_rm_tree(root);
    free(root);
  }
}

/* Writes one dataset of `docs` documents of `len` tokens (token = i % 90 + 1)
 * without weights, T = 8, vocab 100, eos 0, `shard_rows` rows per shard. */
static void ty_write_simple(const char *dir, size_t docs, size_t len, uint64_t shard_rows,
                            bool overwrite) {
  ty_dataset_writer_options_t o = {.dir = dir, .seq_len = 8, .vocab_size = 100, .eos_id = 0,
                                   .tokenizer_sha256 = ty_sha, .created_by = "trainyard test",
                                   .input_format = "text", .rows_per_shard = shard_rows,
                                   .overwrite = overwrite};
  ty_dataset_writer_t *w = NULL;
  TY_EXPECT_OK(ty_dataset_writer_create(&o, &w));
  uint32_t tokens[64];
  for (size_t i = 0; i < len; ++i) tokens[i] = (uint32_t)(i % 90 + 1);
  for (size_t d = 0; d < docs; ++d) {
    TY_EXPECT_OK(ty_dataset_writer_add_document(w, TY_DATASET_SPLIT_TRAIN, tokens, NULL, len));
  }
  TY_EXPECT_OK(ty_dataset_writer_finish(w));
  ty_dataset_writer_destroy(w);
}

typedef struct ty_reader_arg_t {
  const ty_dataset_t *ds;
  int failures;
} ty_reader_arg_t;

static void *ty_reader_thread(void *p) {
  ty_reader_arg_t *a = p;
  uint32_t row[9], first[9];
  for (int pass = 0; pass < 20; ++pass) {
    for (uint64_t r = 0; r < ty_dataset_row_count(a->ds); ++r) {
      ty_status_t s = ty_dataset_read_row(a->ds, r, row, NULL);
      if (s) a->failures++;
      ty_status_free(s);
      if (pass == 0 && r == 0) memcpy(first, row, sizeof(row));
    }
    ty_status_t s = ty_dataset_read_row(a->ds, 0, row, NULL);
    if (s || memcmp(row, first, sizeof(row)) != 0) a->failures++;
    ty_status_free(s);
  }
  return NULL;
}

static void test_threads_and_shards(void **state) {
  (void)state;
  char *root = ty_tmpdir();
  char dir[1100];
  snprintf(dir, sizeof(dir), "%s/ds", root);
  ty_write_simple(dir, 50, 13, 7, false); /* 50*14+1 tokens: 88 rows, 13 shards */
  char shard[1200];
  snprintf(shard, sizeof(shard), "%s/train-00012.tyds", dir);
  assert_true(ty_exists(shard));
  ty_dataset_t *ds = NULL;
  TY_EXPECT_OK(ty_dataset_open(dir, "train", 0, &ds));
  assert_int_equal(ty_dataset_row_count(ds), 88);
  uint8_t w[8];
  uint32_t row[9];
  TY_EXPECT_OK(ty_dataset_read_row(ds, 86, row, w));
  for (int i = 0; i < 8; ++i) assert_int_equal(w[i], 1); /* no weights stored: 1 */
  /* 701 stream tokens: the last row has 4 targets and 4 padding EOS, 0 */
  TY_EXPECT_OK(ty_dataset_read_row(ds, 87, row, w));
  for (int i = 0; i < 8; ++i) assert_int_equal(w[i], i < 4);
  for (int i = 5; i < 9; ++i) assert_int_equal(row[i], 0);
  pthread_t threads[4];
  ty_reader_arg_t args[4];
  for (int i = 0; i < 4; ++i) {
    args[i] = (ty_reader_arg_t){ds, 0};
    assert_int_equal(pthread_create(&threads[i], NULL, ty_reader_thread, &args[i]), 0);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(threads[i], NULL);
    assert_int_equal(args[i].failures, 0);
  }
  /* A split with no documents opens with no rows. */
  ty_dataset_t *val = NULL;
  TY_EXPECT_OK(ty_dataset_open(dir, "val", 0, &val));
  assert_int_equal(ty_dataset_row_count(val), 0);
  TY_EXPECT_STATUS(ty_dataset_read_row(val, 0, row, NULL), TY_CODE_OUT_OF_RANGE, "0 rows");
  ty_dataset_close(val);
  ty_dataset_close(ds);
  ty_rm_tree(root);
  free(root);
}

static void test_split_assignment(void **state) {
  (void)state;
  char text[64];
  size_t val = 0, changed = 0;
  for (int i = 0; i < 20000; ++i) {
    int n = snprintf(text, sizeof(text), "document number %d", i);
    ty_dataset_split_t a = ty_dataset_assign_split(7, 0.1, text, (size_t)n);
    assert_int_equal(a, ty_dataset_assign_split(7, 0.1, text, (size_t)n)); /* deterministic */
    assert_int_equal(ty_dataset_assign_split(7, 0.0, text, (size_t)n), TY_DATASET_SPLIT_TRAIN);
    if (a == TY_DATASET_SPLIT_VAL) ++val;
    if (a != ty_dataset_assign_split(8, 0.1, text, (size_t)n)) ++changed;
    /* A larger fraction only adds documents to val. */
    if (a == TY_DATASET_SPLIT_VAL) {
      assert_int_equal(ty_dataset_assign_split(7, 0.5, text, (size_t)n), TY_DATASET_SPLIT_VAL);
    }
  }
  /* 10% of 20000 = 2000, sd ~42 */
  if (val < 1800 || val > 2200) fail_msg("%zu of 20000 documents in val at fraction 0.1", val);
  if (changed < 2000) fail_msg("another seed moved only %zu documents", changed);
}

/* ---- damaged and inconsistent datasets ---- */

static void ty_patch(const char *path, long offset, const void *bytes, size_t n) {
  int fd = open(path, O_WRONLY);
  assert_true(fd >= 0);
  assert_int_equal(pwrite(fd, bytes, n, offset), (ssize_t)n);
  close(fd);
}

static void ty_read_bytes(const char *path, long offset, void *bytes, size_t n) {
  int fd = open(path, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, bytes, n, offset), (ssize_t)n);
  close(fd);
}

static char *ty_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)n + 1);
  assert_int_equal(fread(data, 1, (size_t)n, f), (size_t)n);
  data[n] = '\0';
  fclose(f);
  return data;
}

static void ty_spit(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

/* Replaces the first `from` in dataset.json by `to`. */
static void ty_edit_json(const char *dir, const char *from, const char *to) {
  char path[1200];
  snprintf(path, sizeof(path), "%s/dataset.json", dir);
  char *text = ty_slurp(path);
  char *at = strstr(text, from);
  assert_non_null(at);
  size_t size = strlen(text) - strlen(from) + strlen(to) + 1;
  char *edited = malloc(size);
  snprintf(edited, size, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  ty_spit(path, edited);
  free(text);
  free(edited);
}

typedef struct ty_bad_t {
  char *root;
  char dir[1100], shard[1200];
} ty_bad_t;

/* 5 documents of 20 tokens: 106 stream tokens, 14 rows of stride 40 in one shard. */
static void ty_bad_setup(ty_bad_t *b) {
  b->root = ty_tmpdir();
  snprintf(b->dir, sizeof(b->dir), "%s/ds", b->root);
  snprintf(b->shard, sizeof(b->shard), "%s/train-00000.tyds", b->dir);
  ty_write_simple(b->dir, 5, 20, 0, false);
}

static void ty_bad_teardown(ty_bad_t *b) {
  ty_rm_tree(b->root);
  free(b->root);
}

static ty_status_t ty_open_read_all(const char *dir, uint32_t flags) {
  ty_dataset_t *ds = NULL;
  TY_RETURN_IF_ERROR(ty_dataset_open(dir, "train", flags, &ds));
  uint32_t row[9];
  ty_status_t s = TY_OK;
  for (uint64_t r = 0; r < ty_dataset_row_count(ds) && !s; ++r) {
    s = ty_dataset_read_row(ds, r, row, NULL);
  }
  ty_dataset_close(ds);
  return s;
}

static void test_bad_truncated(void **state) {
  (void)state;
  ty_bad_t b;
  ty_bad_setup(&b);
  assert_int_equal(ty_dataset_row_stride(8, false), 40);
  assert_int_equal(truncate(b.shard, 64 + 40 * 9 + 17), 0);
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "train-00000.tyds: truncated: 441 bytes, but 14 rows of 40 bytes need 624; "
                   "row 9 (row 9 of the train split) is the first incomplete one");
  assert_int_equal(truncate(b.shard, 30), 0);
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS, "shorter than the 64-byte");
  ty_bad_teardown(&b);
}

static void test_bad_flipped_byte(void **state) {
  (void)state;
  ty_bad_t b;
  ty_bad_setup(&b);
  uint8_t byte;
  long at = 64 + 40 * 6 + 9; /* row 6, token 2 */
  ty_read_bytes(b.shard, at, &byte, 1);
  byte ^= 0x10;
  ty_patch(b.shard, at, &byte, 1);
  ty_dataset_t *ds = NULL;
  TY_EXPECT_OK(ty_dataset_open(b.dir, "train", 0, &ds)); /* rows are checked when read */
  uint32_t row[9];
  TY_EXPECT_OK(ty_dataset_read_row(ds, 5, row, NULL));
  TY_EXPECT_STATUS(ty_dataset_read_row(ds, 6, row, NULL), TY_CODE_DATA_LOSS,
                   "train-00000.tyds: row 6 (row 6 of the train split) is damaged (CRC-32");
  ty_dataset_close(ds);
  TY_EXPECT_STATUS(ty_dataset_open(b.dir, "train", TY_DATASET_OPEN_VERIFY, &ds),
                   TY_CODE_DATA_LOSS, "row 6 (row 6 of the train split) is damaged");
  /* A flipped header byte is caught at open. */
  ty_read_bytes(b.shard, 20, &byte, 1);
  byte ^= 1;
  ty_patch(b.shard, 20, &byte, 1);
  TY_EXPECT_STATUS(ty_dataset_open(b.dir, "train", 0, &ds), TY_CODE_DATA_LOSS,
                   "train-00000.tyds: the shard header is damaged");
  ty_bad_teardown(&b);
}

static void test_bad_token_and_weight(void **state) {
  (void)state;
  ty_bad_t b;
  ty_bad_setup(&b);
  /* Token 100 (= vocab_size) in row 3, position 4, with a valid row CRC. */
  uint8_t row[40];
  long at = 64 + 40 * 3;
  ty_read_bytes(b.shard, at, row, sizeof(row));
  ty_ds_put_u32(row + 16, 100);
  ty_ds_put_u32(row + 36, ty_ds_crc32(0, row, 36));
  ty_patch(b.shard, at, row, sizeof(row));
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "train-00000.tyds: row 3 (row 3 of the train split), position 4: token 100 "
                   "is not below vocab_size 100");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, TY_DATASET_OPEN_VERIFY), TY_CODE_DATA_LOSS,
                   "token 100 is not below vocab_size 100");
  ty_bad_teardown(&b);

  /* The last row (13) holds 2 stream tokens and 7 EOS of padding. */
  ty_bad_setup(&b);
  at = 64 + 40 * 13;
  ty_read_bytes(b.shard, at, row, sizeof(row));
  assert_int_equal(ty_ds_get_u32(row + 8), 0);
  ty_ds_put_u32(row + 20, 7);
  ty_ds_put_u32(row + 36, ty_ds_crc32(0, row, 36));
  ty_patch(b.shard, at, row, sizeof(row));
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "row 13 (row 13 of the train split), position 5: padding that is not EOS");
  ty_bad_teardown(&b);

  /* A weight of 2, in a dataset with weights. */
  char *root = ty_tmpdir();
  char dir[1100], shard[1200];
  snprintf(dir, sizeof(dir), "%s/ds", root);
  snprintf(shard, sizeof(shard), "%s/train-00000.tyds", dir);
  ty_dataset_writer_options_t o = {.dir = dir, .seq_len = 4, .vocab_size = 10, .eos_id = 9,
                                   .tokenizer_sha256 = ty_sha, .input_format = "chat",
                                   .loss_weights = true};
  ty_dataset_writer_t *w = NULL;
  TY_EXPECT_OK(ty_dataset_writer_create(&o, &w));
  uint32_t tokens[6] = {1, 2, 3, 4, 5, 6};
  uint8_t weights[6] = {0, 0, 1, 1, 1, 0}, bad[6] = {0, 2, 0, 0, 0, 0};
  TY_EXPECT_STATUS(ty_dataset_writer_add_document(w, TY_DATASET_SPLIT_TRAIN, tokens, bad, 6),
                   TY_CODE_INVALID_ARGUMENT, "position 1: weight 2 is not 0 or 1");
  tokens[5] = 10;
  TY_EXPECT_STATUS(ty_dataset_writer_add_document(w, TY_DATASET_SPLIT_TRAIN, tokens, weights, 6),
                   TY_CODE_INVALID_ARGUMENT,
                   "train document 0, position 5: token 10 is not below vocab_size 10");
  tokens[5] = 6;
  TY_EXPECT_OK(ty_dataset_writer_add_document(w, TY_DATASET_SPLIT_TRAIN, tokens, weights, 6));
  TY_EXPECT_OK(ty_dataset_writer_finish(w));
  ty_dataset_writer_destroy(w);
  /* stride: 4*5 + 4 weights = 24, + CRC = 28; row 1's weights at 20..23 */
  assert_int_equal(ty_dataset_row_stride(4, true), 28);
  uint8_t r1[28];
  ty_read_bytes(shard, 64 + 28, r1, sizeof(r1));
  r1[22] = 2;
  ty_ds_put_u32(r1 + 24, ty_ds_crc32(0, r1, 24));
  ty_patch(shard, 64 + 28, r1, sizeof(r1));
  TY_EXPECT_STATUS(ty_open_read_all(dir, 0), TY_CODE_DATA_LOSS,
                   "row 1 (row 1 of the train split), target 2: loss weight 2 is not 0 or 1");
  ty_rm_tree(root);
  free(root);
}

static void test_bad_magic_and_version(void **state) {
  (void)state;
  ty_bad_t b;
  ty_bad_setup(&b);
  ty_patch(b.shard, 0, "TYDSHARX", 8);
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "train-00000.tyds: not a trainyard token shard");
  ty_patch(b.shard, 0, "TYDSHARD", 8);
  uint8_t header[64];
  ty_read_bytes(b.shard, 0, header, 64);
  ty_ds_put_u32(header + 8, 2);
  ty_ds_put_u32(header + 60, ty_ds_crc32(0, header, 60));
  ty_patch(b.shard, 0, header, 64);
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_UNIMPLEMENTED,
                   "shard format version 2 is newer");
  ty_bad_teardown(&b);

  ty_bad_setup(&b);
  ty_edit_json(b.dir, "\"format_version\": 1", "\"format_version\": 9");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_UNIMPLEMENTED,
                   "dataset format version 9 is newer");
  ty_bad_teardown(&b);
}

static void test_bad_json_mismatch(void **state) {
  (void)state;
  ty_bad_t b;
  ty_bad_setup(&b);
  ty_edit_json(b.dir, "\"seq_len\": 8", "\"seq_len\": 16");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "train-00000.tyds: the shard header says seq_len 8 but");
  ty_bad_teardown(&b);

  ty_bad_setup(&b);
  ty_edit_json(b.dir, "\"vocab_size\": 100", "\"vocab_size\": 101");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "the shard header says vocab_size 100 but");
  ty_bad_teardown(&b);

  ty_bad_setup(&b);
  ty_edit_json(b.dir, "\"rows\": 14,\n          \"bytes\"", "\"rows\": 13,\n          \"bytes\"");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "the shard header says row count 14 but");
  ty_bad_teardown(&b);

  ty_bad_setup(&b);
  ty_edit_json(b.dir, ty_sha, "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "made with another tokenizer");
  ty_bad_teardown(&b);

  /* A shard dataset.json lists but the folder lacks: lost data (it was
   * NOT_FOUND, which callers took for "no such split"; issue 12). */
  ty_bad_setup(&b);
  ty_edit_json(b.dir, "train-00000.tyds", "train-00001.tyds");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS,
                   "is incomplete: shard");
  ty_bad_teardown(&b);

  /* A shard that is a folder (was UNKNOWN "cannot map ...: No such device"). */
  ty_bad_setup(&b);
  assert_int_equal(unlink(b.shard), 0);
  assert_int_equal(mkdir(b.shard, 0777), 0);
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_FAILED_PRECONDITION,
                   "train-00000.tyds is a folder, not a file");
  ty_bad_teardown(&b);

  ty_bad_setup(&b);
  ty_edit_json(b.dir, "\"splits\"", "\"splits\" ]");
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, 0), TY_CODE_DATA_LOSS, "dataset.json: not valid JSON");
  ty_bad_teardown(&b);

  ty_bad_setup(&b);
  ty_dataset_t *ds = NULL;
  TY_EXPECT_STATUS(ty_dataset_open(b.dir, "test", 0, &ds), TY_CODE_INVALID_ARGUMENT,
                   "unknown split \"test\"");
  TY_EXPECT_STATUS(ty_dataset_open(b.root, "train", 0, &ds), TY_CODE_NOT_FOUND,
                   "is not a trainyard dataset (no dataset.json)");
  /* Rows swapped: every CRC still holds; the SHA-256 does not. */
  uint8_t r0[40], r1[40];
  ty_read_bytes(b.shard, 64, r0, 40);
  ty_read_bytes(b.shard, 104, r1, 40);
  ty_patch(b.shard, 64, r1, 40);
  ty_patch(b.shard, 104, r0, 40);
  TY_EXPECT_OK(ty_open_read_all(b.dir, 0));
  TY_EXPECT_STATUS(ty_open_read_all(b.dir, TY_DATASET_OPEN_VERIFY), TY_CODE_DATA_LOSS,
                   "differs from");
  ty_bad_teardown(&b);
}

/* A split is optional only where dataset.json declares none: the val
 * split of a dataset whose val shard is gone is an error, not "no val". */
static void test_optional_split_is_declared_or_an_error(void **state) {
  (void)state;
  char *root = ty_tmpdir();
  char dir[1100], shard[1200];
  snprintf(dir, sizeof(dir), "%s/ds", root);
  ty_dataset_writer_options_t o = {.dir = dir, .seq_len = 8, .vocab_size = 100, .eos_id = 0,
                                   .tokenizer_sha256 = ty_sha, .created_by = "trainyard test",
                                   .input_format = "text"};
  ty_dataset_writer_t *w = NULL;
  TY_EXPECT_OK(ty_dataset_writer_create(&o, &w));
  uint32_t tokens[20];
  for (size_t i = 0; i < 20; ++i) tokens[i] = (uint32_t)(i + 1);
  for (int d = 0; d < 4; ++d) {
    TY_EXPECT_OK(ty_dataset_writer_add_document(
        w, d == 3 ? TY_DATASET_SPLIT_VAL : TY_DATASET_SPLIT_TRAIN, tokens, NULL, 20));
  }
  TY_EXPECT_OK(ty_dataset_writer_finish(w));
  ty_dataset_writer_destroy(w);

  ty_dataset_t *ds = NULL;
  TY_EXPECT_OK(ty_dataset_open(dir, "val", TY_DATASET_OPEN_IF_DECLARED, &ds));
  assert_non_null(ds);
  assert_true(ty_dataset_row_count(ds) > 0);
  ty_dataset_close(ds);

  snprintf(shard, sizeof(shard), "%s/val-00000.tyds", dir);
  assert_int_equal(unlink(shard), 0);
  ds = NULL;
  for (uint32_t flags = 0; flags <= TY_DATASET_OPEN_VERIFY; ++flags) {
    TY_EXPECT_STATUS(ty_dataset_open(dir, "val", flags | TY_DATASET_OPEN_IF_DECLARED, &ds),
                     TY_CODE_DATA_LOSS, "val-00000.tyds of the val split");
    assert_null(ds);
  }

  /* Only a dataset.json without the split means "none". */
  ty_edit_json(dir, "\"val\":", "\"other\":");
  TY_EXPECT_OK(ty_dataset_open(dir, "val", TY_DATASET_OPEN_IF_DECLARED, &ds));
  assert_null(ds);
  TY_EXPECT_STATUS(ty_dataset_open(dir, "val", 0, &ds), TY_CODE_NOT_FOUND,
                   "declares no split \"val\"");
  TY_EXPECT_OK(ty_dataset_open(dir, "train", TY_DATASET_OPEN_IF_DECLARED, &ds));
  assert_non_null(ds);
  ty_dataset_close(ds);
  ty_rm_tree(root);
  free(root);
}

static void test_writer_refusals(void **state) {
  (void)state;
  char *root = ty_tmpdir();
  char dir[1100], file[1200];
  snprintf(dir, sizeof(dir), "%s/ds", root);
  ty_dataset_writer_options_t o = {.dir = dir, .seq_len = 8, .vocab_size = 100, .eos_id = 0,
                                   .tokenizer_sha256 = ty_sha, .input_format = "text"};
  ty_dataset_writer_t *w = NULL;
  o.seq_len = 0;
  TY_EXPECT_STATUS(ty_dataset_writer_create(&o, &w), TY_CODE_INVALID_ARGUMENT, "seq_len");
  o.seq_len = 8;
  o.eos_id = 100;
  TY_EXPECT_STATUS(ty_dataset_writer_create(&o, &w), TY_CODE_INVALID_ARGUMENT, "eos_id 100");
  o.eos_id = 0;
  o.tokenizer_sha256 = "abc";
  TY_EXPECT_STATUS(ty_dataset_writer_create(&o, &w), TY_CODE_INVALID_ARGUMENT, "hex");
  o.tokenizer_sha256 = ty_sha;

  /* No tokens for train: an error, and nothing left behind. */
  TY_EXPECT_OK(ty_dataset_writer_create(&o, &w));
  uint32_t one = 5;
  TY_EXPECT_OK(ty_dataset_writer_add_document(w, TY_DATASET_SPLIT_VAL, &one, NULL, 1));
  TY_EXPECT_STATUS(ty_dataset_writer_finish(w), TY_CODE_FAILED_PRECONDITION, "no training rows");
  ty_dataset_writer_destroy(w);
  assert_false(ty_exists(dir));
  snprintf(file, sizeof(file), "%s.tmp.%ld", dir, (long)getpid());
  assert_false(ty_exists(file));

  /* A writer dropped half way leaves nothing. */
  TY_EXPECT_OK(ty_dataset_writer_create(&o, &w));
  TY_EXPECT_OK(ty_dataset_writer_add_document(w, TY_DATASET_SPLIT_TRAIN, &one, NULL, 1));
  ty_dataset_writer_destroy(w);
  assert_false(ty_exists(dir));
  assert_false(ty_exists(file));

  /* A folder with other files is never replaced; an older dataset only on
   * request. */
  assert_int_equal(mkdir(dir, 0777), 0);
  snprintf(file, sizeof(file), "%s/notes.txt", dir);
  ty_spit(file, "mine");
  o.overwrite = true;
  TY_EXPECT_STATUS(ty_dataset_writer_create(&o, &w), TY_CODE_ALREADY_EXISTS,
                   "holds no dataset (no dataset.json); it is never replaced");
  unlink(file);
  ty_write_simple(dir, 1, 3, 0, false); /* an empty folder is fine */
  o.overwrite = false;
  TY_EXPECT_STATUS(ty_dataset_writer_create(&o, &w), TY_CODE_ALREADY_EXISTS,
                   "already holds a dataset; pass --force");
  ty_write_simple(dir, 3, 30, 0, true);
  ty_dataset_t *ds = NULL;
  TY_EXPECT_OK(ty_dataset_open(dir, "train", TY_DATASET_OPEN_VERIFY, &ds));
  assert_int_equal(ty_dataset_token_count(ds), 1 + 3 * 31);
  ty_dataset_close(ds);
  char old[1200];
  snprintf(old, sizeof(old), "%s.old.%ld", dir, (long)getpid());
  assert_false(ty_exists(old));
  ty_rm_tree(root);
  free(root);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_threads_and_shards),
      cmocka_unit_test(test_split_assignment),
      cmocka_unit_test(test_bad_truncated),
      cmocka_unit_test(test_bad_flipped_byte),
      cmocka_unit_test(test_bad_token_and_weight),
      cmocka_unit_test(test_bad_magic_and_version),
      cmocka_unit_test(test_bad_json_mismatch),
      cmocka_unit_test(test_optional_split_is_declared_or_an_error),
      cmocka_unit_test(test_writer_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
