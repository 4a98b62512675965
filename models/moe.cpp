// The mixture-of-experts block: hyper-parameters, weights, routing and the grouped experts.
#include "models/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qrun::models {
namespace {

// Token t's probabilities over the experts, in place: ggml_soft_max's steps (exp of the
// difference from the row's maximum, the sum in double, then one multiply by its inverse).
void softmax_row(float* p, int64_t n) {
  const float max = *std::max_element(p, p + n);
  double sum = 0.0;
  for (int64_t e = 0; e < n; ++e) {
    p[e] = std::exp(p[e] - max);
    sum += p[e];
  }
  const auto inv = static_cast<float>(1.0 / sum);
  for (int64_t e = 0; e < n; ++e) p[e] *= inv;
}

}  // namespace

Result<void> read_moe_hparams(const gguf::File& file, bool required, ModelHparams& hp) {
  const std::string& a = hp.arch;
  const std::string count_key = a + ".expert_count";
  const std::string used_key = a + ".expert_used_count";
  Result<int64_t> count = required ? file.get_int(count_key) : file.get_int_or(count_key, 0);
  if (!count.ok()) return count.error();
  if (*count == 0 && !required) return {};
  if (*count < 1 || *count > kMaxExperts) {
    return file.error(ErrorCode::kFormat,
                      format("key '%s' is %lld, expected 1 .. %lld experts", count_key.c_str(),
                             static_cast<long long>(*count), static_cast<long long>(kMaxExperts)));
  }
  Result<int64_t> used = file.get_int(used_key);
  if (!used.ok()) return used.error();
  if (*used < 1 || *used > *count) {
    return file.error(ErrorCode::kFormat,
                      format("key '%s' is %lld, expected 1 .. the %lld experts", used_key.c_str(),
                             static_cast<long long>(*used), static_cast<long long>(*count)));
  }
  hp.n_expert = *count;
  hp.n_expert_used = *used;
  // qwen3moe falls back to n_ff / n_expert_used as llama.cpp does; Mixtral's experts are
  // feed_forward_length wide.
  const int64_t fallback = a == "qwen3moe" ? std::max<int64_t>(1, hp.n_ff / *used) : hp.n_ff;
  Result<int64_t> ff = read_positive(file, a, "expert_feed_forward_length", fallback);
  if (!ff.ok()) return ff.error();
  hp.n_ff_exp = *ff;
  return {};
}

Result<void> bind_moe_weights(const WeightBinder& b, const std::string& prefix,
                              const ModelHparams& hp, MoeWeights* out) {
  const int64_t n_embd = hp.n_embd;
  const int64_t n_ff = hp.n_ff_exp;
  const int64_t n_exp = hp.n_expert;
  QRUN_TRY(b.reject_if_present(prefix + "ffn_gate.0.weight",
                               "per-expert tensors of old Mixtral conversions (reconvert the "
                               "model with a current convert_hf_to_gguf.py)"));
  for (const char* shared : {"ffn_gate_inp_shexp.weight", "ffn_up_shexp.weight"})
    QRUN_TRY(b.reject_if_present(prefix + shared, "shared experts"));
  QRUN_TRY(b.reject_if_present(prefix + "exp_probs_b.bias", "expert selection biases"));
  QRUN_TRY(
      b.bind(prefix + "ffn_gate_inp.weight", {n_embd, n_exp}, WeightUse::kMatMul, &out->gate_inp));
  QRUN_TRY(b.bind(prefix + "ffn_gate_exps.weight", {n_embd, n_ff, n_exp}, WeightUse::kMatMul,
                  &out->gate_exps));
  QRUN_TRY(b.bind(prefix + "ffn_up_exps.weight", {n_embd, n_ff, n_exp}, WeightUse::kMatMul,
                  &out->up_exps));
  QRUN_TRY(b.bind(prefix + "ffn_down_exps.weight", {n_ff, n_embd, n_exp}, WeightUse::kMatMul,
                  &out->down_exps));
  return {};
}

Result<void> check_moe_ops(const Backend& backend, const MoeWeights& w) {
  for (const Tensor* t : {&w.gate_inp, &w.gate_exps, &w.up_exps, &w.down_exps})
    QRUN_TRY(check_op(backend, Op::kMatMul, *t));
  if (!backend.supports(Op::kMoeRows, DType::kF32)) {
    return make_error(ErrorCode::kUnsupported,
                      format("the %.*s backend cannot run mixture-of-experts layers (%s)",
                             static_cast<int>(backend.name().size()), backend.name().data(),
                             op_name(Op::kMoeRows)));
  }
  return {};
}

void MoeScratch::allocate(const ModelHparams& hp, int64_t n_batch) {
  const auto rows = static_cast<size_t>(std::max(n_batch * hp.n_expert_used, hp.n_expert));
  probs_.assign(static_cast<size_t>(n_batch * hp.n_expert), 0.0f);
  weights_.assign(rows, 0.0f);
  experts_.assign(rows, 0);
  tokens_.assign(rows, 0);
  grouped_.assign(rows, 0);
  starts_.assign(static_cast<size_t>(hp.n_expert + 1), 0);
  order_.assign(static_cast<size_t>(hp.n_expert), 0);
  x_.assign(rows * static_cast<size_t>(hp.n_embd), 0.0f);
  out_.assign(rows * static_cast<size_t>(hp.n_embd), 0.0f);
  const auto ff_rows = static_cast<size_t>(std::max(n_batch, hp.n_expert));
  gate_.assign(ff_rows * static_cast<size_t>(hp.n_ff_exp), 0.0f);
  up_.assign(ff_rows * static_cast<size_t>(hp.n_ff_exp), 0.0f);
  views_.reserve(static_cast<size_t>(3 * hp.n_expert));
  products_.reserve(static_cast<size_t>(2 * hp.n_expert));
}

