/* The CPU emulation of the CUDA execution model (see cuda_emu.h). */
#include "cuda_emu.h"

#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include <algorithm>
#include <random>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define TY_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TY_EMU_ASAN 1
#endif
#endif
#ifdef TY_EMU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

ty_emu_dim3 ty_emu_thread_idx, ty_emu_block_idx, ty_emu_block_dim, ty_emu_grid_dim;

namespace {

constexpr size_t kStack = 512 * 1024;

/* Switching fibers: on x86-64 a few instructions that swap the callee-saved
 * registers and the stack pointer (glibc's swapcontext also saves the signal
 * mask, a system call per switch, which made the emulation mostly kernel
 * time); elsewhere ucontext. */
#if defined(__x86_64__)
extern "C" void ty_emu_switch(void **save_sp, void *load_sp);
__asm__(
    ".text\n"
    ".globl ty_emu_switch\n"
    ".type ty_emu_switch, @function\n"
    "ty_emu_switch:\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".size ty_emu_switch, .-ty_emu_switch\n");

struct Context {
  void *sp = nullptr;
};

/* A context that starts `entry` on [stack, stack + size) (entry never
 * returns). */
void context_make(Context *c, char *stack, size_t size, void (*entry)()) {
  uintptr_t *sp = (uintptr_t *)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
  *--sp = 0;                  /* entry's return address: as after a call */
  *--sp = (uintptr_t)entry;   /* where ty_emu_switch returns to */
  for (int i = 0; i < 6; ++i) *--sp = 0; /* rbp rbx r12 r13 r14 r15 */
  c->sp = sp;
}
void context_swap(Context *from, Context *to) { ty_emu_switch(&from->sp, to->sp); }
#else
struct Context {
  ucontext_t uc;
};
void context_make(Context *c, char *stack, size_t size, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = stack;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
void context_swap(Context *from, Context *to) { swapcontext(&from->uc, &to->uc); }
#endif

struct Copy {
  unsigned char *dst;
  const unsigned char *src;
  int bytes, src_bytes;
};

/* Shadow of one 4-byte word of dynamic shared memory. */
struct Shadow {
  int writer = -1;      /* thread of the last cp.async into the word */
  int issued = -1;      /* epoch it was issued in */
  int landed = -1;      /* epoch it was waited for; -1 while pending */
  int read_epoch = -1;  /* latest epoch the word was read in */
  int reader = -1;      /* who read it then (-2: several threads) */
};

struct Slot {
  uint32_t a[4], b[2];
  float c[4];
  const void *addr;
  float f;
};

struct Warp {
  int arrived = 0, expected = 32;
  unsigned gen = 0;
  Slot slots[2][32];
};

struct Fiber {
  Context ctx;
  char *stack = nullptr;
  bool done = false, waiting = false;
  int epoch = 0; /* block barriers passed */
  void *fake = nullptr; /* AddressSanitizer's fake stack while switched out */
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> committed;
};

struct Block {
  unsigned threads = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Context sched;
  int arrived = 0, expected = 0;
  unsigned gen = 0;
  int current = -1;
  unsigned char *smem = nullptr;
  size_t smem_bytes = 0;
  std::vector<Shadow> shadow;
  const std::function<void()> *kernel = nullptr;
  std::mt19937 rng;
#ifdef TY_EMU_ASAN
  void *fake_stack = nullptr;
#endif
};

Block *g_block = nullptr;
ty_emu_stats_t g_stats;
unsigned long long g_progress = 0; /* barriers passed, threads exited */
#ifdef TY_EMU_ASAN
const void *g_main_bottom = nullptr; /* the scheduler's stack */
size_t g_main_size = 0;
#endif

Fiber &self() { return g_block->fibers[g_block->current]; }
int self_id() { return g_block->current; }

[[noreturn]] void die(const char *what) {
  fprintf(stderr, "cuda_emu: %s (block %u,%u,%u thread %d)\n", what, ty_emu_block_idx.x,
          ty_emu_block_idx.y, ty_emu_block_idx.z, g_block ? g_block->current : -1);
  abort();
}

void yield() {
  Fiber &f = self();
#ifdef TY_EMU_ASAN
  __sanitizer_start_switch_fiber(&f.fake, g_main_bottom, g_main_size);
#endif
  context_swap(&f.ctx, &g_block->sched);
#ifdef TY_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake, nullptr, nullptr);
#endif
}

/* Waits for the rest of the warp; afterwards the previous generation's
 * slots hold every lane's operands. */
unsigned warp_barrier(Warp &w) {
  const unsigned gen = w.gen;
  if (++w.arrived == w.expected) {
    w.arrived = 0;
    w.gen++;
  } else {
    self().waiting = true;
    while (w.gen == gen) yield();
    self().waiting = false;
  }
  g_progress++;
  g_stats.collectives++;
  return gen;
}

Warp &my_warp() { return g_block->warps[self_id() / 32]; }
int my_lane() { return self_id() % 32; }

Shadow *shadow_of(const void *p) {
  const unsigned char *c = (const unsigned char *)p;
  if (c < g_block->smem || c >= g_block->smem + g_block->smem_bytes) return nullptr;
  return &g_block->shadow[(size_t)(c - g_block->smem) / 4];
}

void race(const char *what, const void *p, int other) {
  g_stats.races++;
  if (g_stats.races <= 20) {
    fprintf(stderr,
            "cuda_emu: RACE %s at shared byte %td (block %u,%u,%u thread %d epoch %d, other "
            "thread %d)\n",
            what, (const unsigned char *)p - g_block->smem, ty_emu_block_idx.x,
            ty_emu_block_idx.y, ty_emu_block_idx.z, self_id(), self().epoch, other);
  }
}

void note_read(const void *p, int bytes) {
  const int me = self_id(), epoch = self().epoch;
  for (int i = 0; i < bytes; i += 4) {
    Shadow *s = shadow_of((const unsigned char *)p + i);
    if (!s) continue;
    if (s->writer >= 0) {
      if (s->landed < 0) race("read of a word with a cp.async still pending", p, s->writer);
      else if (s->writer != me && s->landed >= epoch)
        race("read without a barrier after the writer's cp.async.wait", p, s->writer);
    }
    if (s->read_epoch < epoch) {
      s->read_epoch = epoch;
      s->reader = me;
    } else if (s->reader != me) {
      s->reader = -2;
    }
  }
}

void land(const Copy &c) {
  if (c.src_bytes > 0) memcpy(c.dst, c.src, (size_t)c.src_bytes);
  if (c.bytes > c.src_bytes) memset(c.dst + c.src_bytes, 0, (size_t)(c.bytes - c.src_bytes));
  const int epoch = self().epoch;
  for (int i = 0; i < c.bytes; i += 4) {
    Shadow *s = shadow_of(c.dst + i);
    if (s) s->landed = epoch;
  }
}

void retire_all(Fiber &f) {
  for (auto &g : f.committed)
    for (auto &c : g) land(c);
  f.committed.clear();
  for (auto &c : f.open) land(c);
  f.open.clear();
}

void trampoline() {
#ifdef TY_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_main_bottom, &g_main_size);
#endif
  (*g_block->kernel)();
  Fiber &f = self();
  size_t pending = f.open.size();
  for (auto &g : f.committed) pending += g.size();
  if (pending) {
    fprintf(stderr, "cuda_emu: thread %d exits with cp.async copies never waited for\n",
            self_id());
    retire_all(f);
  }
  f.done = true;
  g_progress++;
  /* An exited thread no longer counts at barriers. */
  Block &b = *g_block;
  b.expected--;
  if (b.arrived > 0 && b.arrived == b.expected) {
    b.arrived = 0;
    b.gen++;
  }
  Warp &w = my_warp();
  w.expected--;
  if (w.arrived > 0 && w.arrived == w.expected) {
    w.arrived = 0;
    w.gen++;
  }
#ifdef TY_EMU_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_main_bottom, g_main_size);
#endif
  Context dead; /* never resumed */
  context_swap(&dead, &b.sched);
}

void run_block(Block &b) {
  const unsigned n = b.threads;
  b.fibers.assign(n, Fiber());
  b.warps.assign((n + 31) / 32, Warp());
  for (unsigned w = 0; w < b.warps.size(); ++w) {
    b.warps[w].expected = (int)(n - 32 * w < 32 ? n - 32 * w : 32);
  }
  b.arrived = 0;
  b.expected = (int)n;
  b.shadow.assign((b.smem_bytes + 3) / 4, Shadow());
  for (unsigned t = 0; t < n; ++t) {
    Fiber &f = b.fibers[t];
    f.stack = (char *)malloc(kStack);
    if (!f.stack) die("out of memory");
    context_make(&f.ctx, f.stack, kStack, trampoline);
  }
  std::vector<unsigned> order(n);
  for (unsigned t = 0; t < n; ++t) order[t] = t;
  for (;;) {
    std::shuffle(order.begin(), order.end(), b.rng);
    bool any = false;
    const unsigned long long before = g_progress;
    for (unsigned t : order) {
      Fiber &f = b.fibers[t];
      if (f.done) continue;
      any = true;
      b.current = (int)t;
      ty_emu_thread_idx = {t, 0, 0};
#ifdef TY_EMU_ASAN
      __sanitizer_start_switch_fiber(&b.fake_stack, f.stack, kStack);
#endif
      context_swap(&b.sched, &f.ctx);
#ifdef TY_EMU_ASAN
      __sanitizer_finish_switch_fiber(b.fake_stack, nullptr, nullptr);
#endif
    }
    if (!any) break;
    /* A whole pass in which nobody passed a barrier: some thread skipped one. */
    if (g_progress == before) die("deadlock: every live thread waits at a barrier");
  }
  for (auto &f : b.fibers) free(f.stack);
  b.current = -1;
}

} // namespace

unsigned char *ty_emu_dyn_smem() { return g_block->smem; }

void __syncthreads() {
  Block &b = *g_block;
  Fiber &f = self();
  const unsigned gen = b.gen;
  if (++b.arrived == b.expected) {
    b.arrived = 0;
    b.gen++;
  } else {
    f.waiting = true;
    while (b.gen == gen) yield();
    f.waiting = false;
  }
  g_progress++;
  f.epoch++;
  g_stats.barriers++;
  if (b.rng() % 4 == 0) yield(); /* let others go first now and then */
}

float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  if (mask != 0xffffffffu) die("__shfl_xor_sync with a partial mask");
  Warp &w = my_warp();
  const int lane = my_lane();
  w.slots[w.gen & 1][lane].f = v;
  const unsigned gen = warp_barrier(w);
  return w.slots[gen & 1][lane ^ lane_mask].f;
}

void ty_emu_note_read(const void *p, int bytes) { note_read(p, bytes); }

void ty_emu_ldsm_x4(uint32_t r[4], const void *row_addr, bool trans) {
  Warp &w = my_warp();
  const int lane = my_lane();
  if ((uintptr_t)row_addr % 16) die("ldmatrix row address not 16-byte aligned");
  if (!shadow_of(row_addr) || !shadow_of((const char *)row_addr + 15))
    die("ldmatrix row address outside dynamic shared memory");
  note_read(row_addr, 16);
  w.slots[w.gen & 1][lane].addr = row_addr;
  const unsigned gen = warp_barrier(w);
  const Slot *s = w.slots[gen & 1];
  g_stats.ldmatrix++;
  if (lane == 0) {
    /* Bank conflicts: each matrix's eight 16-byte rows should cover the
     * eight 16-byte bank groups once. */
    for (int m = 0; m < 4; ++m) {
      unsigned seen = 0;
      bool conflict = false;
      for (int i = 0; i < 8; ++i) {
        const unsigned grp = (unsigned)(((uintptr_t)s[m * 8 + i].addr / 16) % 8);
        if (seen & (1u << grp)) conflict = true;
        seen |= 1u << grp;
      }
      if (conflict) g_stats.ldmatrix_conflicted++;
    }
  }
  const int g = lane >> 2, t = lane & 3;
  for (int m = 0; m < 4; ++m) {
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t *row = (const uint16_t *)s[m * 8 + g].addr;
      lo = row[2 * t];
      hi = row[2 * t + 1];
    } else {
      lo = ((const uint16_t *)s[m * 8 + 2 * t].addr)[g];
      hi = ((const uint16_t *)s[m * 8 + 2 * t + 1].addr)[g];
    }
    r[m] = (uint32_t)lo | ((uint32_t)hi << 16);
  }
}

