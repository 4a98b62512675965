// Speculative decoding: the drafters and the verification loop (see speculative.h for the
// two acceptance modes and why both leave the target's output law unchanged). Buffers are
// sized once per call (one row per drafted token plus one); a round allocates nothing else.
#include "core/speculative.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "core/generate_emit.h"

namespace qrun {
namespace {

// u in [0, 1) from 53 random bits, as draw_index takes them.
double uniform01(std::mt19937& rng) {
  const uint64_t hi = rng() >> 5;
  const uint64_t lo = rng() >> 6;
  return (static_cast<double>(hi) * 67108864.0 + static_cast<double>(lo)) / 9007199254740992.0;
}

// An index drawn from non-negative weights (not necessarily normalized); never one with
// weight 0 unless all are 0 (then the first).
int32_t draw_weighted(std::span<const float> w, std::mt19937& rng) {
  double total = 0.0;
  for (const float x : w) total += x;
  const double target = uniform01(rng) * total;
  double acc = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0.0f) continue;
    last = static_cast<int32_t>(i);
    acc += w[i];
    if (acc > target) return last;
  }
  return last;  // rounding left target at the very top
}

// The top logit (ties: lowest id) and its softmax probability.
std::pair<int32_t, float> top_of_softmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  double sum = 0.0;
  for (const float l : logits) sum += std::exp(static_cast<double>(l - logits[best]));
  return {static_cast<int32_t>(best), static_cast<float>(1.0 / sum)};
}

// probs = the softmax of logits.
void softmax_into(std::span<const float> logits, std::span<float> probs) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    probs[i] = std::exp(logits[i] - max);
    sum += probs[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (float& p : probs) p *= inv;
}

// One step of speculative sampling (Leviathan et al. 2023, Algorithm 1): keeps the draft d
// with probability min(1, p(d) / q(d)), else draws from max(0, p - q) normalized. p is the
// target chain's law on `row` (computed into `p`, n_vocab floats of scratch); q the draft's
// law (n_vocab floats), or null for a point mass on d. Returns d when kept, else the token
// drawn (not d: a rejected d has residual 0, but in the rounding fallback below, where d
// is as good as kept, the caller treats it so).
int32_t speculative_sample(std::span<const float> row, int32_t d, const float* q, Sampler& sampler,
                           std::span<float> p, std::mt19937& rng) {
  sampler.distribution(row, p);
  const size_t di = static_cast<size_t>(d);
  const double q_d = q == nullptr ? 1.0 : q[di];
  if (uniform01(rng) * q_d < p[di]) return d;
  double mass = 0.0;
  if (q == nullptr) {
    p[di] = 0.0f;
    for (const float x : p) mass += x;
  } else {
    for (size_t j = 0; j < p.size(); ++j) {
      p[j] = std::max(0.0f, p[j] - q[j]);
      mass += p[j];
    }
  }
  // p <= q everywhere happens only when p == q up to rounding, where a rejection is itself
  // a rounding artefact: draw from p then.
  if (!(mass > 0.0)) sampler.distribution(row, p);
  return draw_weighted(p, rng);
}

}  // namespace

ModelDrafter::ModelDrafter(Model& model, Backend& backend, KvCache& kv, float p_min, Sampler chain,
                           uint32_t seed)
    : model_(model),
      backend_(backend),
      kv_(kv),
      p_min_(p_min),
      chain_(std::move(chain)),
      rng_(seed),
      logits_(static_cast<size_t>(model.hparams().n_vocab)),
      probs_(static_cast<size_t>(model.hparams().n_vocab)) {
  kv_.clear();
}

