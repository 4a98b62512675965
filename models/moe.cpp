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
  // qwen3moe and qwen2moe fall back to n_ff / n_expert_used as llama.cpp does; Mixtral's
  // experts are feed_forward_length wide.
  const bool qwen2moe = a == "qwen2moe";
  const int64_t fallback =
      a == "qwen3moe" || qwen2moe ? std::max<int64_t>(1, hp.n_ff / *used) : hp.n_ff;
  Result<int64_t> ff = read_positive(file, a, "expert_feed_forward_length", fallback);
  if (!ff.ok()) return ff.error();
  hp.n_ff_exp = *ff;
  // llama.cpp's qwen2moe and olmoe graphs weight the chosen experts by their probabilities
  // as they are (build_moe_ffn's norm_w false); qwen2moe adds a shared expert.
  hp.expert_weights_norm = !qwen2moe && a != "olmoe";
  // Granite's shared expert (granitemoeshared files) is there when its width is given.
  const bool granite = a == "granite" || a == "granitemoe";
  if (qwen2moe || (granite && file.find(a + ".expert_shared_feed_forward_length") != nullptr)) {
    Result<int64_t> shexp = read_positive(file, a, "expert_shared_feed_forward_length", hp.n_ff);
    if (!shexp.ok()) return shexp.error();
    hp.n_ff_shexp = *shexp;
  }
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
  if (hp.n_ff_shexp > 0) {
    if (hp.arch == "qwen2moe") {  // Granite's shared expert has no gate
      QRUN_TRY(b.bind(prefix + "ffn_gate_inp_shexp.weight", {n_embd}, WeightUse::kMatMul,
                      &out->gate_inp_shexp));
      out->gate_inp_shexp.n_dims = 2;  // one row of n_embd
    } else {
      QRUN_TRY(b.reject_if_present(prefix + "ffn_gate_inp_shexp.weight",
                                   "a gate on the shared expert in this architecture"));
    }
    QRUN_TRY(b.bind(prefix + "ffn_gate_shexp.weight", {n_embd, hp.n_ff_shexp}, WeightUse::kMatMul,
                    &out->gate_shexp));
    QRUN_TRY(b.bind(prefix + "ffn_up_shexp.weight", {n_embd, hp.n_ff_shexp}, WeightUse::kMatMul,
                    &out->up_shexp));
    QRUN_TRY(b.bind(prefix + "ffn_down_shexp.weight", {hp.n_ff_shexp, n_embd}, WeightUse::kMatMul,
                    &out->down_shexp));
  } else {
    for (const char* shared : {"ffn_gate_inp_shexp.weight", "ffn_up_shexp.weight"})
      QRUN_TRY(b.reject_if_present(prefix + shared, "shared experts in this architecture"));
  }
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
  if (w.gate_shexp.data != nullptr) {
    for (const Tensor* t : {&w.gate_shexp, &w.up_shexp, &w.down_shexp})
      QRUN_TRY(check_op(backend, Op::kMatMul, *t));
  }
  if (w.gate_inp_shexp.data != nullptr) QRUN_TRY(check_op(backend, Op::kMatMul, w.gate_inp_shexp));
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
  // A shared expert's rows follow the routed ones in out_.
  const size_t out_rows = rows + (hp.n_ff_shexp > 0 ? static_cast<size_t>(n_batch) : 0);
  out_.assign(out_rows * static_cast<size_t>(hp.n_embd), 0.0f);
  if (hp.n_ff_shexp > 0) {
    const auto sum_slots = static_cast<size_t>(n_batch * (hp.n_expert_used + 1));
    shexp_logits_.assign(static_cast<size_t>(n_batch), 0.0f);
    shexp_gate_.assign(static_cast<size_t>(n_batch * hp.n_ff_shexp), 0.0f);
    shexp_up_.assign(static_cast<size_t>(n_batch * hp.n_ff_shexp), 0.0f);
    // The warm-up's steps hold every expert for fewer tokens (moe_ffn's bound on n).
    sum_rows_.assign(std::max(sum_slots, rows + static_cast<size_t>(n_batch)), 0);
    sum_weights_.assign(sum_rows_.size(), 0.0f);
  }
  const auto ff_rows = static_cast<size_t>(std::max(n_batch, hp.n_expert));
  gate_.assign(ff_rows * static_cast<size_t>(hp.n_ff_exp), 0.0f);
  up_.assign(ff_rows * static_cast<size_t>(hp.n_ff_exp), 0.0f);
  views_.reserve(static_cast<size_t>(3 * hp.n_expert));
  products_.reserve(static_cast<size_t>(2 * hp.n_expert + 2));
}