void moe_ffn(Backend& backend, const MoeWeights& w, const ModelHparams& hp, const float* xn,
             int64_t n, MoeScratch& s, float* out, bool all_experts) {
  const int64_t n_exp = hp.n_expert;
  const int64_t k = all_experts ? n_exp : hp.n_expert_used;
  const int64_t n_embd = hp.n_embd;
  const int64_t n_ff = hp.n_ff_exp;
  QRUN_CHECK(n * k <= static_cast<int64_t>(s.weights_.size()),
             "moe_ffn: %lld tokens of %lld experts each over the scratch",
             static_cast<long long>(n), static_cast<long long>(k));

  // Routing, on the host: each token's top k experts by probability (ties to the lower id)
  // and their probabilities renormalized, the sum clamped below as llama.cpp clamps it.
  backend.matmul(w.gate_inp, xn, n, s.probs_.data());
  std::fill(s.starts_.begin(), s.starts_.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    float* p = s.probs_.data() + t * n_exp;
    softmax_row(p, n_exp);
    std::iota(s.order_.begin(), s.order_.end(), 0);
    std::partial_sort(s.order_.begin(), s.order_.begin() + k, s.order_.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    double sum = 0.0;
    for (int64_t j = 0; j < k; ++j) sum += p[s.order_[static_cast<size_t>(j)]];
    const float denom = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = s.order_[static_cast<size_t>(j)];
      s.experts_[static_cast<size_t>(t * k + j)] = e;
      s.weights_[static_cast<size_t>(t * k + j)] = p[e] / denom;
      ++s.starts_[static_cast<size_t>(e) + 1];
    }
  }
  // Group the (token, slot) rows by expert, tokens in order within each group.
  std::partial_sum(s.starts_.begin(), s.starts_.end(), s.starts_.begin());
  std::vector<int32_t>& next = s.order_;  // each expert's next free grouped row
  std::copy(s.starts_.begin(), s.starts_.end() - 1, next.begin());
  for (int64_t r = 0; r < n * k; ++r) {
    const int32_t row = next[static_cast<size_t>(s.experts_[static_cast<size_t>(r)])]++;
    s.tokens_[static_cast<size_t>(row)] = static_cast<int32_t>(r / k);
    s.grouped_[static_cast<size_t>(r)] = row;
  }

  const auto n_rows = static_cast<size_t>(n * k);
  const std::span<const int32_t> grouped(s.grouped_.data(), n_rows);
  const std::span<const float> weights(s.weights_.data(), n_rows);
  const bool one_row_each =
      std::adjacent_find(s.starts_.begin(), s.starts_.end(), [](int32_t first, int32_t end) {
        return end - first > 1;
      }) == s.starts_.end();
  if (one_row_each) {
    // Each chosen expert has one row (decoding a sequence): the gate and up products of
    // all of them in one call, then their down products in another, which a backend may
    // run as one pass over the weights each. Row r reads its token's row of xn.
    s.views_.clear();
    s.products_.clear();
    for (int64_t e = 0; e < n_exp; ++e) {
      const int32_t r = s.starts_[static_cast<size_t>(e)];
      if (s.starts_[static_cast<size_t>(e) + 1] == r) continue;
      const float* x = xn + s.tokens_[static_cast<size_t>(r)] * n_embd;
      s.views_.push_back(w.gate_exps.matrix(e));
      s.products_.push_back({&s.views_.back(), s.gate_.data() + r * n_ff, x});
      s.views_.push_back(w.up_exps.matrix(e));
      s.products_.push_back({&s.views_.back(), s.up_.data() + r * n_ff, x});
    }
    backend.matmuls(nullptr, 1, s.products_);
    backend.swiglu(s.gate_.data(), s.up_.data(), static_cast<int64_t>(n_rows) * n_ff,
                   s.gate_.data());
    s.products_.clear();
    for (int64_t e = 0; e < n_exp; ++e) {
      const int32_t r = s.starts_[static_cast<size_t>(e)];
      if (s.starts_[static_cast<size_t>(e) + 1] == r) continue;
      s.views_.push_back(w.down_exps.matrix(e));
      s.products_.push_back(
          {&s.views_.back(), s.out_.data() + r * n_embd, s.gate_.data() + r * n_ff});
    }
    backend.matmuls(nullptr, 1, s.products_);
    backend.weighted_row_sum(s.out_.data(), n_embd, grouped, weights, k, out);
    return;
  }
  backend.gather_rows(xn, n_embd, std::span<const int32_t>(s.tokens_.data(), n_rows), s.x_.data());
  for (int64_t e = 0; e < n_exp; ++e) {
    const int64_t first = s.starts_[static_cast<size_t>(e)];
    const int64_t m = s.starts_[static_cast<size_t>(e) + 1] - first;
    if (m == 0) continue;
    const Tensor gate = w.gate_exps.matrix(e);
    const Tensor up = w.up_exps.matrix(e);
    const Backend::Product products[] = {{&gate, s.gate_.data()}, {&up, s.up_.data()}};
    backend.matmuls(s.x_.data() + first * n_embd, m, products);
    backend.swiglu(s.gate_.data(), s.up_.data(), m * n_ff, s.gate_.data());
    backend.matmul(w.down_exps.matrix(e), s.gate_.data(), m, s.out_.data() + first * n_embd);
  }
  backend.weighted_row_sum(s.out_.data(), n_embd, grouped, weights, k, out);
}

}  // namespace qrun::models
