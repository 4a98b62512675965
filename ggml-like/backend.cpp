// The host-memory defaults of Backend's mixture-of-experts row moves, compiled without FMA
// contraction (see CMakeLists.txt) so that weighted_row_sum rounds each product as ggml_mul
// does before ggml_add sums them.
#include "ggml-like/backend.h"

namespace qrun {

void Backend::gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out) {
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(out + static_cast<int64_t>(i) * n, x + static_cast<int64_t>(rows[i]) * n,
                static_cast<size_t>(n) * sizeof(float));
  }
}

void Backend::weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                               std::span<const float> weights, int64_t k, float* out) {
  const int64_t n_out = static_cast<int64_t>(rows.size()) / k;
  for (int64_t t = 0; t < n_out; ++t) {
    float* o = out + t * n;
    for (int64_t j = 0; j < k; ++j) {
      const float w = weights[static_cast<size_t>(t * k + j)];
      const float* s = src + static_cast<int64_t>(rows[static_cast<size_t>(t * k + j)]) * n;
      for (int64_t i = 0; i < n; ++i) {
        const float p = w * s[i];  // rounded before the sum, as ggml_mul then ggml_add
        o[i] = j == 0 ? p : o[i] + p;
      }
    }
  }
}

}  // namespace qrun
