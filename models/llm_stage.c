/* Pipeline units of a model (llm.h): which unit each parameter belongs to
 * and what each unit costs, for the stage partition and for gathering a
 * split model's parameters by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/llm.h"

int32_t ty_llm_unit_count(const ty_model_config_t *c) { return (int32_t)c->num_layers + 2; }

int32_t ty_llm_param_unit(const ty_model_config_t *c, const char *name) {
  const int32_t last = ty_llm_unit_count(c) - 1;
  static const char *const embed[] = {"transformer.wte.", "transformer.wpe.",
                                      "model.embed_tokens.", NULL};
  static const char *const head[] = {"transformer.ln_f.", "model.norm.", "lm_head.", NULL};
  static const char *const layer[] = {"transformer.h.", "model.layers.", NULL};
  for (int i = 0; embed[i]; ++i) {
    if (!strncmp(name, embed[i], strlen(embed[i]))) return 0;
  }
  for (int i = 0; head[i]; ++i) {
    if (!strncmp(name, head[i], strlen(head[i]))) return last;
  }
  for (int i = 0; layer[i]; ++i) {
    size_t n = strlen(layer[i]);
    if (strncmp(name, layer[i], n) != 0) continue;
    char *end = NULL;
    long l = strtol(name + n, &end, 10);
    if (end != name + n && *end == '.' && l >= 0 && l < c->num_layers) return (int32_t)l + 1;
  }
  return -1;
}

ty_status_t ty_llm_unit_costs(const ty_model_config_t *c, int64_t *out_costs) {
  uint32_t count = 0;
  TY_RETURN_IF_ERROR(ty_llm_param_count(c, &count, NULL));
  const int32_t units = ty_llm_unit_count(c);
  for (int32_t u = 0; u < units; ++u) out_costs[u] = 0;
  for (uint32_t i = 0; i < count; ++i) {
    ty_llm_param_t p;
    ty_llm_param_spec(c, i, &p);
    int32_t u = ty_llm_param_unit(c, p.name);
    if (u < 0) {
      return ty_status_make(TY_CODE_INTERNAL, "parameter '%s' belongs to no pipeline unit",
                            p.name);
    }
    int64_t n = 1;
    for (uint32_t d = 0; d < p.rank; ++d) n *= p.dims[d];
    out_costs[u] += n;
  }
  if (c->tie_word_embeddings) out_costs[units - 1] += c->vocab_size * c->hidden_size;
  return TY_OK;
}

bool ty_llm_is_word_embedding(const char *name) {
  return !strcmp(name, "transformer.wte.weight") || !strcmp(name, "model.embed_tokens.weight");
}

bool ty_llm_stage_has_param(const ty_model_config_t *c, int32_t unit_begin, int32_t unit_end,
                            const char *name) {
  int32_t u = ty_llm_param_unit(c, name);
  if (u >= unit_begin && u < unit_end) return true;
  /* the tied head reads the embedding matrix on the last stage */
  return c->tie_word_embeddings && ty_llm_is_word_embedding(name) &&
         unit_end == ty_llm_unit_count(c);
}
