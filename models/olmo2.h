// The olmo2 architecture (AI2's OLMo 2, 1B to 32B, and OLMo 3 with sliding windows): a decoder
// with no norms before attention or the FFN; instead each block's output is RMS-normed before
// its residual add, Q and K are RMS-normed over each token's whole row, RoPE is neox.
#pragma once

#include <memory>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

// Loads hyper-parameters from "olmo2.*" keys and binds every weight with its expected shape.
// The model keeps views into `file`, which must outlive it.
Result<std::unique_ptr<Model>> load_olmo2(const gguf::File& file, const ModelOptions& options);

}  // namespace qrun::models
