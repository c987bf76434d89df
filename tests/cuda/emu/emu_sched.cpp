/* The CPU emulator's scheduler: a launch runs its blocks one after another,
 * and a block's threads as coroutines on the calling OS thread. A thread
 * runs until it reaches a barrier (__syncthreads, or the two warp barriers
 * around a shuffle) or returns; when every live thread of the block (of the
 * warp) waits at the block (warp) barrier, they are released. Threads that
 * diverge around a barrier deadlock, as they may on a GPU: the launch then
 * fails with the reason.
 *
 * A coroutine switch is a few instructions of our own (ty_emu_switch
 * below) on x86-64 and AArch64, not ucontext's swapcontext: glibc's saves
 * and restores the signal mask with a system call on every switch, and
 * every emulated thread switches at least twice, so the emulated cuda tests
 * spent most of their time in the kernel. Other architectures keep
 * ucontext. Under AddressSanitizer each switch tells ASan the stack it moves
 * to (__sanitizer_start/finish_switch_fiber), as its swapcontext
 * interceptor did. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "emu_driver.h"
#include "emu_runtime.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TY_EMU_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define TY_EMU_ASAN 1
#endif
#ifdef TY_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) || defined(__aarch64__)
#define TY_EMU_OWN_SWITCH 1
/* ty_emu_switch(save, to): stores the stack pointer of the running
 * coroutine in *save, after pushing its callee-saved registers, and resumes
 * the one whose saved stack pointer is `to`. Only the registers the C ABI
 * says a call preserves are saved; the caller assumes the rest clobbered,
 * as for any call. The floating-point control words are not switched: no
 * kernel changes them. */
extern "C" void ty_emu_switch(void **save, void *to);
#if defined(__x86_64__)
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden ty_emu_switch\n"
        ".globl ty_emu_switch\n"
        ".type ty_emu_switch,@function\n"
        "ty_emu_switch:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size ty_emu_switch, .-ty_emu_switch\n"
        ".section .note.GNU-stack,\"\",@progbits\n"
        ".text\n");
/* The six registers ty_emu_switch pops, then the address its `ret` jumps
 * to, then a null return address for that function (which never returns),
 * so it starts with the stack aligned as after a call. */
enum { kFrameWords = 8, kEntrySlot = 6 };
#else
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden ty_emu_switch\n"
        ".globl ty_emu_switch\n"
        ".type ty_emu_switch,%function\n"
        "ty_emu_switch:\n"
        "  sub sp, sp, #160\n"
        "  stp x19, x20, [sp, #0]\n"
        "  stp x21, x22, [sp, #16]\n"
        "  stp x23, x24, [sp, #32]\n"
        "  stp x25, x26, [sp, #48]\n"
        "  stp x27, x28, [sp, #64]\n"
        "  stp x29, x30, [sp, #80]\n"
        "  stp d8, d9, [sp, #96]\n"
        "  stp d10, d11, [sp, #112]\n"
        "  stp d12, d13, [sp, #128]\n"
        "  stp d14, d15, [sp, #144]\n"
        "  mov x9, sp\n"
        "  str x9, [x0]\n"
        "  mov sp, x1\n"
        "  ldp x19, x20, [sp, #0]\n"
        "  ldp x21, x22, [sp, #16]\n"
        "  ldp x23, x24, [sp, #32]\n"
        "  ldp x25, x26, [sp, #48]\n"
        "  ldp x27, x28, [sp, #64]\n"
        "  ldp x29, x30, [sp, #80]\n"
        "  ldp d8, d9, [sp, #96]\n"
        "  ldp d10, d11, [sp, #112]\n"
        "  ldp d12, d13, [sp, #128]\n"
        "  ldp d14, d15, [sp, #144]\n"
        "  add sp, sp, #160\n"
        "  ret\n"
        ".size ty_emu_switch, .-ty_emu_switch\n"
        ".section .note.GNU-stack,\"\",%progbits\n"
        ".text\n");
