/* The CPU emulator's runtime as kernels and the fake driver see it: the
 * indices of the running thread and block, barriers and warp shuffles
 * (emu_sched.cpp), and the table of kernels by name that cuModuleGetFunction
 * searches (each kernel family's generated registration file adds its
 * kernels with TY_EMU_REGISTER). */
#ifndef TY_TESTS_CUDA_EMU_EMU_RUNTIME_H_
#define TY_TESTS_CUDA_EMU_EMU_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <utility>

struct ty_emu_dim3 {
  unsigned x, y, z;
};

struct ty_emu_thread_info {
  ty_emu_dim3 tid;
};

struct ty_emu_block_info {
  ty_emu_dim3 bid, bdim, gdim;
};

extern ty_emu_thread_info *ty_emu_cur_thread;
extern ty_emu_block_info ty_emu_cur_block;

inline const ty_emu_thread_info *ty_emu_current() { return ty_emu_cur_thread; }
inline const ty_emu_block_info *ty_emu_block() { return &ty_emu_cur_block; }

/* __syncthreads: waits until every thread of the block that has not
 * returned arrives. */
void ty_emu_sync_block();
/* A warp shuffle: every live lane of the warp offers `v` and gets the value
 * of lane pick(lane, arg). */
uint64_t ty_emu_shuffle(uint64_t v, int (*pick)(int lane, int arg), int arg);
[[noreturn]] void ty_emu_trap();
/* Aborts, naming the kernel, block and thread, when p is not a multiple of
 * `bytes` (a misaligned vector access, which faults on a GPU). */
void ty_emu_check_aligned(const void *p, size_t bytes);

/* A kernel: calls the function with its parameters unpacked from a CUDA
 * parameter block (each at its natural alignment, in order) or from an
 * array of pointers to each (cuLaunchKernel's two forms). */
struct ty_emu_kernel {
  const char *name;
  std::function<void(const unsigned char *block)> from_block;
  std::function<void(void **args)> from_array;
};

void ty_emu_register(const ty_emu_kernel &k);
/* NULL when no kernel has that name. */
const ty_emu_kernel *ty_emu_find(const char *name);

template <typename T> inline T ty_emu_load(const unsigned char *p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}

template <typename... A, size_t... I>
inline void ty_emu_call_block(void (*f)(A...), const unsigned char *p, const size_t *at,
                              std::index_sequence<I...>) {
  f(ty_emu_load<A>(p + at[I])...);
}

template <typename... A, size_t... I>
inline void ty_emu_call_array(void (*f)(A...), void **args, std::index_sequence<I...>) {
  f(ty_emu_load<A>((const unsigned char *)args[I])...);
}

template <typename... A> inline ty_emu_kernel ty_emu_bind(const char *name, void (*f)(A...)) {
  ty_emu_kernel k;
  k.name = name;
  k.from_block = [f](const unsigned char *p) {
    size_t at[sizeof...(A) + 1] = {0};
    size_t off = 0, i = 0;
    /* The CUDA ABI: each parameter at its own alignment, in order. */
    (void)std::initializer_list<int>{
        (off = (off + alignof(A) - 1) / alignof(A) * alignof(A), at[i++] = off,
         off += sizeof(A), 0)...};
    ty_emu_call_block(f, p, at, std::index_sequence_for<A...>{});
  };
  k.from_array = [f](void **args) { ty_emu_call_array(f, args, std::index_sequence_for<A...>{}); };
  return k;
}

struct ty_emu_registrar {
  template <typename... A> ty_emu_registrar(const char *name, void (*f)(A...)) {
    ty_emu_register(ty_emu_bind(name, f));
  }
};

#define TY_EMU_REGISTER(name) static ty_emu_registrar ty_emu_reg_##name(#name, name);

#endif /* TY_TESTS_CUDA_EMU_EMU_RUNTIME_H_ */
