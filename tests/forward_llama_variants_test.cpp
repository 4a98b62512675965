// Architectures that are the llama graph with one difference, each against llama.cpp's
// logits and greedy tokens on a model `qrun synth` writes (references in tests/data, see its
// README): SmolLM3 (every fourth layer without RoPE), Mistral 3 (YaRN and Llama 4's attention
// temperature) and ERNIE 4.5 dense (llama's graph as it is); and OLMo 2 and 3, whose blocks
// norm their outputs instead of their inputs. Not verified: real checkpoints of these (the
// smallest, ERNIE-4.5-0.3B, is 0.7 GB in Q8_0).
#include <gtest/gtest.h>

#include "tests/support/llamacpp_rows.h"

namespace qrun {
namespace {

// 4 layers, layer 3 without RoPE; F32. Measured (generic, avx2, avx512): every row within
// 2.6e-7 .. 3.2e-7 (F16 roundings of K or V flipped, as in the qwen tests); with RoPE in
// every layer 2e-2.
TEST(Smollm3, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch smollm3 --like tiny --n-layer 4 --head-dim 32 --type f32 --std 0.1 --seed 7",
      15765338429721075426ull, "smollm3_tiny_llamacpp.txt", 1e-6);
}

// YaRN by 4 from an original context of 4, which is also the temperature's step: q at
// positions 4 .. 7 scaled by 1 + 0.1 ln 2, 8 .. 11 by 1 + 0.1 ln 3, 12 .. 15 by 1 + 0.1 ln 4.
// Measured (generic, avx2, avx512): every row within 4.4e-8; without the temperature 1.8e-2.
TEST(Mistral3, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch mistral3 --like tiny --rope-scaling yarn --rope-factor 4 --orig-ctx 4 --type f32 "
      "--std 0.1 --seed 7",
      5808310912218912424ull, "mistral3_tiny_llamacpp.txt", 1e-6);
}

// Q8_0. Measured (generic, avx2, avx512): every row within 6e-15.
TEST(Ernie45, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp("--arch ernie4_5 --like tiny --type q8_0 --std 0.1 --seed 7",
                                      9716796561039654529ull, "ernie4_5_tiny_llamacpp.txt", 1e-6);
}

// OLMo 2: no pre-norms, post-norms, whole-row Q/K norms, neox RoPE; 4 layers, F32.
// Measured (generic, avx2, avx512): every row within 7e-9 .. 1.9e-7; without the attention's
// post-norm 2.4.
TEST(Olmo2, MatchesLlamaCppOnASyntheticModel) {
  test::expect_synth_matches_llamacpp(
      "--arch olmo2 --like tiny --n-layer 4 --type f32 --std 0.1 --seed 7", 10740989696939677320ull,
      "olmo2_tiny_llamacpp.txt", 1e-6);
}

// OLMo 3's shape of the file: layers 0 .. 2 local (a window of 4, plain RoPE), layer 3 global
// with YaRN (by 4 from an original context of 64). Measured (generic, avx2, avx512): every
// row within 5.7e-8 .. 1.6e-7; the local layers scaled as the global one 0.89, every other
// layer local (Gemma 2's pattern) 0.64.
TEST(Olmo2, SlidingWindowsAndYarnMatchLlamaCpp) {
  test::expect_synth_matches_llamacpp(
      "--arch olmo2 --like tiny --n-layer 4 --sliding-window 4 --rope-scaling yarn "
      "--rope-factor 4 --orig-ctx 64 --type f32 --std 0.1 --seed 7",
      11710511797585944189ull, "olmo3_tiny_llamacpp.txt", 1e-6);
}

}  // namespace
}  // namespace qrun
