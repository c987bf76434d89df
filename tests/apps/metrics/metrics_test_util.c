/* Helpers of the metrics tests (see metrics_test_util.h). The CRC used here
 * is the bit-at-a-time definition, not the library's tables, so the reader
 * is independent of the code it checks. */
#include "metrics_test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

char *ty_mt_temp_dir(void) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  size_t n = strlen(base) + 32;
  char *dir = malloc(n);
  assert_non_null(dir);
  snprintf(dir, n, "%s/ty-metrics-XXXXXX", base);
  assert_non_null(mkdtemp(dir));
  return dir;
}

static int ty_mt_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

void ty_mt_remove_tree(const char *path) {
  nftw(path, ty_mt_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

char *ty_mt_read_file(const char *path, size_t *out_size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, size = 0;
  char *data = malloc(cap + 1);
  size_t n;
  while (data && (n = fread(data + size, 1, cap - size, f)) > 0) {
    size += n;
    if (size == cap) {
      char *grown = realloc(data, cap * 2 + 1);
      if (!grown) {
        free(data);
        data = NULL;
        break;
      }
      data = grown;
      cap *= 2;
    }
  }
  fclose(f);
  if (!data) return NULL;
  data[size] = '\0';
  if (out_size) *out_size = size;
  return data;
}

void ty_mt_write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
  assert_int_equal(fclose(f), 0);
}

char *ty_mt_only_file(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  char *found = NULL;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    ++count;
    free(found);
    size_t n = strlen(dir) + strlen(e->d_name) + 2;
    found = malloc(n);
    assert_non_null(found);
    snprintf(found, n, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (count != 1) fail_msg("%d entries named %s* in %s, wanted 1", count, prefix, dir);
  return found;
}

/* ---- an independent TFRecord / Event reader ------------------------------ */

static uint32_t ty_mt_crc32c_bitwise(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

static uint32_t ty_mt_masked(const uint8_t *p, size_t n) {
  uint32_t c = ty_mt_crc32c_bitwise(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t ty_mt_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

typedef struct ty_mt_cursor_t {
  const uint8_t *p, *end;
} ty_mt_cursor_t;

static bool ty_mt_varint(ty_mt_cursor_t *c, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && c->p < c->end; shift += 7) {
    uint8_t b = *c->p++;
    v |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) {
      *out = v;
      return true;
    }
  }
  return false;
}

#define TY_MT_FAIL(...)                          \
  do {                                           \
    snprintf(error, error_size, __VA_ARGS__);    \
    return false;                                \
  } while (0)

static bool ty_mt_decode_value(ty_mt_cursor_t c, ty_mt_event_t *e, char *error,
                               size_t error_size) {
  if (e->value_count == TY_MT_MAX_VALUES) TY_MT_FAIL("too many values");
  size_t i = e->value_count++;
  bool has_value = false;
  while (c.p < c.end) {
    uint64_t key, len;
    if (!ty_mt_varint(&c, &key)) TY_MT_FAIL("bad key in Value");
    if (key == (1 << 3 | 2)) {
      if (!ty_mt_varint(&c, &len) || len > (uint64_t)(c.end - c.p) || len >= 64) {
        TY_MT_FAIL("bad tag length");
      }
      memcpy(e->tags[i], c.p, len);
      e->tags[i][len] = '\0';
      c.p += len;
    } else if (key == (2 << 3 | 5)) {
      if (c.end - c.p < 4) TY_MT_FAIL("short simple_value");
      uint32_t bits = (uint32_t)ty_mt_le(c.p, 4);
      memcpy(&e->values[i], &bits, 4);
      c.p += 4;
      has_value = true;
    } else {
      TY_MT_FAIL("unexpected Value key %llu", (unsigned long long)key);
    }
  }
  if (!has_value || !e->tags[i][0]) TY_MT_FAIL("Value without tag or simple_value");
  return true;
}

static bool ty_mt_decode_event(ty_mt_cursor_t c, ty_mt_event_t *e, char *error,
                               size_t error_size) {
  memset(e, 0, sizeof(*e));
  while (c.p < c.end) {
    uint64_t key, len, v;
    if (!ty_mt_varint(&c, &key)) TY_MT_FAIL("bad key in Event");
    switch (key) {
      case 1 << 3 | 1: {
        if (c.end - c.p < 8) TY_MT_FAIL("short wall_time");
        uint64_t bits = ty_mt_le(c.p, 8);
        memcpy(&e->wall_time, &bits, 8);
        e->has_wall_time = true;
        c.p += 8;
        break;
      }
      case 2 << 3 | 0:
        if (!ty_mt_varint(&c, &v)) TY_MT_FAIL("bad step");
        e->step = (int64_t)v;
        break;
      case 3 << 3 | 2:
        if (!ty_mt_varint(&c, &len) || len > (uint64_t)(c.end - c.p) || len >= 32) {
          TY_MT_FAIL("bad file_version");
        }
        memcpy(e->file_version, c.p, len);
        c.p += len;
        break;
      case 5 << 3 | 2: {
        if (!ty_mt_varint(&c, &len) || len > (uint64_t)(c.end - c.p)) TY_MT_FAIL("bad summary");
        ty_mt_cursor_t s = {c.p, c.p + len};
        c.p += len;
        while (s.p < s.end) {
          uint64_t vkey, vlen;
          if (!ty_mt_varint(&s, &vkey) || vkey != (1 << 3 | 2) || !ty_mt_varint(&s, &vlen) ||
              vlen > (uint64_t)(s.end - s.p)) {
            TY_MT_FAIL("bad Summary.value");
          }
          ty_mt_cursor_t vc = {s.p, s.p + vlen};
          if (!ty_mt_decode_value(vc, e, error, error_size)) return false;
          s.p += vlen;
        }
        break;
      }
      default:
        TY_MT_FAIL("unexpected Event key %llu", (unsigned long long)key);
    }
  }
  return true;
}

int ty_mt_read_events(const uint8_t *data, size_t size, ty_mt_event_t *events, size_t max,
                      char *error, size_t error_size) {
  size_t off = 0;
  int count = 0;
  while (off < size) {
    if (size - off < 12) {
      snprintf(error, error_size, "record %d: torn header at byte %zu", count, off);
      return -1;
    }
    uint64_t len = ty_mt_le(data + off, 8);
    if ((uint32_t)ty_mt_le(data + off + 8, 4) != ty_mt_masked(data + off, 8)) {
      snprintf(error, error_size, "record %d: bad length CRC", count);
      return -1;
    }
    if (len > size - off - 12 || size - off - 12 - len < 4) {
      snprintf(error, error_size, "record %d: torn data", count);
      return -1;
    }
    const uint8_t *payload = data + off + 12;
    if ((uint32_t)ty_mt_le(payload + len, 4) != ty_mt_masked(payload, len)) {
      snprintf(error, error_size, "record %d: bad data CRC", count);
      return -1;
    }
    if ((size_t)count >= max) {
      snprintf(error, error_size, "more than %zu records", max);
      return -1;
    }
    ty_mt_cursor_t c = {payload, payload + len};
    if (!ty_mt_decode_event(c, &events[count], error, error_size)) return -1;
    ++count;
    off += 12 + len + 4;
  }
  return count;
}
