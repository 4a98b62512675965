// Two backends sharing one model, as -ngl N splits it: the weights of some layers are
// placed on the second backend (a GPU), the rest on the first (the CPU). Each op runs where
// its weights are (a matmul's matrix, a norm's weight); an op without weights (RoPE, KV
// store, attention, the gated activations, add, scale, softcap, the experts' row moves) runs where
// the op before it ran, which in a decoder is the layer it belongs to. get_rows always runs on the
// first backend (the embedding is looked up on the host, as llama.cpp does). This is how
// llama.cpp's scheduler assigns a graph's nodes to backends: by weight, then spread to the
// neighbours.
// Memory: the second backend is never given the model's scratch scope, so each of its ops
// copies its inputs in and its outputs back (the Backend contract): every op sees the host
// memory the other backend wrote. Each KV cache layer stays on the backend of its layer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ggml-like/backend.h"

namespace qrun {

class SplitBackend final : public Backend {
 public:
  // Bytes of one weight placed on the second backend.
  struct Placement {
    const void* data;
    size_t n_bytes;
  };
  // `on_second`: every weight the second backend runs (whole tensors, not overlapping).
  SplitBackend(std::unique_ptr<Backend> first, std::unique_ptr<Backend> second,
               std::span<const Placement> on_second);

  Backend& first() const { return *first_; }
  Backend& second() const { return *second_; }

  std::string_view name() const override { return name_; }
  // Only what both run: an op may land on either, depending on its layer.
  bool supports(Op op, DType type) const override;
  bool supports_paged_kv() const override {
    return first_->supports_paged_kv() && second_->supports_paged_kv();
  }

  void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) override;
  void matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) override;
  void get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) override;
  void rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  // Fused where both weights live on one backend (a layer's post-norm and the next
  // layer's norm may not).
  void norm_add_rms_norm(float* x, float* delta, const Tensor& delta_weight, const Tensor& weight,
                         int64_t n_rows, int64_t n, float eps, float* y) override;
  void add_rms_norm(float* x, const float* delta, const Tensor& weight, int64_t n_rows, int64_t n,
                    float eps, float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
            std::span<const int32_t> positions, const RopeParams& params) override;
  void rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
               int64_t head_dim, std::span<const int32_t> positions,
               const RopeParams& params) override;
  void kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                const float* v) override;
  void rope_qk_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                     int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                     const RopeParams& params, const KvLayerView& cache, int64_t pos) override;
  // Where both norms' weights are on the backend the step runs on, that backend runs the
  // whole op; else each op runs where its weight is.
  void norm_rope_qk_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                          int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                          const RopeParams& params, const HeadNorms& norms,
                          const KvLayerView& cache, int64_t pos) override;
  void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                 const AttentionParams& params, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void geglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void scale(const float* x, int64_t n, float s, float* out) override;
  void softcap(const float* x, int64_t n, float cap, float* out) override;
  void gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out) override;
  void weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                        std::span<const float> weights, int64_t k, float* out) override;
  // To both: each acts on the layers it holds.
  void kv_to_host(const KvLayerView& cache) override;
  void kv_from_host(const KvLayerView& cache) override;
  void kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n) override;
  // The scope goes to the first backend only (see the memory note above).
  void set_decode_rows(bool on) override;
  void begin_scratch(std::span<const std::span<float>> buffers) override;
  void end_scratch() override;

 private:
  // The backend that runs ops on `w`.
  Backend& owner(const Tensor& w) const;
  // owner(w), which from now on also runs the ops without weights.
  Backend& place(const Tensor& w);

  std::unique_ptr<Backend> first_;
  std::unique_ptr<Backend> second_;
  std::vector<Placement> on_second_;  // sorted by address
  Backend* current_;
  std::string name_;
};

}  // namespace qrun
