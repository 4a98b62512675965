// `qrun perplexity`: on a golden prompt run as one chunk, the figure equals the one computed
// from llama.cpp's own logits for that prompt (same tokens, same scored positions); chunking
// follows llama.cpp's rule; bad input is one line and a documented exit code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/perplexity.h"
#include "support/test_data.h"

namespace qrun {
namespace {

using test::CommandResult;
using test::data_path;
using test::run_command;

std::string write_text(const std::string& text) {
  const std::string path = (test::temp_dir() / "text.txt").string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

nlohmann::json perplexity_json(const std::string& args) {
  CommandResult r = run_command(test::qrun_binary().string() + " perplexity -q --json " + args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(Perplexity, NegativeLogLikelihoodOfAFixedVector) {
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 1000.0f};
  EXPECT_NEAR(negative_log_likelihood(logits, 3), 0.0, 1e-12);
  const std::vector<float> flat = {0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_NEAR(negative_log_likelihood(flat, 2), std::log(4.0), 1e-12);
}

// The perplexity llama.cpp's logits give for a golden prompt scored as one chunk.
double golden_perplexity(const std::string& stem) {
  const auto golden = nlohmann::json::parse(test::read_text(data_path("golden/" + stem + ".json")));
  const std::vector<int32_t> tokens = golden["prompt_tokens"];
  const int64_t n_vocab = golden["n_vocab"];
  const std::vector<uint8_t> bytes = test::read_bytes(data_path("golden/" + stem + ".logits.f32"));
  std::vector<float> logits(bytes.size() / sizeof(float));
  std::memcpy(logits.data(), bytes.data(), logits.size() * sizeof(float));
  const auto n = static_cast<int64_t>(tokens.size());
  double sum = 0;
  int64_t count = 0;
  for (int64_t j = n / 2; j + 1 < n; ++j, ++count) {
    const std::span<const float> row(logits.data() + j * n_vocab, static_cast<size_t>(n_vocab));
    sum += negative_log_likelihood(row, tokens[static_cast<size_t>(j + 1)]);
  }
  return std::exp(sum / static_cast<double>(count));
}

struct GoldenCase {
  const char* stem;
  double rel_tolerance;
};

class PerplexityGolden : public testing::TestWithParam<GoldenCase> {};

TEST_P(PerplexityGolden, MatchesLlamaCppLogits) {
  const std::string stem = GetParam().stem;
  const auto golden = nlohmann::json::parse(test::read_text(data_path("golden/" + stem + ".json")));
  const std::string model = golden["model"];
  const std::string text = write_text(golden["prompt"]);
  const size_t n_tokens = golden["prompt_tokens"].size();
  const nlohmann::json j = perplexity_json("-m '" + data_path("models/" + model).string() +
                                           "' -f '" + text + "' -c " + std::to_string(n_tokens));
  ASSERT_EQ(j["n_tokens"], n_tokens) << "the text must tokenize as the golden prompt did";
  EXPECT_EQ(j["n_chunks"], 1);
  EXPECT_EQ(j["n_scored"], n_tokens - n_tokens / 2 - 1);
  const double want = golden_perplexity(stem);
  EXPECT_NEAR(j["ppl"].get<double>(), want, want * GetParam().rel_tolerance);
}

INSTANTIATE_TEST_SUITE_P(SharedModels, PerplexityGolden,
                         // Quantized: 8-bit activations, where a float-order ulp can flip one
                         // rounding (see forward_golden_test), move the figure by a few 1e-3.
                         testing::Values(GoldenCase{"stories260K.long", 1e-4},
                                         GoldenCase{"stories260K-Q8_0.long", 1e-2},
                                         GoldenCase{"TinyLLama-v0-5M-Q4_K_M.long", 1e-2}));

TEST(Perplexity, ChunksAreWholeAndTheirSecondHalfIsScored) {
  std::string story;
  for (int i = 0; i < 8; ++i) story += "Lily and Tom went to the park. They saw a big red ball. ";
  const std::string text = write_text(story);
  const std::string model = data_path("models/stories260K.gguf").string();
  const nlohmann::json all = perplexity_json("-m '" + model + "' -f '" + text + "' -c 32");
  const int64_t n_tokens = all["n_tokens"];
  EXPECT_EQ(all["n_chunks"], n_tokens / 32);
  EXPECT_EQ(all["n_scored"], all["n_chunks"].get<int64_t>() * 15);
  EXPECT_GT(all["ppl"].get<double>(), 1.0);
  EXPECT_GT(all["ppl_stderr"].get<double>(), 0.0);
  const nlohmann::json two =
      perplexity_json("-m '" + model + "' -f '" + text + "' -c 32 --chunks 2");
  EXPECT_EQ(two["n_chunks"], 2);
  // Stdin works as the text too.
  CommandResult piped = run_command(
      test::qrun_binary().string() + " perplexity -q -m '" + model + "' -f - -c 32", story);
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out.rfind("PPL = ", 0), 0u) << piped.out;
}

TEST(Perplexity, RefusesTextsShorterThanAChunkAndMissingFiles) {
  const std::string model = data_path("models/stories260K.gguf").string();
  CommandResult shorter = run_command(test::qrun_binary().string() + " perplexity -m '" + model +
                                      "' -c 256 -f '" + write_text("Once upon a time") + "'");
  EXPECT_EQ(shorter.exit_code, 2);
  EXPECT_NE(shorter.err.find("fewer than one chunk of 256"), std::string::npos) << shorter.err;
  EXPECT_TRUE(shorter.out.empty());

  CommandResult missing = run_command(test::qrun_binary().string() + " perplexity -m '" + model +
                                      "' -f /nonexistent/text.txt");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.err.find("/nonexistent/text.txt"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace qrun
