/* Fault injection for the cuda backend's tests (TRAINYARD_CUDA_FAULT in
 * cuda_errors.c): kernels that fail the way real bugs do, so the error paths
 * — a sticky illegal-address fault, a device-side trap — can be exercised
 * on purpose. Never launched otherwise, and never embedded in the plugin:
 * a test-only family (cuda_families.def), built into the build folder's
 * tests/cuda-fatbin-test/test.fatbin, which tests load through
 * TRAINYARD_CUDA_FATBIN_DIR. */
#include "common.cuh"

/* Writes through `wild`, an address no allocation has. */
extern "C" __global__ void ty_test_wild_write(float *wild) {
  ty_pdl_enter();
  if (threadIdx.x == 0) wild[0] = 1.0f;
}

/* A device-side trap, as a failed device assert would raise. */
extern "C" __global__ void ty_test_trap(float *unused) {
  ty_pdl_enter();
  (void)unused;
  if (threadIdx.x == 0) __trap();
}