static float half_bits(uint16_t h, bool bf16) {
  if (bf16) return __uint_as_float((uint32_t)h << 16);
  return __half2float(__ushort_as_half(h));
}

void ty_emu_mma16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool bf16) {
  Warp &w = my_warp();
  const int lane = my_lane();
  Slot &mine = w.slots[w.gen & 1][lane];
  memcpy(mine.a, a, sizeof(mine.a));
  mine.b[0] = b0;
  mine.b[1] = b1;
  memcpy(mine.c, d, sizeof(mine.c));
  const unsigned gen = warp_barrier(w);
  const Slot *s = w.slots[gen & 1];
  /* Rebuild A (16x16), B (16x8, k x n) and C from the documented layouts. */
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int i = 0; i < 4; ++i) {
      A[ar[i]][ac[i]] = half_bits((uint16_t)(s[l].a[i] & 0xffffu), bf16);
      A[ar[i]][ac[i] + 1] = half_bits((uint16_t)(s[l].a[i] >> 16), bf16);
    }
    for (int i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = half_bits((uint16_t)(s[l].b[i] & 0xffffu), bf16);
      B[2 * t + 8 * i + 1][g] = half_bits((uint16_t)(s[l].b[i] >> 16), bf16);
    }
    C[g][2 * t] = s[l].c[0];
    C[g][2 * t + 1] = s[l].c[1];
    C[g + 8][2 * t] = s[l].c[2];
    C[g + 8][2 * t + 1] = s[l].c[3];
  }
  const int g = lane >> 2, t = lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; ++i) {
    float acc = C[rows[i]][cols[i]];
    for (int kk = 0; kk < 16; ++kk) acc += A[rows[i]][kk] * B[kk][cols[i]];
    d[i] = acc;
  }
}

