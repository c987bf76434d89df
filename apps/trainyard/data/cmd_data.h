/* What the files of `trainyard data` share: the interrupt flag, input
 * collection and number parsing. */
#ifndef TY_APPS_TRAINYARD_CMD_DATA_H_
#define TY_APPS_TRAINYARD_CMD_DATA_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "app.h"

/* From the call on, SIGINT/SIGTERM/SIGHUP are recorded (stop_signals.h) instead of
 * killing the process, so that the command can stop between documents and
 * remove what it was writing. */
void ty_data_catch_interrupts(void);
bool ty_data_interrupted(void);

/* Appends `path` to a growable list of input paths. False when memory runs
 * out. */
bool ty_data_inputs_push(const char ***paths, size_t *count, const char *path);

/* The output of a data command against its --input paths and --tokenizer
 * (files/out_paths.h); `what` names the output in errors ("dataset
 * folder"), `replaces_folder` for an output folder replaced whole. */
ty_status_t ty_data_check_out(const char *out, const char *what, bool replaces_folder,
                              const char *const *inputs, size_t input_count,
                              const char *tokenizer);

/* Decimal unsigned integer in [min, max]; false otherwise. */
bool ty_data_parse_u64(const char *text, uint64_t min, uint64_t max, uint64_t *out);

/* The document separator of `tok`: the token `name` (--eos), or with NULL
 * the first of <|endoftext|>, <|end_of_text|>, </s>, <eos> it has.
 * INVALID_ARGUMENT naming what is missing. *out_name is `name` or a
 * static string. */
struct ty_tokenizer_t;
ty_status_t ty_data_tokenizer_eos(const struct ty_tokenizer_t *tok, const char *name,
                                  uint32_t *out_id, const char **out_name);

int ty_cmd_data_prepare(ty_app_t *app, int argc, char **argv);
int ty_cmd_data_train_tokenizer(ty_app_t *app, int argc, char **argv);
int ty_cmd_data_info(ty_app_t *app, int argc, char **argv);

#endif /* TY_APPS_TRAINYARD_CMD_DATA_H_ */
