// RMS normalization: y = (x * 1/sqrt(mean(x^2) + eps)) * weight, row by row. The sum of
// squares is accumulated in double (as ggml does) so long rows lose nothing to rounding;
// the scale is applied first and the weight second, in float, matching ggml's two ops.
#include <algorithm>

#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {

void CpuBackend::rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n,
                          float eps, float* y) {
  QRUN_CHECK(weight.type == DType::kF32 && weight.n_elements() == n,
             "rms_norm: weight must be f32 [%lld], got %s with %lld elements",
             static_cast<long long>(n), dtype_name(weight.type),
             static_cast<long long>(weight.n_elements()));
  const auto* w = static_cast<const float*>(weight.data);
  const RmsNormRowFn row = kernels_->rms_norm_row;
  pool_.parallel_for(
      n_rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) row(x + r * n, w, n, eps, y + r * n);
      },
      std::max<int64_t>(1, 8192 / std::max<int64_t>(1, n)));
}

}  // namespace qrun::kernels
