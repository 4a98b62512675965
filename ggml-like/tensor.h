// A non-owning view of a tensor: type, shape and a pointer to its data.
// Shapes follow GGML: ne[0] is the contiguous row length, ne[1] the number of rows, and
// so on; unused trailing dimensions are 1. A weight matrix W with rows = output features
// has ne = {in_features, out_features}.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "ggml-like/dtype.h"

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
};

}  // namespace qrun
