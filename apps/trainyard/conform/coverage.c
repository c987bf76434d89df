/* The coverage table of a conform run (coverage.h). */
#include "conform/coverage.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"

static const ty_dtype_t ty_coverage_dtypes[] = {TY_DTYPE_F32, TY_DTYPE_BF16, TY_DTYPE_F16,
                                                TY_DTYPE_I32, TY_DTYPE_I64};
#define TY_COVERAGE_DTYPES (sizeof(ty_coverage_dtypes) / sizeof(ty_coverage_dtypes[0]))
#define TY_COVERAGE_CELLS (2 * TY_COVERAGE_DTYPES)

typedef struct {
  uint32_t runs, pass, fail, unsupported, xfail;
} ty_cell_t;

static int ty_coverage_dtype_index(ty_dtype_t dtype) {
  for (size_t i = 0; i < TY_COVERAGE_DTYPES; ++i) {
    if (ty_coverage_dtypes[i] == dtype) return (int)i;
  }
  return -1;
}

static const char *ty_cell_text(const ty_cell_t *c) {
  if (!c->runs) return "-";
  if (c->fail) return "FAIL";
  if (c->unsupported == c->runs) return "unsup";
  if (c->unsupported) return "part";
  if (c->xfail) return "xfail";
  return "pass";
}

/* Prints `line` without its trailing blanks. */
static void ty_coverage_line(FILE *out, char *line) {
  size_t n = strlen(line);
  while (n && line[n - 1] == ' ') line[--n] = '\0';
  fprintf(out, "%s\n", line);
}

void ty_conform_print_coverage(FILE *out, const ty_conform_result_t *results, uint32_t count,
                               ty_conform_tier_t tier) {
  /* Ops in the order the case table lists them; cells per dtype, direction. */
  const char **ops = calloc(count ? count : 1, sizeof(*ops));
  ty_cell_t *cells = calloc(count ? count : 1, TY_COVERAGE_CELLS * sizeof(*cells));
  if (!ops || !cells) {
    free(ops);
    free(cells);
    fprintf(out, "(out of memory for the coverage table)\n");
    return;
  }
  uint32_t op_count = 0;
  bool used[TY_COVERAGE_CELLS] = {false};
  for (uint32_t i = 0; i < count; ++i) {
    const ty_conform_result_t *r = &results[i];
    int d = ty_coverage_dtype_index(r->dtype);
    if (r->tier != tier || d < 0) continue;
    uint32_t op = 0;
    while (op < op_count && strcmp(ops[op], r->test_case->op) != 0) ++op;
    if (op == op_count) ops[op_count++] = r->test_case->op;
    size_t k = 2 * (size_t)d + (r->direction == TY_CONFORM_BACKWARD);
    ty_cell_t *c = &cells[op * TY_COVERAGE_CELLS + k];
    used[k] = true;
    c->runs++;
    c->pass += r->status == TY_CONFORM_PASS;
    c->fail += r->status == TY_CONFORM_FAIL || r->status == TY_CONFORM_XPASS;
    c->unsupported += r->status == TY_CONFORM_UNSUPPORTED;
    c->xfail += r->status == TY_CONFORM_XFAIL;
  }
  char line[512];
  size_t used_chars = (size_t)snprintf(line, sizeof(line), "%-22s", "op");
  for (size_t k = 0; k < TY_COVERAGE_CELLS; ++k) {
    if (!used[k]) continue;
    char head[16];
    snprintf(head, sizeof(head), "%s/%c", ty_dtype_name(ty_coverage_dtypes[k / 2]),
             k % 2 ? 'B' : 'F');
    used_chars += (size_t)snprintf(line + used_chars, sizeof(line) - used_chars, " %-7s", head);
  }
  fprintf(out, "\ncoverage (%s tier; F forward, B backward):\n", ty_conform_tier_name(tier));
  ty_coverage_line(out, line);
  uint32_t covered = 0;
  for (uint32_t op = 0; op < op_count; ++op) {
    used_chars = (size_t)snprintf(line, sizeof(line), "%-22s", ops[op]);
    bool any_pass = false;
    for (size_t k = 0; k < TY_COVERAGE_CELLS; ++k) {
      if (!used[k]) continue;
      const ty_cell_t *c = &cells[op * TY_COVERAGE_CELLS + k];
      any_pass |= c->pass > 0;
      used_chars += (size_t)snprintf(line + used_chars, sizeof(line) - used_chars, " %-7s",
                                     ty_cell_text(c));
    }
    covered += any_pass;
    ty_coverage_line(out, line);
  }
  fprintf(out,
          "%u of %u ops pass in at least one dtype (pass: every case passed; part: some "
          "unsupported; unsup: none ran; FAIL: a failure or xpass)\n",
          covered, op_count);
  free(ops);
  free(cells);
}
