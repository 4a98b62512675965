// The KL-divergence base file and statistics (core/kld_base_file.h, core/kl_divergence.h):
// the row encoding against exact log-softmax values, the statistics on hand-computed
// cases, a write/read round trip, and a clear error for every corrupt or truncated file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/kl_divergence.h"
#include "core/kld_base_file.h"
#include "support/test_data.h"

namespace qrun {
namespace {

std::vector<uint16_t> encode(const std::vector<float>& logits) {
  std::vector<uint16_t> row(
      static_cast<size_t>(kld_row_words(static_cast<int64_t>(logits.size()))));
  encode_log_probs(logits, row);
  return row;
}

std::vector<double> log_softmax(const std::vector<float>& logits) {
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l));
  std::vector<double> out;
  for (float l : logits) out.push_back(l - std::log(sum));
  return out;
}

TEST(KldRow, EncodesLogProbabilitiesToAStepOfScaleAndClipsBelowSixteen) {
  // Odd vocabulary: 4 + 6 words, the last one padding.
  const std::vector<float> logits = {1.0f, 0.5f, -3.0f, -30.0f, 0.25f};
  const std::vector<uint16_t> row = encode(logits);
  ASSERT_EQ(row.size(), 10u);
  EXPECT_EQ(row[9], 0);
  const float scale = kld_row_scale(row);
  const float min_log_prob = kld_row_min_log_prob(row);
  EXPECT_FLOAT_EQ(scale, 16.0f / 65535.0f);  // max 1, clipped min 1 - 16
  const std::vector<double> want = log_softmax(logits);
  EXPECT_NEAR(min_log_prob, want[0] - 16.0, 1e-5);
  EXPECT_EQ(row[4], 65535);  // the top logit
  for (size_t i : {0u, 1u, 2u, 4u}) {
    EXPECT_NEAR(decode_log_prob(scale, min_log_prob, row[4 + i]), want[i], scale / 2 + 1e-5) << i;
  }
  EXPECT_EQ(row[4 + 3], 0);  // -30 is more than 16 below the top: clipped
}

TEST(KldRow, AFlatRowIsUniform) {
  const std::vector<uint16_t> row = encode({2.0f, 2.0f, 2.0f, 2.0f});
  EXPECT_EQ(kld_row_scale(row), 0.0f);
  EXPECT_NEAR(kld_row_min_log_prob(row), -std::log(4.0), 1e-6);
  for (size_t i = 4; i < row.size(); ++i) EXPECT_EQ(row[i], 0);
}

TEST(KldScore, HandComputedTwoTokenCase) {
  // Base p = (1/2, 1/2); model p = (1/4, 3/4).
  // KLD = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3).
  const std::vector<uint16_t> base = encode({0.0f, 0.0f});
  const std::vector<float> model = {0.0f, static_cast<float>(std::log(3.0))};
  const KldTokenScore s = score_token(model, base, 1);
  EXPECT_NEAR(s.kld, 0.5 * std::log(4.0 / 3.0), 1e-6);
  EXPECT_NEAR(s.nll, -std::log(0.75), 1e-6);
  EXPECT_NEAR(s.nll_base, std::log(2.0), 1e-6);
  EXPECT_NEAR(s.p_diff, 0.25, 1e-6);
  EXPECT_FALSE(s.same_top);  // the model's top is 1; the base's tie goes to 0
  const KldTokenScore back = score_token(model, encode(model), 0);
  EXPECT_TRUE(back.same_top);
  EXPECT_NEAR(back.p_diff, 0.0, 1e-4);
}

TEST(KldScore, AModelAgainstItsOwnRowIsZeroUpToTheEncodingStep) {
  // Each decoded log-probability is within scale/2 <= 16/65535/2 = 1.2e-4 of the exact one,
  // and the KLD is their p_base-weighted sum, so |KLD| <= 1.3e-4 (with float rounding).
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * i) * 8.0f;
  const KldTokenScore s = score_token(logits, encode(logits), 17);
  EXPECT_LT(std::fabs(s.kld), 1.3e-4);
  EXPECT_TRUE(s.same_top);
  EXPECT_NEAR(s.nll, s.nll_base, 1.3e-4);
}

