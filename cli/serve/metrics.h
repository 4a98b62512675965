// The counters and histograms `qrun serve` exposes on GET /metrics, in Prometheus' text
// format (version 0.0.4). Only what the server measures: responses by route and status,
// prompt and generated tokens, requests ended by the time limit, time to first token and
// the time between tokens; the gauges (slots, queue, KV tokens) and the engine's step
// counters are read when rendering.
// Thread-safe: HTTP threads record, any thread renders.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace qrun::cli::serve {

// A Prometheus histogram: cumulative counts at fixed upper bounds, a sum and a count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // ascending; +Inf is implied
  void observe(double value);
  // The "# HELP", "# TYPE" and sample lines of metric `name`.
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  mutable std::mutex mutex_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; one more for +Inf
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

// Values read at the moment /metrics is asked.
struct MetricsGauges {
  int64_t slots = 0;            // -np
  int64_t running = 0;          // slots held by a request
  int64_t queued = 0;           // requests waiting for a slot
  int64_t kv_tokens_used = 0;   // tokens in the KV caches of running requests
  int64_t kv_tokens_total = 0;  // all slots' capacity
  // A paged KV cache (--kv-unified; all 0 without): its blocks, those running requests
  // hold, and those in the prefix cache; preemptions so far (a counter).
  int64_t kv_blocks_total = 0;
  int64_t kv_blocks_used = 0;
  int64_t kv_blocks_cached = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;        // engine steps so far (a counter, kept by the engine)
  int64_t mixed_steps = 0;  // of them, those with prompt chunks beside decode tokens
};

class Metrics {
 public:
  Metrics();
  // One finished HTTP response. Routes other than the server's own count as "other".
  void count_response(const std::string& path, int status);
  void add_prompt_tokens(int64_t n);
  void add_generated_tokens(int64_t n);
  // Prompt tokens of one request whose K/V came from the prefix cache (0: none).
  void add_cached_prompt_tokens(int64_t n);
  void count_timeout();
  // Seconds from a request's arrival to its first generated token (queue wait included).
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  // Seconds between two consecutive generated tokens of one request.
  void observe_inter_token(double seconds) { inter_token_.observe(seconds); }

  std::string render(const MetricsGauges& gauges) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> responses_;  // (route, status)
  uint64_t prompt_tokens_ = 0;
  uint64_t generated_tokens_ = 0;
  uint64_t cached_prompt_tokens_ = 0;
  uint64_t prefix_hits_ = 0;  // requests with cached prompt tokens
  uint64_t timeouts_ = 0;
  Histogram ttft_;
  Histogram inter_token_;
};

}  // namespace qrun::cli::serve
