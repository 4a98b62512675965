// A real model against llama.cpp: Gemma 3 270M Q4_K_M (fetched by scripts/fetch-models.sh)
// and its golden outputs in ../shared/golden/real. The prompts must tokenize to llama.cpp's
// ids exactly. The forward pass is compared teacher-forced: llama.cpp's 48 greedy tokens are
// fed whatever we would have picked, so every step compares the same context (`swa` is 781
// tokens, past the 512-token sliding window, so the local layers must forget the start of
// the prompt). For `once`, every logits row (the prompt from one batched prefill, then 4
// decode steps) is compared by KL divergence; for every step of every prompt, our top token
// must be llama.cpp's unless its top two are within kFlipGap, and our logits of llama.cpp's
// ten best tokens must be close (RMS difference). Runs on every kernel ISA this host runs (the
// generic one without `swa`) and prints a table of the figures.
//
// Why these bounds and not bit-exactness: this model amplifies rounding. Its residual
// stream carries outliers in the hundreds, and llama.cpp's attention keeps its accumulator
// in F16 (as ours does, see kernels/cpu/ref_attention.cpp), so one F32 ulp of difference in
// a score can move an F16 rounding by an F16 ulp, and a Q8_0 activation rounding flips
// downstream. Our three kernel sets (generic, AVX2, AVX-512) differ from each other in
// float summation order only, and differ from llama.cpp and from each other by the same
// amount: prompt rows 0 and 1 agree to 1e-14 NMSE, later rows show a KL divergence of
// 1e-4 .. 9e-3 nats (mean about 2.5e-3). llama.cpp against itself is no closer: on this
// file, turning its flash attention off gives a mean KLD of 7.0e-3 and the same top token
// at 94.8 % of positions (llama-perplexity --kl-divergence, 8 chunks of 512 tokens of
// licence text). A real defect (a wrong RoPE base on the local layers, a missed window,
// soft-capping or norm) gives a KLD of 0.1 and more. The bounds below sit above the
// measured spread, under that of llama.cpp's own flash-attention switch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "models/registry.h"
#include "tests/support/golden.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

constexpr const char* kModel = "gemma-3-270m-q4_k_m";
// Bounds (measured, see the top of the file): the mean and the worst KL divergence of the
// `once` logits rows (nats), the largest top-two gap of llama.cpp's at which our top token
// may differ, and the mean RMS difference of our logits of llama.cpp's ten best tokens.
constexpr double kMeanKld = 5e-3;
constexpr double kMaxKld = 2e-2;
constexpr double kFlipGap = 0.25;
constexpr double kTop10Rms = 0.35;
// Steps (of 48) whose top token must be llama.cpp's: measured 43 .. 48; llama.cpp's own
// flash-attention switch keeps 94.8 %, 45.5 of 48.
constexpr int kMinSameTop = 40;

test::Golden golden(const std::string& prompt, bool with_logits) {
  return test::load_golden(std::string("golden/real/") + kModel + "." + prompt, with_logits);
}

struct Row {
  std::string isa;
  std::string prompt;
  int64_t n_prompt = 0;
  double mean_kld = -1;  // over the logits rows (`once` only)
  double max_kld = -1;
  int top1_same = 0;            // steps whose top token is llama.cpp's
  double widest_flip_gap = -1;  // llama.cpp's top-two gap at our widest disagreement
  double top10_rms = 0;         // mean over steps
};

std::vector<Row>& results() {
  static std::vector<Row> rows;
  return rows;
}

