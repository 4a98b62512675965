// SplitBackend: see split_backend.h.
#include "ggml-like/split_backend.h"

#include <algorithm>
#include <functional>

#include "ggml-like/result.h"

namespace qrun {

SplitBackend::SplitBackend(std::unique_ptr<Backend> first, std::unique_ptr<Backend> second,
                           std::span<const Placement> on_second)
    : first_(std::move(first)),
      second_(std::move(second)),
      on_second_(on_second.begin(), on_second.end()),
      current_(first_.get()) {
  QRUN_CHECK(first_ != nullptr && second_ != nullptr, "split backend: a backend is missing");
  std::sort(on_second_.begin(), on_second_.end(), [](const Placement& a, const Placement& b) {
    return std::less<const void*>()(a.data, b.data);
  });
  name_ = std::string(first_->name()) + "+" + std::string(second_->name());
}

bool SplitBackend::supports(Op op, DType type) const {
  return first_->supports(op, type) && second_->supports(op, type);
}

Backend& SplitBackend::owner(const Tensor& w) const {
  // The last placement starting at or before w.data, if w lies inside it.
  const auto it = std::upper_bound(
      on_second_.begin(), on_second_.end(), w.data,
      [](const void* p, const Placement& pl) { return std::less<const void*>()(p, pl.data); });
  if (it == on_second_.begin()) return *first_;
  const Placement& pl = *std::prev(it);
  const auto offset = reinterpret_cast<uintptr_t>(w.data) - reinterpret_cast<uintptr_t>(pl.data);
  return offset < pl.n_bytes ? *second_ : *first_;
}

Backend& SplitBackend::place(const Tensor& w) {
  current_ = &owner(w);
  return *current_;
}

void SplitBackend::matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  place(w).matmul(w, x, n_tokens, y);
}

void SplitBackend::matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) {
  Backend& b = place(*products.front().w);
  const bool together = std::all_of(products.begin(), products.end(),
                                    [&](const Product& p) { return &owner(*p.w) == &b; });
  if (together) {
    b.matmuls(x, n_tokens, products);
  } else {
    Backend::matmuls(x, n_tokens, products);  // one by one, each where its weight is
  }
}

void SplitBackend::get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) {
  current_ = first_.get();
  first_->get_rows(table, ids, out);
}

void SplitBackend::rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n,
                            float eps, float* y) {
  place(weight).rms_norm(x, weight, n_rows, n, eps, y);
}

void SplitBackend::add_rms_norm(float* x, const float* delta, const Tensor& weight, int64_t n_rows,
                                int64_t n, float eps, float* y) {
  place(weight).add_rms_norm(x, delta, weight, n_rows, n, eps, y);
}

void SplitBackend::norm_add_rms_norm(float* x, float* delta, const Tensor& delta_weight,
                                     const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                                     float* y) {
  if (&owner(delta_weight) == &owner(weight)) {
    place(weight).norm_add_rms_norm(x, delta, delta_weight, weight, n_rows, n, eps, y);
  } else {
    Backend::norm_add_rms_norm(x, delta, delta_weight, weight, n_rows, n, eps, y);
  }
}

void SplitBackend::rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                        std::span<const int32_t> positions, const RopeParams& params) {
  current_->rope(x, n_tokens, n_head, head_dim, positions, params);
}

void SplitBackend::rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
                           int64_t head_dim, std::span<const int32_t> positions,
                           const RopeParams& params) {
  current_->rope_qk(q, n_head, k, n_head_kv, n_tokens, head_dim, positions, params);
}

void SplitBackend::kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                            const float* v) {
  current_->kv_store(cache, pos, n_tokens, k, v);
}

void SplitBackend::rope_qk_store(float* q, int64_t n_head, float* k, const float* v,
                                 int64_t n_head_kv, int64_t n_tokens, int64_t head_dim,
                                 std::span<const int32_t> positions, const RopeParams& params,
                                 const KvLayerView& cache, int64_t pos) {
  current_->rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params, cache,
                          pos);
}

void SplitBackend::norm_rope_qk_store(float* q, int64_t n_head, float* k, const float* v,
                                      int64_t n_head_kv, int64_t n_tokens, int64_t head_dim,
                                      std::span<const int32_t> positions, const RopeParams& params,
                                      const HeadNorms& norms, const KvLayerView& cache,
                                      int64_t pos) {
  const auto here = [&](const Tensor* w) { return w == nullptr || &owner(*w) == current_; };
  if (here(norms.q) && here(norms.k)) {
    current_->norm_rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params,
                                 norms, cache, pos);
  } else {
    Backend::norm_rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params,
                                norms, cache, pos);
  }
}

void SplitBackend::attention(const float* q, int64_t n_tokens, int64_t pos0,
                             const KvLayerView& cache, const AttentionParams& params, float* out) {
  current_->attention(q, n_tokens, pos0, cache, params, out);
}

void SplitBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  current_->swiglu(gate, up, n, out);
}

void SplitBackend::geglu(const float* gate, const float* up, int64_t n, float* out) {
  current_->geglu(gate, up, n, out);
}

void SplitBackend::add(const float* a, const float* b, int64_t n, float* out) {
  current_->add(a, b, n, out);
}

void SplitBackend::scale(const float* x, int64_t n, float s, float* out) {
  current_->scale(x, n, s, out);
}

void SplitBackend::softcap(const float* x, int64_t n, float cap, float* out) {
  current_->softcap(x, n, cap, out);
}

void SplitBackend::gather_rows(const float* x, int64_t n, std::span<const int32_t> rows,
                               float* out) {
  current_->gather_rows(x, n, rows, out);
}

void SplitBackend::weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                                    std::span<const float> weights, int64_t k, float* out) {
  current_->weighted_row_sum(src, n, rows, weights, k, out);
}

void SplitBackend::kv_to_host(const KvLayerView& cache) {
  first_->kv_to_host(cache);
  second_->kv_to_host(cache);
}

void SplitBackend::kv_from_host(const KvLayerView& cache) {
  first_->kv_from_host(cache);
  second_->kv_from_host(cache);
}

void SplitBackend::kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n) {
  // (a layer the second never held is copied on the host twice: the same bytes)
  first_->kv_copy(cache, from, to, n);
  second_->kv_copy(cache, from, to, n);
}

void SplitBackend::set_decode_rows(bool on) {
  first_->set_decode_rows(on);
  second_->set_decode_rows(on);
}

void SplitBackend::begin_scratch(std::span<const std::span<float>> buffers) {
  current_ = first_.get();
  first_->begin_scratch(buffers);
}

void SplitBackend::end_scratch() {
  first_->end_scratch();
}

}  // namespace qrun