Result<void> ModelDrafter::sync(std::span<const int32_t> sequence, size_t n) {
  QRUN_CHECK(n >= 1 && n <= sequence.size(), "draft sync to %zu of %zu tokens", n, sequence.size());
  // Keep the longest common prefix, but read at least the last token again for its logits.
  size_t keep = 0;
  while (keep < cached_.size() && keep + 1 < n && cached_[keep] == sequence[keep]) ++keep;
  keep = static_cast<size_t>(kv_.keepable(static_cast<int64_t>(keep)));
  kv_.truncate(static_cast<int64_t>(keep));
  cached_.resize(keep);
  const std::span<const int32_t> rest = sequence.subspan(keep, n - keep);
  QRUN_TRY(model_.forward(backend_, rest, static_cast<int64_t>(keep), kv_, false, logits_.data()));
  cached_.insert(cached_.end(), rest.begin(), rest.end());
  return {};
}

Result<void> ModelDrafter::prefill(std::span<const int32_t> sequence) {
  if (sequence.size() < 2) return {};
  return sync(sequence, sequence.size() - 1);  // propose() reads the last token
}

Result<void> ModelDrafter::propose(std::span<const int32_t> sequence, int64_t n_max, bool sampled,
                                   Draft& out) {
  out.clear();
  if (static_cast<int64_t>(sequence.size()) > kv_.n_ctx()) return {};  // no room to draft
  QRUN_TRY(sync(sequence, sequence.size()));
  const size_t n_vocab = logits_.size();
  for (int64_t i = 0; i < n_max; ++i) {
    int32_t token = 0;
    if (sampled) {
      // Any law q keeps the target's; the chain's when it has one (a chat's /set may have
      // changed the target's chain since the drafter was made), else the raw softmax.
      if (chain_.has_distribution()) {
        chain_.distribution(logits_, probs_);
      } else {
        softmax_into(logits_, probs_);
      }
      if (*std::max_element(probs_.begin(), probs_.end()) < p_min_) break;
      token = draw_weighted(probs_, rng_);
      out.probs.insert(out.probs.end(), probs_.begin(), probs_.end());
    } else {
      const auto [top, p] = top_of_softmax(logits_);
      if (p < p_min_) break;
      token = top;
    }
    out.tokens.push_back(token);
    if (i + 1 == n_max || kv_.n_free() == 0) break;  // the last draft need not be read
    QRUN_TRY(model_.forward(backend_, std::span<const int32_t>(&token, 1), kv_.n_tokens(), kv_,
                            false, logits_.data()));
    cached_.push_back(token);
  }
  QRUN_CHECK(out.probs.empty() || out.probs.size() == out.tokens.size() * n_vocab,
             "draft of %zu tokens with %zu probabilities", out.tokens.size(), out.probs.size());
  return {};
}

Result<void> NgramDrafter::propose(std::span<const int32_t> sequence, int64_t n_max, bool,
                                   Draft& out) {
  out.clear();
  const size_t n = static_cast<size_t>(n_);
  if (n == 0 || sequence.size() <= n) return {};
  const std::span<const int32_t> tail = sequence.last(n);
  // The latest start j < size - n whose n tokens equal the tail; what follows it is the
  // proposal (it may run into the tail itself, which is still text that came next).
  for (size_t j = sequence.size() - n; j-- > 0;) {
    if (!std::equal(tail.begin(), tail.end(), sequence.begin() + static_cast<ptrdiff_t>(j))) {
      continue;
    }
    const size_t from = j + n;
    const size_t count = std::min(static_cast<size_t>(n_max), sequence.size() - from);
    out.tokens.assign(sequence.begin() + static_cast<ptrdiff_t>(from),
                      sequence.begin() + static_cast<ptrdiff_t>(from + count));
    return {};
  }
  return {};
}

