// Speculative decoding flags, named as llama.cpp names them (-md/--model-draft,
// --draft-max, --draft-min, --draft-p-min) plus --lookup-ngram (prompt lookup decoding),
// and the drafter they build for a loaded target session: a draft model (same vocabulary,
// checked token by token) or n-gram lookup. See core/speculative.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/session.h"
#include "core/generate.h"
#include "core/sampling/sampling.h"
#include "core/speculative.h"

namespace qrun::cli {

struct DraftFlags {
  std::string model;          // -md: the draft model; empty: none
  int64_t draft_max = 16;     // most tokens drafted per target pass
  int64_t draft_min = 0;      // shorter drafts are dropped
  float draft_p_min = 0.75f;  // the draft model stops below this top probability
  int64_t lookup_ngram = 0;   // > 0: prompt lookup with n-grams of this size
  bool enabled() const { return !model.empty() || lookup_ngram > 0; }
};

// Declares the flags on `cmd` (in a "Speculative decoding" help group).
void add_draft_flags(CLI::App* cmd, DraftFlags& flags);

// The drafter and what it owns (the draft model's session).
struct DraftSetup {
  std::unique_ptr<Session> session;  // null for n-gram lookup
  std::unique_ptr<Drafter> drafter;
  SpeculativeParams params;  // drafter set, limits from the flags
};

// Builds the drafter for `target` (loaded from model_flags). The draft model is loaded with
// the target's threads, batch size, context and cache type. Errors: both -md and
// --lookup-ngram (kUsage); a draft whose vocabulary differs from the target's
// (kUnsupported, naming both files and the first differing token); the draft's own load
// errors. `sampling` is the target's chain parameters (the draft model draws with the same
// chain under its own seed).
Result<DraftSetup> open_drafter(const DraftFlags& flags, const ModelFlags& model_flags,
                                const Session& target, const SamplingParams& sampling, bool log);

// "drafted 120, accepted 96 (80.0 %), 4.20 tokens per target pass" for stderr timings.
std::string speculative_summary(const GenerateTimings& t);

}  // namespace qrun::cli
