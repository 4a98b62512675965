// Speculative decoding over the abstract Model: a Drafter proposes the next tokens (a
// smaller draft model, or n-gram matches in the text so far), the target model scores all
// of them in one forward pass, keeps the longest accepted prefix plus one token of its own,
// and rolls its KV cache back past the rest. The output follows the target alone:
//   - match mode (a greedy chain, or a chain with history or a grammar: penalties,
//     mirostat, a constraint): the target's Sampler samples each position in turn exactly
//     as plain decoding would, and a drafted token is kept iff it is the one sampled. Under
//     --temp 0 that is the plain greedy output token for token; otherwise the same law
//     (and, the random draws being consumed the same way, the same tokens for a seed).
//   - speculative sampling (a chain of filters ending in a draw, Sampler::has_distribution):
//     with p and q the target's and the draft's laws after the chain, a drafted d is kept
//     with probability min(1, p(d) / q(d)), else a token is drawn from max(0, p - q)
//     normalized (Leviathan et al. 2023); a drafter that chooses deterministically has q a
//     point mass on its token.
// Rollbacks are shorter than the model's n_batch (drafts are capped at n_batch - 1), which a
// sliding-window ring of window - 1 + n_batch rows always allows (KvCache::keepable).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/generate.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

class TokenEmitter;  // core/generate_emit.h

// A proposal: tokens, and when they were drawn at random, the law each was drawn from.
struct Draft {
  std::vector<int32_t> tokens;
  // tokens.size() rows of n_vocab probabilities when sampled; empty when every token was
  // chosen deterministically (its law is a point mass).
  std::vector<float> probs;
  void clear() {
    tokens.clear();
    probs.clear();
  }
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Sees the prompt while the target runs it (a draft model prefills it). `sequence` is
  // everything the target has seen so far.
  virtual Result<void> prefill(std::span<const int32_t> /*sequence*/) { return {}; }
  // Proposes at most n_max (>= 1) tokens to follow `sequence` (the prompt and every token
  // generated so far) into `out` (cleared first). sampled: draw them from the chain's law
  // and record it (speculative sampling); otherwise choose the likeliest.
  virtual Result<void> propose(std::span<const int32_t> sequence, int64_t n_max, bool sampled,
                               Draft& out) = 0;
};

// Drafts with a smaller model of the same vocabulary. Its cache holds a prefix of the
// sequence (the tokens it has read, drafted ones included): each round it rolls back to
// the part the target kept (re-reading from the start where a ring forgot it) and reads the
// rest, then proposes while its most likely token has probability >= p_min. Under
// speculative sampling it draws from `chain` (the target's chain, its own seed) and p_min
// applies to the chain's law; otherwise it takes the top raw logit and p_min applies to
// the softmax of the raw logits. (Where `chain` has no law, e.g. greedy, and the target's
// chain has one, it draws from the softmax of the raw logits.)
class ModelDrafter final : public Drafter {
 public:
  ModelDrafter(Model& model, Backend& backend, KvCache& kv, float p_min, Sampler chain,
               uint32_t seed);
  Result<void> prefill(std::span<const int32_t> sequence) override;
  Result<void> propose(std::span<const int32_t> sequence, int64_t n_max, bool sampled,
                       Draft& out) override;

 private:
  // Makes the cache hold sequence[0, n) and logits_ the row after it (n >= 1).
  Result<void> sync(std::span<const int32_t> sequence, size_t n);
  Model& model_;
  Backend& backend_;
  KvCache& kv_;
  float p_min_;
  Sampler chain_;
  std::mt19937 rng_;
  std::vector<int32_t> cached_;  // the tokens kv_ holds, in order
  std::vector<float> logits_;    // n_vocab, the row after cached_
  std::vector<float> probs_;     // n_vocab, scratch
};

// Prompt lookup decoding: finds the latest earlier occurrence of the last n tokens of the
// sequence and proposes what followed it. Deterministic, so its law is a point mass.
class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(int64_t n) : n_(n) {}
  Result<void> propose(std::span<const int32_t> sequence, int64_t n_max, bool sampled,
                       Draft& out) override;

 private:
  int64_t n_;
};

// The generation loop of generate() with params.drafter set, from the row after the prompt
// (`logits`, n_vocab floats) to a stop, each sampled token through `emitter`. Adds the
// passes, drafted and accepted counts to `timings`.
Result<StopReason> speculative_decode(Model& model, Backend& backend, KvCache& kv,
                                      std::span<const int32_t> prompt,
                                      const SpeculativeParams& params, Sampler& sampler,
                                      TokenEmitter& emitter, std::span<const float> logits,
                                      GenerateTimings& timings);

}  // namespace qrun
