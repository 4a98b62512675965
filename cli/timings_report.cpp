// See timings_report.h.
#include "cli/timings_report.h"

namespace qrun::cli {

double tokens_per_second(int64_t n_tokens, double ms) {
  return ms > 0 ? 1000.0 * static_cast<double>(n_tokens) / ms : 0.0;
}

nlohmann::json timings_json(const GenerateTimings& t) {
  nlohmann::json j = {{"load_ms", t.load_ms},
                      {"prompt_ms", t.prompt_ms},
                      {"prompt_tokens", t.n_prompt},
                      {"prompt_tok_s", tokens_per_second(t.n_prompt, t.prompt_ms)},
                      {"gen_ms", t.gen_ms},
                      {"gen_tokens", t.n_gen},
                      {"gen_tok_s", tokens_per_second(t.n_gen > 1 ? t.n_gen - 1 : 0, t.gen_ms)},
                      {"ttft_ms", t.ttft_ms}};
  if (t.speculative) {
    j["drafted"] = t.n_drafted;
    j["accepted"] = t.n_accepted;
    j["acceptance_rate"] =
        t.n_drafted > 0 ? static_cast<double>(t.n_accepted) / static_cast<double>(t.n_drafted)
                        : 0.0;
    j["target_passes"] = t.n_passes;
    j["tokens_per_pass"] =
        t.n_passes > 0 ? static_cast<double>(t.n_gen) / static_cast<double>(t.n_passes) : 0.0;
  }
  return j;
}

}  // namespace qrun::cli
