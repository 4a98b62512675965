// evaluate_perplexity: chunked batched forward passes and a log-softmax per scored token.
#include "core/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace qrun {

double negative_log_likelihood(std::span<const float> logits, int32_t target) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  return std::log(sum) - (static_cast<double>(logits[static_cast<size_t>(target)]) - max);
}

int64_t perplexity_chunk_count(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
  const int64_t n = n_tokens / n_ctx;
  return max_chunks > 0 ? std::min(n, max_chunks) : n;
}

Result<PerplexityResult> evaluate_perplexity(Model& model, Backend& backend, KvCache& kv,
                                             std::span<const int32_t> tokens,
                                             const PerplexityOptions& o) {
  const int64_t n_ctx = o.n_ctx;
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  if (n_ctx < 2 || n_ctx > kv.n_ctx()) {
    return make_error(ErrorCode::kUsage,
                      format("perplexity: a chunk of %lld tokens does not fit the context (%lld)",
                             static_cast<long long>(n_ctx), static_cast<long long>(kv.n_ctx())));
  }
  if (n_tokens < n_ctx) {
    return make_error(ErrorCode::kUsage,
                      format("perplexity: the text has %lld tokens, fewer than one chunk of %lld "
                             "(use a longer text or a smaller -c)",
                             static_cast<long long>(n_tokens), static_cast<long long>(n_ctx)));
  }
  const int64_t n_chunks = perplexity_chunk_count(n_tokens, n_ctx, o.max_chunks);

  const int64_t n_vocab = model.hparams().n_vocab;
  const int64_t first = n_ctx / 2;  // positions before this only give context
  std::vector<float> logits(static_cast<size_t>(n_ctx * n_vocab));
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx));
  PerplexityResult r;
  double sum = 0.0, sum_sq = 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    if (o.interrupt != nullptr && o.interrupt->load()) {
      r.interrupted = true;
      break;
    }
    std::copy_n(tokens.begin() + c * n_ctx, n_ctx, chunk.begin());
    if (o.bos) chunk[0] = *o.bos;
    kv.clear();
    QRUN_TRY(model.forward(backend, chunk, 0, kv, /*all_logits=*/true, logits.data()));
    // The logits at position j predict token j + 1.
    for (int64_t j = first; j + 1 < n_ctx; ++j) {
      const double nll = negative_log_likelihood(
          std::span<const float>(logits).subspan(static_cast<size_t>(j * n_vocab),
                                                 static_cast<size_t>(n_vocab)),
          chunk[static_cast<size_t>(j + 1)]);
      sum += nll;
      sum_sq += nll * nll;
      ++r.n_scored;
    }
    if (o.on_scored_logits) {
      QRUN_TRY(o.on_scored_logits(
          c, tokens.subspan(static_cast<size_t>(c * n_ctx), static_cast<size_t>(n_ctx)),
          std::span<const float>(logits)
              .subspan(static_cast<size_t>(first * n_vocab))
              .first(static_cast<size_t>((n_ctx - 1 - first) * n_vocab))));
    }
    ++r.n_chunks;
    if (o.on_chunk) o.on_chunk(c, n_chunks, std::exp(sum / static_cast<double>(r.n_scored)));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.n_scored == 0) return r;
  const auto n = static_cast<double>(r.n_scored);
  r.mean_nll = sum / n;
  r.ppl = std::exp(r.mean_nll);
  if (r.n_scored > 1) {
    const double var = std::max(0.0, sum_sq / n - r.mean_nll * r.mean_nll);
    r.ppl_stderr = r.ppl * std::sqrt(var / (n - 1));
  }
  return r;
}

}  // namespace qrun
