// Read-bandwidth measurement. This file is built for the baseline ISA, so the summing
// loop uses GCC/Clang vector types: 16-byte integer adds that become SSE2 on x86-64 and
// NEON on arm64 with no ISA branches. Each thread reads its share as four streams with
// independent accumulators, which keeps many loads in flight; 16-byte loads already
// outrun what one core can pull from DRAM, so a wider ISA would not change the figure.
// Integer sums are exact, so nothing is reordered unsafely.
#include "kernels/cpu/mem_bandwidth.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

namespace qrun::kernels {
namespace {

using U64x2 = uint64_t __attribute__((vector_size(16)));

constexpr size_t kChunkBytes = size_t{64} << 10;  // the unit of work split among threads
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kMinBuffer = 256 * kMiB;
constexpr size_t kMaxBuffer = 2048 * kMiB;
constexpr uint64_t kPatternStep = 0x9E3779B97F4A7C15ull;  // word i holds i * step + 1

constexpr size_t kStreams = 4;  // sub-ranges one thread reads side by side

// Sum of n 64-bit words (n a multiple of 8 * kStreams) at a 16-byte aligned address. The
// range is read as kStreams interleaved sequential streams, one cache line of each per
// step: a single stream leaves the memory system idle at every page the hardware
// prefetcher has to pick up again (measured: 4 streams read about 15 % faster).
uint64_t sum_words(const uint64_t* p, size_t n) {
  const size_t len = n / kStreams;
  U64x2 acc[kStreams][4] = {};
  for (size_t i = 0; i < len; i += 8) {
    for (size_t s = 0; s < kStreams; ++s) {
      const uint64_t* q = p + s * len + i;
      for (size_t k = 0; k < 4; ++k) {
        U64x2 v;
        std::memcpy(&v, q + 2 * k, sizeof v);
        acc[s][k] += v;
      }
    }
  }
  U64x2 total = {0, 0};
  for (const auto& stream : acc) {
    for (const U64x2& v : stream) total += v;
  }
  uint64_t lanes[2];
  std::memcpy(lanes, &total, sizeof lanes);
  return lanes[0] + lanes[1];
}

// Parses a sysfs cache size such as "8192K" or "32M".
size_t parse_cache_size(const std::string& text) {
  size_t pos = 0;
  size_t value = 0;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    value = value * 10 + static_cast<size_t>(text[pos] - '0');
    ++pos;
  }
  if (pos < text.size() && text[pos] == 'K') value <<= 10;
  if (pos < text.size() && text[pos] == 'M') value <<= 20;
  if (pos < text.size() && text[pos] == 'G') value <<= 30;
  return value;
}

size_t choose_buffer_bytes(size_t requested) {
  size_t bytes = requested;
  if (bytes == 0) {
    bytes = std::clamp(8 * last_level_cache_bytes(), kMinBuffer, kMaxBuffer);
    const size_t phys = physical_memory_bytes();
    if (phys > 0) bytes = std::min(bytes, std::max(phys / 4, 16 * kMiB));
  }
  return std::max(kChunkBytes, bytes / kChunkBytes * kChunkBytes);
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

size_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<size_t>(pages) * static_cast<size_t>(page);
}

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int index = 0; index < 16; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    if (!in) continue;
    std::string text;
    in >> text;
    best = std::max(best, parse_cache_size(text));
  }
  return best > 0 ? best : 32 * kMiB;
}

Result<MemBandwidth> measure_read_bandwidth(ThreadPool& pool, const MemBandwidthOptions& options) {
  const size_t bytes = choose_buffer_bytes(options.buffer_bytes);
  std::unique_ptr<uint64_t, FreeDeleter> buffer(
      static_cast<uint64_t*>(std::aligned_alloc(4096, bytes)));
  if (!buffer) {
    return make_error(ErrorCode::kRuntime,
                      format("memory bandwidth: cannot allocate a %zu MiB buffer", bytes / kMiB));
  }
  uint64_t* data = buffer.get();
  const int64_t n_chunks = static_cast<int64_t>(bytes / kChunkBytes);
  constexpr size_t kWordsPerChunk = kChunkBytes / sizeof(uint64_t);

  // Writing a pattern maps every page (untouched pages would all read the shared zero
  // page, which sits in cache) and places each share on the memory of the thread that
  // reads it later, since parallel_for splits the same range the same way every time.
  pool.parallel_for(n_chunks, [&](int64_t begin, int64_t end) {
    for (size_t i = static_cast<size_t>(begin) * kWordsPerChunk;
         i < static_cast<size_t>(end) * kWordsPerChunk; ++i) {
      data[i] = i * kPatternStep + 1;
    }
  });

  std::atomic<uint64_t> checksum{0};
  auto one_pass = [&](int64_t begin, int64_t end) {
    const uint64_t s = sum_words(data + static_cast<size_t>(begin) * kWordsPerChunk,
                                 static_cast<size_t>(end - begin) * kWordsPerChunk);
    checksum.fetch_add(s, std::memory_order_relaxed);
  };

  MemBandwidth result;
  result.n_threads = pool.n_threads();
  result.buffer_bytes = bytes;
  double total_s = 0.0;
  const int min_passes = std::max(1, options.min_passes);
  const int max_passes = std::max(min_passes, options.max_passes);
  while (result.passes < max_passes &&
         (result.passes < min_passes || total_s < options.time_budget_s)) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(n_chunks, one_pass);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    total_s += s;
    ++result.passes;
    result.gbps = std::max(result.gbps, static_cast<double>(bytes) / s / 1e9);
  }
  result.mean_gbps = static_cast<double>(bytes) * result.passes / total_s / 1e9;
  // Every pass reads every word once, so (mod 2^64) the checksum is passes x the pattern's
  // sum, sum over i < n of (i * K + 1) = K * n(n-1)/2 + n.
  const uint64_t n = bytes / sizeof(uint64_t);
  const uint64_t half_product = n % 2 == 0 ? (n / 2) * (n - 1) : n * ((n - 1) / 2);
  const uint64_t one_pass_sum = half_product * kPatternStep + n;
  QRUN_CHECK(checksum.load() == one_pass_sum * static_cast<uint64_t>(result.passes),
             "memory bandwidth: checksum %llu after %d passes over %zu bytes",
             static_cast<unsigned long long>(checksum.load()), result.passes, bytes);
  return result;
}

}  // namespace qrun::kernels
