// SlotPool: free slots first, a bounded queue served in arrival order, refusal when the
// queue is full, cancellation of a waiter, and a lease that gives its slot back once.
#include "core/slot_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace qrun {
namespace {

using namespace std::chrono_literals;

std::vector<KvCache> caches(int n) {
  std::vector<KvCache> v;
  for (int i = 0; i < n; ++i) {
    Result<KvCache> kv = KvCache::create(1, 8, 1, 4);
    v.push_back(std::move(*kv));
  }
  return v;
}

// Waits (bounded) until `pool` has `n` waiters.
bool wait_queued(const SlotPool& pool, int64_t n) {
  for (int i = 0; i < 400 && pool.n_queued() != n; ++i) std::this_thread::sleep_for(5ms);
  return pool.n_queued() == n;
}

TEST(SlotPool, GivesDistinctSlotsThenRefusesWhenTheQueueIsFull) {
  SlotPool pool(caches(2), /*max_queued=*/0);
  AcquireResult a = pool.acquire(nullptr);
  AcquireResult b = pool.acquire(nullptr);
  ASSERT_EQ(a.status, AcquireStatus::kAcquired);
  ASSERT_EQ(b.status, AcquireStatus::kAcquired);
  EXPECT_NE(a.lease.slot(), b.lease.slot());
  EXPECT_NE(&a.lease.kv(), &b.lease.kv());
  EXPECT_EQ(pool.n_busy(), 2);
  EXPECT_EQ(pool.acquire(nullptr).status, AcquireStatus::kQueueFull);
  const int freed = a.lease.slot();
  a.lease.release();
  a.lease.release();  // a second release does nothing
  EXPECT_EQ(pool.n_busy(), 1);
  AcquireResult c = pool.acquire(nullptr);
  ASSERT_EQ(c.status, AcquireStatus::kAcquired);
  EXPECT_EQ(c.lease.slot(), freed);
}

TEST(SlotPool, WaitersAreServedInArrivalOrder) {
  SlotPool pool(caches(1), /*max_queued=*/3);
  AcquireResult held = pool.acquire(nullptr);
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::future<void>> waiters;
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(std::async(std::launch::async, [&, i] {
      AcquireResult r = pool.acquire(nullptr, 1ms);
      ASSERT_EQ(r.status, AcquireStatus::kAcquired);
      std::lock_guard<std::mutex> lock(mutex);
      order.push_back(i);
    }));
    ASSERT_TRUE(wait_queued(pool, i + 1));  // arrival order is i
  }
  EXPECT_EQ(pool.acquire(nullptr).status, AcquireStatus::kQueueFull);
  held.lease.release();
  for (auto& w : waiters) ASSERT_EQ(w.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(pool.n_busy(), 0);
}

TEST(SlotPool, CancelledWaiterLeavesTheQueue) {
  SlotPool pool(caches(1), /*max_queued=*/1);
  AcquireResult held = pool.acquire(nullptr);
  std::atomic<bool> cancel{false};
  auto waiter = std::async(std::launch::async, [&] { return pool.acquire(&cancel, 1ms).status; });
  ASSERT_TRUE(wait_queued(pool, 1));
  cancel.store(true);
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(waiter.get(), AcquireStatus::kCancelled);
  EXPECT_EQ(pool.n_queued(), 0);
  EXPECT_EQ(pool.n_busy(), 1);
}

}  // namespace
}  // namespace qrun
