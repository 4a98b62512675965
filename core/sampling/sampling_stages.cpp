// The filtering stages of the sampler chain: logit bias, repetition penalties, top-k,
// locally typical, top-p and min-p, with llama.cpp's semantics (src/llama-sampling.cpp).
// Each keeps at least one candidate, keeps CandidateList::n_sorted truthful, and reuses its
// own buffers, so a stage allocates nothing per token once warmed up.
#include <algorithm>
#include <cmath>

#include "core/sampling/sampling.h"
#include "ggml-like/result.h"

namespace qrun {
namespace {

// The candidate for `id`: found directly while items are still in id order, else searched.
TokenCandidate* find_candidate(CandidateList& c, int32_t id) {
  if (id < 0) return nullptr;
  const size_t i = static_cast<size_t>(id);
  if (i < c.items.size() && c.items[i].id == id) return &c.items[i];
  for (TokenCandidate& tc : c.items) {
    if (tc.id == id) return &tc;
  }
  return nullptr;
}

class LogitBiasStage final : public SamplerStage {
 public:
  explicit LogitBiasStage(std::vector<LogitBias> biases) : biases_(std::move(biases)) {}
  std::string_view name() const override { return "logit-bias"; }
  Kind kind() const override { return Kind::kFilter; }
  void apply(CandidateList& c, std::mt19937&) override {
    for (const LogitBias& b : biases_) {
      if (TokenCandidate* tc = find_candidate(c, b.token)) tc->logit += b.bias;
    }
    c.n_sorted = 0;
  }

 private:
  std::vector<LogitBias> biases_;
};

// The window of the last last_n accepted tokens is a ring buffer; counts_[id] is how often
// id occurs in it, and distinct_ lists the ids with a non-zero count, so apply() costs
// O(window) whatever the vocabulary size.
class PenaltiesStage final : public SamplerStage {
 public:
  PenaltiesStage(int32_t last_n, float repeat, float frequency, float presence)
      : last_n_(last_n), repeat_(repeat), frequency_(frequency), presence_(presence) {
    if (last_n_ > 0) {
      window_.reserve(static_cast<size_t>(last_n_));
      distinct_.reserve(static_cast<size_t>(last_n_));
    }
  }
  std::string_view name() const override { return "penalties"; }

  void accept(int32_t token) override {
    if (last_n_ == 0 || token < 0) return;
    if (last_n_ > 0 && window_.size() == static_cast<size_t>(last_n_)) {
      remove(window_[head_]);
      window_[head_] = token;
      head_ = (head_ + 1) % window_.size();
    } else {
      window_.push_back(token);
    }
    const size_t i = static_cast<size_t>(token);
    if (i >= counts_.size()) counts_.resize(std::max(i + 1, 2 * counts_.size()), 0);
    if (counts_[i]++ == 0) distinct_.push_back(token);
  }

  void apply(CandidateList& c, std::mt19937&) override {
    for (const int32_t id : distinct_) {
      TokenCandidate* tc = find_candidate(c, id);
      if (tc == nullptr) continue;
      const int32_t count = counts_[static_cast<size_t>(id)];
      // Dividing a negative logit would make the token more likely, so it is multiplied.
      if (tc->logit <= 0.0f) {
        tc->logit *= repeat_;
      } else {
        tc->logit /= repeat_;
      }
      tc->logit -= static_cast<float>(count) * frequency_ + presence_;
    }
    if (!distinct_.empty()) c.n_sorted = 0;
  }

  void reset() override {
    window_.clear();
    distinct_.clear();
    std::fill(counts_.begin(), counts_.end(), 0);
    head_ = 0;
  }

 private:
  void remove(int32_t token) {
    if (--counts_[static_cast<size_t>(token)] > 0) return;
    const auto it = std::find(distinct_.begin(), distinct_.end(), token);
    *it = distinct_.back();
    distinct_.pop_back();
  }

  int32_t last_n_;
  float repeat_;
  float frequency_;
  float presence_;
  std::vector<int32_t> window_;  // a ring once full; head_ is the oldest
  size_t head_ = 0;
  std::vector<int32_t> counts_;    // by token id, grown on demand
  std::vector<int32_t> distinct_;  // ids with counts_ > 0, in no particular order
};

class TopKStage final : public SamplerStage {
 public:
  explicit TopKStage(int32_t k) : k_(k) {}
  std::string_view name() const override { return "top-k"; }
  Kind kind() const override { return Kind::kFilter; }
  int64_t top_only() const override { return std::max(k_, 0); }
  void apply(CandidateList& c, std::mt19937&) override {
    const int64_t n = static_cast<int64_t>(c.items.size());
    if (k_ <= 0 || k_ >= n) return;
    sort_prefix(c, k_);
    c.items.resize(static_cast<size_t>(k_));
  }

