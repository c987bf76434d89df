/* cuda_attention_plan.c compiled into the C++ emulation harness (the plugin
 * builds the same file as C), so one toolchain links the harness. */
#include "backends/cuda/cuda_attention_plan.c"