/* The 160-byte frame ty_emu_switch loads; x30 (word 11) is where its `ret`
 * jumps, x29 (word 10) a null frame pointer. */
enum { kFrameWords = 20, kEntrySlot = 11 };
#endif
#else
#include <ucontext.h>
#endif

ty_emu_thread_info *ty_emu_cur_thread;
ty_emu_block_info ty_emu_cur_block;

namespace {

enum class State { kRun, kAtBlock, kAtWarp, kDone };

struct Thread {
#ifdef TY_EMU_OWN_SWITCH
  void *sp; /* saved by ty_emu_switch while the thread waits */
#else
  ucontext_t ctx;
#endif
  void *fake_stack; /* ASan's, while the thread waits */
  ty_emu_thread_info info;
  int warp, lane;
  State state;
  /* cp.async copies issued and not yet landed: the open group, then the
   * committed ones, oldest first. */
  struct Copy {
    void *dst;
    const void *src;
    int bytes, src_bytes;
  };
  std::vector<Copy> open;
  std::deque<std::vector<Copy>> groups;
};

struct Launch {
  const ty_emu_kernel *kernel;
  const unsigned char *block_params;
  void **array_params;
#ifdef TY_EMU_OWN_SWITCH
  void *sched_sp;
#else
  ucontext_t sched;
#endif
  const void *sched_bottom; /* the scheduler's stack, for ASan */
  size_t sched_size;
  std::vector<Thread> threads;
  std::vector<uint64_t> slots; /* a value per lane, for shuffles */
  std::vector<unsigned char> gather; /* kGather bytes per lane: ldmatrix, mma.sync */
  std::vector<unsigned char> dyn; /* the block's dynamic shared memory */
};

Launch *g_launch;
Thread *g_cur;

/* Bytes a lane offers to a warp-wide gather (mma.sync: a, b, c = 10 words). */
constexpr size_t kGather = 48;

/* Stacks of the coroutines, reserved once and reused: pages a thread never
 * touches are never backed. */
constexpr size_t kStack = 256 * 1024;
char *g_stacks;
size_t g_stack_count;

bool reserve_stacks(size_t n) {
  if (n <= g_stack_count) return true;
  if (g_stacks) munmap(g_stacks, g_stack_count * kStack);
  void *p = mmap(nullptr, n * kStack, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    g_stacks = nullptr;
    g_stack_count = 0;
    return false;
  }
  g_stacks = (char *)p;
  g_stack_count = n;
  return true;
}

char *stack_of(const Launch *l, const Thread *t) {
  return g_stacks + (size_t)(t - l->threads.data()) * kStack;
}

#ifdef TY_EMU_OWN_SWITCH
/* From a thread to the scheduler; `done`: the thread has returned and is
 * never resumed (ASan then drops its fake stack). */
void to_scheduler(Thread *t, bool done) {
  Launch *l = g_launch;
#ifdef TY_EMU_ASAN
  __sanitizer_start_switch_fiber(done ? nullptr : &t->fake_stack, l->sched_bottom,
                                 l->sched_size);
#else
  (void)done;
#endif
  ty_emu_switch(&t->sp, l->sched_sp);
#ifdef TY_EMU_ASAN
  __sanitizer_finish_switch_fiber(t->fake_stack, &l->sched_bottom, &l->sched_size);
#endif
}

[[noreturn]] void thread_entry() {
  Launch *l = g_launch;
#ifdef TY_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &l->sched_bottom, &l->sched_size);
#endif
  if (l->block_params) l->kernel->from_block(l->block_params);
  else l->kernel->from_array(l->array_params);
  g_cur->state = State::kDone;
  to_scheduler(g_cur, true);
  __builtin_trap(); /* a finished thread is never resumed */
}

/* A new thread's stack: the frame ty_emu_switch pops, returning into
 * thread_entry. */
void prepare(Launch *l, Thread *t) {
  void **frame = (void **)(stack_of(l, t) + kStack) - kFrameWords;
  memset(frame, 0, kFrameWords * sizeof(void *));
  frame[kEntrySlot] = (void *)&thread_entry;
  t->sp = frame;
}

void resume(Launch *l, Thread *t) {
#ifdef TY_EMU_ASAN
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, stack_of(l, t), kStack);
#endif
  ty_emu_switch(&l->sched_sp, t->sp);
#ifdef TY_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}
#else
void thread_entry() {
  Launch *l = g_launch;
  if (l->block_params) l->kernel->from_block(l->block_params);
  else l->kernel->from_array(l->array_params);
  g_cur->state = State::kDone; /* uc_link returns to the scheduler */
}

void to_scheduler(Thread *t, bool) { swapcontext(&t->ctx, &g_launch->sched); }

void prepare(Launch *l, Thread *t) {
  getcontext(&t->ctx);
  t->ctx.uc_stack.ss_sp = stack_of(l, t);
  t->ctx.uc_stack.ss_size = kStack;
  t->ctx.uc_link = &l->sched;
  makecontext(&t->ctx, thread_entry, 0);
}

void resume(Launch *l, Thread *t) { swapcontext(&l->sched, &t->ctx); }
#endif

void wait_at(State s) {
  Thread *t = g_cur;
  t->state = s;
  to_scheduler(t, false);
}

std::map<std::string, ty_emu_kernel> &registry() {
  static std::map<std::string, ty_emu_kernel> kernels;
  return kernels;
}

}  // namespace

