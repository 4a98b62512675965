// The fiber scheduler behind simt_emu.h. One block at a time: its threads are ucontext
// fibers with their own stacks, resumed round-robin by the scheduler; a fiber runs until
// it must wait for a barrier (it then yields) or its kernel returns. A round in which no
// fiber arrives at a barrier or returns is a deadlock and aborts.
// Switches: a fiber is entered the first time with setcontext, and from then on the
// scheduler and the fibers switch with _setjmp/_longjmp, which save and restore only the
// registers a call preserves. swapcontext would also save and restore the signal mask (a
// system call each way) and the floating-point environment, which kernels never change:
// it took most of an emulated test's time (a warp shuffle is two switches per lane).
// Under AddressSanitizer every switch is announced (__sanitizer_*_switch_fiber) so that
// ASan follows the stacks, as QEMU's coroutines do around their own sigsetjmp switches.
// There the jump is glibc's own _longjmp, not ASan's interceptor of it: the interceptor
// treats every jump as an unwind, and clears the poison of the stack it leaves (a
// sigaltstack system call and a shadow memset each time): cuda_emu_graph_test took 441 s
// under ASan with it, 59 s without. A switch unwinds nothing; a finished fiber clears its
// own frames.
// (_longjmp between stacks: the fortified __longjmp_chk would take a jump to another stack
// for stack corruption.)
#undef _FORTIFY_SOURCE
#include "kernels/cuda/emu/simt_emu.h"

#include <setjmp.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <dlfcn.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define QRUN_EMU_ASAN 1
#endif

namespace qrun::simt::emu {
namespace {

// Kernels keep small frames; ASan's frames are larger.
#if defined(QRUN_EMU_ASAN)
constexpr size_t kStackBytes = 256 * 1024;
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif
constexpr int kMaxBlockThreads = 1024;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "SIMT emulator: %s\n", what);
  std::abort();
}

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
  const char* file = nullptr;  // call site of the first arrival (block barriers)
  int line = 0;
};

struct Fiber {
  ucontext_t context{};  // its entry
  jmp_buf resume;        // where it yielded
  bool started = false;
  char* stack = nullptr;  // (fiber_stacks)
  LaunchIds ids{};
  int linear = 0;
  bool done = false;
  bool waited = false;  // called wait_for_prior_kernels()
#if defined(QRUN_EMU_ASAN)
  void* fake_stack = nullptr;
#endif
};

struct Warp {
  Barrier barrier;
  alignas(8) unsigned char slots[kWarpSize][8];
};

// The state of the block being run, per OS thread.
struct BlockRun {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Barrier block_barrier;
  int n_threads = 0;
  Fiber* current = nullptr;
  jmp_buf scheduler_resume;
  bool progress = false;
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
#if defined(QRUN_EMU_ASAN)
  void* scheduler_fake_stack = nullptr;
  const void* scheduler_stack_bottom = nullptr;
  size_t scheduler_stack_size = 0;
#endif
};

thread_local BlockRun* t_run = nullptr;

#if defined(QRUN_EMU_ASAN)
// glibc's _longjmp, found in libc itself (a plain lookup finds ASan's interceptor first);
// called through a pointer whose type is not [[noreturn]], so that the compiler does not
// add the unwind's unpoisoning either.
using LongJmp = void (*)(__jmp_buf_tag*, int);
LongJmp libc_longjmp() {
  static const LongJmp libc_jump = [] {
    void* libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    void* symbol = libc != nullptr ? dlsym(libc, "_longjmp") : nullptr;
    return symbol != nullptr ? reinterpret_cast<LongJmp>(symbol) : LongJmp{&_longjmp};
  }();
  return libc_jump;
}
void jump(jmp_buf to) {
  libc_longjmp()(to, 1);
}
#else
void jump(jmp_buf to) {
  _longjmp(to, 1);
}
#endif

// The fibers' stacks, kept by each OS thread from launch to launch: allocating them anew
// for each launch cost more than many kernels (under ASan, an mmap and a munmap each).
// Not zeroed: pages a fiber never touched stay unmapped.
thread_local std::vector<std::unique_ptr<char[]>> t_stacks;

