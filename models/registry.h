// The table of architectures qrun can run, keyed by GGUF `general.architecture`.
#pragma once

#include <string_view>
#include <vector>

namespace qrun::models {

// Names of the registered architectures, for messages and `qrun --version`.
std::vector<std::string_view> architecture_names();

}  // namespace qrun::models
