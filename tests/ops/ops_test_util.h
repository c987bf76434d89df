/* Test helpers for the op set: descriptors and attribute sets written as
 * short strings ("f32[2,3]", "trans_a=1 shape=[2,-1] dtype='bf16'"), so the
 * inference and gradient tables stay readable. Failures fail the test. */
#ifndef TY_TESTS_OPS_TEST_UTIL_H_
#define TY_TESTS_OPS_TEST_UTIL_H_

#include <stdbool.h>
#include <stdint.h>

#include "hal/tensor.h"
#include "ops/attrs.h"
#include "ops/op.h"

/* Parses one descriptor, e.g. "bf16[2,3]" or "i64[]". */
void tyt_desc_parse(const char *spec, ty_tensor_desc_t *out_desc);

/* Parses whitespace-separated descriptors; "-" is an absent input, whose
 * pointer is set to NULL. Returns how many were read (at most capacity). */
uint32_t tyt_descs_parse(const char *spec, ty_tensor_desc_t *descs,
                         const ty_tensor_desc_t **ptrs, uint32_t capacity);

/* Parses "name=value ..." (NULL or "" for none). A value is an int list
 * "[1,-2]", a string "'llama3'", a float when it contains '.', 'e' or 'n'
 * (1.0, 1e-5, inf, nan), else an int. */
void tyt_attrs_parse(const char *spec, ty_attrs_t *out_attrs);

/* True when the descriptors have the same dtype and dims. */
bool tyt_desc_equal(const ty_tensor_desc_t *a, const ty_tensor_desc_t *b);

/* "f32[2,3]" into a static buffer (valid until the next call). */
const char *tyt_desc_str(const ty_tensor_desc_t *d);

#endif /* TY_TESTS_OPS_TEST_UTIL_H_ */
