// A non-owning view of a tensor: type, shape and a pointer to its data.
// Shapes follow GGML: ne[0] is the contiguous row length, ne[1] the number of rows, and
// so on; unused trailing dimensions are 1. A weight matrix W with rows = output features
// has ne = {in_features, out_features}.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "ggml-like/dtype.h"
#include "ggml-like/result.h"

namespace qrun {

struct Tensor {
  DType type = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};
  const void* data = nullptr;
  std::string_view name;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return row_size(type, ne[0]); }
  size_t n_bytes() const { return row_bytes() * static_cast<size_t>(n_rows()); }
  const void* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + static_cast<size_t>(i) * row_bytes();
  }
  // Rows first .. first + n - 1 of a matrix, as a matrix sharing this one's data: rows are
  // contiguous and no quantized block straddles two, so a row range is itself a valid
  // weight (the Q, K and V parts of a fused QKV projection, say). Same name.
  Tensor rows(int64_t first, int64_t n) const {
    QRUN_CHECK(n_dims <= 2 && first >= 0 && n > 0 && first + n <= ne[1],
               "rows %lld .. %lld of a tensor of %lld rows", static_cast<long long>(first),
               static_cast<long long>(first + n), static_cast<long long>(ne[1]));
    Tensor t = *this;
    t.n_dims = 2;
    t.ne[1] = n;
    t.data = row(first);
    return t;
  }
  // Matrix i of a 3-D tensor ([n_in, n_out, n_matrices]: a mixture-of-experts layer's
  // experts, one matrix each), as a matrix sharing this one's data. Same name.
  Tensor matrix(int64_t i) const {
    QRUN_CHECK(n_dims <= 3 && ne[3] == 1 && i >= 0 && i < ne[2], "matrix %lld of a tensor of %lld",
               static_cast<long long>(i), static_cast<long long>(ne[2]));
    Tensor t = *this;
    t.n_dims = 2;
    t.ne[2] = 1;
    t.data = row(i * ne[1]);
    return t;
  }
};

}  // namespace qrun
