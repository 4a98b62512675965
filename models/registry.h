// The table of architectures qrun can run, keyed by GGUF `general.architecture`, and the
// one entry point that turns an opened GGUF file into a Model.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun::models {

using ModelFactory = Result<std::unique_ptr<Model>> (*)(const gguf::File& file,
                                                        const ModelOptions& options);

struct Architecture {
  std::string_view name;  // general.architecture
  ModelFactory load;
};

// Every registered architecture, in table order.
std::span<const Architecture> architectures();

// Names of the registered architectures, for messages and `qrun --version`.
std::vector<std::string_view> architecture_names();

// Builds the model `file` describes. The model holds views into `file`, which must
// outlive it. An unknown or missing architecture is ErrorCode::kUnsupported (listing the
// supported ones); bad hyper-parameters or weights are the loader's errors.
Result<std::unique_ptr<Model>> load_model(const gguf::File& file, const ModelOptions& options = {});

}  // namespace qrun::models