TEST(KldSummary, HandComputedStatistics) {
  // 12 tokens: KLD k = 0..11, NLL 1 + k/10 against a constant base NLL of 1, Δp alternating
  // +-0.1, and the same top for 9 of them.
  KldAccumulator acc;
  for (int k = 0; k < 12; ++k) {
    acc.add({.kld = static_cast<double>(k),
             .nll = 1.0 + 0.1 * k,
             .nll_base = 1.0,
             .p_diff = k % 2 == 0 ? 0.1f : -0.1f,
             .same_top = k < 9});
  }
  const KldSummary s = acc.summary();
  EXPECT_EQ(s.count, 12);
  // Mean 5.5; population variance (12^2 - 1) / 12; error sqrt(variance / 11).
  EXPECT_DOUBLE_EQ(s.kld.value, 5.5);
  EXPECT_NEAR(s.kld.error, std::sqrt(143.0 / 12.0 / 11.0), 1e-12);
  EXPECT_DOUBLE_EQ(s.kld_quantiles.max, 11);
  EXPECT_DOUBLE_EQ(s.kld_quantiles.min, 0);
  EXPECT_DOUBLE_EQ(s.kld_quantiles.median, 5.5);    // between the 6th and 7th
  EXPECT_NEAR(s.kld_quantiles.p90, 9.9, 1e-12);     // at 0.9 * 11
  EXPECT_NEAR(s.kld_quantiles.p0_1, 0.011, 1e-12);  // at 0.001 * 11
  EXPECT_NEAR(s.kld_quantiles.p99_9, 11 - 0.011, 1e-12);
  EXPECT_NEAR(s.same_top.value, 0.75, 1e-12);
  EXPECT_NEAR(s.same_top.error, std::sqrt(0.75 * 0.25 / 11), 1e-12);
  EXPECT_NEAR(s.p_diff.value, 0.0, 1e-9);
  EXPECT_NEAR(s.p_diff_rms.value, 0.1, 1e-7);
  EXPECT_NEAR(s.p_diff_quantiles.max, 0.1, 1e-7);
  EXPECT_NEAR(s.p_diff_quantiles.min, -0.1, 1e-7);
  // PPL(Q) = exp(1.55), PPL(base) = e; the base NLL has no spread, so the ratio's error is
  // PPL(Q)'s alone: sqrt(0.01 * 143/12 / 11).
  const double log_error = std::sqrt(0.01 * 143.0 / 12.0 / 11.0);
  EXPECT_NEAR(s.ppl.value, std::exp(1.55), 1e-12);
  EXPECT_NEAR(s.ppl.error, std::exp(1.55) * log_error, 1e-9);
  EXPECT_NEAR(s.ppl_base.value, std::exp(1.0), 1e-12);
  EXPECT_EQ(s.ppl_base.error, 0.0);
  EXPECT_NEAR(s.log_ppl_ratio.value, 0.55, 1e-12);
  EXPECT_NEAR(s.log_ppl_ratio.error, log_error, 1e-9);
  EXPECT_NEAR(s.ppl_ratio.value, std::exp(0.55), 1e-12);
  EXPECT_NEAR(s.ppl_diff.value, std::exp(1.55) - std::exp(1.0), 1e-12);
}

TEST(KldSummary, FewTokensHaveNoErrorBars) {
  KldAccumulator acc;
  acc.add({.kld = 1.0, .nll = 1, .nll_base = 1, .p_diff = 0, .same_top = true});
  acc.add({.kld = 3.0, .nll = 1, .nll_base = 1, .p_diff = 0, .same_top = true});
  const KldSummary s = acc.summary();
  EXPECT_DOUBLE_EQ(s.kld.value, 2.0);
  EXPECT_EQ(s.kld.error, 0.0);  // n <= 10
  EXPECT_DOUBLE_EQ(s.kld_quantiles.median, 2.0);
  EXPECT_EQ(s.same_top.value, 1.0);
}

