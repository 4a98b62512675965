// The sequence slots of a server: N slots, each owning its own KV cache, and a bounded
// first-come-first-served queue of requests waiting for one. Independent of HTTP: a request
// handler acquires a slot (waiting in the queue if all are busy, refused at once if the
// queue is full), generates into that slot's cache, and the lease gives it back.
// Invariant: a slot is leased to at most one request; waiters are served in arrival order.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "core/kv_cache.h"

namespace qrun {

class SlotPool;

// A slot held by one request; gives it back when destroyed.
class SlotLease {
 public:
  SlotLease() = default;
  SlotLease(SlotLease&& other) noexcept : pool_(other.pool_), slot_(other.slot_) {
    other.pool_ = nullptr;
  }
  SlotLease& operator=(SlotLease&& other) noexcept;
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  ~SlotLease() { release(); }

  bool held() const { return pool_ != nullptr; }
  int slot() const { return slot_; }
  KvCache& kv();
  void release();

 private:
  friend class SlotPool;
  SlotLease(SlotPool* pool, int slot) : pool_(pool), slot_(slot) {}
  SlotPool* pool_ = nullptr;
  int slot_ = -1;
};

enum class AcquireStatus {
  kAcquired,
  kQueueFull,  // every slot busy and max_queued requests already waiting
  kCancelled,  // *cancel was set while waiting
};

struct AcquireResult {
  AcquireStatus status = AcquireStatus::kCancelled;
  SlotLease lease;  // held when status is kAcquired
};

class SlotPool {
 public:
  // One slot per cache; at most `max_queued` requests wait when all are busy.
  SlotPool(std::vector<KvCache> caches, int64_t max_queued);
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  // Takes a free slot, or waits in the queue for one. While waiting, `cancel` (may be null)
  // is polled every `poll` so that a shutdown or a gone client leaves the queue.
  AcquireResult acquire(const std::atomic<bool>* cancel,
                        std::chrono::milliseconds poll = std::chrono::milliseconds(50));

  int n_slots() const { return static_cast<int>(caches_.size()); }
  int64_t n_busy() const;
  int64_t n_queued() const;

 private:
  friend class SlotLease;
  void give_back(int slot);

  std::vector<KvCache> caches_;
  const int64_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> busy_;
  std::deque<uint64_t> queue_;  // tickets of waiting requests, oldest first
  uint64_t next_ticket_ = 0;
};

}  // namespace qrun
