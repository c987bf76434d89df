/* The command line's options as the graph recipe's description
 * (train_recipe.h): the one place that knows both structures. */
#include "train_recipe.h"

#include <stdio.h>
#include <string.h>

#include "train_config.h"

ty_status_t ty_train_config_recipe(const ty_train_config_t *c, ty_train_recipe_t *r) {
  memset(r, 0, sizeof(*r));
  snprintf(r->precision, sizeof(r->precision), "%s", c->dtype);
  r->dropout = c->dropout;
  snprintf(r->optimizer, sizeof(r->optimizer), "%s", c->optimizer);
  r->adafactor = (ty_adafactor_config_t){
      .set = true, .eps1 = c->adafactor_eps1, .eps2 = c->adafactor_eps2,
      .clip_threshold = c->clip_threshold, .decay_rate = c->decay_rate,
      .relative_step = c->relative_step, .scale_parameter = c->scale_parameter,
      .warmup_init = c->warmup_init,
      /* transformers' beta1=None unless given: --beta1 on purpose turns it on */
      .momentum = ty_train_config_layer(c, "beta1") != TY_TRAIN_LAYER_DEFAULT};
  r->decay_all = c->decay_all;
  r->clip = c->clip;
  r->grad_accum = c->grad_accum;
  r->deterministic = c->deterministic;
  snprintf(r->recompute, sizeof(r->recompute), "%s", c->recompute);
  r->loss_chunk = c->loss_chunk;
  r->mlp_chunk = c->mlp_chunk;
  r->fused_optimizer = c->fused_optimizer;
  snprintf(r->offload, sizeof(r->offload), "%s", c->offload);
  snprintf(r->memory_limit, sizeof(r->memory_limit), "%s", c->memory_limit);
  r->world = c->world;
  r->rank = c->rank;
  r->world_in_graph = c->world_in_graph;
  r->zero = (int)c->zero;
  r->tp = c->tp;
  r->tp_rank = c->tp_rank;
  r->cp = c->cp;
  r->cp_rank = c->cp_rank;
  return ty_train_config_memory_limit(c, &r->memory_limit_bytes);
}