// ---- The file ----

constexpr int64_t kCtx = 6, kVocab = 5, kChunks = 2;  // 2 scored rows per chunk

std::vector<float> chunk_logits(int64_t chunk) {
  std::vector<float> l(static_cast<size_t>(kld_scored_per_chunk(kCtx) * kVocab));
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::cos(0.9f * i + chunk) * 3.0f;
  return l;
}

std::vector<int32_t> file_tokens() {
  std::vector<int32_t> t(static_cast<size_t>(kCtx * kChunks));
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 3) % kVocab);
  return t;
}

std::string write_base() {
  const std::string path = (test::temp_dir() / "base.kld").string();
  Result<KldBaseWriter> w = KldBaseWriter::create(path, kCtx, kVocab, file_tokens());
  EXPECT_TRUE(w.ok()) << w.error().message;
  for (int64_t c = 0; c < kChunks; ++c) EXPECT_TRUE(w->append_chunk(chunk_logits(c)).ok());
  EXPECT_TRUE(w->finish().ok());
  return path;
}

TEST(KldFile, RoundTrip) {
  const std::string path = write_base();
  // 20 header + 12 tokens * 4 + 2 chunks * 2 rows * (4 + 6) words * 2
  EXPECT_EQ(test::read_bytes(path).size(), 20u + 48u + 80u);
  Result<KldBaseReader> r = KldBaseReader::open(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->header().n_ctx, kCtx);
  EXPECT_EQ(r->header().n_vocab, kVocab);
  EXPECT_EQ(r->header().n_chunk, kChunks);
  EXPECT_EQ(r->tokens(), file_tokens());
  const int64_t words = kld_row_words(kVocab);
  for (int64_t c = 0; c < kChunks; ++c) {
    Result<std::span<const uint16_t>> rows = r->read_chunk();
    ASSERT_TRUE(rows.ok()) << rows.error().message;
    const std::vector<float> logits = chunk_logits(c);
    for (int64_t j = 0; j < kld_scored_per_chunk(kCtx); ++j) {
      const std::span<const float> row_logits(logits.data() + j * kVocab, kVocab);
      const KldTokenScore s = score_token(row_logits, rows->subspan(j * words, words), 2);
      EXPECT_LT(std::fabs(s.kld), 1.3e-4);
      EXPECT_TRUE(s.same_top);
    }
  }
}