void ty_emu_sync_block() { wait_at(State::kAtBlock); }

uint64_t ty_emu_shuffle(uint64_t v, int (*pick)(int lane, int arg), int arg) {
  Thread *t = g_cur;
  std::vector<uint64_t> &slots = g_launch->slots;
  const size_t base = (size_t)t->warp * 32;
  slots[base + t->lane] = v;
  wait_at(State::kAtWarp); /* every lane has offered its value */
  const size_t from = base + (size_t)pick(t->lane, arg);
  const uint64_t r = from < g_launch->threads.size() ? slots[from] : v;
  wait_at(State::kAtWarp); /* every lane has read before any writes again */
  return r;
}

namespace {

/* Every lane of the calling thread's warp offers `bytes` (<= kGather) at
 * `mine`; afterwards all[l * bytes ...] holds lane l's, for the 32 lanes
 * (a warp collective: the lanes meet twice, as in ty_emu_shuffle). */
void warp_gather(const void *mine, size_t bytes, unsigned char *all) {
  Thread *t = g_cur;
  unsigned char *base = g_launch->gather.data() + (size_t)t->warp * 32 * kGather;
  memcpy(base + (size_t)t->lane * kGather, mine, bytes);
  wait_at(State::kAtWarp);
  for (int l = 0; l < 32; ++l) memcpy(all + (size_t)l * bytes, base + (size_t)l * kGather, bytes);
  wait_at(State::kAtWarp);
}

float b16_bits(uint16_t h, bool bf16) {
  if (bf16) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  /* IEEE half: sign, 5 exponent bits (bias 15), 10 mantissa bits */
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  if (e == 0) return sign * ldexpf((float)m, -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * ldexpf((float)(m | 0x400), e - 25);
}

}  // namespace

/* ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 (kernels/warp_mma.cuh):
 * lane l gives the address of row l % 8 of matrix l / 8; lane 4g + t gets,
 * of each matrix m, elements (g, 2t) and (g, 2t + 1), or with .trans
 * (2t, g) and (2t + 1, g), as the PTX ISA lays the fragments out. */
void ty_emu_ldsm_x4(uint32_t r[4], const void *row_addr, bool trans) {
  Launch *l = g_launch;
  const unsigned char *lo = l->dyn.data(), *hi = lo + l->dyn.size();
  const unsigned char *a = (const unsigned char *)row_addr;
  if ((uintptr_t)a % 16 || a < lo || a + 16 > hi) {
    fprintf(stderr, "cuda emulator: kernel %s: ldmatrix row address %p is not 16-byte aligned "
            "inside the block's dynamic shared memory\n", l->kernel->name, row_addr);
    abort();
  }
  const void *rows[32];
  warp_gather(&row_addr, sizeof(row_addr), (unsigned char *)rows);
  const int g = g_cur->lane >> 2, t = g_cur->lane & 3;
  for (int m = 0; m < 4; ++m) {
    uint16_t e0, e1;
    if (!trans) {
      const uint16_t *row = (const uint16_t *)rows[m * 8 + g];
      e0 = row[2 * t];
      e1 = row[2 * t + 1];
    } else {
      e0 = ((const uint16_t *)rows[m * 8 + 2 * t])[g];
      e1 = ((const uint16_t *)rows[m * 8 + 2 * t + 1])[g];
    }
    r[m] = (uint32_t)e0 | ((uint32_t)e1 << 16);
  }
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: D = A B + C with the
 * PTX ISA's fragments (lane 4g + t): a[0..3] hold A (g, 2t..), (g + 8,
 * 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); b0, b1 hold B (2t.., g), (2t +
 * 8.., g); c/d hold (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
 * The products are summed in f32 in k order (a GPU's order inside the
 * tensor core is its own: results agree to rounding). */
void ty_emu_mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool bf16) {
  uint32_t mine[10];
  memcpy(mine, a, 16);
  mine[4] = b0;
  mine[5] = b1;
  memcpy(mine + 6, d, 16);
  uint32_t all[32][10];
  warp_gather(mine, sizeof(mine), (unsigned char *)all);
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int i = 0; i < 4; ++i) {
      A[ar[i]][ac[i]] = b16_bits((uint16_t)(all[l][i] & 0xffffu), bf16);
      A[ar[i]][ac[i] + 1] = b16_bits((uint16_t)(all[l][i] >> 16), bf16);
    }
    for (int i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = b16_bits((uint16_t)(all[l][4 + i] & 0xffffu), bf16);
      B[2 * t + 8 * i + 1][g] = b16_bits((uint16_t)(all[l][4 + i] >> 16), bf16);
    }
    float c[4];
    memcpy(c, all[l] + 6, 16);
    C[g][2 * t] = c[0];
    C[g][2 * t + 1] = c[1];
    C[g + 8][2 * t] = c[2];
    C[g + 8][2 * t + 1] = c[3];
  }
  const int g = g_cur->lane >> 2, t = g_cur->lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) {
    float acc = C[rows[i]][cols[i]];
    for (int k = 0; k < 16; ++k) acc += A[rows[i]][k] * B[k][cols[i]];
    d[i] = acc;
  }
}

