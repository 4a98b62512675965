// Prometheus text rendering for `qrun serve` (see metrics.h). Counters and histograms only
// grow; a scrape sees each one consistent in itself (one lock per histogram).
#include "cli/serve/metrics.h"

#include <cstdio>

#include "ggml-like/result.h"

namespace qrun::cli::serve {
namespace {

// A finite float as Prometheus reads it: the shortest form that reads back exactly.
std::string number(double v) {
  char buf[32];
  double back = 0.0;
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::sscanf(buf, "%lf", &back) == 1 && back == v) break;
  }
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, uint64_t value) {
  out += name + " " + std::to_string(value) + "\n";
}

void gauge(std::string& out, const std::string& name, const std::string& help, int64_t value) {
  header(out, name, "gauge", help);
  out += name + " " + std::to_string(value) + "\n";
}

// The 1 ms .. 60 s buckets of both latency histograms.
std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

const char* const kRoutes[] = {"/health", "/metrics", "/v1/models", "/v1/completions",
                               "/v1/chat/completions"};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  for (size_t i = 1; i < bounds_.size(); ++i)
    QRUN_CHECK(bounds_[i - 1] < bounds_[i], "histogram bounds must ascend");
}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  std::lock_guard<std::mutex> lock(mutex_);
  header(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + number(sum_) + "\n";
  sample(out, name + "_count", count_);
}

Metrics::Metrics() : ttft_(latency_bounds()), inter_token_(latency_bounds()) {}

void Metrics::count_response(const std::string& path, int status) {
  std::string route = "other";
  for (const char* r : kRoutes) {
    if (path == r) route = r;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[{route, status}];
}

void Metrics::add_prompt_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::add_generated_tokens(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  generated_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::add_cached_prompt_tokens(int64_t n) {
  if (n <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  cached_prompt_tokens_ += static_cast<uint64_t>(n);
  ++prefix_hits_;
}

void Metrics::count_timeout() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++timeouts_;
}

std::string Metrics::render(const MetricsGauges& g) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    header(out, "qrun_http_responses_total", "counter",
           "HTTP responses sent, by route and status code");
    for (const auto& [key, n] : responses_) {
      out += "qrun_http_responses_total{route=\"" + key.first + "\",status=\"" +
             std::to_string(key.second) + "\"} " + std::to_string(n) + "\n";
    }
    header(out, "qrun_prompt_tokens_total", "counter", "Prompt tokens of completion requests");
    sample(out, "qrun_prompt_tokens_total", prompt_tokens_);
    header(out, "qrun_prompt_tokens_cached_total", "counter",
           "Prompt tokens whose KV came from the prefix cache (not computed)");
    sample(out, "qrun_prompt_tokens_cached_total", cached_prompt_tokens_);
    header(out, "qrun_prefix_cache_hits_total", "counter",
           "Completion requests that reused cached prompt blocks");
    sample(out, "qrun_prefix_cache_hits_total", prefix_hits_);
    header(out, "qrun_generated_tokens_total", "counter",
           "Tokens generated (returned to clients) by completion requests");
    sample(out, "qrun_generated_tokens_total", generated_tokens_);
    header(out, "qrun_request_timeouts_total", "counter",
           "Completion requests ended by the per-request time limit (--timeout)");
    sample(out, "qrun_request_timeouts_total", timeouts_);
  }
  ttft_.render(out, "qrun_time_to_first_token_seconds",
               "Seconds from a request's arrival to its first generated token");
  inter_token_.render(out, "qrun_inter_token_latency_seconds",
                      "Seconds between consecutive generated tokens of a request");
  gauge(out, "qrun_slots", "Sequence slots (-np)", g.slots);
  gauge(out, "qrun_requests_running", "Requests holding a sequence slot", g.running);
  gauge(out, "qrun_requests_queued", "Requests waiting for a sequence slot", g.queued);
  gauge(out, "qrun_kv_tokens_used", "Tokens in the KV caches of running requests",
        g.kv_tokens_used);
  gauge(out, "qrun_kv_tokens_total", "KV cache capacity in tokens, all slots", g.kv_tokens_total);
  gauge(out, "qrun_kv_blocks_total", "Blocks of the paged KV cache (0: per-slot caches)",
        g.kv_blocks_total);
  gauge(out, "qrun_kv_blocks_used", "KV blocks held by running requests", g.kv_blocks_used);
  gauge(out, "qrun_kv_blocks_free",
        "KV blocks a request can take: unused, or cached and held by no request",
        g.kv_blocks_total - g.kv_blocks_used);
  gauge(out, "qrun_kv_blocks_cached", "KV blocks in the prefix cache, held by a request or not",
        g.kv_blocks_cached);
  header(out, "qrun_preemptions_total", "counter",
         "Running requests preempted for want of KV blocks (recomputed later)");
  sample(out, "qrun_preemptions_total", static_cast<uint64_t>(g.preemptions));
  header(out, "qrun_engine_steps_total", "counter",
         "Batched forward passes the engine ran (one decode token per running sequence each)");
  sample(out, "qrun_engine_steps_total", static_cast<uint64_t>(g.steps));
  header(out, "qrun_engine_mixed_steps_total", "counter",
         "Engine steps that held prompt chunks and decode tokens together (chunked prefill)");
  sample(out, "qrun_engine_mixed_steps_total", static_cast<uint64_t>(g.mixed_steps));
  return out;
}

}  // namespace qrun::cli::serve
