// Perplexity of a model on a text, as llama.cpp's perplexity tool measures it: the tokens
// are cut into chunks of n_ctx, each chunk starts with BOS (replacing its first token) and
// runs from an empty KV cache in one batched forward pass, and only the second half of each
// chunk is scored (every scored token then has at least n_ctx / 2 tokens of context).
// PPL = exp(mean negative log-likelihood); the error is the standard error of that mean
// carried through exp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

struct PerplexityOptions {
  int64_t n_ctx = 512;                           // tokens per chunk (the KV cache must hold them)
  std::optional<int32_t> bos;                    // written over each chunk's first token when set
  int64_t max_chunks = 0;                        // <= 0: every whole chunk of the text
  const std::atomic<bool>* interrupt = nullptr;  // checked between chunks
  // After each chunk: its index, the chunk count, and the running estimate.
  std::function<void(int64_t, int64_t, double)> on_chunk;
  // Before on_chunk: the chunk's index, its tokens as in the text (before BOS is written
  // over the first), and the logits of its scored positions, [n_ctx - 1 - n_ctx/2, n_vocab]
  // (row r is position n_ctx/2 + r and predicts token n_ctx/2 + r + 1). An error stops the
  // run and is returned.
  std::function<Result<void>(int64_t, std::span<const int32_t>, std::span<const float>)>
      on_scored_logits;
};

struct PerplexityResult {
  int64_t n_chunks = 0;
  int64_t n_scored = 0;  // tokens whose likelihood was scored
  double mean_nll = 0;   // natural log
  double ppl = 0;
  double ppl_stderr = 0;
  double seconds = 0;        // forward passes and scoring
  bool interrupted = false;  // stopped early; the figures cover the chunks done
};

// The chunks a run scores: whole chunks of n_ctx, at most max_chunks when that is > 0.
int64_t perplexity_chunk_count(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks);

// -log p(target) under softmax(logits), in double.
double negative_log_likelihood(std::span<const float> logits, int32_t target);

// Errors: fewer than n_ctx tokens, or n_ctx < 2 or beyond the KV cache (kUsage, with the
// counts); whatever the forward pass reports.
Result<PerplexityResult> evaluate_perplexity(Model& model, Backend& backend, KvCache& kv,
                                             std::span<const int32_t> tokens,
                                             const PerplexityOptions& options);

}  // namespace qrun
