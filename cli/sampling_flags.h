// The sampling flags shared by `qrun run` and `qrun chat`, named as llama.cpp names them
// (--temp, --top-k, --top-p, --min-p, --typical, --repeat-penalty, --repeat-last-n,
// --presence-penalty, --frequency-penalty, --mirostat, --mirostat-lr, --mirostat-ent,
// --logit-bias, --ignore-eos, --stop, -s/--seed), declared once, settable again by name
// from the chat REPL's /set, and turned into a core SamplingParams.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "core/sampling.h"
#include "ggml-like/result.h"

namespace qrun::cli {

struct SamplingFlags {
  SamplingParams params;           // llama.cpp's defaults (see core/sampling.h)
  int64_t seed = -1;               // -1: a random seed, reported on stderr
  std::vector<std::string> stops;  // --stop, repeatable
  bool ignore_eos = false;
  std::vector<std::string> logit_bias;  // raw "TOKEN(+|-)BIAS" strings, resolved per model
};

// Declares every sampling flag on `cmd`, bound to `flags`.
void add_sampling_flags(CLI::App* cmd, SamplingFlags& flags);

// Sets one flag by its long name without dashes ("temp", "top-k", "stop", ...), as the
// REPL's `/set temp=0.2` does. kUsage naming the key for an unknown key or a bad value.
Result<void> set_sampling_flag(SamplingFlags& flags, std::string_view key, std::string_view value);

// "temp=0.80 top-k=40 ..." for /show and logs.
std::string describe_sampling_flags(const SamplingFlags& flags);

}  // namespace qrun::cli
