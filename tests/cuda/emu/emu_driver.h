/* What the fake driver (emu_driver.cpp) asks of the scheduler. */
#ifndef TY_TESTS_CUDA_EMU_EMU_DRIVER_H_
#define TY_TESTS_CUDA_EMU_EMU_DRIVER_H_

#include <stddef.h>

#include "emu_runtime.h"

/* Runs kernel k over grid x block with `shared` bytes of dynamic shared
 * memory per block and its parameters in a CUDA parameter block or an
 * array of pointers; false with `why` when the shape is impossible or the
 * threads deadlock at divergent barriers. */
bool ty_emu_launch(const ty_emu_kernel *k, const unsigned grid[3], const unsigned block[3],
                   size_t shared, const unsigned char *block_params, void **array_params,
                   char *why, size_t cap);

/* TRAINYARD_CUDA_EMU_TRACE=1: every launch (and every cuBLASLt matmul, in
 * emu_blaslt.cpp) prints one `emu-trace:` line on stderr as it runs, so a
 * test or a developer can count a step's launches without a card. */
bool ty_emu_trace();

#endif /* TY_TESTS_CUDA_EMU_EMU_DRIVER_H_ */
