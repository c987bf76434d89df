/* What a failed cuda run says: the device data errors kernels record in
 * the error flag (decoded into INVALID_ARGUMENT naming the node), a failed
 * command's driver error, and the TRAINYARD_CUDA_FAULT test hook that makes
 * a chosen run fail the way a real fault would. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_executable.h"

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
  else if (!strcmp(kind, "copies-oom")) e->fault_kind = TY_CU_FAULT_COPIES_OOM;
  e->fault_run = run ? run : 1;
}

ty_abi_status_t ty_cu_cmd_error(const ty_abi_executable_t *e, const ty_cu_cmd_t *c,
                                       const char *what, CUresult r) {
  char text[320];
  snprintf(text, sizeof(text), "node %u (%s): %s of %s", c->node,
           e->core.graph->graph.nodes[c->node].op, what, c->name);
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
