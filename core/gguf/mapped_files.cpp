// A fixed table of slots filled and emptied with atomics: a signal handler can neither lock
// nor allocate, so this is the one piece of mutable global state in gguf/ (as sigint_flag()
// is in the CLI).
#include "core/gguf/mapped_files.h"

#include <atomic>
#include <cstdint>

namespace qrun::gguf {
namespace {

struct Slot {
  std::atomic<bool> used{false};    // claimed by a registration
  std::atomic<uintptr_t> begin{0};  // 0 while being filled or after unregistering
  std::atomic<size_t> length{0};
  std::atomic<const char*> path{nullptr};
};

constexpr int kSlots = 64;
Slot g_slots[kSlots];

static_assert(std::atomic<uintptr_t>::is_always_lock_free);
static_assert(std::atomic<const char*>::is_always_lock_free);

}  // namespace

int register_mapped_file(const void* begin, size_t length, const char* path) {
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].used.compare_exchange_strong(expected, true)) continue;
    g_slots[i].length.store(length, std::memory_order_relaxed);
    g_slots[i].path.store(path, std::memory_order_relaxed);
    g_slots[i].begin.store(reinterpret_cast<uintptr_t>(begin), std::memory_order_release);
    return i;
  }
  return -1;
}

void unregister_mapped_file(int registration) {
  if (registration < 0 || registration >= kSlots) return;
  Slot& s = g_slots[registration];
  s.begin.store(0, std::memory_order_release);
  s.path.store(nullptr, std::memory_order_relaxed);
  s.used.store(false, std::memory_order_release);
}

const char* mapped_file_at(const void* address) {
  const auto a = reinterpret_cast<uintptr_t>(address);
  for (const Slot& s : g_slots) {
    const uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin != 0 && a >= begin && a - begin < s.length.load(std::memory_order_relaxed)) {
      return s.path.load(std::memory_order_relaxed);
    }
  }
  return nullptr;
}

}  // namespace qrun::gguf
