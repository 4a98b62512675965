// SlotPool: a mutex, a condition variable and a ticket queue. A waiter takes a slot only
// when its ticket is at the front, so requests are served in arrival order.
#include "core/slot_pool.h"

#include <algorithm>

#include "ggml-like/result.h"

namespace qrun {

SlotLease& SlotLease::operator=(SlotLease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = other.pool_;
    slot_ = other.slot_;
    other.pool_ = nullptr;
  }
  return *this;
}

KvCache& SlotLease::kv() {
  QRUN_CHECK(pool_ != nullptr, "kv() of a lease that holds no slot");
  return pool_->caches_[static_cast<size_t>(slot_)];
}

void SlotLease::release() {
  if (pool_ == nullptr) return;
  pool_->give_back(slot_);
  pool_ = nullptr;
}

SlotPool::SlotPool(std::vector<KvCache> caches, int64_t max_queued)
    : caches_(std::move(caches)), max_queued_(max_queued), busy_(caches_.size(), false) {
  QRUN_CHECK(!caches_.empty(), "a slot pool needs at least one slot");
  QRUN_CHECK(max_queued >= 0, "max_queued %lld < 0", static_cast<long long>(max_queued));
}

AcquireResult SlotPool::acquire(const std::atomic<bool>* cancel, std::chrono::milliseconds poll) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto free_slot = [&] {
    return static_cast<int>(std::find(busy_.begin(), busy_.end(), false) - busy_.begin());
  };
  AcquireResult r;
  if (queue_.empty() && free_slot() < n_slots()) {
    const int slot = free_slot();
    busy_[static_cast<size_t>(slot)] = true;
    r.status = AcquireStatus::kAcquired;
    r.lease = SlotLease(this, slot);
    return r;
  }
  if (static_cast<int64_t>(queue_.size()) >= max_queued_) {
    r.status = AcquireStatus::kQueueFull;
    return r;
  }
  const uint64_t ticket = next_ticket_++;
  queue_.push_back(ticket);
  for (;;) {
    if (queue_.front() == ticket && free_slot() < n_slots()) {
      const int slot = free_slot();
      busy_[static_cast<size_t>(slot)] = true;
      queue_.pop_front();
      r.status = AcquireStatus::kAcquired;
      r.lease = SlotLease(this, slot);
      changed_.notify_all();  // the next waiter may take another free slot
      return r;
    }
    if (cancel != nullptr && cancel->load()) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
      changed_.notify_all();
      r.status = AcquireStatus::kCancelled;
      return r;
    }
    changed_.wait_for(lock, poll);
  }
}

void SlotPool::give_back(int slot) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    QRUN_CHECK(busy_[static_cast<size_t>(slot)], "slot %d given back twice", slot);
    busy_[static_cast<size_t>(slot)] = false;
  }
  changed_.notify_all();
}

int64_t SlotPool::n_busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::count(busy_.begin(), busy_.end(), true);
}

int64_t SlotPool::n_queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

}  // namespace qrun
