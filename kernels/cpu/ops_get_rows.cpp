// Embedding lookup: rows of a weight table of any type with a dequantizer, widened to
// float with the traits table's reference to_float (bit-exact with ggml's dequantizers).
#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"

namespace qrun::kernels {

void CpuBackend::get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) {
  const TypeTraits& tt = type_traits(table.type);
  QRUN_CHECK(tt.to_float != nullptr, "get_rows: type %s cannot be dequantized", tt.name);
  const int64_t n = table.ne[0];
  const int64_t n_rows = table.n_rows();
  pool_.parallel_for(static_cast<int64_t>(ids.size()), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int32_t id = ids[static_cast<size_t>(i)];
      QRUN_CHECK(id >= 0 && id < n_rows, "get_rows: row %d out of range [0, %lld)", id,
                 static_cast<long long>(n_rows));
      tt.to_float(table.row(id), out + i * n, n);
    }
  });
}

}  // namespace qrun::kernels
