// The CPU backend: every Backend op as a scalar reference kernel, multithreaded over
// output rows (matmul), tokens (rope, norms) or (token, head) pairs (attention) with one
// persistent thread pool. The dot products and quantizers are the reference functions of
// the dtype traits table, so this backend is the oracle later SIMD paths are tested against.
// Not thread-safe: one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ggml-like/backend.h"
#include "ggml-like/thread_pool.h"

namespace qrun::kernels {

class CpuBackend final : public Backend {
 public:
  // n_threads <= 0: one thread per physical core.
  explicit CpuBackend(int n_threads = 0);

  int n_threads() const { return pool_.n_threads(); }
  ThreadPool& pool() { return pool_; }

  std::string_view name() const override { return "cpu"; }
  bool supports(Op op, DType type) const override;

  void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) override;
  void get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) override;
  void rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
            std::span<const int32_t> positions, const RopeParams& params) override;
  void kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                const float* v) override;
  void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                 const AttentionParams& params, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;

 private:
  ThreadPool pool_;
  // Activations converted to a weight's vec_dot_type; grows to the largest batch seen,
  // then is reused (no allocation per token).
  std::vector<uint8_t> act_buf_;
};

}  // namespace qrun::kernels