void ty_emu_trap() {
  fprintf(stderr, "cuda emulator: a kernel executed __trap()\n");
  abort();
}

void ty_emu_check_aligned(const void *p, size_t bytes) {
  if ((uintptr_t)p % bytes == 0) return;
  const ty_emu_dim3 b = ty_emu_cur_block.bid, t = g_cur->info.tid;
  fprintf(stderr,
          "cuda emulator: kernel %s, block (%u, %u, %u), thread (%u, %u, %u): a %zu-byte "
          "vector access at %p is misaligned (a fault on a GPU)\n",
          g_launch->kernel->name, b.x, b.y, b.z, t.x, t.y, t.z, bytes, p);
  abort();
}

unsigned char *ty_emu_dyn_smem() { return g_launch->dyn.data(); }

/* cp.async: the copy is queued on the issuing thread and lands (src_bytes
 * copied, the rest zero-filled) when a wait retires its group. */
void ty_emu_cp_async(void *smem, const void *gmem, int bytes, int src_bytes) {
  Launch *l = g_launch;
  const unsigned char *lo = l->dyn.data(), *hi = lo + l->dyn.size(), *d = (unsigned char *)smem;
  if ((uintptr_t)smem % (unsigned)bytes || (src_bytes && (uintptr_t)gmem % (unsigned)bytes) ||
      src_bytes < 0 || src_bytes > bytes) {
    fprintf(stderr, "cuda emulator: kernel %s: cp.async of %d bytes (%d from the source) at "
            "%p <- %p: misaligned or bad size\n", l->kernel->name, bytes, src_bytes, smem, gmem);
    abort();
  }
  if (!(d >= lo && d + bytes <= hi)) {
    /* Static shared memory is a function-local static here: allowed, but
     * the kernels using cp.async stage into dynamic shared memory. */
    fprintf(stderr, "cuda emulator: kernel %s: cp.async destination %p is outside the "
            "block's %zu bytes of dynamic shared memory\n", l->kernel->name, smem,
            l->dyn.size());
    abort();
  }
  g_cur->open.push_back({smem, gmem, bytes, src_bytes});
}