// An interrupted run (Ctrl-C, an error mid-way) drops the writer before finish(): the base
// file from an earlier run must stay whole, and no partial file may be left to be read later.
// (qrun perplexity used to delete the path outright.)
TEST(KldFile, AWriterDroppedBeforeFinishLeavesTheEarlierFileWhole) {
  const std::string path = write_base();
  const std::vector<uint8_t> earlier = test::read_bytes(path);
  {
    Result<KldBaseWriter> w = KldBaseWriter::create(path, kCtx, kVocab, file_tokens());
    ASSERT_TRUE(w.ok()) << w.error().message;
    ASSERT_TRUE(w->append_chunk(chunk_logits(7)).ok());
  }
  EXPECT_EQ(test::read_bytes(path), earlier);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

struct Corruption {
  const char* name;
  size_t offset;  // where to write `value`, or the size to cut the file to
  bool truncate;
  int32_t value;
  const char* message;  // expected in the error
  bool on_read;         // reported by read_chunk, not open
};

class KldCorrupt : public testing::TestWithParam<Corruption> {};

TEST_P(KldCorrupt, IsAnErrorNamingTheFileAndOffset) {
  const Corruption& c = GetParam();
  const std::string path = write_base();
  std::vector<uint8_t> bytes = test::read_bytes(path);
  if (c.truncate) {
    bytes.resize(c.offset);
  } else if (c.offset == SIZE_MAX) {
    bytes.push_back(0);
  } else {
    std::memcpy(bytes.data() + c.offset, &c.value, sizeof c.value);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  Result<KldBaseReader> r = KldBaseReader::open(path);
  Error e;
  if (c.on_read) {
    ASSERT_TRUE(r.ok()) << r.error().message;
    Result<std::span<const uint16_t>> rows = r->read_chunk();
    ASSERT_FALSE(rows.ok());
    e = rows.error();
  } else {
    ASSERT_FALSE(r.ok());
    e = r.error();
  }
  EXPECT_EQ(e.code, ErrorCode::kFormat);
  EXPECT_EQ(e.message.rfind(path + ": offset ", 0), 0u) << e.message;
  EXPECT_NE(e.message.find(c.message), std::string::npos) << e.message;
}

const float kNan = std::numeric_limits<float>::quiet_NaN();
int32_t float_bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, KldCorrupt,
    testing::Values(
        Corruption{"magic", 0, false, 0x41414141, "offset 0: not a KL-divergence base file", false},
        Corruption{"header", 13, true, 0, "offset 13: truncated: 13 bytes", false},
        Corruption{"n_ctx", 8, false, 0, "offset 8: n_ctx is 0", false},
        Corruption{"n_vocab", 12, false, -5, "offset 12: n_vocab is -5", false},
        Corruption{"huge_n_chunk", 16, false, 1 << 26, "truncated in the tokens", false},
        Corruption{"n_chunk_too_big", 16, false, 1 << 27, "n_chunk is 134217728", false},
        Corruption{"tokens", 40, true, 0, "offset 40: truncated in the tokens", false},
        Corruption{"chunk", 140, true, 0,
                   "offset 140: truncated in chunk 2 of 2, which ends at "
                   "offset 148",
                   false},
        Corruption{"trailing", SIZE_MAX, false, 0, "offset 148: 1 bytes after the last", false},
        Corruption{"token", 20 + 4 * 7, false, 5, "offset 48: token 7 is 5, outside", false},
        Corruption{"scale", 68, false, float_bits(kNan), "chunk 1 row 0 has scale nan", true},
        Corruption{"min", 68 + 20 + 4, false, float_bits(1.0f), "offset 88: chunk 1 row 1", true}),
    [](const testing::TestParamInfo<Corruption>& p) { return std::string(p.param.name); });

TEST(KldFile, MissingFilesAndDirectoriesAreIoErrors) {
  Result<KldBaseReader> missing = KldBaseReader::open("/nonexistent/base.kld");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);
  EXPECT_NE(missing.error().message.find("/nonexistent/base.kld"), std::string::npos);
  Result<KldBaseReader> dir = KldBaseReader::open(test::temp_dir().string());
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.error().code, ErrorCode::kIo);
}

TEST(KldFile, TokenMismatchNamesTheFirstDifference) {
  const std::vector<int32_t> base = file_tokens();
  const KldBaseHeader h{kCtx, kVocab, kChunks};
  std::vector<int32_t> text = base;
  text.push_back(1);  // a longer text is fine: only its first n_chunk * n_ctx tokens count
  EXPECT_TRUE(check_kld_tokens("b.kld", h, base, text).ok());
  text[8] = (text[8] + 1) % kVocab;
  const Result<void> differ = check_kld_tokens("b.kld", h, base, text);
  ASSERT_FALSE(differ.ok());
  EXPECT_EQ(differ.error().code, ErrorCode::kUsage);
  EXPECT_NE(differ.error().message.find("b.kld: token 8 (chunk 2, position 2; offset 52)"),
            std::string::npos)
      << differ.error().message;
  const Result<void> shorter =
      check_kld_tokens("b.kld", h, base, std::span<const int32_t>(base).first(5));
  ASSERT_FALSE(shorter.ok());
  EXPECT_NE(shorter.error().message.find("ends at token 5 (chunk 1, position 5"), std::string::npos)
      << shorter.error().message;
}

}  // namespace
}  // namespace qrun
