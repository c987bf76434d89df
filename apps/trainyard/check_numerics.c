/* `--check-numerics`: its value and the report of the first non-finite node,
 * shared by forward and train (check_numerics.h). */
#include "check_numerics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "hal/dtype.h"

ty_status_t ty_check_numerics_parse(const char *value, int64_t *out_every) {
  if (!value || !value[0] || !strcmp(value, "true")) {
    *out_every = 1;
    return TY_OK;
  }
  if (!strncmp(value, "every:", 6)) {
    char *end = NULL;
    errno = 0;
    long long n = strtoll(value + 6, &end, 10);
    if (value[6] && end && !*end && errno == 0 && n >= 1) {
      *out_every = n;
      return TY_OK;
    }
  }
  return ty_status_make(TY_CODE_INVALID_ARGUMENT,
                        "--check-numerics=%.64s: expected no value (check every step) or "
                        "every:N with N >= 1 (check steps 1, N+1, 2N+1, ...)",
                        value);
}

void ty_check_numerics_layer(const ty_model_config_t *config, uint32_t region, char *out,
                             size_t capacity) {
  if (!region) {
    snprintf(out, capacity, "outside the transformer blocks (embedding, final norm, head, "
                            "loss or optimizer)");
    return;
  }
  unsigned layer = TY_REGION_LAYER(region);
  const char *part = TY_REGION_PART(region) == TY_REGION_ATTENTION ? "attention" : "MLP";
  if (config->arch == TY_ARCH_GPT2) {
    snprintf(out, capacity, "layer %u (transformer.h.%u) %s", layer, layer, part);
  } else {
    snprintf(out, capacity, "layer %u (model.layers.%u) %s", layer, layer, part);
  }
}

static void ty_check_numerics_shape(const ty_tensor_desc_t *d, char *out, size_t capacity) {
  size_t used = (size_t)snprintf(out, capacity, "%s [", ty_dtype_name(d->dtype));
  for (uint32_t i = 0; i < d->rank && used < capacity; ++i) {
    used += (size_t)snprintf(out + used, capacity - used, "%s%" PRId64, i ? "," : "", d->dims[i]);
  }
  if (used < capacity) snprintf(out + used, capacity - used, "]");
}

void ty_check_numerics_print(FILE *out, const char *command, const ty_model_config_t *config,
                             const ty_numerics_finding_t *f, uint32_t node_count,
                             const char *when) {
  char shape[160], layer[160];
  ty_check_numerics_shape(&f->desc, shape, sizeof(shape));
  ty_check_numerics_layer(config, f->region, layer, sizeof(layer));
  fprintf(out,
          "trainyard %s: check-numerics: %s: the first non-finite value is the output of "
          "node %u of %u, %s (%s)\n"
          "  output %u %s %s: %" PRId64 " NaN, %" PRId64 " Inf of %" PRId64 "\n"
          "  in %s%s\n",
          command, when, f->node, node_count, f->op, f->backward ? "backward" : "forward",
          f->output, f->desc.name, shape, f->stats.nan, f->stats.inf, f->stats.count, layer,
          f->region_derived ? " (the backward of its nodes)" : "");
  for (uint32_t i = 0; i < f->input_count; ++i) {
    const ty_numerics_input_t *in = &f->inputs[i];
    char from[96];
    if (in->producer != UINT32_MAX) {
      snprintf(from, sizeof(from), "node %u", in->producer);
    } else {
      snprintf(from, sizeof(from), "%s%s", ty_value_role_name(in->role),
               in->updated ? ", as after the step's update" : "");
    }
    ty_check_numerics_shape(&in->desc, shape, sizeof(shape));
    if (in->read) {
      fprintf(out,
              "  input %u %s %s (%s): min %.6g max %.6g, %" PRId64 " NaN, %" PRId64 " Inf\n", i,
              in->desc.name[0] ? in->desc.name : "-", shape, from, in->stats.min, in->stats.max,
              in->stats.nan, in->stats.inf);
    } else {
      fprintf(out, "  input %u %s %s (%s): not read back (a bound input or not a float)\n", i,
              in->desc.name[0] ? in->desc.name : "-", shape, from);
    }
  }
  if (f->input_total > f->input_count) {
    fprintf(out, "  (%u more inputs not shown)\n", f->input_total - f->input_count);
  }
}

ty_status_t ty_check_numerics_status(const ty_model_config_t *config,
                                     const ty_numerics_finding_t *f, const char *when) {
  char layer[160];
  ty_check_numerics_layer(config, f->region, layer, sizeof(layer));
  return ty_status_make(TY_CODE_ABORTED,
                        "%s: non-finite values first appear in node %u (%s, %s) in %s; the "
                        "report above names its inputs",
                        when, f->node, f->op, f->backward ? "backward" : "forward", layer);
}