void ty_emu_cp_async(void *smem, const void *gmem, int bytes, int src_bytes) {
  if ((uintptr_t)smem % (uintptr_t)bytes || (src_bytes > 0 && (uintptr_t)gmem % (uintptr_t)bytes))
    die("cp.async address not aligned to its size");
  if (src_bytes != 0 && src_bytes != bytes) die("cp.async src_bytes is neither 0 nor the size");
  if (!shadow_of(smem) || !shadow_of((char *)smem + bytes - 1))
    die("cp.async destination outside dynamic shared memory");
  const int me = self_id(), epoch = self().epoch;
  for (int i = 0; i < bytes; i += 4) {
    Shadow *s = shadow_of((char *)smem + i);
    if (s->writer >= 0 && s->landed < 0) {
      race("cp.async onto a word with a copy still pending", smem, s->writer);
    }
    if (s->read_epoch >= epoch && s->reader != me)
      race("cp.async issued in the epoch another thread reads the word", smem, s->reader);
    s->writer = me;
    s->issued = epoch;
    s->landed = -1;
  }
  g_stats.cp_async++;
  self().open.push_back({(unsigned char *)smem, (const unsigned char *)gmem, bytes, src_bytes});
}

void ty_emu_cp_commit() {
  Fiber &f = self();
  f.committed.push_back(std::move(f.open));
  f.open.clear();
}

