// The persistent thread pool: one generation counter wakes the workers, one countdown
// tells the caller they are done. Both are spun on briefly (a matmul for one token takes
// microseconds, less than a futex round trip) and then waited on, so idle workers sleep.
#include "ggml-like/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace qrun {
namespace {

constexpr int kSpinIterations = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins, then sleeps, until `value` no longer holds `old`; returns the new value.
uint32_t wait_while_equal(const std::atomic<uint32_t>& value, uint32_t old) {
  for (int i = 0; i < kSpinIterations; ++i) {
    const uint32_t v = value.load(std::memory_order_acquire);
    if (v != old) return v;
    cpu_relax();
  }
  uint32_t v;
  while ((v = value.load(std::memory_order_acquire)) == old)
    value.wait(old, std::memory_order_acquire);
  return v;
}

bool read_int(const std::string& path, int* out) {
  std::ifstream in(path);
  return static_cast<bool>(in >> *out);
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = default_thread_count();
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::run_share(int index, int n_parts) const {
  if (index >= n_parts) return;
  const int64_t begin = job_n_ * index / n_parts;
  const int64_t end = job_n_ * (index + 1) / n_parts;
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::worker_loop(int index) {
  // The counter is 0 at construction and only parallel_for (after the constructor) bumps
  // it. Reading it here instead would race: a job posted before this thread first runs
  // would be taken as already seen, and its caller would wait for this worker forever.
  uint32_t seen = 0;
  for (;;) {
    seen = wait_while_equal(generation_, seen);
    if (stop_.load(std::memory_order_relaxed)) return;
    run_share(index, job_parts_);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, RangeFn fn, int64_t min_per_thread) {
  if (n <= 0) return;
  const int64_t by_size = std::max<int64_t>(1, n / std::max<int64_t>(1, min_per_thread));
  const int n_parts = static_cast<int>(std::min<int64_t>(n_threads(), by_size));
  if (n_parts == 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_parts_ = n_parts;
  remaining_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_share(0, n_parts);
  uint32_t left = remaining_.load(std::memory_order_acquire);
  while (left != 0) left = wait_while_equal(remaining_, left);
  job_ = nullptr;
}

int ThreadPool::default_thread_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return static_cast<int>(hw);
  std::set<std::pair<int, int>> cores;  // (package, core) pairs seen
  int n_cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++n_cpus;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    int package = 0;
    int core = 0;
    if (!read_int(dir + "physical_package_id", &package) || !read_int(dir + "core_id", &core)) {
      cores.emplace(-1, cpu);  // no topology: count the logical CPU
    } else {
      cores.emplace(package, core);
    }
  }
  if (n_cpus == 0) return static_cast<int>(hw);
  return std::max(1, static_cast<int>(cores.size()));
}

}  // namespace qrun
