// The gemma2 and gemma3 architectures (Google's Gemma 2 text models, 2B to 27B, and Gemma 3,
// 270M to 27B): a llama-like decoder with scaled embeddings, RMS norms before and after
// attention and the FFN, a GELU-gated FFN and interleaved sliding-window (local) and global
// layers; Gemma 3 adds per-head Q/K norms, Gemma 2 soft-caps its attention logits.
#pragma once

#include <memory>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

// Load hyper-parameters from "gemma2.*" or "gemma3.*" keys and bind every weight with its
// expected shape. The model keeps views into `file`, which must outlive it.
Result<std::unique_ptr<Model>> load_gemma2(const gguf::File& file, const ModelOptions& options);
Result<std::unique_ptr<Model>> load_gemma3(const gguf::File& file, const ModelOptions& options);

}  // namespace qrun::models