char* fiber_stack(size_t i) {
  if (t_stacks.size() <= i) t_stacks.resize(i + 1);
  if (t_stacks[i] == nullptr) t_stacks[i].reset(new char[kStackBytes]);
  return t_stacks[i].get();
}

BlockRun& run() {
  if (t_run == nullptr || t_run->current == nullptr)
    fail("a device function was called outside a kernel launch");
  return *t_run;
}

// Back to the scheduler; returns when the scheduler resumes this fiber.
void yield_to_scheduler(BlockRun& r, bool finished) {
  Fiber* self = r.current;
#if defined(QRUN_EMU_ASAN)
  if (finished) {
    // The frames left on the stack (this one, fiber_main's and the entry's) are never
    // returned through: clear their poison for the fiber that next starts on the stack.
    // (What lies below this frame are libc's and ASan's, which poison nothing.)
    char* const top = self->stack + kStackBytes;
    char* const from = static_cast<char*>(__builtin_frame_address(0)) - 1024;
    __asan_unpoison_memory_region(from, static_cast<size_t>(top - from));
  }
  __sanitizer_start_switch_fiber(finished ? nullptr : &self->fake_stack, r.scheduler_stack_bottom,
                                 r.scheduler_stack_size);
#endif
  if (_setjmp(self->resume) == 0) jump(r.scheduler_resume);
#if defined(QRUN_EMU_ASAN)
  __sanitizer_finish_switch_fiber(self->fake_stack, nullptr, nullptr);
#endif
  (void)finished;
}

// Runs fiber f until it yields or finishes. (Not inlined: the locals of the caller's loops
// stay out of the frame that _setjmp returns to twice.)
[[gnu::noinline]] void resume(BlockRun& r, Fiber& f) {
  r.current = &f;
#if defined(QRUN_EMU_ASAN)
  __sanitizer_start_switch_fiber(&r.scheduler_fake_stack, f.stack, kStackBytes);
#endif
  if (_setjmp(r.scheduler_resume) == 0) {
    if (!f.started) {
      f.started = true;
      setcontext(&f.context);
      fail("setcontext failed");
    }
    jump(f.resume);
  }
#if defined(QRUN_EMU_ASAN)
  __sanitizer_finish_switch_fiber(r.scheduler_fake_stack, nullptr, nullptr);
#endif
}

void fiber_main() {
  BlockRun& r = *t_run;
#if defined(QRUN_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &r.scheduler_stack_bottom, &r.scheduler_stack_size);
#endif
  r.body(r.arg);
  if (!r.current->waited) {
    fail(
        "a thread returned without calling wait_for_prior_kernels() (every kernel must, as "
        "its first statement: on the GPU it may start before the kernel ahead of it ends)");
  }
  r.current->done = true;
  r.progress = true;
  yield_to_scheduler(r, true);
  fail("a finished fiber was resumed");
}

// Arrives at b, which completes when `expected` threads have arrived, and waits for that.
void arrive_and_wait(BlockRun& r, Barrier& b, int expected) {
  r.progress = true;
  const uint64_t generation = b.generation;
  if (++b.arrived == expected) {
    b.arrived = 0;
    b.file = nullptr;
    ++b.generation;
    return;
  }
  while (b.generation == generation) yield_to_scheduler(r, false);
}

// getcontext, which returns twice, in a frame of its own.
[[gnu::noinline]] void get_context(ucontext_t& c) {
  if (getcontext(&c) != 0) fail("getcontext failed");
}

// f's entry: fiber_main on its own stack; `fresh`: from a new context.
void make_entry(Fiber& f, bool fresh) {
  if (fresh) get_context(f.context);
  f.context.uc_stack.ss_sp = f.stack;
  f.context.uc_stack.ss_size = kStackBytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, fiber_main, 0);
}

