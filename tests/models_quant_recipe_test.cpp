// QuantPlanner: llama-quantize's per-tensor choices for a 32-layer llama with 4096-wide rows
// (where every k-quant fits) and for narrow rows (where the fallbacks apply).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <string>

#include "models/quant_recipe.h"

namespace qrun::models {
namespace {

std::string blk(int i, const char* t) {
  return "blk." + std::to_string(i) + "." + t + ".weight";
}

TEST(QuantRecipe, MediumMixGivesMoreBitsToChosenLayers) {
  QuantPlanner p(*find_quant_recipe("q4_k_m"), 32, 32, true);
  EXPECT_EQ(p.next("token_embd.weight", 4096), DType::kQ4_K);
  std::string v, d;
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(p.next(blk(i, "attn_q"), 4096), DType::kQ4_K);
    v += p.next(blk(i, "attn_v"), 4096) == DType::kQ6_K ? '6' : '4';
    d += p.next(blk(i, "ffn_down"), 14336) == DType::kQ6_K ? '6' : '4';
  }
  // The first and last eighth and every third layer in between (4 + 2, 4 + 5, ...).
  EXPECT_EQ(v, "66664464464464464464464464466666");
  EXPECT_EQ(d, v);
  EXPECT_EQ(p.next("output.weight", 4096), DType::kQ6_K);
}

TEST(QuantRecipe, SmallMixAndPlainTypes) {
  QuantPlanner s(*find_quant_recipe("q4_k_s"), 32, 32, true);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(s.next(blk(i, "attn_v"), 4096), i < 4 ? DType::kQ5_K : DType::kQ4_K) << i;
    EXPECT_EQ(s.next(blk(i, "ffn_down"), 4096), i < 4 ? DType::kQ5_K : DType::kQ4_K) << i;
  }
  QuantPlanner q8(*find_quant_recipe("q8_0"), 32, 32, true);
  EXPECT_EQ(q8.next("output.weight", 4096), DType::kQ8_0);
  QuantPlanner f16(*find_quant_recipe("f16"), 32, 32, true);
  EXPECT_EQ(f16.next("output.weight", 4096), DType::kF16);
  EXPECT_EQ(find_quant_recipe("q5_1")->file_type, 9);  // LLAMA_FTYPE_MOSTLY_Q5_1
  EXPECT_EQ(find_quant_recipe("q4_1")->base, DType::kQ4_1);
  EXPECT_FALSE(find_quant_recipe("q3_k"));    // llama-quantize's Q3_K files are _S, _M or _L
  EXPECT_FALSE(find_quant_recipe("q2_k_s"));  // needs an importance matrix
}

TEST(QuantRecipe, TiedEmbeddingIsTheOutput) {
  QuantPlanner p(*find_quant_recipe("q4_0"), 2, 2, /*has_output=*/false);
  EXPECT_EQ(p.next("token_embd.weight", 2048), DType::kQ6_K);
}

// The IQ4 recipes (without an importance matrix): attn_v gets Q5_K where 4 or more query
// heads share a KV head, and the first eighth of the ffn_down weights Q5_K.
TEST(QuantRecipe, Iq4RecipesGiveAttnVAndEarlyFfnDownMoreBits) {
  for (const char* name : {"iq4_nl", "iq4_xs"}) {
    SCOPED_TRACE(name);
    const DType base = *dtype_from_name(name);
    QuantPlanner gqa4(*find_quant_recipe(name), 16, 16, true, /*n_gqa=*/4);
    QuantPlanner gqa2(*find_quant_recipe(name), 16, 16, true, /*n_gqa=*/2);
    EXPECT_EQ(gqa4.next("blk.0.attn_v.weight", 4096), DType::kQ5_K);
    EXPECT_EQ(gqa2.next("blk.0.attn_v.weight", 4096), base);
    EXPECT_EQ(gqa2.next("blk.0.attn_q.weight", 4096), base);
    EXPECT_EQ(gqa2.next("blk.0.ffn_down.weight", 4096), DType::kQ5_K);
    EXPECT_EQ(gqa2.next("blk.1.ffn_down.weight", 4096), DType::kQ5_K);
    EXPECT_EQ(gqa2.next("blk.2.ffn_down.weight", 4096), base);
    EXPECT_EQ(gqa2.next("output.weight", 4096), DType::kQ6_K);
  }
  const std::vector<std::string> names = quant_recipe_names();  // what help texts list
  EXPECT_NE(std::find(names.begin(), names.end(), "iq4_xs"), names.end());
  for (const std::string& n : names) EXPECT_TRUE(find_quant_recipe(n)) << n;
  EXPECT_EQ(find_quant_recipe("iq4_nl")->file_type, 25);  // LLAMA_FTYPE_MOSTLY_IQ4_NL
  EXPECT_EQ(find_quant_recipe("iq4_xs")->file_type, 30);  // LLAMA_FTYPE_MOSTLY_IQ4_XS
  // Other recipes keep attn_v at any grouping.
  QuantPlanner q4(*find_quant_recipe("q4_0"), 16, 16, true, 8);
  EXPECT_EQ(q4.next("blk.0.attn_v.weight", 4096), DType::kQ4_0);
}

