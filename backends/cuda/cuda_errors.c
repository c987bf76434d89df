/* What a failed cuda run says: the device data errors kernels record in
 * the error flag (decoded into INVALID_ARGUMENT naming the node), a failed
 * command's driver error, and the TRAINYARD_CUDA_FAULT test hook that makes
 * a chosen run fail the way a real fault would. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_executable.h"

void ty_cu_fault_parse(ty_abi_executable_t *e) {
  const char *env = getenv("TRAINYARD_CUDA_FAULT");
  if (!env || !env[0]) return;
  char kind[32] = "";
  unsigned long long run = 1;
  if (sscanf(env, "%31[a-z-]@%llu", kind, &run) < 1) return;
  if (!strcmp(kind, "illegal-address")) e->fault_kind = TY_CU_FAULT_ILLEGAL_ADDRESS;
  else if (!strcmp(kind, "launch")) e->fault_kind = TY_CU_FAULT_LAUNCH;
  else if (!strcmp(kind, "trap")) e->fault_kind = TY_CU_FAULT_TRAP;
  else if (!strcmp(kind, "device-lost")) e->fault_kind = TY_CU_FAULT_DEVICE_LOST;
  e->fault_run = run ? run : 1;
}

ty_abi_status_t ty_cu_cmd_error(const ty_abi_executable_t *e, const ty_cu_cmd_t *c,
                                       const char *what, CUresult r) {
  char text[320];
  snprintf(text, sizeof(text), "node %u (%s): %s of %s", c->node,
           e->graph->graph.nodes[c->node].op, what, c->name);
  return ty_cu_driver_error(e->device, text, r);
}

/* The test hook's fault, queued before the commands of the chosen run. */
ty_abi_status_t ty_cu_fault_inject(ty_abi_executable_t *e) {
  ty_abi_device_t *d = e->device;
  if (e->fault_kind == TY_CU_FAULT_DEVICE_LOST) {
    return ty_cu_driver_error(d, "running (test hook TRAINYARD_CUDA_FAULT: a lost device)",
                              CUDA_ERROR_DEVICE_UNAVAILABLE);
  }
  CUmodule m = NULL;
  ty_abi_status_t st = ty_cu_module_get(d, TY_CU_FAM_TEST, &m);
  if (st) return st;
  CUfunction f = NULL;
  const char *name = e->fault_kind == TY_CU_FAULT_TRAP ? "ty_test_trap" : "ty_test_wild_write";
  CUresult r = e->api->cuModuleGetFunction(&f, m, name);
  if (r != CUDA_SUCCESS) return ty_cu_driver_error(d, "finding the test-hook kernel", r);
  uint64_t wild = 0x10; /* never a valid device address */
  void *params[] = {&wild};
  unsigned threads = e->fault_kind == TY_CU_FAULT_LAUNCH ? 4096u : 1u; /* > 1024: invalid */
  r = e->api->cuLaunchKernel(f, 1, 1, 1, threads, 1, 1, 0, d->stream, params, NULL);
  if (r != CUDA_SUCCESS) {
    char what[128];
    snprintf(what, sizeof(what), "launching kernel %s (test hook TRAINYARD_CUDA_FAULT)", name);
    return ty_cu_driver_error(d, what, r);
  }
  return NULL;
}

/* The message of a data error a kernel recorded. */
ty_abi_status_t ty_cu_data_error(const ty_abi_executable_t *e, const int32_t *flag) {
  int64_t a, b, c;
  memcpy(&a, (const char *)flag + 8, 8);
  memcpy(&b, (const char *)flag + 16, 8);
  memcpy(&c, (const char *)flag + 24, 8);
  uint32_t node = (uint32_t)flag[1];
  const char *op = node < e->graph->graph.node_count ? e->graph->graph.nodes[node].op : "?";
  char what[256];
  long long x = (long long)a, y = (long long)b, z = (long long)c;
  switch (flag[0]) {
    case 1:
      snprintf(what, sizeof(what), "embedding: ids[%lld] = %lld is outside the vocabulary "
               "[0, %lld)", x, y, z);
      break;
    case 2:
      snprintf(what, sizeof(what), "%s: targets[%lld] = %lld is outside the "
               "vocabulary [0, %lld) (negative means ignored)",
               strncmp(op, "vocab_", 6) == 0 ? op : "cross_entropy", x, y, z);
      break;
    case 3:
      snprintf(what, sizeof(what), "kv_cache_write: %lld new positions starting at position "
               "%lld do not fit in a cache of max_len %lld (start must be in 0..max_len-len)",
               y, x, z);
      break;
    case 4:
      snprintf(what, sizeof(what), "attention: kv_len input %lld must lie in [%lld, %lld] "
               "(the query length and the key length)", x, y, z);
      break;
    case 5:
      snprintf(what, sizeof(what), "cast i64 -> i32: element %lld = %lld does not fit in i32",
               x, y);
      break;
    case 6:
      snprintf(what, sizeof(what), "adamw: step %lld must be >= 1 (it counts this update)", x);
      break;
    case 7: {
      uint32_t bits = (uint32_t)a;
      float m;
      memcpy(&m, &bits, sizeof(m));
      snprintf(what, sizeof(what), "sgd: nesterov needs momentum > 0 (got %g)", (double)m);
      break;
    }
    case 8: {
      uint32_t bits = (uint32_t)b;
      float beta1;
      memcpy(&beta1, &bits, sizeof(beta1));
      snprintf(what, sizeof(what), "adafactor: step %lld must be >= 1 and beta1 %g in [0, 1)", x,
               (double)beta1);
      break;
    }
    default:
      snprintf(what, sizeof(what), "unknown device error code %d", (int)flag[0]);
      break;
  }
  return ty_cu_error(TY_CODE_INVALID_ARGUMENT, "%s: node %u (%s): %s", e->device->label, node,
                     op, what);
}
