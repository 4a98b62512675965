// Loading llama.cpp's golden outputs (see golden.h).
#include "tests/support/golden.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {

Golden load_golden(const std::string& stem, bool with_logits) {
  const nlohmann::json j = nlohmann::json::parse(read_text(data_path(stem + ".json")));
  Golden g;
  g.prompt_text = j.value("prompt", "");
  g.prompt = j.at("prompt_tokens").get<std::vector<int32_t>>();
  g.greedy = j.at("greedy_tokens").get<std::vector<int32_t>>();
  g.n_vocab = j.at("n_vocab").get<int64_t>();
  for (const auto& step : j.at("top10_per_step")) {
    g.top2_gap.push_back(step.at(0).at(1).get<double>() - step.at(1).at(1).get<double>());
    g.second.push_back(step.at(1).at(0).get<int32_t>());
    auto& top = g.top10.emplace_back();
    for (const auto& entry : step) {
      top.emplace_back(entry.at(0).get<int32_t>(), entry.at(1).get<double>());
    }
  }
  if (with_logits) {
    const std::vector<uint8_t> bytes = read_bytes(data_path(stem + ".logits.f32"));
    g.logits.resize(bytes.size() / sizeof(float));
    std::memcpy(g.logits.data(), bytes.data(), g.logits.size() * sizeof(float));
  }
  return g;
}

double nmse(const float* a, const float* ref, size_t n) {
  double num = 0.0;
  double den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den > 0.0 ? num / den : num;
}

namespace {

// log(sum exp(row)) over n values, shifted by the maximum.
double log_sum_exp(const float* row, size_t n) {
  const double max = *std::max_element(row, row + n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - max);
  return max + std::log(sum);
}

}  // namespace

double kl_divergence(const float* ref, const float* a, size_t n) {
  const double lse_ref = log_sum_exp(ref, n);
  const double lse_a = log_sum_exp(a, n);
  double kl = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double log_p = static_cast<double>(ref[i]) - lse_ref;
    const double log_q = static_cast<double>(a[i]) - lse_a;
    kl += std::exp(log_p) * (log_p - log_q);
  }
  return kl;
}

int32_t argmax(const float* row, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

}  // namespace qrun::test
