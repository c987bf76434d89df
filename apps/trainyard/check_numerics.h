/* `--check-numerics[=every:N]` of forward and train: the option's value, and
 * the report of the first non-finite node (graph/runtime/numerics.h) in the words of
 * the model (its layer and block). */
#ifndef TY_APPS_TRAINYARD_CHECK_NUMERICS_H_
#define TY_APPS_TRAINYARD_CHECK_NUMERICS_H_

#include <stdint.h>
#include <stdio.h>

#include "graph/runtime/numerics.h"
#include "models/config.h"

/* The option's value: NULL, "" or "true" check every step (1), "every:N"
 * every N-th (N >= 1). INVALID_ARGUMENT naming the value otherwise. */
ty_status_t ty_check_numerics_parse(const char *value, int64_t *out_every);

/* The block of region `region` in the model's words: "layer 3
 * (transformer.h.3) attention"; "outside the transformer blocks" for 0. */
void ty_check_numerics_layer(const ty_model_config_t *config, uint32_t region, char *out,
                             size_t capacity);

/* Writes the finding, a few lines each starting with "  " after the first,
 * to `out`. `when` ("step 5", "the batch") says what ran. */
void ty_check_numerics_print(FILE *out, const char *command, const ty_model_config_t *config,
                             const ty_numerics_finding_t *finding, uint32_t node_count,
                             const char *when);

/* ABORTED: the one-line summary of a finding, for the command's exit. */
ty_status_t ty_check_numerics_status(const ty_model_config_t *config,
                                     const ty_numerics_finding_t *finding, const char *when);

#endif /* TY_APPS_TRAINYARD_CHECK_NUMERICS_H_ */
