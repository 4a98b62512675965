// The per-tensor rules of llama-quantize for the types qrun runs (see quant_recipe.h).
#include "models/quant_recipe.h"

#include <array>

namespace qrun::models {
namespace {

// llama.cpp's layer choice for "more bits" in the _M mixes: the first and last eighth and
// every third layer in between.
bool use_more_bits(int64_t i, int64_t n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// The recipes, in the order qrun lists them.
struct RecipeRow {
  const char* name;
  DType base;
  QuantMix mix;
  int64_t file_type;
};
constexpr std::array kRecipes = {
    RecipeRow{"f32", DType::kF32, QuantMix::kNone, 0},
    RecipeRow{"f16", DType::kF16, QuantMix::kNone, 1},
    RecipeRow{"bf16", DType::kBF16, QuantMix::kNone, 32},
    RecipeRow{"q8_0", DType::kQ8_0, QuantMix::kNone, 7},
    RecipeRow{"q4_0", DType::kQ4_0, QuantMix::kNone, 2},
    RecipeRow{"q5_0", DType::kQ5_0, QuantMix::kNone, 8},
    RecipeRow{"q4_1", DType::kQ4_1, QuantMix::kNone, 3},
    RecipeRow{"q5_1", DType::kQ5_1, QuantMix::kNone, 9},
    RecipeRow{"iq4_nl", DType::kIQ4_NL, QuantMix::kNone, 25},
    RecipeRow{"iq4_xs", DType::kIQ4_XS, QuantMix::kNone, 30},
    RecipeRow{"q2_k", DType::kQ2_K, QuantMix::kNone, 10},
    RecipeRow{"q3_k_s", DType::kQ3_K, QuantMix::kSmall, 11},
    RecipeRow{"q3_k_m", DType::kQ3_K, QuantMix::kMedium, 12},
    RecipeRow{"q3_k_l", DType::kQ3_K, QuantMix::kLarge, 13},
    RecipeRow{"q4_k", DType::kQ4_K, QuantMix::kNone, 14},
    RecipeRow{"q5_k", DType::kQ5_K, QuantMix::kNone, 16},
    RecipeRow{"q6_k", DType::kQ6_K, QuantMix::kNone, 18},
    RecipeRow{"q4_k_s", DType::kQ4_K, QuantMix::kSmall, 14},
    RecipeRow{"q4_k_m", DType::kQ4_K, QuantMix::kMedium, 15},
    RecipeRow{"q5_k_s", DType::kQ5_K, QuantMix::kSmall, 16},
    RecipeRow{"q5_k_m", DType::kQ5_K, QuantMix::kMedium, 17},
};

}  // namespace

std::optional<QuantRecipe> find_quant_recipe(std::string_view name) {
  for (const RecipeRow& r : kRecipes) {
    if (name == r.name) return QuantRecipe{r.name, r.base, r.mix, r.file_type};
  }
  return std::nullopt;
}

std::vector<std::string> quant_recipe_names() {
  std::vector<std::string> names;
  for (const RecipeRow& r : kRecipes) names.emplace_back(r.name);
  return names;
}

std::string quant_recipe_list() {
  std::string list;
  for (const std::string& n : quant_recipe_names()) list += (list.empty() ? "" : ", ") + n;
  return list;
}

Result<QuantRecipe> quant_recipe_or_error(std::string_view name, const char* command) {
  std::optional<QuantRecipe> recipe = find_quant_recipe(name);
  if (!recipe) {
    return make_error(ErrorCode::kUsage, format("%s: unknown type '%.*s' (known: %s)", command,
                                                static_cast<int>(name.size()), name.data(),
                                                quant_recipe_list().c_str()));
  }
  return *recipe;
}

bool is_quantizable_weight(std::string_view name, int n_dims) {
  constexpr std::string_view kSuffix = "weight";
  return n_dims >= 2 && name.size() >= kSuffix.size() &&
         name.substr(name.size() - kSuffix.size()) == kSuffix && !contains(name, "_norm.weight") &&
         !contains(name, "ffn_gate_inp.weight");
}

DType fit_type(DType want, int64_t row_len) {
  const TypeTraits& t = type_traits(want);
  if (row_len % t.block_elems == 0) return want;
  if (t.block_elems == 256) {
    const DType fallback = want == DType::kQ2_K || want == DType::kQ3_K ? DType::kQ4_0
                           : want == DType::kQ4_K                       ? DType::kQ5_0
                           : want == DType::kQ5_K                       ? DType::kQ5_1
                           : want == DType::kIQ4_XS                     ? DType::kIQ4_NL
                                                                        : DType::kQ8_0;
    if (row_len % type_traits(fallback).block_elems == 0) return fallback;
  }
  return DType::kF16;
}

QuantPlanner::QuantPlanner(QuantRecipe recipe, int64_t n_attn_v, int64_t n_layer, bool has_output,
                           int64_t n_gqa)
    : recipe_(std::move(recipe)),
      n_attn_v_(n_attn_v),
      n_layer_(n_layer),
      has_output_(has_output),
      n_gqa_(n_gqa) {}

DType QuantPlanner::next(std::string_view name, int64_t row_len) {
  const DType base = recipe_.base;
  // Float recipes keep every weight in their type; only quantized ones mix.
  if (!type_traits(base).is_quantized) return base;
  const QuantMix mix = recipe_.mix;
  const bool iq4 = base == DType::kIQ4_NL || base == DType::kIQ4_XS;
  const bool q2 = base == DType::kQ2_K;
  const bool q3 = base == DType::kQ3_K;
  DType type = base;
  if (name == "output.weight" || (!has_output_ && name == "token_embd.weight")) {
    // At least Q6_K, or Q8_0 where the base type's blocks do not tile the row.
    if (row_len % type_traits(base).block_elems != 0) {
      type = DType::kQ8_0;
    } else if (base != DType::kQ8_0) {
      type = DType::kQ6_K;
    }
  } else if (contains(name, "attn_v.weight")) {
    const int64_t i = i_attn_v_++;
    if (q2) type = n_gqa_ >= 4 ? DType::kQ4_K : DType::kQ3_K;
    if (q3 && mix == QuantMix::kMedium) type = i < 2 ? DType::kQ5_K : DType::kQ4_K;
    if (q3 && mix == QuantMix::kLarge) type = DType::kQ5_K;
    if (iq4 && n_gqa_ >= 4) type = DType::kQ5_K;
    if (!q3 && mix == QuantMix::kMedium && use_more_bits(i, n_attn_v_)) type = DType::kQ6_K;
    if (mix == QuantMix::kSmall && base == DType::kQ4_K && i < 4) type = DType::kQ5_K;
  } else if (contains(name, "ffn_down")) {
    const int64_t i = i_ffn_down_++;
    if (q2) type = DType::kQ3_K;
    if (q3 && mix == QuantMix::kMedium) type = i < n_layer_ / 16 ? DType::kQ5_K : DType::kQ4_K;
    if (q3 && mix == QuantMix::kLarge) type = DType::kQ5_K;
    if (!q3 && mix == QuantMix::kMedium && use_more_bits(i, n_layer_)) type = DType::kQ6_K;
    if (mix == QuantMix::kSmall && base == DType::kQ4_K && i < n_layer_ / 8) type = DType::kQ5_K;
    if (iq4 && i < n_layer_ / 8) type = DType::kQ5_K;  // (without an importance matrix)
  } else if (contains(name, "attn_output.weight")) {
    if (q2) type = DType::kQ3_K;
    if (q3 && mix == QuantMix::kMedium) type = DType::kQ4_K;
    if (q3 && mix == QuantMix::kLarge) type = DType::kQ5_K;
  } else if (contains(name, "attn_qkv.weight")) {
    if (q3 && mix != QuantMix::kSmall) {
      type = DType::kQ4_K;
    } else if (mix == QuantMix::kMedium) {
      type = base == DType::kQ4_K ? DType::kQ5_K : DType::kQ6_K;
    }
  }
  return fit_type(type, row_len);
}

}  // namespace qrun::models
