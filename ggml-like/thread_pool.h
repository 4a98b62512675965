// A persistent pool of worker threads for data-parallel loops over rows.
// Threads are created once; each parallel_for wakes them (a short spin, then a futex wait),
// splits [0, n) into one contiguous range per thread, runs one range on the calling
// thread and returns when every range is done. parallel_for allocates nothing, is not
// reentrant, and must be called from one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace qrun {

// A non-owning reference to a callable `void(int64_t begin, int64_t end)`; the callable
// must outlive the call it is passed to.
class RangeFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& f)  // NOLINT: implicit by design, like std::function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* obj, int64_t b, int64_t e) {
          (*static_cast<std::remove_reference_t<F>*>(obj))(b, e);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

class ThreadPool {
 public:
  // n_threads counts the calling thread; n_threads - 1 workers are started. <= 0 means
  // default_thread_count().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) split into at most n_threads() contiguous ranges of
  // at least `min_per_thread` items each (so tiny loops stay on the calling thread).
  void parallel_for(int64_t n, RangeFn fn, int64_t min_per_thread = 1);

  // Physical cores available to this process (hyper-threads counted once), at least 1.
  static int default_thread_count();

 private:
  void worker_loop(int index);
  void run_share(int index, int n_parts) const;

  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers wait on it
  std::atomic<uint32_t> remaining_{0};   // workers still running the current job
  std::atomic<bool> stop_{false};
  // The current job, published by the release store to generation_.
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
};

}  // namespace qrun
