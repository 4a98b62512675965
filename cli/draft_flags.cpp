// See draft_flags.h.
#include "cli/draft_flags.h"

#include <climits>
#include <cstdio>

#include "cli/text_file.h"

namespace qrun::cli {

void add_draft_flags(CLI::App* cmd, DraftFlags& f) {
  const std::string group = "Speculative decoding";
  add_file_option(cmd, "--model-draft", f.model,
                  "Draft model (-md): a smaller model with the same vocabulary proposes tokens")
      ->group(group);
  cmd->add_option("--draft-max", f.draft_max, "Most tokens drafted per target pass")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{INT32_MAX}))
      ->group(group);
  cmd->add_option("--draft-min", f.draft_min,
                  "Fewest tokens a draft must have to be used (shorter: one plain step)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{INT32_MAX}))
      ->group(group);
  cmd->add_option("--draft-p-min", f.draft_p_min,
                  "The draft model stops drafting when its top probability is below P")
      ->capture_default_str()
      ->check(CLI::Range(0.0f, 1.0f))
      ->group(group);
  cmd->add_option("--lookup-ngram", f.lookup_ngram,
                  "Prompt lookup decoding: draft what followed the last N tokens earlier in "
                  "the text (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->group(group);
}

namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "'";
}

// The draft must give every token id the same text as the target.
Result<void> check_same_vocab(const Session& draft, const Session& target) {
  const std::string both =
      format("-md %s: the draft model's vocabulary differs from the target's (%s)",
             draft.model_name.c_str(), target.model_name.c_str());
  const int32_t n_draft = draft.tokenizer->n_vocab();
  const int32_t n_target = target.tokenizer->n_vocab();
  if (n_draft != n_target || draft.model->hparams().n_vocab != target.model->hparams().n_vocab) {
    return make_error(ErrorCode::kUnsupported,
                      format("%s: %d tokens against %d", both.c_str(), n_draft, n_target));
  }
  for (int32_t id = 0; id < n_target; ++id) {
    const std::string& a = draft.tokenizer->token_text(id);
    const std::string& b = target.tokenizer->token_text(id);
    if (a != b) {
      return make_error(ErrorCode::kUnsupported,
                        format("%s: token %d is %s against %s", both.c_str(), id, quoted(a).c_str(),
                               quoted(b).c_str()));
    }
  }
  return {};
}

}  // namespace

Result<DraftSetup> open_drafter(const DraftFlags& flags, const ModelFlags& model_flags,
                                const Session& target, const SamplingParams& sampling, bool log) {
  DraftSetup setup;
  setup.params.n_max = flags.draft_max;
  setup.params.n_min = flags.draft_min;
  setup.params.seed = sampling.seed ^ 0x5bd1e995u;  // acceptance draws: apart from the chain's
  if (!flags.model.empty() && flags.lookup_ngram > 0) {
    return make_error(ErrorCode::kUsage,
                      "--model-draft and --lookup-ngram: give one drafter, not both");
  }
  if (flags.lookup_ngram > 0) {
    setup.drafter = std::make_unique<NgramDrafter>(flags.lookup_ngram);
  } else {
    ModelFlags draft_flags = model_flags;
    draft_flags.model = flags.model;
    draft_flags.ctx_size = target.kv.n_ctx();
    Result<std::unique_ptr<Session>> s = open_session(draft_flags, log);
    if (!s.ok()) return s.error();
    QRUN_TRY(check_same_vocab(**s, target));
    setup.session = std::move(*s);
    SamplingParams chain = sampling;
    chain.seed = sampling.seed + 1;  // the draft's own draws
    Session& d = *setup.session;
    setup.drafter = std::make_unique<ModelDrafter>(*d.model, *d.backend, d.kv, flags.draft_p_min,
                                                   make_sampler(chain), sampling.seed + 2);
  }
  setup.params.drafter = setup.drafter.get();
  return setup;
}

std::string speculative_summary(const GenerateTimings& t) {
  const double rate =
      t.n_drafted > 0 ? 100.0 * static_cast<double>(t.n_accepted) / t.n_drafted : 0.0;
  const double per_pass =
      t.n_passes > 0 ? static_cast<double>(t.n_gen) / static_cast<double>(t.n_passes) : 0.0;
  return format("drafted %lld, accepted %lld (%.1f %%), %.2f tokens per target pass",
                static_cast<long long>(t.n_drafted), static_cast<long long>(t.n_accepted), rate,
                per_pass);
}

}  // namespace qrun::cli
