// The llama architecture (Llama 1/2/3, TinyLlama, Mistral-style GQA): pre-norm decoder
// layers of RMSNorm -> RoPE self-attention -> residual, RMSNorm -> SwiGLU FFN -> residual,
// then a final RMSNorm and the output projection (tied to token_embd when absent).
// Qwen2 and Qwen3 are this graph with small differences, so they are flags of the same
// class: Qwen2 adds biases to Q, K and V; Qwen3 RMS-norms each Q and K head before RoPE and
// may have head_dim != n_embd / n_head; both rotate halves (neox RoPE), not adjacent pairs.
// Mixtral-style llama files and Qwen3-MoE replace the SwiGLU FFN with a mixture of SwiGLU
// experts (models/moe.h).
#pragma once

#include <memory>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

// Loads hyper-parameters from "llama.*" keys and binds every weight with its expected
// shape. The model keeps views into `file`, which must outlive it.
// A file with "llama.expert_count" above 0 has mixture-of-experts FFNs (Mixtral).
Result<std::unique_ptr<Model>> load_llama(const gguf::File& file, const ModelOptions& options);
// Same, from "qwen2.*" keys, with attn_{q,k,v}.bias required in every layer.
Result<std::unique_ptr<Model>> load_qwen2(const gguf::File& file, const ModelOptions& options);
// Same, from "qwen3.*" keys, with attn_q_norm / attn_k_norm ([head_dim]) in every layer.
Result<std::unique_ptr<Model>> load_qwen3(const gguf::File& file, const ModelOptions& options);
// Qwen3 with mixture-of-experts FFNs, from "qwen3moe.*" keys (expert_count required).
Result<std::unique_ptr<Model>> load_qwen3moe(const gguf::File& file, const ModelOptions& options);

// Qwen2 with mixture-of-experts FFNs and a shared expert (Qwen1.5-MoE, Qwen2-57B-A14B), from
// "qwen2moe.*" keys (expert_count required).
Result<std::unique_ptr<Model>> load_qwen2moe(const gguf::File& file, const ModelOptions& options);

// OLMoE (OLMoE-1B-7B): llama's graph with RMS norms over each token's whole Q and K rows,
// neox RoPE, and mixture-of-experts FFNs whose weights are not renormalized, from "olmoe.*"
// keys (expert_count required).
Result<std::unique_ptr<Model>> load_olmoe(const gguf::File& file, const ModelOptions& options);

// IBM Granite 3.x dense (granite) and mixture-of-experts (granitemoe, with or without a
// shared expert): llama's graph with multipliers on the embeddings, the blocks' outputs, the
// attention scores and the logits.
Result<std::unique_ptr<Model>> load_granite(const gguf::File& file, const ModelOptions& options);
Result<std::unique_ptr<Model>> load_granitemoe(const gguf::File& file, const ModelOptions& options);

// SmolLM3: llama's graph with every fourth layer attending without RoPE, from "smollm3.*"
// keys.
Result<std::unique_ptr<Model>> load_smollm3(const gguf::File& file, const ModelOptions& options);

// Mistral 3 (Ministral 3, Mistral Small 3.x as mistral3): llama's graph, YaRN RoPE as the file
// says, and q scaled by Llama 4's attention temperature beyond the original context
// ("mistral3.attention.temperature_scale"); mixture-of-experts FFNs with expert_count.
Result<std::unique_ptr<Model>> load_mistral3(const gguf::File& file, const ModelOptions& options);

// ERNIE 4.5 dense (ERNIE-4.5-0.3B): llama's graph, from "ernie4_5.*" keys.
Result<std::unique_ptr<Model>> load_ernie4_5(const gguf::File& file, const ModelOptions& options);

}  // namespace qrun::models
