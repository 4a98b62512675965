// The host's sustained memory read bandwidth, measured the way token generation reads
// weights: every thread of a ThreadPool streams its own contiguous share of a buffer many
// times larger than the last-level cache, once per pass. The figure is the best pass (the
// least disturbed by other processes), in GB/s = 1e9 bytes per second. It is the roofline
// that `qrun bench` compares decoding against.
#pragma once

#include <cstddef>

#include "ggml-like/result.h"
#include "ggml-like/thread_pool.h"

namespace qrun::kernels {

struct MemBandwidthOptions {
  size_t buffer_bytes = 0;     // 0: 8 x the last-level cache, within [256 MiB, 2 GiB]
  int min_passes = 3;          // timed passes at least ...
  int max_passes = 30;         // ... and at most
  double time_budget_s = 0.6;  // no new pass starts after this much time of timed passes
};

struct MemBandwidth {
  double gbps = 0.0;  // best pass
  double mean_gbps = 0.0;
  int n_threads = 0;
  int passes = 0;
  size_t buffer_bytes = 0;
};

// The largest CPU cache of this host in bytes (sysfs), or 32 MiB when it cannot be read.
size_t last_level_cache_bytes();

// The host's physical memory in bytes, or 0 when it cannot be read.
size_t physical_memory_bytes();

// Measures with all threads of `pool`. Errors: the buffer cannot be allocated (kRuntime).
Result<MemBandwidth> measure_read_bandwidth(ThreadPool& pool, const MemBandwidthOptions& options);

}  // namespace qrun::kernels
