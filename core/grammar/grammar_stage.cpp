// The grammar constraint stage: allows() for the sampler's fast path, apply() to mask every
// candidate when the fast path's pick was rejected (one walk of the vocabulary's trie, the
// same answers as allows() on each), accept() to advance the matcher.
#include "core/grammar/grammar_stage.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qrun {
namespace {

class GrammarStage final : public ConstraintStage {
 public:
  GrammarStage(GrammarMatcher matcher, std::shared_ptr<const GrammarVocab> vocab,
               std::vector<uint8_t> is_eog, std::string trigger, int32_t trigger_token)
      : matcher_(std::move(matcher)),
        vocab_(std::move(vocab)),
        pieces_(vocab_->pieces),
        is_eog_(std::move(is_eog)),
        trigger_(std::move(trigger)),
        trigger_token_(trigger_token),
        waiting_(!trigger_.empty()) {
    // One flag for every token, so that the loops over the vocabulary test no bounds.
    if (is_eog_.size() < pieces_.size()) is_eog_.resize(pieces_.size(), 0);
  }

  std::string_view name() const override { return "grammar"; }

  bool allows(int32_t token) override {
    if (token < 0 || static_cast<size_t>(token) >= pieces_.size()) return false;
    if (unconstrained()) return true;
    const auto t = static_cast<size_t>(token);
    if (is_end(t)) return matcher_.can_end();
    if (matcher_.token_allows(token)) return true;
    if (pieces_[t].empty()) return false;
    Result<bool> ok = matcher_.can_accept(pieces_[t]);
    if (!ok.ok()) {
      if (!error_) error_ = ok.error();
      return false;
    }
    return *ok;
  }

  void allows_each(std::span<const int32_t> ids, std::span<uint8_t> allowed) override {
    if (unconstrained()) {
      for (size_t i = 0; i < ids.size(); ++i)
        allowed[i] = ids[i] >= 0 && static_cast<size_t>(ids[i]) < pieces_.size() ? 1 : 0;
      return;
    }
    // The ends answer can_end(); the rest go through one walk of their trie paths.
    some_.clear();
    for (const int32_t id : ids) {
      if (id >= 0 && static_cast<size_t>(id) < pieces_.size() && !is_end(id)) some_.push_back(id);
    }
    allowed_.resize(pieces_.size());
    std::optional<Error> err = matcher_.can_accept_some(vocab_->trie, some_, allowed_);
    if (err && !error_) error_ = std::move(err);
    const bool can_end = matcher_.can_end();
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto t = static_cast<size_t>(ids[i]);
      const bool ok = ids[i] >= 0 && t < pieces_.size() &&
                      (is_end(t) ? can_end : allowed_[t] != 0 || matcher_.token_allows(ids[i]));
      allowed[i] = ok ? 1 : 0;
    }
  }

  void allows_all(std::span<const float> logits, std::span<uint8_t> mask) override {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // The tokens allows() would be asked about: in the vocabulary, not -inf, not an end.
    const size_t n = std::min(logits.size(), pieces_.size());
    if (unconstrained()) {
      std::fill(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(n), uint8_t{1});
      std::fill(mask.begin() + static_cast<ptrdiff_t>(n), mask.end(), uint8_t{0});
      return;
    }
    wanted_.assign(pieces_.size(), 0);
    for (size_t t = 0; t < n; ++t) wanted_[t] = (logits[t] != kNegInf) & (is_eog_[t] == 0);
    allowed_.resize(pieces_.size());
    std::optional<Error> err = matcher_.can_accept_all(vocab_->trie, wanted_, allowed_);
    if (err && !error_) error_ = std::move(err);
    matcher_.allow_token_elements(allowed_);
    const uint8_t can_end = matcher_.can_end() ? 1 : 0;
    for (size_t t = 0; t < n; ++t) mask[t] = is_eog_[t] != 0 ? can_end : allowed_[t];
    std::fill(mask.begin() + static_cast<ptrdiff_t>(n), mask.end(), uint8_t{0});
  }

  void apply(CandidateList& c, std::mt19937& /*rng*/) override {
    if (unconstrained()) return;
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // The tokens allows() would be asked about: in the vocabulary, not -inf, not an end.
    wanted_.assign(pieces_.size(), 0);
    for (const TokenCandidate& item : c.items) {
      const auto t = static_cast<size_t>(item.id);
      if (item.logit == kNegInf || item.id < 0 || t >= pieces_.size()) continue;
      if (is_end(t)) continue;
      wanted_[t] = 1;
    }
    allowed_.resize(pieces_.size());  // can_accept_all sets every entry
    std::optional<Error> err = matcher_.can_accept_all(vocab_->trie, wanted_, allowed_);
    if (err && !error_) error_ = std::move(err);
    matcher_.allow_token_elements(allowed_);
    const bool can_end = matcher_.can_end();
    bool any = false;
    for (TokenCandidate& item : c.items) {
      if (item.logit == kNegInf) continue;
      const auto t = static_cast<size_t>(item.id);
      bool ok = false;
      if (item.id >= 0 && t < pieces_.size()) {
        ok = is_end(t) ? can_end : allowed_[t] != 0;
      }
      if (ok) {
        any = true;
      } else {
        item.logit = kNegInf;
      }
    }
    if (!any) {
      // Nothing can continue the text: let the end-of-generation tokens end it.
      for (TokenCandidate& item : c.items) {
        const auto t = static_cast<size_t>(item.id);
        if (is_end(t)) item.logit = 0.0f;
      }
    }
    c.n_sorted = 0;
  }

