// The host runtime (runtime.h) for the emulated build: device memory is host memory and
// every call completes before it returns. New allocations are filled with NaN bytes so
// that a kernel reading what nobody wrote shows up in the tests.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml-like/fp16.h"
#include "ggml-like/result.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

const char* runtime_name() {
  return "emulated";
}

void* device_alloc(size_t bytes) {
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  QRUN_CHECK(p != nullptr, "emulated device_alloc of %zu bytes failed", bytes);
  std::memset(p, 0xff, rounded == 0 ? 256 : rounded);  // 0xffffffff is a NaN as a float
  return p;
}

void device_free(void* ptr) {
  std::free(ptr);
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream) {
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void fill_zero(void* dst, size_t bytes, Stream) {
  if (bytes != 0) std::memset(dst, 0, bytes);
}

void synchronize(Stream) {}

// Each dot in float, p ascending: the F16 values are exact in float, each product rounds
// once and each addition once (cuBLAS sums in another order; the tests bound both).
void gemm_f16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, float* c, int64_t ldc, Stream) {
  QRUN_CHECK(m >= 0 && n >= 0 && k >= 0 && lda >= k && ldb >= k && ldc >= m,
             "gemm_f16: m %lld n %lld k %lld, lda %lld ldb %lld ldc %lld",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
             static_cast<long long>(lda), static_cast<long long>(ldb), static_cast<long long>(ldc));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) row[p] = fp16_to_fp32(a[i * lda + p]);
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* bj = b + j * ldb;
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p) sum += row[p] * fp16_to_fp32(bj[p]);
      c[j * ldc + i] = sum;
    }
  }
}

// Each dot in float, p ascending, as gemm_f16; with beta 1 the sum is then added to c.
void gemm_f16_batched(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                      int64_t stride_a, bool a_rows, const uint16_t* b, int64_t ldb,
                      int64_t stride_b, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                      float beta, Stream) {
  QRUN_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0 && lda >= (a_rows ? k : m) && ldb >= k &&
                 ldc >= m && (beta == 0.0f || beta == 1.0f),
             "gemm_f16_batched: m %lld n %lld k %lld, lda %lld ldb %lld ldc %lld, batch %lld, "
             "beta %g",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
             static_cast<long long>(lda), static_cast<long long>(ldb), static_cast<long long>(ldc),
             static_cast<long long>(batch), static_cast<double>(beta));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t l = 0; l < batch; ++l) {
    const uint16_t* al = a + l * stride_a;
    const uint16_t* bl = b + l * stride_b;
    float* cl = c + l * stride_c;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p)
        row[p] = fp16_to_fp32(a_rows ? al[i * lda + p] : al[p * lda + i]);
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t* bj = bl + j * ldb;
        float sum = 0.0f;
        for (int64_t p = 0; p < k; ++p) sum += row[p] * fp16_to_fp32(bj[p]);
        cl[j * ldc + i] = beta == 0.0f ? sum : cl[j * ldc + i] + sum;
      }
    }
  }
}

QRUN_CUDA_NAMESPACE_END
