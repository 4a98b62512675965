// The demo model (stories260K, MIT, karpathy's tinyllamas) embedded in the binary at
// build time, so that qrun works on a fresh machine with nothing downloaded.
#pragma once

#include <cstdint>
#include <span>

#include "core/gguf/gguf.h"

namespace qrun::cli {

inline constexpr const char* kDemoModelName = "<embedded demo model: stories260K.gguf>";

std::span<const uint8_t> demo_model_bytes();
// Parses the embedded model.
Result<gguf::File> open_demo_model();

}  // namespace qrun::cli
