// A Backend that runs every op on another backend and records which ops it was given, for
// tests that check where ops land (SplitBackend) or that a caller used the composite ops.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml-like/backend.h"

namespace qrun::test {

class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(Backend& inner) : inner_(inner) {}

  // The ops run so far, in order, by name ("matmul", "matmuls", "add_rms_norm", ...).
  const std::vector<std::string>& ops() const { return ops_; }
  int64_t count(const std::string& op) const {
    int64_t n = 0;
    for (const std::string& o : ops_) n += o == op;
    return n;
  }
  void clear() { ops_.clear(); }

  std::string_view name() const override { return inner_.name(); }
  bool supports(Op op, DType type) const override { return inner_.supports(op, type); }
  bool supports_paged_kv() const override { return inner_.supports_paged_kv(); }
  void kv_to_host(const KvLayerView& cache) override {
    ops_.emplace_back("kv_to_host");
    inner_.kv_to_host(cache);
  }
  void kv_from_host(const KvLayerView& cache) override {
    ops_.emplace_back("kv_from_host");
    inner_.kv_from_host(cache);
  }
  void kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n) override {
    ops_.emplace_back("kv_copy");
    inner_.kv_copy(cache, from, to, n);
  }
  void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) override {
    ops_.emplace_back("matmul");
    inner_.matmul(w, x, n_tokens, y);
  }
  void matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) override {
    ops_.emplace_back("matmuls");
    inner_.matmuls(x, n_tokens, products);
  }
  void get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) override {
    ops_.emplace_back("get_rows");
    inner_.get_rows(table, ids, out);
  }
  void rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override {
    ops_.emplace_back("rms_norm");
    inner_.rms_norm(x, weight, n_rows, n, eps, y);
  }
  void add_rms_norm(float* x, const float* delta, const Tensor& weight, int64_t n_rows, int64_t n,
                    float eps, float* y) override {
    ops_.emplace_back("add_rms_norm");
    inner_.add_rms_norm(x, delta, weight, n_rows, n, eps, y);
  }
  void norm_add_rms_norm(float* x, float* delta, const Tensor& delta_weight, const Tensor& weight,
                         int64_t n_rows, int64_t n, float eps, float* y) override {
    ops_.emplace_back("norm_add_rms_norm");
    inner_.norm_add_rms_norm(x, delta, delta_weight, weight, n_rows, n, eps, y);
  }
  void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
            std::span<const int32_t> positions, const RopeParams& params) override {
    ops_.emplace_back("rope");
    inner_.rope(x, n_tokens, n_head, head_dim, positions, params);
  }
  void rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
               int64_t head_dim, std::span<const int32_t> positions,
               const RopeParams& params) override {
    ops_.emplace_back("rope_qk");
    inner_.rope_qk(q, n_head, k, n_head_kv, n_tokens, head_dim, positions, params);
  }
  void kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                const float* v) override {
    ops_.emplace_back("kv_store");
    inner_.kv_store(cache, pos, n_tokens, k, v);
  }
  void norm_rope_qk_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                          int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                          const RopeParams& params, const HeadNorms& norms,
                          const KvLayerView& cache, int64_t pos) override {
    ops_.emplace_back("norm_rope_qk_store");
    inner_.norm_rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params,
                              norms, cache, pos);
  }
  void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                 const AttentionParams& params, float* out) override {
    ops_.emplace_back("attention");
    inner_.attention(q, n_tokens, pos0, cache, params, out);
  }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    ops_.emplace_back("swiglu");
    inner_.swiglu(gate, up, n, out);
  }
  void geglu(const float* gate, const float* up, int64_t n, float* out) override {
    ops_.emplace_back("geglu");
    inner_.geglu(gate, up, n, out);
  }
  void add(const float* a, const float* b, int64_t n, float* out) override {
    ops_.emplace_back("add");
    inner_.add(a, b, n, out);
  }
  void scale(const float* x, int64_t n, float s, float* out) override {
    ops_.emplace_back("scale");
    inner_.scale(x, n, s, out);
  }
  void softcap(const float* x, int64_t n, float cap, float* out) override {
    ops_.emplace_back("softcap");
    inner_.softcap(x, n, cap, out);
  }
  void gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out) override {
    ops_.emplace_back("gather_rows");
    inner_.gather_rows(x, n, rows, out);
  }
  void weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                        std::span<const float> weights, int64_t k, float* out) override {
    ops_.emplace_back("weighted_row_sum");
    inner_.weighted_row_sum(src, n, rows, weights, k, out);
  }
  void begin_scratch(std::span<const std::span<float>> buffers) override {
    ops_.emplace_back("begin_scratch");
    inner_.begin_scratch(buffers);
  }
  void end_scratch() override {
    ops_.emplace_back("end_scratch");
    inner_.end_scratch();
  }

 private:
  Backend& inner_;
  std::vector<std::string> ops_;
};

}  // namespace qrun::test
