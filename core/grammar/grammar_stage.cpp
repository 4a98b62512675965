// The grammar constraint stage: allows() for the sampler's fast path, apply() to mask every
// candidate when the fast path's pick was rejected (one walk of the vocabulary's trie, the
// same answers as allows() on each), accept() to advance the matcher.
#include "core/grammar/grammar_stage.h"

#include <cmath>
#include <limits>

namespace qrun {
namespace {

class GrammarStage final : public ConstraintStage {
 public:
  GrammarStage(GrammarMatcher matcher, std::shared_ptr<const GrammarVocab> vocab,
               std::vector<uint8_t> is_eog)
      : matcher_(std::move(matcher)),
        vocab_(std::move(vocab)),
        pieces_(vocab_->pieces),
        is_eog_(std::move(is_eog)) {}

  std::string_view name() const override { return "grammar"; }

  bool allows(int32_t token) override {
    if (token < 0 || static_cast<size_t>(token) >= pieces_.size()) return false;
    const auto t = static_cast<size_t>(token);
    if (t < is_eog_.size() && is_eog_[t] != 0) return matcher_.can_end();
    if (pieces_[t].empty()) return false;
    Result<bool> ok = matcher_.can_accept(pieces_[t]);
    if (!ok.ok()) {
      if (!error_) error_ = ok.error();
      return false;
    }
    return *ok;
  }

  void apply(CandidateList& c, std::mt19937& /*rng*/) override {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    // The tokens allows() would be asked about: in the vocabulary, not -inf, not an end.
    wanted_.assign(pieces_.size(), 0);
    for (const TokenCandidate& item : c.items) {
      const auto t = static_cast<size_t>(item.id);
      if (item.logit == kNegInf || item.id < 0 || t >= pieces_.size()) continue;
      if (t < is_eog_.size() && is_eog_[t] != 0) continue;
      wanted_[t] = 1;
    }
    allowed_.assign(pieces_.size(), 0);
    std::optional<Error> err = matcher_.can_accept_all(vocab_->trie, wanted_, allowed_);
    if (err && !error_) error_ = std::move(err);
    const bool can_end = matcher_.can_end();
    bool any = false;
    for (TokenCandidate& item : c.items) {
      if (item.logit == kNegInf) continue;
      const auto t = static_cast<size_t>(item.id);
      bool ok = false;
      if (item.id >= 0 && t < pieces_.size()) {
        ok = t < is_eog_.size() && is_eog_[t] != 0 ? can_end : allowed_[t] != 0;
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
        if (t < is_eog_.size() && is_eog_[t] != 0) item.logit = 0.0f;
      }
    }
    c.n_sorted = 0;
  }

  void accept(int32_t token) override {
    if (token < 0 || static_cast<size_t>(token) >= pieces_.size()) return;
    const auto t = static_cast<size_t>(token);
    if (t < is_eog_.size() && is_eog_[t] != 0) return;
    Result<bool> ok = matcher_.accept(pieces_[t]);
    if (!ok.ok() && !error_) error_ = ok.error();
  }

  bool complete() const override { return matcher_.must_end(); }

  void reset() override { matcher_.reset(); }

  std::optional<Error> error() const override { return error_; }

 private:
  GrammarMatcher matcher_;
  std::shared_ptr<const GrammarVocab> vocab_;
  const std::vector<std::string>& pieces_;  // vocab_->pieces
  std::vector<uint8_t> is_eog_;
  std::vector<uint8_t> wanted_;   // apply()'s scratch, by token id
  std::vector<uint8_t> allowed_;  // apply()'s scratch, by token id
  std::optional<Error> error_;
};

}  // namespace

std::shared_ptr<const GrammarVocab> make_grammar_vocab(std::vector<std::string> pieces) {
  auto vocab = std::make_shared<GrammarVocab>();
  vocab->pieces = std::move(pieces);
  vocab->trie = VocabTrie(vocab->pieces, {});
  return vocab;
}

Result<std::unique_ptr<ConstraintStage>> make_grammar_stage(
    std::shared_ptr<const Grammar> grammar, std::shared_ptr<const GrammarVocab> vocab,
    std::vector<uint8_t> is_eog) {
  QRUN_CHECK(vocab != nullptr, "grammar stage without a vocabulary");
  Result<GrammarMatcher> matcher = GrammarMatcher::create(std::move(grammar));
  if (!matcher.ok()) return matcher.error();
  return std::unique_ptr<ConstraintStage>(
      std::make_unique<GrammarStage>(std::move(*matcher), std::move(vocab), std::move(is_eog)));
}

Result<std::unique_ptr<ConstraintStage>> make_grammar_stage(std::shared_ptr<const Grammar> grammar,
                                                            std::vector<std::string> pieces,
                                                            std::vector<uint8_t> is_eog) {
  return make_grammar_stage(std::move(grammar), make_grammar_vocab(std::move(pieces)),
                            std::move(is_eog));
}

}  // namespace qrun