 private:
  int32_t k_;
};

// Orders the candidates by |surprise - entropy| and keeps them, in that order, until their
// probability mass exceeds p. (llama.cpp with its default min_keep of 0 never cuts here,
// through an unsigned underflow; this keeps at least one token, as intended.)
class TypicalStage final : public SamplerStage {
 public:
  explicit TypicalStage(float p) : p_(p) {}
  std::string_view name() const override { return "typical"; }
  Kind kind() const override { return Kind::kFilter; }
  void apply(CandidateList& c, std::mt19937&) override {
    if (p_ >= 1.0f || c.items.empty()) return;
    softmax(c);
    double entropy = 0.0;
    for (const TokenCandidate& tc : c.items) {
      if (tc.p > 0.0f) entropy -= tc.p * std::log(static_cast<double>(tc.p));
    }
    const size_t n = c.items.size();
    shifted_.resize(n);
    order_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const float p = c.items[i].p;
      shifted_[i] = p > 0.0f ? std::fabs(-std::log(static_cast<double>(p)) - entropy) : INFINITY;
      order_[i] = i;
    }
    std::sort(order_.begin(), order_.end(), [&](size_t a, size_t b) {
      return shifted_[a] < shifted_[b] ||
             (shifted_[a] == shifted_[b] && c.items[a].id < c.items[b].id);
    });
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += c.items[order_[i]].p;
      if (cum > p_) {
        keep = i + 1;
        break;
      }
    }
    kept_.resize(keep);
    for (size_t i = 0; i < keep; ++i) kept_[i] = c.items[order_[i]];
    c.items.assign(kept_.begin(), kept_.end());
    c.n_sorted = 0;
  }

 private:
  float p_;
  std::vector<double> shifted_;
  std::vector<size_t> order_;
  std::vector<TokenCandidate> kept_;
};

// Sorts only as far as it needs: the sorted prefix grows geometrically until the running
// mass reaches p, so after top-k (already sorted) or on a peaked distribution it is cheap.
class TopPStage final : public SamplerStage {
 public:
  explicit TopPStage(float p) : p_(p) {}
  std::string_view name() const override { return "top-p"; }
  Kind kind() const override { return Kind::kFilter; }
  void apply(CandidateList& c, std::mt19937&) override {
    if (p_ >= 1.0f || c.items.empty()) return;
    softmax(c);
    const int64_t n = static_cast<int64_t>(c.items.size());
    double cum = 0.0;
    int64_t i = 0;
    for (int64_t chunk = 64;; chunk *= 2) {
      sort_prefix(c, i + chunk);
      for (; i < c.n_sorted; ++i) {
        cum += c.items[static_cast<size_t>(i)].p;
        if (cum >= p_) {
          c.items.resize(static_cast<size_t>(i + 1));
          return;
        }
      }
      if (i >= n) return;  // rounding kept the mass just under p: keep everything
    }
  }

 private:
  float p_;
};

// Keeps logit >= max + log(p), i.e. probability >= p * the highest, in place and in order.
class MinPStage final : public SamplerStage {
 public:
  explicit MinPStage(float p) : p_(p) {}
  std::string_view name() const override { return "min-p"; }
  Kind kind() const override { return Kind::kFilter; }
  void apply(CandidateList& c, std::mt19937&) override {
    if (p_ <= 0.0f || c.items.empty()) return;
    float max = -INFINITY;
    for (const TokenCandidate& tc : c.items) max = std::max(max, tc.logit);
    const float min_logit = std::min(max, max + std::log(p_));  // the best always stays
    size_t kept = 0;
    int64_t kept_sorted = 0;
    for (size_t i = 0; i < c.items.size(); ++i) {
      if (c.items[i].logit >= min_logit) {
        if (static_cast<int64_t>(i) < c.n_sorted) ++kept_sorted;
        c.items[kept++] = c.items[i];
      }
    }
    if (kept == 0) {
      // Only NaN logits (a broken model's): none compares >= anything, and nothing was
      // moved. Keep the lowest id, as greedy picks token 0 from a row of NaNs.
      c.items[0] = *std::min_element(
          c.items.begin(), c.items.end(),
          [](const TokenCandidate& a, const TokenCandidate& b) { return a.id < b.id; });
      kept = 1;
      kept_sorted = 1;  // (one candidate is in order)
    }
    // The survivors of the sorted prefix are still the highest, in order.
    c.items.resize(kept);
    c.n_sorted = kept_sorted;
  }

 private:
  float p_;
};

}  // namespace

std::unique_ptr<SamplerStage> make_logit_bias_stage(std::vector<LogitBias> biases) {
  return std::make_unique<LogitBiasStage>(std::move(biases));
}
std::unique_ptr<SamplerStage> make_penalties_stage(int32_t last_n, float repeat, float frequency,
                                                   float presence) {
  QRUN_CHECK(repeat > 0.0f, "repeat penalty %g must be positive", static_cast<double>(repeat));
  return std::make_unique<PenaltiesStage>(last_n, repeat, frequency, presence);
}
std::unique_ptr<SamplerStage> make_top_k_stage(int32_t k) {
  return std::make_unique<TopKStage>(k);
}
std::unique_ptr<SamplerStage> make_typical_stage(float p) {
  return std::make_unique<TypicalStage>(p);
}
std::unique_ptr<SamplerStage> make_top_p_stage(float p) {
  return std::make_unique<TopPStage>(p);
}
std::unique_ptr<SamplerStage> make_min_p_stage(float p) {
  return std::make_unique<MinPStage>(p);
}

}  // namespace qrun