class PrintTable : public ::testing::Environment {
 public:
  void TearDown() override {
    if (results().empty()) return;
    std::ostringstream out;
    out << "\n"
        << kModel << " against llama.cpp, teacher-forced\n"
        << "isa     prompt n_prompt  mean KLD   max KLD  same top  widest flip gap  top-10 RMS\n";
    for (const Row& r : results()) {
      out << std::left << std::setw(8) << r.isa << std::setw(7) << r.prompt << std::right
          << std::setw(8) << r.n_prompt << std::scientific << std::setprecision(2);
      if (r.mean_kld >= 0) {
        out << std::setw(11) << r.mean_kld << std::setw(10) << r.max_kld;
      } else {
        out << std::setw(11) << "-" << std::setw(10) << "-";
      }
      out << std::setw(7) << r.top1_same << "/" << test::kGoldenGreedySteps << std::fixed
          << std::setprecision(4) << std::setw(17);
      if (r.widest_flip_gap >= 0) {
        out << r.widest_flip_gap;
      } else {
        out << "-";
      }
      out << std::setw(12) << r.top10_rms << "\n";
    }
    std::cout << out.str() << std::flush;
  }
};
const auto* const kPrintTable = ::testing::AddGlobalTestEnvironment(new PrintTable);

TEST(ForwardReal, PromptTokensMatchLlamaCpp) {
  QRUN_REAL_MODEL_OR_SKIP(path, std::string(kModel) + ".gguf");
  Result<gguf::File> file = gguf::File::open(path.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  for (const std::string prompt : {"once", "park", "long", "swa"}) {
    const test::Golden g = golden(prompt, false);
    // As llama.cpp made them: BOS added, special tokens not parsed.
    EXPECT_EQ((*tok)->encode(g.prompt_text, true, false), g.prompt) << prompt;
  }
  // Gemma's special tokens parsed in a prompt (turn markers, HTML tags, <unusedN>, <pad>),
  // with accents, CJK, a tab and a double space: llama.cpp's ids, from
  // llama-completion --verbose-prompt (d8a24cce) on the same text.
  const std::string special =
      "<start_of_turn>user\nH\u00e9llo w\u00f6rld! \u65e5\u672c\u8a9e <b>x</b>\t  "
      "tabs<end_of_turn>\n<start_of_turn>model\n<unused5><pad>";
  const std::vector<int32_t> want = {2,   105,    2364,  107,    236814, 7869, 844,    515, 4010,
                                     671, 236888, 33375, 238582, 236743, 200,  236781, 209, 255968,
                                     138, 39218,  106,   107,    105,    4368, 107,    11,  0};
  EXPECT_EQ((*tok)->encode(special, true, true), want);
}

class ForwardReal : public ::testing::TestWithParam<kernels::Isa> {};

// Our logits row for one step against llama.cpp's greedy pick and top ten there.
void compare_step(const float* logits, int64_t n_vocab, const test::Golden& g, size_t step,
                  Row& row) {
  const int32_t ours = test::argmax(logits, n_vocab);
  if (ours == g.greedy[step]) {
    ++row.top1_same;
  } else {
    row.widest_flip_gap = std::max(row.widest_flip_gap, g.top2_gap[step]);
    EXPECT_LT(g.top2_gap[step], kFlipGap)
        << "step " << step << ": our top token " << ours << ", llama.cpp's " << g.greedy[step];
  }
  double sum = 0.0;
  for (const auto& [token, logit] : g.top10[step]) {
    const double d = static_cast<double>(logits[token]) - logit;
    sum += d * d;
  }
  row.top10_rms +=
      std::sqrt(sum / static_cast<double>(g.top10[step].size())) / test::kGoldenGreedySteps;
}

TEST_P(ForwardReal, MatchesLlamaCpp) {
  const kernels::Isa isa = GetParam();
  QRUN_REAL_MODEL_OR_SKIP(path, std::string(kModel) + ".gguf");
  Result<gguf::File> file = gguf::File::open(path.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> model = models::load_model(*file, ModelOptions{512});
  ASSERT_TRUE(model.ok()) << model.error().message;
  kernels::CpuBackend backend(2, isa);
  ASSERT_TRUE((*model)->check_backend(backend).ok());
  Model& m = **model;

  // The generic kernels skip `swa`: their pass over its 781 tokens took 90 % of this test's
  // time (320 s of CPU), the sliding window is the model's and the cache's logic, which the
  // SIMD ISAs check here, and the generic attention over a window's ring is held to theirs
  // in kernels_attention_chunks_test (SlidingWindowRing).
  std::vector<std::string> prompts = {"once", "park", "long", "swa"};
  if (isa == kernels::Isa::kGeneric) prompts.pop_back();
  for (const std::string& prompt : prompts) {
    SCOPED_TRACE(prompt + " on " + kernels::isa_name(isa));
    const bool with_logits = prompt == "once";
    const test::Golden g = golden(prompt, with_logits);
    const int64_t n_vocab = g.n_vocab;
    const auto n_prompt = static_cast<int64_t>(g.prompt.size());
    ASSERT_EQ(m.hparams().n_vocab, n_vocab);
    ASSERT_EQ(g.top10.size(), static_cast<size_t>(test::kGoldenGreedySteps));
    Row row{kernels::isa_name(isa), prompt, n_prompt};
    Result<KvCache> kv = make_kv_cache(m, 1024, DType::kF16);
    ASSERT_TRUE(kv.ok()) << kv.error().message;

    // rows: every prompt row when llama.cpp's are kept, else the last; then one per step.
    const int64_t n_rows = with_logits ? n_prompt : 1;
    std::vector<float> rows(static_cast<size_t>(n_rows * n_vocab));
    ASSERT_TRUE(m.forward(backend, g.prompt, 0, *kv, with_logits, rows.data()).ok());
    std::vector<float> logits(rows.end() - n_vocab, rows.end());
    std::vector<double> klds;
    auto kld_against = [&](const float* ours, int64_t golden_row) {
      klds.push_back(test::kl_divergence(g.logits.data() + golden_row * n_vocab, ours,
                                         static_cast<size_t>(n_vocab)));
    };
    if (with_logits) {
      ASSERT_EQ(static_cast<int64_t>(g.logits.size()),
                (n_prompt + test::kGoldenDecodeRows) * n_vocab);
      for (int64_t r = 0; r < n_prompt; ++r) kld_against(rows.data() + r * n_vocab, r);
    }
    for (int i = 0; i < test::kGoldenGreedySteps; ++i) {
      const auto step = static_cast<size_t>(i);
      if (with_logits && i >= 1 && i <= test::kGoldenDecodeRows) {
        kld_against(logits.data(), n_prompt + i - 1);
      }
      compare_step(logits.data(), n_vocab, g, step, row);
      if (i + 1 == test::kGoldenGreedySteps) break;
      const int32_t tok = g.greedy[step];
      ASSERT_TRUE(m.forward(backend, std::span<const int32_t>(&tok, 1), n_prompt + i, *kv, false,
                            logits.data())
                      .ok());
    }
    if (with_logits) {
      double sum = 0.0;
      for (const double kl : klds) sum += kl;
      row.mean_kld = sum / static_cast<double>(klds.size());
      row.max_kld = *std::max_element(klds.begin(), klds.end());
      EXPECT_LT(row.mean_kld, kMeanKld);
      EXPECT_LT(row.max_kld, kMaxKld);
    }
    EXPECT_LT(row.top10_rms, kTop10Rms);
    EXPECT_GE(row.top1_same, kMinSameTop);
    results().push_back(row);
  }
}

// Every ISA in a plain build. Under the sanitizers the host's best only: the generic
// kernels' pass over the 781-token prompt alone takes many minutes there, and they are held
// to the SIMD ones op by op in the kernels_* tests.
std::vector<kernels::Isa> isas_to_test() {
#ifdef QRUN_SANITIZED
  return {kernels::default_isa()};
#else
  return kernels::host_isas();
#endif
}

INSTANTIATE_TEST_SUITE_P(EveryIsa, ForwardReal, ::testing::ValuesIn(isas_to_test()),
                         [](const ::testing::TestParamInfo<kernels::Isa>& param) {
                           return std::string(kernels::isa_name(param.param));
                         });

}  // namespace
}  // namespace qrun