// One call of moe_ffn: its inputs, and the steps that fill the scratch.
struct MoeStep {
  Backend& backend;
  const MoeWeights& w;
  const ModelHparams& hp;
  const float* xn;  // [n, n_embd]
  int64_t n;
  int64_t k;  // experts per token
  MoeScratch& s;

  bool shared() const { return w.gate_shexp.data != nullptr; }
  bool shared_gate() const { return w.gate_inp_shexp.data != nullptr; }
  int64_t n_rows() const { return n * k; }
  float* shared_out() const { return s.out_.data() + n_rows() * hp.n_embd; }

  // Each token's top k experts by probability (ties to the lower id) and their
  // probabilities, renormalized where the architecture does (the sum clamped below as
  // llama.cpp clamps it), on the host; a shared expert's gate logits come with the router's.
  // Then the (token, slot) rows grouped by expert, tokens in order within each group.
  void route() {
    QRUN_CHECK(n_rows() <= static_cast<int64_t>(s.weights_.size()),
               "moe_ffn: %lld tokens of %lld experts each over the scratch",
               static_cast<long long>(n), static_cast<long long>(k));
    const int64_t n_exp = hp.n_expert;
    const Backend::Product logits[] = {{&w.gate_inp, s.probs_.data()},
                                       {&w.gate_inp_shexp, s.shexp_logits_.data()}};
    backend.matmuls(xn, n, std::span(logits, shared_gate() ? 2 : 1));
    std::fill(s.starts_.begin(), s.starts_.end(), 0);
    for (int64_t t = 0; t < n; ++t) {
      float* p = s.probs_.data() + t * n_exp;
      softmax_row(p, n_exp);
      std::iota(s.order_.begin(), s.order_.end(), 0);
      std::partial_sort(
          s.order_.begin(), s.order_.begin() + k, s.order_.end(),
          [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
      double sum = 0.0;
      for (int64_t j = 0; j < k; ++j) sum += p[s.order_[static_cast<size_t>(j)]];
      const float denom =
          hp.expert_weights_norm ? std::max(static_cast<float>(sum), 6.103515625e-5f) : 1.0f;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = s.order_[static_cast<size_t>(j)];
        s.experts_[static_cast<size_t>(t * k + j)] = e;
        s.weights_[static_cast<size_t>(t * k + j)] = p[e] / denom;
        ++s.starts_[static_cast<size_t>(e) + 1];
      }
    }
    std::partial_sum(s.starts_.begin(), s.starts_.end(), s.starts_.begin());
    std::vector<int32_t>& next = s.order_;  // each expert's next free grouped row
    std::copy(s.starts_.begin(), s.starts_.end() - 1, next.begin());
    for (int64_t r = 0; r < n_rows(); ++r) {
      const int32_t row = next[static_cast<size_t>(s.experts_[static_cast<size_t>(r)])]++;
      s.tokens_[static_cast<size_t>(row)] = static_cast<int32_t>(r / k);
      s.grouped_[static_cast<size_t>(r)] = row;
    }
  }

  // Whether every chosen expert has at most one row (a decode step).
  bool one_row_each() const {
    return std::adjacent_find(s.starts_.begin(), s.starts_.end(), [](int32_t first, int32_t end) {
             return end - first > 1;
           }) == s.starts_.end();
  }

  // Calls fn(e, r) for each chosen expert e with its first grouped row r.
  template <typename Fn>
  void for_each_chosen(Fn fn) const {
    for (int64_t e = 0; e < hp.n_expert; ++e) {
      const int32_t r = s.starts_[static_cast<size_t>(e)];
      if (s.starts_[static_cast<size_t>(e) + 1] != r) fn(e, r);
    }
  }

  // The shared expert's products over the whole step (each reads xn).
  std::array<Backend::Product, 2> shared_gate_up() const {
    return {{{&w.gate_shexp, s.shexp_gate_.data(), xn}, {&w.up_shexp, s.shexp_up_.data(), xn}}};
  }
  Backend::Product shared_down() const {
    return {&w.down_shexp, shared_out(), s.shexp_gate_.data()};
  }

  void shared_expert() {
    const std::array<Backend::Product, 2> gate_up = shared_gate_up();
    backend.matmuls(xn, n, gate_up);
    backend.swiglu(s.shexp_gate_.data(), s.shexp_up_.data(), n * hp.n_ff_shexp,
                   s.shexp_gate_.data());
    backend.matmul(w.down_shexp, s.shexp_gate_.data(), n, shared_out());
  }

  // Each chosen expert has one row: the gate and up products of all of them in one call,
  // then their down products in another, which a backend may run as one pass over the
  // weights each; a single token's shared expert joins them. Row r reads its token's row
  // of xn (no gather).
  void one_row_experts() {
    const int64_t n_embd = hp.n_embd;
    const int64_t n_ff = hp.n_ff_exp;
    const bool shared_joins = shared() && n == 1;
    s.views_.clear();
    s.products_.clear();
    for_each_chosen([&](int64_t e, int32_t r) {
      const float* x = xn + s.tokens_[static_cast<size_t>(r)] * n_embd;
      s.views_.push_back(w.gate_exps.matrix(e));
      s.products_.push_back({&s.views_.back(), s.gate_.data() + r * n_ff, x});
      s.views_.push_back(w.up_exps.matrix(e));
      s.products_.push_back({&s.views_.back(), s.up_.data() + r * n_ff, x});
    });
    if (shared_joins) {
      const std::array<Backend::Product, 2> gate_up = shared_gate_up();
      s.products_.insert(s.products_.end(), gate_up.begin(), gate_up.end());
    }
    backend.matmuls(nullptr, 1, s.products_);
    backend.swiglu(s.gate_.data(), s.up_.data(), n_rows() * n_ff, s.gate_.data());
    if (shared_joins) {
      backend.swiglu(s.shexp_gate_.data(), s.shexp_up_.data(), hp.n_ff_shexp, s.shexp_gate_.data());
    }
    s.products_.clear();
    for_each_chosen([&](int64_t e, int32_t r) {
      s.views_.push_back(w.down_exps.matrix(e));
      s.products_.push_back(
          {&s.views_.back(), s.out_.data() + r * n_embd, s.gate_.data() + r * n_ff});
    });
    if (shared_joins) s.products_.push_back(shared_down());
    backend.matmuls(nullptr, 1, s.products_);
    if (shared() && !shared_joins) shared_expert();
  }

  // Each chosen expert once over its gathered group of rows.
  void grouped_experts() {
    const int64_t n_embd = hp.n_embd;
    const int64_t n_ff = hp.n_ff_exp;
    backend.gather_rows(xn, n_embd,
                        std::span<const int32_t>(s.tokens_.data(), static_cast<size_t>(n_rows())),
                        s.x_.data());
    for_each_chosen([&](int64_t e, int32_t first) {
      const int64_t m = s.starts_[static_cast<size_t>(e) + 1] - first;
      const Tensor gate = w.gate_exps.matrix(e);
      const Tensor up = w.up_exps.matrix(e);
      const Backend::Product products[] = {{&gate, s.gate_.data()}, {&up, s.up_.data()}};
      backend.matmuls(s.x_.data() + first * n_embd, m, products);
      backend.swiglu(s.gate_.data(), s.up_.data(), m * n_ff, s.gate_.data());
      backend.matmul(w.down_exps.matrix(e), s.gate_.data(), m, s.out_.data() + first * n_embd);
    });
    if (shared()) shared_expert();
  }

  // out = each token's k experts summed in slot order, then the shared expert (its rows
  // after the routed ones in out_) weighted by the sigmoid of its gate (1 without one), as
  // llama.cpp adds it.
  void sum(float* out) {
    std::span<const int32_t> rows(s.grouped_.data(), static_cast<size_t>(n_rows()));
    std::span<const float> weights(s.weights_.data(), static_cast<size_t>(n_rows()));
    const int64_t slots = shared() ? k + 1 : k;
    if (shared()) {
      for (int64_t t = 0; t < n; ++t) {
        const auto to = static_cast<ptrdiff_t>(t * slots);
        std::copy_n(s.grouped_.begin() + t * k, k, s.sum_rows_.begin() + to);
        std::copy_n(s.weights_.begin() + t * k, k, s.sum_weights_.begin() + to);
        const float logit = s.shexp_logits_[static_cast<size_t>(t)];
        s.sum_rows_[static_cast<size_t>(to + k)] = static_cast<int32_t>(n_rows() + t);
        s.sum_weights_[static_cast<size_t>(to + k)] =
            shared_gate() ? 1.0f / (1.0f + std::exp(-logit)) : 1.0f;
      }
      rows = std::span<const int32_t>(s.sum_rows_.data(), static_cast<size_t>(n * slots));
      weights = std::span<const float>(s.sum_weights_.data(), static_cast<size_t>(n * slots));
    }
    backend.weighted_row_sum(s.out_.data(), hp.n_embd, rows, weights, slots, out);
  }
};

void moe_ffn(Backend& backend, const MoeWeights& w, const ModelHparams& hp, const float* xn,
             int64_t n, MoeScratch& s, float* out, bool all_experts) {
  MoeStep step{backend, w, hp, xn, n, all_experts ? hp.n_expert : hp.n_expert_used, s};
  step.route();
  if (step.one_row_each()) {
    step.one_row_experts();
  } else {
    step.grouped_experts();
  }
  step.sum(out);
}

}  // namespace qrun::models
