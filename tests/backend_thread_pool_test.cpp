// The persistent thread pool: every index is visited exactly once for awkward sizes and
// thread counts, tiny loops stay on the caller, and back-to-back jobs, jobs posted right
// after construction, and destruction never hang.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "ggml-like/thread_pool.h"

namespace qrun {
namespace {

TEST(ThreadPool, VisitsEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (int64_t n : {0, 1, 7, 31, 32, 33, 255, 4097}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t begin, int64_t end) {
        ASSERT_LE(0, begin);
        ASSERT_LE(begin, end);
        ASSERT_LE(end, n);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "threads " << threads << " n " << n;
      }
    }
  }
}

TEST(ThreadPool, SmallLoopsStayOnTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> calls{0};
  pool.parallel_for(
      100,
      [&](int64_t begin, int64_t end) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        EXPECT_EQ(begin, 0);
        EXPECT_EQ(end, 100);
        ++calls;
      },
      /*min_per_thread=*/64);
  EXPECT_EQ(calls.load(), 1);
  // With 200 items and at least 64 each, at most 3 ranges.
  std::atomic<int> ranges{0};
  pool.parallel_for(
      200, [&](int64_t, int64_t) { ++ranges; }, 64);
  EXPECT_EQ(ranges.load(), 3);
}

TEST(ThreadPool, ManyJobsAndFreshPoolsDoNotHang) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  for (int job = 0; job < 20000; ++job) {
    pool.parallel_for(3, [&](int64_t begin, int64_t end) { total += end - begin; });
  }
  EXPECT_EQ(total.load(), 60000);
  // A job posted before the workers have started must still be run by all of them.
  for (int i = 0; i < 200; ++i) {
    ThreadPool fresh(4);
    std::atomic<int> sum{0};
    fresh.parallel_for(4,
                       [&](int64_t begin, int64_t end) { sum += static_cast<int>(end - begin); });
    ASSERT_EQ(sum.load(), 4);
  }
}

TEST(ThreadPool, DefaultThreadCountIsPositive) {
  const int n = ThreadPool::default_thread_count();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  ThreadPool pool;
  EXPECT_EQ(pool.n_threads(), n);
}

}  // namespace
}  // namespace qrun
