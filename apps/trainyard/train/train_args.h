/* The one command-line parser of `trainyard train` and `trainyard compare`:
 * defaults < --config files < the command line, where the command line
 * takes --key value, --key=value and key=value. A command adds its own
 * options as a table (tried before the training options); everything else
 * goes to ty_train_config_set. Messages go to stderr (usage errors,
 * exit 2) and --help to stdout. Not thread-safe (it prints). */
#ifndef TY_APPS_TRAINYARD_TRAIN_TRAIN_ARGS_H_
#define TY_APPS_TRAINYARD_TRAIN_TRAIN_ARGS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "train_config.h"

typedef enum ty_train_arg_kind_e {
  TY_TRAIN_ARG_TEXT,      /* dest: char[capacity] */
  TY_TRAIN_ARG_COUNT,     /* dest: int64_t, an integer >= 1 */
  TY_TRAIN_ARG_TOLERANCE, /* dest: double, a number >= 0 */
  TY_TRAIN_ARG_REFUSED,   /* a training option the command sets itself: `refusal` */
} ty_train_arg_kind_t;

/* One option of the command's own (its key without "--"). */
typedef struct ty_train_arg_t {
  const char *key;
  ty_train_arg_kind_t kind;
  void *dest;
  size_t capacity;
  const char *refusal; /* REFUSED: the message, "%s" for the key */
} ty_train_arg_t;

typedef struct ty_train_args_t {
  const char *command;        /* "train", "compare": names it in messages */
  void (*usage)(FILE *out);   /* the --help text */
  const ty_train_arg_t *own;  /* the command's options, or NULL */
  size_t own_count;
  /* A value the training options refuse ends with "; see 'trainyard
   * <command> --help'" (compare) or not (train), as each always did. */
  bool hint_on_bad_value;
} ty_train_args_t;

/* ty_train_args_parse's answer after printing --help. */
#define TY_TRAIN_ARGS_HELP (-1)

/* Parses argv[1..argc) into *config (set to the defaults by the caller) and
 * the command's own options. TY_EXIT_OK; TY_TRAIN_ARGS_HELP after --help;
 * or TY_EXIT_USAGE after printing the error. */
int ty_train_args_parse(const ty_train_args_t *args, int argc, char **argv,
                        ty_train_config_t *config);

#endif /* TY_APPS_TRAINYARD_TRAIN_TRAIN_ARGS_H_ */