void ty_emu_cp_commit() {
  g_cur->groups.push_back(std::move(g_cur->open));
  g_cur->open.clear();
}

void ty_emu_cp_wait(int n) {
  Thread *t = g_cur;
  while ((int)t->groups.size() > n) {
    for (const Thread::Copy &c : t->groups.front()) {
      if (c.src_bytes) memcpy(c.dst, c.src, (size_t)c.src_bytes);
      memset((unsigned char *)c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
    }
    t->groups.pop_front();
  }
}

void ty_emu_register(const ty_emu_kernel &k) { registry()[k.name] = k; }

const ty_emu_kernel *ty_emu_find(const char *name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

/* TRAINYARD_CUDA_EMU_ORDER=reverse runs a block's threads (between
 * barriers) and a grid's blocks from the last to the first: a kernel that
 * reads what another thread writes without a barrier in between, or what
 * another block writes in the same launch, then sees different data, as it
 * may on a GPU. */
static bool reverse_order() {
  static const int reverse = [] {
    const char *env = getenv("TRAINYARD_CUDA_EMU_ORDER");
    return env && strcmp(env, "reverse") == 0 ? 1 : 0;
  }();
  return reverse != 0;
}

/* TRAINYARD_CUDA_EMU_ORDER=scatter runs a grid's blocks in a scattered
 * order (a stride coprime to the block count): blocks of one row far
 * apart, as a GPU may run them, for kernels whose blocks meet through
 * counters in memory (the last one of a group finishing the group's work). */
static bool scatter_order() {
  static const int scatter = [] {
    const char *env = getenv("TRAINYARD_CUDA_EMU_ORDER");
    return env && strcmp(env, "scatter") == 0 ? 1 : 0;
  }();
  return scatter != 0;
}

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
  while (b) {
    const uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Runs the threads of the current block to completion; false with `why`
 * on a deadlock. */
static bool run_block(Launch *l, char *why, size_t cap) {
  const size_t n = l->threads.size();
  const size_t warps = (n + 31) / 32;
  for (size_t i = 0; i < n; ++i) {
    Thread &t = l->threads[i];
    t.state = State::kRun;
    t.open.clear(); /* copies a returned thread never waited for are dropped */
    t.groups.clear();
    prepare(l, &t);
  }
  std::vector<size_t> live(warps), waiting(warps);
  for (;;) {
    for (size_t k = 0; k < n; ++k) {
      Thread &t = l->threads[reverse_order() ? n - 1 - k : k];
      if (t.state != State::kRun) continue;
      g_cur = &t;
      ty_emu_cur_thread = &t.info;
      resume(l, &t);
    }
    size_t done = 0, at_block = 0;
    for (size_t w = 0; w < warps; ++w) live[w] = waiting[w] = 0;
    for (size_t i = 0; i < n; ++i) {
      const Thread &t = l->threads[i];
      if (t.state == State::kDone) {
        ++done;
        continue;
      }
      ++live[t.warp];
      if (t.state == State::kAtWarp) ++waiting[t.warp];
      if (t.state == State::kAtBlock) ++at_block;
    }
    if (done == n) return true;
    bool released = false;
    for (size_t i = 0; i < n; ++i) {
      Thread &t = l->threads[i];
      if (t.state == State::kAtWarp && waiting[t.warp] == live[t.warp]) {
        t.state = State::kRun;
        released = true;
      }
    }
    if (!released && at_block == n - done) {
      for (Thread &t : l->threads) {
        if (t.state == State::kAtBlock) t.state = State::kRun;
      }
      released = true;
    }
    if (!released) {
      snprintf(why, cap,
               "kernel %s, block (%u, %u, %u): threads wait at different barriers (%zu at "
               "__syncthreads, %zu returned, the rest at a warp shuffle): a divergent "
               "barrier",
               l->kernel->name, ty_emu_cur_block.bid.x, ty_emu_cur_block.bid.y,
               ty_emu_cur_block.bid.z, at_block, done);
      return false;
    }
  }
}

bool ty_emu_trace() {
  static const bool on = [] {
    const char *e = getenv("TRAINYARD_CUDA_EMU_TRACE");
    return e && *e && strcmp(e, "0") != 0;
  }();
  return on;
}

bool ty_emu_launch(const ty_emu_kernel *k, const unsigned grid[3], const unsigned block[3],
                   size_t shared, const unsigned char *block_params, void **array_params,
                   char *why, size_t cap) {
  const size_t n = (size_t)block[0] * block[1] * block[2];
  if (n == 0 || n > 1024 || !grid[0] || !grid[1] || !grid[2]) {
    snprintf(why, cap, "kernel %s: launch of %u x %u x %u blocks of %u x %u x %u threads",
             k->name, grid[0], grid[1], grid[2], block[0], block[1], block[2]);
    return false;
  }
  if (!reserve_stacks(n)) {
    snprintf(why, cap, "kernel %s: no memory for %zu thread stacks", k->name, n);
    return false;
  }
  if (ty_emu_trace()) {
    fprintf(stderr, "emu-trace: kernel %s grid %u x %u x %u block %u\n", k->name, grid[0],
            grid[1], grid[2], (unsigned)n);
  }
  Launch l;
  l.kernel = k;
  l.block_params = block_params;
  l.array_params = array_params;
  l.sched_bottom = nullptr;
  l.sched_size = 0;
  l.threads.resize(n);
  l.slots.assign(((n + 31) / 32) * 32, 0);
  l.gather.assign(((n + 31) / 32) * 32 * kGather, 0);
  for (size_t i = 0; i < n; ++i) {
    Thread &t = l.threads[i];
    t.info.tid.x = (unsigned)(i % block[0]);
    t.info.tid.y = (unsigned)(i / block[0] % block[1]);
    t.info.tid.z = (unsigned)(i / ((size_t)block[0] * block[1]));
    t.warp = (int)(i / 32);
    t.lane = (int)(i % 32);
  }
  Launch *outer = g_launch;
  g_launch = &l;
  ty_emu_cur_block.bdim = {block[0], block[1], block[2]};
  ty_emu_cur_block.gdim = {grid[0], grid[1], grid[2]};
  bool ok = true;
  const uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
  uint64_t stride = 1;
  if (scatter_order() && blocks > 2) {
    stride = blocks / 2 + 1;
    while (gcd_u64(stride, blocks) != 1) ++stride;
  }
  for (uint64_t q = 0; q < blocks && ok; ++q) {
    const uint64_t b = reverse_order()   ? blocks - 1 - q
                       : stride > 1 ? (q * stride + blocks / 3) % blocks
                                    : q;
    ty_emu_cur_block.bid = {(unsigned)(b % grid[0]), (unsigned)(b / grid[0] % grid[1]),
                            (unsigned)(b / ((uint64_t)grid[0] * grid[1]))};
    l.dyn.assign(shared, 0xA5); /* stale bytes, never zeros a kernel might rely on */
    ok = run_block(&l, why, cap);
  }
#ifdef TY_EMU_ASAN
  /* The deadlocked threads never return: their frames' redzones would stay
   * poisoned on stacks the next launch reuses. */
  if (!ok) ASAN_UNPOISON_MEMORY_REGION(g_stacks, n * kStack);
#endif
  g_launch = outer;
  return ok;
}
