// CudaBackend's mixture-of-experts row moves (gather_rows, weighted_row_sum): the row ids
// and weights go up through pinned staging memory, as RoPE's positions do, so that a
// captured decode step holds the copy; the kernels are ops_moe.cu's.
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "ggml-like/result.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

// The rows of n floats that gather_rows or weighted_row_sum reads from its source: up to
// the largest of `rows` (not empty; checked: none negative).
int64_t rows_read(std::span<const int32_t> rows, const char* op) {
  const auto [lo, hi] = std::minmax_element(rows.begin(), rows.end());
  QRUN_CHECK(*lo >= 0, "cuda %s: row %d", op, *lo);
  return int64_t{*hi} + 1;
}

}  // namespace

void CudaBackend::gather_rows(const float* x, int64_t n, std::span<const int32_t> rows,
                              float* out) {
  const auto n_rows = static_cast<int64_t>(rows.size());
  if (n_rows == 0 || n == 0) return;
  const float* dx = input(kIn0, x, rows_read(rows, "gather_rows") * n);
  float* dout = output(kOut, out, n_rows * n);
  const auto* drows =
      reinterpret_cast<const int32_t*>(upload_staged(moe_rows_[0], {std::as_bytes(rows)}));
  cuda::gather_rows(dx, n, drows, n_rows, dout, stream());
  finish_output(out, dout, n_rows * n);
}

void CudaBackend::weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                                   std::span<const float> weights, int64_t k, float* out) {
  QRUN_CHECK(k > 0 && weights.size() >= rows.size(),
             "cuda weighted_row_sum: %zu rows, %zu weights, k = %lld", rows.size(), weights.size(),
             static_cast<long long>(k));
  const int64_t n_out = static_cast<int64_t>(rows.size()) / k;
  if (n_out == 0 || n == 0) return;
  rows = rows.first(static_cast<size_t>(n_out * k));
  weights = weights.first(rows.size());
  const float* dsrc = input(kIn0, src, rows_read(rows, "weighted_row_sum") * n);
  float* dout = output(kOut, out, n_out * n);
  // (rows then weights, both of 4-byte elements: the weights stay aligned)
  const uint8_t* d = upload_staged(moe_rows_[1], {std::as_bytes(rows), std::as_bytes(weights)});
  cuda::weighted_row_sum(dsrc, n, reinterpret_cast<const int32_t*>(d),
                         reinterpret_cast<const float*>(d + rows.size_bytes()), k, n_out, dout,
                         stream());
  finish_output(out, dout, n_out * n);
}

const uint8_t* CudaBackend::upload_staged(StagedCopy& s,
                                          std::initializer_list<std::span<const std::byte>> parts) {
  size_t bytes = 0;
  for (const std::span<const std::byte> p : parts) bytes += p.size();
  if (s.queued || s.device.size() < bytes) {
    // (a copy from staging may be queued or captured; an allocation, after the old's readers)
    flush();
    sync_stream();
  }
  if (s.device.size() < bytes) {
    const size_t room = std::max(bytes, 2 * s.device.size());
    s.staging = PinnedArray<uint8_t>(room);
    s.device = DeviceArray<uint8_t>(room);
  }
  size_t at = 0;
  for (const std::span<const std::byte> p : parts) {
    std::memcpy(s.staging.data() + at, p.data(), p.size());
    at += p.size();
  }
  copy_to_device(s.device.data(), s.staging.data(), bytes, stream());
  staged(s.queued);
  return s.device.data();
}

QRUN_CUDA_NAMESPACE_END
