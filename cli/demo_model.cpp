// Embeds assets/stories260K.gguf with the assembler's .incbin (path from CMake).
#include "cli/demo_model.h"

#include <vector>

__asm__(
    ".section .rodata\n"
    ".balign 64\n"
    "qrun_demo_model_begin:\n"
    ".incbin \"" QRUN_DEMO_MODEL_PATH
    "\"\n"
    "qrun_demo_model_end:\n"
    ".previous\n");

extern "C" const uint8_t qrun_demo_model_begin[];
extern "C" const uint8_t qrun_demo_model_end[];

namespace qrun::cli {

std::span<const uint8_t> demo_model_bytes() {
  return {qrun_demo_model_begin, static_cast<size_t>(qrun_demo_model_end - qrun_demo_model_begin)};
}

Result<gguf::File> open_demo_model() {
  std::span<const uint8_t> bytes = demo_model_bytes();
  return gguf::File::from_bytes(std::vector<uint8_t>(bytes.begin(), bytes.end()), kDemoModelName);
}

}  // namespace qrun::cli
