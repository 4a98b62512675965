// The llama architecture (Llama 1/2/3, TinyLlama, Mistral-style GQA): pre-norm decoder
// layers of RMSNorm -> RoPE self-attention -> residual, RMSNorm -> SwiGLU FFN -> residual,
// then a final RMSNorm and the output projection (tied to token_embd when absent).
#pragma once

#include <memory>

#include "core/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

// Loads hyper-parameters from "llama.*" keys and binds every weight with its expected
// shape. The model keeps views into `file`, which must outlive it.
Result<std::unique_ptr<Model>> load_llama(const gguf::File& file, const ModelOptions& options);

}  // namespace qrun::models
