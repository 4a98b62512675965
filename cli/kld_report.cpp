// The KL-divergence report: percentages for probabilities and fractions of tokens, six
// decimals for KLD values, each mean with its standard error.
#include "cli/kld_report.h"

namespace qrun::cli {
namespace {

struct QuantileRow {
  const char* label;
  double Quantiles::*field;
};

// Largest first, as the report reads.
constexpr QuantileRow kKldRows[] = {
    {"Maximum", &Quantiles::max},  {"99.9%  ", &Quantiles::p99_9}, {"99.0%  ", &Quantiles::p99},
    {"95.0%  ", &Quantiles::p95},  {"90.0%  ", &Quantiles::p90},   {"Median ", &Quantiles::median},
    {"10.0%  ", &Quantiles::p10},  {" 5.0%  ", &Quantiles::p5},    {" 1.0%  ", &Quantiles::p1},
    {" 0.1%  ", &Quantiles::p0_1}, {"Minimum", &Quantiles::min}};
constexpr QuantileRow kPDiffRows[] = {
    {"Maximum", &Quantiles::max},    {"99.9%  ", &Quantiles::p99_9}, {"99.0%  ", &Quantiles::p99},
    {"95.0%  ", &Quantiles::p95},    {"90.0%  ", &Quantiles::p90},   {"75.0%  ", &Quantiles::p75},
    {"Median ", &Quantiles::median}, {"25.0%  ", &Quantiles::p25},   {"10.0%  ", &Quantiles::p10},
    {" 5.0%  ", &Quantiles::p5},     {" 1.0%  ", &Quantiles::p1},    {" 0.1%  ", &Quantiles::p0_1},
    {"Minimum", &Quantiles::min}};

nlohmann::json value_error(const ValueError& v) {
  return {v.value, v.error};
}

nlohmann::json quantiles_json(const Quantiles& q) {
  return {{"max", q.max}, {"p99.9", q.p99_9},   {"p99", q.p99}, {"p95", q.p95}, {"p90", q.p90},
          {"p75", q.p75}, {"median", q.median}, {"p25", q.p25}, {"p10", q.p10}, {"p5", q.p5},
          {"p1", q.p1},   {"p0.1", q.p0_1},     {"min", q.min}};
}

}  // namespace

void print_kld_progress_header(std::FILE* out) {
  std::fprintf(out,
               "chunk             PPL          ln(PPL(Q)/PPL(base))          KL Divergence"
               "              Δp RMS            Same top p\n");
}

void print_kld_progress(std::FILE* out, int64_t chunk, const KldSummary& s) {
  std::fprintf(out,
               "%4lld    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%"
               "    %6.3f ± %6.3f %%\n",
               static_cast<long long>(chunk + 1), s.ppl.value, s.ppl.error, s.log_ppl_ratio.value,
               s.log_ppl_ratio.error, s.kld.value, s.kld.error, 100 * s.p_diff_rms.value,
               100 * s.p_diff_rms.error, 100 * s.same_top.value, 100 * s.same_top.error);
}

void print_kld_summary(std::FILE* out, const KldSummary& s) {
  std::fprintf(out, "====== Perplexity statistics ======\n");
  std::fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", s.ppl.value, s.ppl.error);
  std::fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", s.ppl_base.value,
               s.ppl_base.error);
  std::fprintf(out, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * s.log_ppl_correlation);
  std::fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", s.log_ppl_ratio.value,
               s.log_ppl_ratio.error);
  std::fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", s.ppl_ratio.value,
               s.ppl_ratio.error);
  std::fprintf(out, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", s.ppl_diff.value,
               s.ppl_diff.error);

  std::fprintf(out, "====== KL divergence statistics ======\n");
  std::fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", s.kld.value, s.kld.error);
  for (const QuantileRow& row : kKldRows) {
    std::fprintf(out, "%s KLD: %10.6f\n", row.label, s.kld_quantiles.*row.field);
  }
  std::fprintf(out, "\n====== Token probability statistics ======\n");
  std::fprintf(out, "Mean    Δp: %6.3f ± %5.3f %%\n", 100 * s.p_diff.value, 100 * s.p_diff.error);
  for (const QuantileRow& row : kPDiffRows) {
    std::fprintf(out, "%s Δp: %6.3f%%\n", row.label, 100 * (s.p_diff_quantiles.*row.field));
  }
  std::fprintf(out, "RMS Δp    : %6.3f ± %5.3f %%\n", 100 * s.p_diff_rms.value,
               100 * s.p_diff_rms.error);
  std::fprintf(out, "Same top p: %6.3f ± %5.3f %%\n", 100 * s.same_top.value,
               100 * s.same_top.error);
}

nlohmann::json kld_summary_json(const KldSummary& s) {
  return {{"count", s.count},
          {"ppl", value_error(s.ppl)},
          {"ppl_base", value_error(s.ppl_base)},
          {"log_ppl_correlation", s.log_ppl_correlation},
          {"log_ppl_ratio", value_error(s.log_ppl_ratio)},
          {"ppl_ratio", value_error(s.ppl_ratio)},
          {"ppl_diff", value_error(s.ppl_diff)},
          {"kld", value_error(s.kld)},
          {"kld_quantiles", quantiles_json(s.kld_quantiles)},
          {"p_diff", value_error(s.p_diff)},
          {"p_diff_quantiles", quantiles_json(s.p_diff_quantiles)},
          {"p_diff_rms", value_error(s.p_diff_rms)},
          {"same_top", value_error(s.same_top)}};
}

}  // namespace qrun::cli