// The low-bit mixes, as llama-quantize's rules for a 16-layer llama: Q2_K lifts attn_v (Q4_K
// from 4 query heads per KV head, else Q3_K), attn_output and ffn_down to Q3_K; Q3_K_M gives
// the first two attn_v and the first sixteenth of ffn_down Q5_K, the rest of those and
// attn_output Q4_K; Q3_K_L gives all three Q5_K; Q3_K_S changes nothing but the output.
TEST(QuantRecipe, LowBitMixesLiftAttentionAndFfnDown) {
  struct Case {
    const char* recipe;
    int64_t n_gqa;
    DType base, v0, v2, out_proj, down0, down1;
    int64_t file_type;
  };
  const Case cases[] = {
      {"q2_k", 4, DType::kQ2_K, DType::kQ4_K, DType::kQ4_K, DType::kQ3_K, DType::kQ3_K,
       DType::kQ3_K, 10},
      {"q2_k", 2, DType::kQ2_K, DType::kQ3_K, DType::kQ3_K, DType::kQ3_K, DType::kQ3_K,
       DType::kQ3_K, 10},
      {"q3_k_s", 4, DType::kQ3_K, DType::kQ3_K, DType::kQ3_K, DType::kQ3_K, DType::kQ3_K,
       DType::kQ3_K, 11},
      {"q3_k_m", 4, DType::kQ3_K, DType::kQ5_K, DType::kQ4_K, DType::kQ4_K, DType::kQ5_K,
       DType::kQ4_K, 12},
      {"q3_k_l", 1, DType::kQ3_K, DType::kQ5_K, DType::kQ5_K, DType::kQ5_K, DType::kQ5_K,
       DType::kQ5_K, 13},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.recipe) + " n_gqa " + std::to_string(c.n_gqa));
    ASSERT_TRUE(find_quant_recipe(c.recipe));
    EXPECT_EQ(find_quant_recipe(c.recipe)->file_type, c.file_type);
    QuantPlanner p(*find_quant_recipe(c.recipe), 16, 16, true, c.n_gqa);
    EXPECT_EQ(p.next("token_embd.weight", 4096), c.base);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(p.next(blk(i, "attn_q"), 4096), c.base);
      EXPECT_EQ(p.next(blk(i, "attn_v"), 4096), i < 2 ? c.v0 : c.v2);
      EXPECT_EQ(p.next(blk(i, "attn_output"), 4096), c.out_proj);
      EXPECT_EQ(p.next(blk(i, "ffn_up"), 4096), c.base);
      EXPECT_EQ(p.next(blk(i, "ffn_down"), 14336), i < 1 ? c.down0 : c.down1);
    }
    EXPECT_EQ(p.next("output.weight", 4096), DType::kQ6_K);
  }
  // A fused QKV matrix: Q4_K in Q3_K_M and Q3_K_L, Q5_K in Q4_K_M.
  EXPECT_EQ(QuantPlanner(*find_quant_recipe("q3_k_m"), 1, 1, true).next(blk(0, "attn_qkv"), 4096),
            DType::kQ4_K);
  EXPECT_EQ(QuantPlanner(*find_quant_recipe("q3_k_s"), 1, 1, true).next(blk(0, "attn_qkv"), 4096),
            DType::kQ3_K);
  EXPECT_EQ(QuantPlanner(*find_quant_recipe("q4_k_m"), 1, 1, true).next(blk(0, "attn_qkv"), 4096),
            DType::kQ5_K);
}

TEST(QuantRecipe, FallbacksWhenBlocksDoNotTileTheRow) {
  EXPECT_EQ(fit_type(DType::kQ4_K, 64), DType::kQ5_0);
  EXPECT_EQ(fit_type(DType::kQ6_K, 64), DType::kQ8_0);
  EXPECT_EQ(fit_type(DType::kQ5_K, 96), DType::kQ5_1);
  EXPECT_EQ(fit_type(DType::kIQ4_XS, 96), DType::kIQ4_NL);
  EXPECT_EQ(fit_type(DType::kQ2_K, 96), DType::kQ4_0);
  EXPECT_EQ(fit_type(DType::kQ3_K, 64), DType::kQ4_0);
  EXPECT_EQ(fit_type(DType::kQ3_K, 48), DType::kF16);
  EXPECT_EQ(fit_type(DType::kQ4_K, 172), DType::kF16);
  EXPECT_EQ(fit_type(DType::kQ4_0, 172), DType::kF16);
  QuantPlanner p(*find_quant_recipe("q4_0"), 1, 1, true);
  EXPECT_EQ(p.next("output.weight", 64), DType::kQ8_0);  // Q6_K does not fit 64
}

TEST(QuantRecipe, OnlyMatricesNamedWeightAreQuantized) {
  EXPECT_TRUE(is_quantizable_weight("blk.0.attn_q.weight", 2));
  EXPECT_FALSE(is_quantizable_weight("blk.0.attn_norm.weight", 1));
  EXPECT_FALSE(is_quantizable_weight("blk.0.attn_norm.weight", 2));
  EXPECT_FALSE(is_quantizable_weight("rope_freqs", 2));
  EXPECT_FALSE(is_quantizable_weight("blk.0.ffn_gate_inp.weight", 2));
}

}  // namespace
}  // namespace qrun::models
