/* `trainyard compare --per-layer` (compare_layers.c): one batch on two
 * backends, layer by layer. */
#ifndef TY_APPS_TRAINYARD_COMPARE_LAYERS_H_
#define TY_APPS_TRAINYARD_COMPARE_LAYERS_H_

#include <stdbool.h>

#include "app.h"

/* Whether the command line asks for --per-layer. */
bool ty_compare_is_per_layer(int argc, char **argv);
/* The whole command: 0 every layer within the bound, 1 one beyond it (or a
 * failed run), 2 bad input. */
int ty_compare_per_layer(ty_app_t *app, int argc, char **argv);

#endif /* TY_APPS_TRAINYARD_COMPARE_LAYERS_H_ */
