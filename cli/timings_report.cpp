// See timings_report.h.
#include "cli/timings_report.h"

namespace qrun::cli {

double tokens_per_second(int64_t n_tokens, double ms) {
  return ms > 0 ? 1000.0 * static_cast<double>(n_tokens) / ms : 0.0;
}

nlohmann::json timings_json(const GenerateTimings& t) {
  return {{"load_ms", t.load_ms},
          {"prompt_ms", t.prompt_ms},
          {"prompt_tokens", t.n_prompt},
          {"prompt_tok_s", tokens_per_second(t.n_prompt, t.prompt_ms)},
          {"gen_ms", t.gen_ms},
          {"gen_tokens", t.n_gen},
          {"gen_tok_s", tokens_per_second(t.n_gen > 1 ? t.n_gen - 1 : 0, t.gen_ms)},
          {"ttft_ms", t.ttft_ms}};
}

}  // namespace qrun::cli
