// llama.cpp's reference outputs (../shared/golden and golden/real, README there): one prompt
// of one model as JSON (prompt tokens, 48 greedy tokens, the top-10 logits of each greedy
// step) and, where kept, the raw logits rows. Shared by the golden tests.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace qrun::test {

inline constexpr int kGoldenDecodeRows = 4;    // logits rows after the prompt rows
inline constexpr int kGoldenGreedySteps = 48;  // greedy tokens

struct Golden {
  std::string prompt_text;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  std::vector<double> top2_gap;  // per greedy step: llama.cpp's first minus second logit
  std::vector<int32_t> second;   // llama.cpp's runner-up token per greedy step
  // per greedy step: llama.cpp's ten highest (token, logit), highest first
  std::vector<std::vector<std::pair<int32_t, double>>> top10;
  int64_t n_vocab = 0;
  std::vector<float> logits;  // (prompt + kGoldenDecodeRows) rows of n_vocab; empty if not kept
};

// Loads data_dir()/<stem>.json and, when with_logits, <stem>.logits.f32
// (stem e.g. "golden/stories260K.once" or "golden/real/gemma-3-270m-q4_k_m.swa").
Golden load_golden(const std::string& stem, bool with_logits);

// sum (a - ref)^2 / sum ref^2 over n values.
double nmse(const float* a, const float* ref, size_t n);

// KL(P_ref || P) between the softmax distributions of two logits rows of n values, in nats,
// as llama-perplexity --kl-divergence reports it.
double kl_divergence(const float* ref, const float* a, size_t n);

// The index of the largest value (the first on ties).
int32_t argmax(const float* row, int64_t n);

}  // namespace qrun::test
