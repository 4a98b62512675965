// Quantization recipes: which type each weight of a model gets, with llama-quantize's rules
// (the _S and _M mixes give attn_v and ffn_down of chosen layers more bits, the output
// projection gets at least Q6_K, and a type whose blocks do not tile a row falls back to
// one that does), so that `qrun quantize` writes the same tensors as llama-quantize and
// `qrun synth` the same mix. Some rules count the tensors seen so far, so a planner is
// fed the tensors in file order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/result.h"

namespace qrun::models {

enum class QuantMix { kNone, kSmall, kMedium, kLarge };  // plain type, _S, _M, _L

struct QuantRecipe {
  std::string name;        // "q4_k_m"
  DType base;              // the type of most weights
  QuantMix mix;            // which layers get more bits
  int64_t file_type = -1;  // general.file_type (llama.cpp's llama_ftype), -1: none
};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_1", "q5_1", "iq4_nl", "iq4_xs", "q2_k",
// "q3_k_s", "q3_k_m", "q3_k_l", "q4_k", "q5_k", "q6_k", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m"
// (q4_k and q5_k: every weight of that type, the output at least Q6_K; q2_k is llama-quantize's
// Q2_K mix, attn_v, attn_output and ffn_down in Q3_K or better).
std::optional<QuantRecipe> find_quant_recipe(std::string_view name);
std::vector<std::string> quant_recipe_names();
// The names above, comma-separated, for help texts and errors.
std::string quant_recipe_list();
// find_quant_recipe, or a usage error "<command>: unknown type 'x' (known: ...)".
Result<QuantRecipe> quant_recipe_or_error(std::string_view name, const char* command);

// Whether llama-quantize would quantize a tensor: a matrix whose name ends in "weight" and
// is not a norm.
bool is_quantizable_weight(std::string_view name, int n_dims);

// A type whose blocks tile rows of `row_len`, falling back as llama-quantize does
// (Q2_K and Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, then
// F16).
DType fit_type(DType want, int64_t row_len);

class QuantPlanner {
 public:
  // n_attn_v: how many attn_v weights the model has; n_layer: its block count;
  // has_output: whether it has output.weight (if not, token_embd is the output too);
  // n_gqa: query heads per KV head (the IQ4 recipes give attn_v more bits from 4 on).
  QuantPlanner(QuantRecipe recipe, int64_t n_attn_v, int64_t n_layer, bool has_output,
               int64_t n_gqa = 1);

  // The type of the next weight in file order (call only for quantizable weights).
  DType next(std::string_view name, int64_t row_len);

 private:
  QuantRecipe recipe_;
  int64_t n_attn_v_, n_layer_;
  bool has_output_;
  int64_t n_gqa_;
  int64_t i_attn_v_ = 0, i_ffn_down_ = 0;
};

}  // namespace qrun::models