void run_block(BlockRun& r, bool first) {
  for (Fiber& f : r.fibers) {
    f.done = false;
    f.waited = false;
    f.started = false;
    make_entry(f, first);  // (only ever entered: the last block's entry, made again)
  }
  int live = r.n_threads;
  while (live > 0) {
    r.progress = false;
    for (Fiber& f : r.fibers) {
      if (f.done) continue;
      resume(r, f);
      if (f.done) --live;
    }
    r.current = nullptr;
    if (!r.progress && live > 0) {
      fail(
          "deadlock: threads wait at a barrier that the others never reach (a __syncthreads() "
          "or warp shuffle not reached by the whole block or warp)");
    }
  }
}

}  // namespace

const LaunchIds& ids() {
  return run().current->ids;
}

int lane_id() {
  return run().current->linear % kWarpSize;
}

void run_grid(dim3 grid, dim3 block, void (*body)(void*), void* arg) {
  const int64_t n_threads = static_cast<int64_t>(block.x) * block.y * block.z;
  if (n_threads <= 0 || n_threads > kMaxBlockThreads)
    fail("block size out of range (1..1024 threads)");
  // The limits of every GPU qrun builds for (compute capability 8.0 and later), so that a
  // launch the GPU would refuse fails here too.
  if (block.x > 1024 || block.y > 1024 || block.z > 64) fail("block dimension over 1024/1024/64");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) fail("empty grid");
  if (grid.y > 65535 || grid.z > 65535) fail("grid y or z dimension over 65535");
  if (t_run != nullptr) fail("a kernel launched from inside a kernel");
  BlockRun r;
  r.n_threads = static_cast<int>(n_threads);
  r.body = body;
  r.arg = arg;
  r.fibers.resize(static_cast<size_t>(n_threads));
  r.warps.resize(static_cast<size_t>((n_threads + kWarpSize - 1) / kWarpSize));
  for (int i = 0; i < r.n_threads; ++i) {
    Fiber& f = r.fibers[static_cast<size_t>(i)];
    f.stack = fiber_stack(static_cast<size_t>(i));
    f.linear = i;
    f.ids.thread_idx = {static_cast<unsigned>(i) % block.x,
                        static_cast<unsigned>(i) / block.x % block.y,
                        static_cast<unsigned>(i) / (block.x * block.y)};
    f.ids.block_dim = block;
    f.ids.grid_dim = grid;
  }
  t_run = &r;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        for (Fiber& f : r.fibers) f.ids.block_idx = {x, y, z};
        run_block(r, x == 0 && y == 0 && z == 0);
      }
    }
  }
  t_run = nullptr;
}

void note_prior_kernels_waited() {
  run().current->waited = true;
}

void sync_threads(const char* file, int line) {
  BlockRun& r = run();
  Barrier& b = r.block_barrier;
  if (b.arrived == 0) {
    b.file = file;
    b.line = line;
  } else if (b.line != line || std::strcmp(b.file, file) != 0) {
    std::fprintf(stderr, "SIMT emulator: __syncthreads() at %s:%d met one at %s:%d\n", file, line,
                 b.file, b.line);
    fail("divergent __syncthreads()");
  }
  arrive_and_wait(r, b, r.n_threads);
}

void sync_warp() {
  BlockRun& r = run();
  if (r.n_threads % kWarpSize != 0)
    fail("warp operation in a block that is not a whole number of warps");
  arrive_and_wait(r, r.warps[static_cast<size_t>(r.current->linear / kWarpSize)].barrier,
                  kWarpSize);
}

void warp_exchange(const void* value, int src_lane, void* out, size_t bytes, unsigned mask) {
  if (mask != 0xffffffffu) fail("warp shuffles with a partial lane mask are not emulated");
  BlockRun& r = run();
  Warp& w = r.warps[static_cast<size_t>(r.current->linear / kWarpSize)];
  std::memcpy(w.slots[lane_id()], value, bytes);
  sync_warp();
  std::memcpy(out, w.slots[src_lane], bytes);
  sync_warp();
}

}  // namespace qrun::simt::emu
