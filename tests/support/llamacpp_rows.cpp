// Reading llama.cpp's reference rows (llamacpp_rows.h).
#include "tests/support/llamacpp_rows.h"

#include <fstream>
#include <sstream>

namespace qrun::test {

std::vector<LlamaCppRow> read_llamacpp_rows(const std::string& name) {
  std::ifstream in(std::string(QRUN_SOURCE_DIR) + "/tests/data/" + name);
  std::vector<LlamaCppRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    LlamaCppRow r;
    ls >> tag >> r.pos >> r.argmax;
    double v = 0;
    while (ls >> v) r.logits.push_back(v);
    if (tag == "row") rows.push_back(std::move(r));
  }
  return rows;
}

double nmse_strided(const float* logits, const LlamaCppRow& ref) {
  double num = 0, den = 0;
  for (size_t j = 0; j < ref.logits.size(); ++j) {
    const double d = logits[j * kLlamaCppRowStride] - ref.logits[j];
    num += d * d;
    den += ref.logits[j] * ref.logits[j];
  }
  return num / den;
}

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

}  // namespace qrun::test
