// How `qrun perplexity --kl-divergence` shows a KldSummary (core/kl_divergence.h): one
// progress line per chunk, the final statistics under the labels llama.cpp's perplexity tool
// prints (so that scripts reading either tool's output read both), and a JSON object.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/kl_divergence.h"

namespace qrun::cli {

void print_kld_progress_header(std::FILE* out);
void print_kld_progress(std::FILE* out, int64_t chunk, const KldSummary& s);
void print_kld_summary(std::FILE* out, const KldSummary& s);
// Fractions stay fractions here (the printed report shows percentages).
nlohmann::json kld_summary_json(const KldSummary& s);

}  // namespace qrun::cli
