// The gemma3 architecture (Google's Gemma 3 text models, 270M to 27B): a llama-like decoder
// with scaled embeddings, RMS norms before and after attention and the FFN, per-head Q/K
// norms, a GELU-gated FFN and interleaved sliding-window (local) and global layers.
#pragma once

#include <memory>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

// Loads hyper-parameters from "gemma3.*" keys and binds every weight with its expected
// shape. The model keeps views into `file`, which must outlive it.
Result<std::unique_ptr<Model>> load_gemma3(const gguf::File& file, const ModelOptions& options);

}  // namespace qrun::models
