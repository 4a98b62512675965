// Weight binding, hyper-parameter reading and the shared attention / FFN blocks.
#include "models/common_blocks.h"

#include "ggml-like/dtype.h"

namespace qrun::models {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* use_name(WeightUse use) {
  switch (use) {
    case WeightUse::kMatMul:
      return "a matrix multiplication";
    case WeightUse::kGetRows:
      return "an embedding lookup";
    case WeightUse::kF32:
      return "this tensor (f32 only)";
  }
  return "?";
}

bool type_allows(DType type, WeightUse use) {
  const TypeTraits& t = type_traits(type);
  switch (use) {
    case WeightUse::kMatMul:
      return t.vec_dot != nullptr;
    case WeightUse::kGetRows:
      return t.to_float != nullptr;
    case WeightUse::kF32:
      return type == DType::kF32;
  }
  return false;
}

}  // namespace

Result<std::optional<Tensor>> WeightBinder::bind_optional(const std::string& name,
                                                          std::vector<int64_t> shape,
                                                          WeightUse use) const {
  const gguf::TensorInfo* info = file_.find_tensor(name);
  if (info == nullptr) return std::optional<Tensor>();
  std::vector<int64_t> actual(info->ne.begin(), info->ne.begin() + info->n_dims);
  // Trailing dimensions of 1 are not significant ([64] equals [64, 1]).
  while (actual.size() > shape.size() && actual.back() == 1) actual.pop_back();
  while (shape.size() > actual.size() && shape.back() == 1) shape.pop_back();
  if (actual != shape) {
    return file_.error(ErrorCode::kFormat,
                       format("tensor '%s' has shape %s, expected %s", name.c_str(),
                              shape_string(actual).c_str(), shape_string(shape).c_str()));
  }
  if (!type_allows(info->type, use)) {
    return file_.error(ErrorCode::kUnsupported,
                       format("tensor '%s' has type %s, which qrun cannot use for %s", name.c_str(),
                              dtype_name(info->type), use_name(use)));
  }
  return std::optional<Tensor>(info->view());
}

Result<Tensor> WeightBinder::bind(const std::string& name, std::vector<int64_t> shape,
                                  WeightUse use) const {
  Result<std::optional<Tensor>> t = bind_optional(name, std::move(shape), use);
  if (!t.ok()) return t.error();
  if (!t->has_value()) {
    return file_.error(ErrorCode::kFormat, format("tensor '%s' is missing", name.c_str()));
  }
  return **t;
}

Result<void> WeightBinder::reject_if_present(const std::string& name, const char* what) const {
  if (file_.find_tensor(name) == nullptr) return {};
  return file_.error(ErrorCode::kUnsupported,
                     format("tensor '%s': %s are not supported", name.c_str(), what));
}

Result<int64_t> read_positive(const gguf::File& file, const std::string& arch,
                              const std::string& suffix, std::optional<int64_t> fallback) {
  const std::string key = arch + "." + suffix;
  Result<int64_t> v = fallback ? file.get_int_or(key, *fallback) : file.get_int(key);
  if (!v.ok()) return v.error();
  // Upper bound keeps every product of two dimensions far from overflow.
  if (*v <= 0 || *v > (int64_t{1} << 24)) {
    return file.error(ErrorCode::kFormat,
                      format("key '%s' is %lld, expected a positive count below 2^24", key.c_str(),
                             static_cast<long long>(*v)));
  }
  return *v;
}

namespace {

// y[t] += bias for each of n rows of y: [n, bias.ne[0]]; nothing when bias is absent.
void add_bias(Backend& backend, const Tensor& bias, int64_t n, float* y) {
  if (bias.data == nullptr) return;
  const int64_t width = bias.ne[0];
  const auto* b = static_cast<const float*>(bias.data);
  for (int64_t t = 0; t < n; ++t) backend.add(y + t * width, b, width, y + t * width);
}

}  // namespace

void self_attention(Backend& backend, const AttentionWeights& w, const AttentionParams& shape,
                    const RopeParams& rope, float norm_eps, const KvLayerView& cache,
                    const float* xn, int64_t n, int64_t pos, std::span<const int32_t> positions,
                    const BlockScratch& s, float* out) {
  // q: [n, n_head, head_dim]; k, v: [n, n_head_kv, head_dim]
  backend.matmul(w.wq, xn, n, s.q);
  add_bias(backend, w.bq, n, s.q);
  backend.matmul(w.wk, xn, n, s.k);
  add_bias(backend, w.bk, n, s.k);
  backend.matmul(w.wv, xn, n, s.v);
  add_bias(backend, w.bv, n, s.v);
  // Per-head RMS norm: each head_dim row of q and k on its own.
  if (w.q_norm.data != nullptr)
    backend.rms_norm(s.q, w.q_norm, n * shape.n_head, shape.head_dim, norm_eps, s.q);
  if (w.k_norm.data != nullptr)
    backend.rms_norm(s.k, w.k_norm, n * shape.n_head_kv, shape.head_dim, norm_eps, s.k);
  backend.rope(s.q, n, shape.n_head, shape.head_dim, positions, rope);
  backend.rope(s.k, n, shape.n_head_kv, shape.head_dim, positions, rope);
  backend.kv_store(cache, pos, n, s.k, s.v);
  // attn: [n, n_head * head_dim], each token over cache positions 0 .. its own
  backend.attention(s.q, n, pos, cache, shape, s.attn);
  // out: [n, n_embd]
  backend.matmul(w.wo, s.attn, n, out);
}

void swiglu_ffn(Backend& backend, const FfnWeights& w, const float* xn, int64_t n,
                const BlockScratch& s, float* out) {
  const int64_t n_ff = w.gate.ne[1];
  // gate, up: [n, n_ff]
  backend.matmul(w.gate, xn, n, s.gate);
  backend.matmul(w.up, xn, n, s.up);
  backend.swiglu(s.gate, s.up, n * n_ff, s.gate);
  // out: [n, n_embd]
  backend.matmul(w.down, s.gate, n, out);
}

}  // namespace qrun::models