void ty_emu_cp_wait(int n) {
  Fiber &f = self();
  while ((int)f.committed.size() > n) {
    for (auto &c : f.committed.front()) land(c);
    f.committed.erase(f.committed.begin());
  }
}

void ty_emu_launch(ty_emu_dim3 grid, unsigned threads, size_t smem_bytes, unsigned seed,
                   const std::function<void()> &kernel) {
  Block b;
  b.threads = threads;
  b.kernel = &kernel;
  b.rng.seed(seed);
  ty_emu_grid_dim = grid;
  ty_emu_block_dim = {threads, 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        ty_emu_block_idx = {x, y, z};
        b.smem_bytes = smem_bytes;
        b.smem = (unsigned char *)malloc(smem_bytes ? smem_bytes : 1);
        if (!b.smem) die("out of memory");
        /* Garbage, as a GPU's shared memory holds: reads of unwritten
         * words show up as wrong results. */
        for (size_t i = 0; i < smem_bytes; ++i) b.smem[i] = (unsigned char)(b.rng() | 0x7f);
        g_block = &b;
        run_block(b);
        g_block = nullptr;
        free(b.smem);
        g_stats.blocks++;
      }
}

ty_emu_stats_t ty_emu_stats() { return g_stats; }
void ty_emu_reset_stats() { g_stats = ty_emu_stats_t(); }