Result<StopReason> speculative_decode(Model& model, Backend& backend, KvCache& kv,
                                      std::span<const int32_t> prompt,
                                      const SpeculativeParams& params, Sampler& sampler,
                                      TokenEmitter& emitter, std::span<const float> logits,
                                      GenerateTimings& timings) {
  QRUN_CHECK(params.drafter != nullptr, "speculative decoding without a drafter");
  const size_t n_vocab = static_cast<size_t>(model.hparams().n_vocab);
  // Speculative sampling where the chain has a law; match mode otherwise (speculative.h).
  const bool sampled = !sampler.is_greedy() && sampler.has_distribution();
  const int64_t n_max = std::max<int64_t>(0, std::min(params.n_max, model.n_batch() - 1));
  std::mt19937 rng(params.seed);

  std::vector<int32_t> sequence(params.history.begin(), params.history.end());
  sequence.insert(sequence.end(), prompt.begin(), prompt.end());        // what the drafter sees
  std::vector<int32_t> batch;                                           // the pending token + draft
  std::vector<float> rows((static_cast<size_t>(n_max) + 1) * n_vocab);  // target logits
  std::vector<float> p(sampled ? n_vocab : 0);                          // target law
  Draft draft;
  batch.reserve(static_cast<size_t>(n_max) + 1);
  draft.tokens.reserve(static_cast<size_t>(n_max));

  // The first token comes from the prompt's logits, as in plain decoding.
  int32_t pending = sampler.sample(logits);
  if (const std::optional<StopReason> stop = emitter.emit(pending, kv.n_free())) return *stop;
  sequence.push_back(pending);

  for (;;) {
    // Positions: `pending` goes to n, the draft after it. Room: n_free >= 1 (emit checked),
    // the remaining token budget, and n_batch - 1 (one pass, a rollback a ring allows).
    const int64_t n = kv.n_tokens();
    int64_t k_max = std::min(n_max, kv.n_free() - 1);
    if (emitter.budget_left() >= 0) k_max = std::min(k_max, emitter.budget_left() - 1);
    draft.clear();
    if (k_max >= 1 && k_max >= params.n_min) {
      QRUN_TRY(params.drafter->propose(sequence, k_max, sampled, draft));
      QRUN_CHECK(static_cast<int64_t>(draft.tokens.size()) <= k_max,
                 "draft of %zu tokens, max %lld", draft.tokens.size(),
                 static_cast<long long>(k_max));
      if (static_cast<int64_t>(draft.tokens.size()) < params.n_min) draft.clear();
    }
    const size_t k = draft.tokens.size();
    batch.assign(1, pending);
    batch.insert(batch.end(), draft.tokens.begin(), draft.tokens.end());
    // As decode rows (Backend::set_decode_rows): each row's logits are then those of
    // decoding its token alone, bit for bit on the CPU, so greedy speculation takes plain
    // decoding's argmax even at a near tie (and a few rows cost less than the gemm tiles).
    backend.set_decode_rows(true);
    const Result<void> ran = model.forward(backend, batch, n, kv, /*all_logits=*/true, rows.data());
    backend.set_decode_rows(false);
    QRUN_TRY(ran);
    ++timings.n_passes;
    timings.n_drafted += static_cast<int64_t>(k);

    // Row i is the target's logits after batch[i]: it verifies draft i, or (i == k) gives
    // the token after a fully accepted draft.
    for (size_t i = 0; i <= k; ++i) {
      const std::span<const float> row(rows.data() + i * n_vocab, n_vocab);
      int32_t token = 0;
      bool accepted = false;
      if (i == k) {
        token = sampler.sample(row);
      } else if (!sampled) {
        token = sampler.sample(row);
        accepted = token == draft.tokens[i];
      } else {
        const float* q = draft.probs.empty() ? nullptr : draft.probs.data() + i * n_vocab;
        token = speculative_sample(row, draft.tokens[i], q, sampler, p, rng);
        accepted = token == draft.tokens[i];
      }
      if (accepted) ++timings.n_accepted;
      // The cache holds pending and draft[0, i) before `token`: n + 1 + i positions.
      const int64_t n_before = n + 1 + static_cast<int64_t>(i);
      const std::optional<StopReason> stop = emitter.emit(token, kv.n_ctx() - n_before);
      if (stop || !accepted) kv.truncate(n_before);  // forget the rejected tail
      if (stop) return *stop;
      sequence.push_back(token);
      if (!accepted) {
        pending = token;
        break;
      }
    }
  }
}

}  // namespace qrun
