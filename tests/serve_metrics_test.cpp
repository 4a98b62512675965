// cli/serve/metrics: the Prometheus text of a histogram (cumulative buckets, a value on a
// bound counted in that bound's bucket, +Inf, sum, count) and of the counters and gauges,
// on fixed observations.
#include "cli/serve/metrics.h"

#include <gtest/gtest.h>

#include <string>

namespace qrun::cli::serve {
namespace {

TEST(ServeMetrics, HistogramBucketsAreCumulative) {
  Histogram h({0.001, 0.01, 0.1});
  for (double v : {0.0005, 0.001, 0.003, 0.05, 0.05, 7.0}) h.observe(v);
  std::string out;
  h.render(out, "lat_seconds", "Latency");
  EXPECT_EQ(out,
            "# HELP lat_seconds Latency\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.001\"} 2\n"
            "lat_seconds_bucket{le=\"0.01\"} 3\n"
            "lat_seconds_bucket{le=\"0.1\"} 5\n"
            "lat_seconds_bucket{le=\"+Inf\"} 6\n"
            "lat_seconds_sum 7.1045\n"
            "lat_seconds_count 6\n");
}

TEST(ServeMetrics, CountersByRouteAndStatusAndGauges) {
  Metrics m;
  m.count_response("/v1/completions", 200);
  m.count_response("/v1/completions", 200);
  m.count_response("/v1/completions", 400);
  m.count_response("/secret/../etc", 404);  // not a route: "other", whatever the path
  m.add_prompt_tokens(12);
  m.add_generated_tokens(30);
  m.count_timeout();
  MetricsGauges g;
  g.slots = 4;
  g.running = 2;
  g.queued = 1;
  g.kv_tokens_used = 77;
  g.kv_tokens_total = 4096;
  g.kv_blocks_total = 128;
  g.kv_blocks_used = 5;
  g.kv_blocks_cached = 9;
  g.preemptions = 3;
  m.add_cached_prompt_tokens(64);
  m.add_cached_prompt_tokens(0);  // no hit: counted nowhere
  const std::string out = m.render(g);
  for (const char* line :
       {"qrun_http_responses_total{route=\"/v1/completions\",status=\"200\"} 2\n",
        "qrun_http_responses_total{route=\"/v1/completions\",status=\"400\"} 1\n",
        "qrun_http_responses_total{route=\"other\",status=\"404\"} 1\n",
        "qrun_prompt_tokens_total 12\n", "qrun_generated_tokens_total 30\n",
        "qrun_request_timeouts_total 1\n", "qrun_time_to_first_token_seconds_count 0\n",
        "qrun_slots 4\n", "qrun_requests_running 2\n", "qrun_requests_queued 1\n",
        "qrun_kv_tokens_used 77\n", "qrun_kv_tokens_total 4096\n", "qrun_kv_blocks_total 128\n",
        "qrun_kv_blocks_used 5\n", "qrun_kv_blocks_free 123\n", "qrun_kv_blocks_cached 9\n",
        "qrun_preemptions_total 3\n", "qrun_prompt_tokens_cached_total 64\n",
        "qrun_prefix_cache_hits_total 1\n"}) {
    EXPECT_NE(out.find(line), std::string::npos) << line << " not in\n" << out;
  }
  EXPECT_EQ(out.find("/secret"), std::string::npos);
}

}  // namespace
}  // namespace qrun::cli::serve
