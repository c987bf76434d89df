/* `trainyard conform --summary`: the coverage table of a run, one line per
 * op with a cell per dtype and direction (pass, FAIL, unsup, part, xfail,
 * or - where the op has no case), so a run where most cases are
 * unsupported still shows at a glance what a backend covers. */
#ifndef TY_APPS_TRAINYARD_CONFORM_COVERAGE_H_
#define TY_APPS_TRAINYARD_CONFORM_COVERAGE_H_

#include <stdint.h>
#include <stdio.h>

#include "graph/conform/conform.h"

/* Prints the table of `results` (those of `tier`) to `out`. */
void ty_conform_print_coverage(FILE *out, const ty_conform_result_t *results, uint32_t count,
                               ty_conform_tier_t tier);

#endif /* TY_APPS_TRAINYARD_CONFORM_COVERAGE_H_ */
