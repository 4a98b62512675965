// Generation timings as `qrun run --json` reports them and as `qrun run` and the chat
// REPL's /stats print them, written once for both. Rates are tokens per second, 0 when the
// time is 0; the generation rate counts the tokens after the first (which ttft_ms covers).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/generate.h"

namespace qrun::cli {

double tokens_per_second(int64_t n_tokens, double ms);
// {"load_ms", "prompt_ms", "prompt_tokens", "prompt_tok_s", "gen_ms", "gen_tokens",
//  "gen_tok_s", "ttft_ms"}, and after speculative decoding "drafted", "accepted",
//  "acceptance_rate" (accepted / drafted), "target_passes", "tokens_per_pass"
nlohmann::json timings_json(const GenerateTimings& t);

}  // namespace qrun::cli
