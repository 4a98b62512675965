// The architecture table. Each architecture file adds one row.
#include "models/registry.h"

#include <array>
#include <string>

#include "models/gemma3.h"
#include "models/llama.h"
#include "models/olmo2.h"
#include "models/phi3.h"

namespace qrun::models {
namespace {

constexpr std::array kArchitectures = {
    Architecture{"llama", load_llama},       Architecture{"qwen2", load_qwen2},
    Architecture{"qwen3", load_qwen3},       Architecture{"qwen2moe", load_qwen2moe},
    Architecture{"qwen3moe", load_qwen3moe}, Architecture{"olmoe", load_olmoe},
    Architecture{"granite", load_granite},   Architecture{"granitemoe", load_granitemoe},
    Architecture{"gemma2", load_gemma2},     Architecture{"gemma3", load_gemma3},
    Architecture{"phi3", load_phi3},         Architecture{"smollm3", load_smollm3},
    Architecture{"mistral3", load_mistral3}, Architecture{"ernie4_5", load_ernie4_5},
    Architecture{"olmo2", load_olmo2},
};

}  // namespace

std::span<const Architecture> architectures() {
  return kArchitectures;
}

std::vector<std::string_view> architecture_names() {
  std::vector<std::string_view> names;
  for (const Architecture& a : kArchitectures) names.push_back(a.name);
  return names;
}

Result<std::unique_ptr<Model>> load_model(const gguf::File& file, const ModelOptions& options) {
  Result<std::string> arch = file.get_string("general.architecture");
  if (!arch.ok()) return arch.error();
  for (const Architecture& a : kArchitectures) {
    if (a.name == *arch) return a.load(file, options);
  }
  std::string supported;
  for (const Architecture& a : kArchitectures) {
    if (!supported.empty()) supported += ", ";
    supported += a.name;
  }
  return file.error(ErrorCode::kUnsupported,
                    format("architecture '%s' is not supported (supported: %s)", arch->c_str(),
                           supported.c_str()));
}

}  // namespace qrun::models