  void accept(int32_t token) override {
    if (token < 0 || static_cast<size_t>(token) >= pieces_.size()) return;
    const auto t = static_cast<size_t>(token);
    if (is_end(t) || lifted_) return;
    if (waiting_ && token == trigger_token_) {
      waiting_ = false;  // the grammar holds what follows the token
      return;
    }
    if (waiting_) {
      seen_ += pieces_[t];
      const size_t at = seen_.find(trigger_);
      if (at == std::string::npos) {
        // Keep only what could still be the trigger's beginning.
        if (seen_.size() >= trigger_.size()) seen_.erase(0, seen_.size() - trigger_.size() + 1);
        return;
      }
      waiting_ = false;
      Result<bool> ok = matcher_.accept(std::string_view(seen_).substr(at));
      lifted_ = !ok.ok() || !*ok;
      seen_.clear();
      return;
    }
    Result<bool> ok = matcher_.accept_token(token, pieces_[t]);
    if (!ok.ok() && !error_) error_ = ok.error();
  }

  bool complete() const override { return !unconstrained() && matcher_.must_end(); }

  void reset() override {
    matcher_.reset();
    waiting_ = !trigger_.empty();
    lifted_ = false;
    seen_.clear();
  }

  std::optional<Error> error() const override { return error_; }

 private:
  bool is_end(size_t t) const { return t < is_eog_.size() && is_eog_[t] != 0; }
  // A lazy grammar before its trigger, or after text it could not take.
  bool unconstrained() const { return waiting_ || lifted_; }

  GrammarMatcher matcher_;
  std::shared_ptr<const GrammarVocab> vocab_;
  const std::vector<std::string>& pieces_;  // vocab_->pieces
  std::vector<uint8_t> is_eog_;             // at least one flag per piece
  std::vector<uint8_t> wanted_;             // apply()'s and allows_all()'s scratch, by token id
  std::vector<uint8_t> allowed_;  // the scratch of apply(), allows_all(), allows_each(), by id
  std::vector<int32_t> some_;     // allows_each()'s scratch: the ids the trie answers
  std::optional<Error> error_;
  std::string trigger_;  // "" for a grammar that holds from the start
  // The control token whose text is the trigger (-1: none); it has no piece to hold
  int32_t trigger_token_;
  bool waiting_;         // the trigger has not come yet
  bool lifted_ = false;  // the text from the trigger on did not fit the grammar
  std::string seen_;     // while waiting: the text that may hold the trigger's start
};

}  // namespace

std::shared_ptr<const GrammarVocab> make_grammar_vocab(
    std::vector<std::string> pieces,
    std::function<std::vector<int32_t>(std::string_view)> tokenize) {
  auto vocab = std::make_shared<GrammarVocab>();
  vocab->pieces = std::move(pieces);
  vocab->tokenize = std::move(tokenize);
  vocab->trie = VocabTrie(vocab->pieces, {});
  return vocab;
}

Result<std::unique_ptr<ConstraintStage>> make_grammar_stage(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
    std::vector<uint8_t> is_eog, std::string trigger) {
  QRUN_CHECK(vocab != nullptr, "grammar stage without a vocabulary");
  if (grammar->has_tokens) {
    const GrammarVocab& v = *vocab;
    auto by_piece = [&v](std::string_view text) {
      const auto at = std::find(v.pieces.begin(), v.pieces.end(), text);
      if (at == v.pieces.end()) return std::vector<int32_t>();
      return std::vector<int32_t>{static_cast<int32_t>(at - v.pieces.begin())};
    };
    Result<std::shared_ptr<const Grammar>> bound = resolve_grammar_tokens(
        std::move(grammar), static_cast<int32_t>(v.pieces.size()),
        v.tokenize ? v.tokenize : std::function<std::vector<int32_t>(std::string_view)>(by_piece));
    if (!bound.ok()) return bound.error();
    grammar = std::move(*bound);
  }
  Result<GrammarMatcher> matcher = GrammarMatcher::create(std::move(grammar));
  if (!matcher.ok()) return matcher.error();
  // A trigger that is one control token (Mistral's [TOOL_CALLS]) fires on that token.
  int32_t trigger_token = -1;
  if (!trigger.empty() && vocab->tokenize) {
    const std::vector<int32_t> ids = vocab->tokenize(trigger);
    if (ids.size() == 1 && ids[0] >= 0 && static_cast<size_t>(ids[0]) < vocab->pieces.size() &&
        vocab->pieces[static_cast<size_t>(ids[0])].empty())
      trigger_token = ids[0];
  }
  return std::unique_ptr<ConstraintStage>(std::make_unique<GrammarStage>(
      std::move(*matcher), std::move(vocab), std::move(is_eog), std::move(trigger), trigger_token));
}

Result<std::unique_ptr<ConstraintStage>> make_grammar_stage(std::shared_ptr<const Grammar> grammar,
                                                            std::vector<std::string> pieces,
                                                            std::vector<uint8_t> is_eog) {
  return make_grammar_stage(std::move(grammar), make_grammar_vocab(std::move(pieces)),
                            std::move(is_eog));
}

}  // namespace qrun
