/* The inference table: for each op, good cases with the exact outputs and
 * bad cases with the expected error. Shared by ops_infer_test.c (which runs
 * them) and its coverage check (every op has at least one of each). */
#ifndef TY_TESTS_OPS_INFER_CASES_H_
#define TY_TESTS_OPS_INFER_CASES_H_

typedef struct tyt_infer_case_t {
  const char *op;
  const char *inputs; /* descriptors, "-" for an absent optional input */
  const char *attrs;  /* see tyt_attrs_parse */
  /* Outputs, e.g. "f32[2,4] f32[2]"; or "!substring" for INVALID_ARGUMENT,
   * "?substring" for NOT_FOUND. */
  const char *expect;
} tyt_infer_case_t;

extern const tyt_infer_case_t tyt_infer_cases[];
extern const unsigned tyt_infer_case_count;

#endif /* TY_TESTS_OPS_INFER_CASES_H_ */
