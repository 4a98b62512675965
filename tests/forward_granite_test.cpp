// The granite and granitemoe architectures (IBM Granite 3.x): llama's graph with multipliers
// on the embeddings, on each block's output before its residual add, as the attention's
// scale, and dividing the logits. Verified against llama.cpp's logits and greedy tokens on
// models `qrun synth` writes with Granite 3.x 2B's multipliers (references in tests/data, see
// its README), and the load errors of files with bad multipliers. Not verified: a real
// Granite checkpoint.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "models/registry.h"
#include "models/synth.h"
#include "tests/support/gguf_edit.h"
#include "tests/support/llamacpp_rows.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

// Dense, tied output. Measured (generic, avx2, avx512): every row within 5.1e-15; without
// the residual multiplier, 0.53.
TEST(Granite, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch granite --like tiny --tied --type q8_0 --std 0.1 --seed 7", 7660295082031729374ull,
      "granite_tiny_llamacpp.txt", 1e-6);
}

// 8 Q8_0 experts as wide as feed_forward_length, 2 used, renormalized, and a shared expert
// 96 wide with no gate (granitemoeshared). Measured (generic, avx2, avx512): every row within
// 5.5e-15; without the shared expert, 1.7e-2.
TEST(GraniteMoe, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch granitemoe --like tiny --shared-expert-ff 96 --type q8_0 --std 0.1 --seed 7",
      8937841006315948935ull, "granitemoe_tiny_llamacpp.txt", 1e-6);
}

// The load's error for a synthetic granite file with `key` set to `value`, or left out
// (nullopt); "" when it loads.
std::string load_error(const std::string& key, std::optional<gguf::Value> value) {
  Result<gguf::File> vocab = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  EXPECT_TRUE(vocab.ok());
  if (!vocab.ok()) return "no vocabulary";
  models::SynthOptions o;
  o.arch = "granite";
  o.shape = *models::synth_preset("tiny");
  const std::string path = (test::temp_dir() / "granite.gguf").string();
  EXPECT_TRUE(models::write_synthetic_model(o, *vocab, path).ok());
  Result<gguf::File> file = gguf::File::open(path);
  EXPECT_TRUE(file.ok());
  if (!file.ok()) return "no file";
  Result<gguf::File> edited = test::with_key(*file, key, value);
  EXPECT_TRUE(edited.ok());
  if (!edited.ok()) return "not written";
  Result<std::unique_ptr<Model>> model = models::load_model(*edited);
  return model.ok() ? "" : model.error().message;
}

TEST(GraniteLoad, BadMultipliersAreOneLineNamingTheKey) {
  EXPECT_EQ(load_error("granite.residual_scale", std::nullopt), "");  // optional
  const auto has = [](const std::string& message, const char* what) {
    return message.find(what) != std::string::npos;
  };
  std::string e = load_error("granite.logit_scale", std::nullopt);
  EXPECT_TRUE(has(e, "granite.logit_scale")) << e;
  e = load_error("granite.logit_scale", gguf::Value{0.0f});
  EXPECT_TRUE(has(e, "granite.logit_scale")) << e;
  e = load_error("granite.embedding_scale", gguf::Value{-2.0f});
  EXPECT_TRUE(has(e, "granite.embedding_scale")) << e;
  e = load_error("granite.attention.scale", gguf::Value{std::string("x")});
  EXPECT_TRUE(has(e, "granite.attention.scale")) << e;
  // Granite's switch for attention without RoPE.
  e = load_error("granite.rope.scaling.finetuned", gguf::Value{false});
  EXPECT_TRUE(has(e, "granite.rope.scaling.finetuned") && has(e, "not supported")) << e;
  EXPECT_EQ(load_error("granite.rope.scaling.finetuned", gguf::Value{true}), "");
}

}  // namespace
}  // namespace qrun
