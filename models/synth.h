// Synthetic decoder models (llama, qwen2, qwen3, gemma2, gemma3, phi3 and the rest of
// synth_arch_names()) with random weights, for
// benchmarks and tests: any shape, any weight recipe, and the tokenizer copied from a vocab-only
// GGUF file. The same options and vocabulary always give the same bytes. Memory traffic and
// arithmetic do not depend on the values, so these stand in for full-size downloads.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"

namespace qrun::models {

struct SynthShape {
  int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0;
  int64_t n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_output = false;    // no output.weight: the token embedding is reused
  int64_t head_dim = 0;        // 0: n_embd / n_head
  int64_t rope_dims = 0;       // rotated elements per head, even (0: head_dim; Phi-4-mini: 3/4)
  int64_t sliding_window = 0;  // gemma: the local layers' window (0: 512); phi3: the key only
  // phi3: rope.scaling.original_context_length (0: n_ctx). Below n_ctx, the file also gets
  // random LongRoPE factors (rope_factors_long / _short) and LongRoPE's attention factor.
  int64_t rope_orig_ctx = 0;
  // Mixture of experts: llama and granite with n_expert > 0, qwen3moe, qwen2moe, olmoe and
  // granitemoe (default 8). The router is F32 (llama-quantize keeps it so); 0 used: 2; 0 width:
  // n_ff.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;  // qwen2moe: the shared expert's width (0: n_ff); granite: 0 none
};

// Named shapes: "tinyllama-1.1b", "llama-3.2-1b", "llama-3-8b", ...
std::optional<SynthShape> synth_preset(const std::string& name);
std::vector<std::string> synth_preset_names();

// Architectures write_synthetic_model can write.
std::vector<std::string> synth_arch_names();

struct SynthOptions {
  // llama, qwen2 (random Q/K/V biases), qwen3 (random Q/K norms), gemma3 (random Q/K norms,
  // post-attention and post-FFN norms, a sliding window on 5 of every 6 layers, tied output),
  // gemma2 (gemma3 without the Q/K norms, a window on every other layer, and Gemma 2's
  // attention and output soft-caps of 50 and 30),
  // phi3 (fused attn_qkv and gate-up ffn_up, LongRoPE factors when rope_orig_ctx < n_ctx),
  // qwen3moe (qwen3 with a mixture of experts in every layer), qwen2moe (qwen2 with a
  // mixture of experts and a shared expert with an F32 gate in every layer), olmoe (llama
  // with random Q/K norms over whole rows and experts as wide as n_ff), granite (llama with
  // Granite 3.x 2B's multipliers; experts as wide as n_ff with --experts), granitemoe
  // (granite with experts, default 8; a gateless shared expert with n_ff_shexp)
  std::string arch = "llama";
  SynthShape shape;
  std::string recipe = "q4_0";  // a weight type name, or "q4_k_m" / "q4_k_s" / "q5_k_m"
  uint64_t seed = 42;
  float weight_std = 0.02f;
  std::string name = "qrun-synth";
  // Logit soft-caps (0: the architecture's own: gemma2 50 and 30, none elsewhere). Tests set
  // small ones, whose effect shows on small random weights.
  float attn_softcap = 0.0f;   // gemma2 only
  float final_softcap = 0.0f;  // gemma2 or gemma3
  // RoPE scaling ("" none; "linear" or "yarn", any architecture but phi3) by rope_factor;
  // yarn writes shape.rope_orig_ctx as its original context when given.
  std::string rope_scaling;
  float rope_factor = 0.0f;
};

// Names accepted as SynthOptions::recipe.
std::vector<std::string> synth_recipe_names();

// Writes a synthetic model to `path`, taking the tokenizer.* keys from `vocab`.
Result<void> write_synthetic_model(const SynthOptions& options, const gguf::File& vocab,
                                   const std::string& path);

}  // namespace qrun::models
