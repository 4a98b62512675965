// The phi3 architecture (Microsoft's Phi-3, Phi-3.5 and Phi-4 dense text models): the llama
// layer with fused weights, one attn_qkv matrix for Q, K and V and one ffn_up matrix for
// the SwiGLU gate and up projections, neox RoPE, and LongRoPE for the long-context models
// (per-pair frequency factors, long or short by context size, and an attention factor).
#pragma once

#include <memory>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

// Loads hyper-parameters from "phi3.*" keys and binds every weight with its expected
// shape. The model keeps views into `file`, which must outlive it.
Result<std::unique_ptr<Model>> load_phi3(const gguf::File& file, const ModelOptions& options);

}  // namespace qrun::models
