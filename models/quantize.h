// `qrun quantize`: rewrites a GGUF model with its weights in another type, choosing each
// tensor's type by a llama-quantize recipe (models/quant_recipe.h) and converting with the
// scalar reference quantizers, so that from the same input the tensors come out byte for
// byte as llama-quantize writes them. Metadata are copied; general.file_type and
// general.quantization_version are set. The output is written to a temporary file and
// renamed into place, so a failure never leaves a half-written model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/gguf/gguf.h"
#include "ggml-like/thread_pool.h"

namespace qrun::models {

struct QuantizeOptions {
  std::string recipe = "q4_k_m";         // see quant_recipe_names()
  bool allow_requantize = false;         // accept weights that are already quantized
  bool pure = false;                     // every weight in the base type: no mix, no output rule
  std::optional<DType> output_type;      // forced type of output.weight
  std::optional<DType> token_embd_type;  // forced type of token_embd.weight
  ThreadPool* pool = nullptr;            // converts rows in parallel when set
  // Called before each tensor is written: its index, the count, the tensor and its new type.
  std::function<void(size_t, size_t, const gguf::TensorInfo&, DType)> on_tensor;
};

struct QuantizeStats {
  size_t n_tensors = 0;
  size_t n_converted = 0;  // tensors whose type changed
  uint64_t bytes_in = 0;   // tensor data
  uint64_t bytes_out = 0;
};

// Errors: an unknown recipe (kUsage), quantized input without allow_requantize (kUsage,
// naming the file and a tensor), a tensor type qrun cannot convert (kUnsupported, naming
// the tensor), and I/O errors naming the output.
Result<QuantizeStats> quantize_model(const gguf::File& in, const std::string& out_path,
                                     const QuantizeOptions& options);

}  // namespace qrun::models
