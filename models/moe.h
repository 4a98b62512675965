// The mixture-of-experts feed-forward block of qwen3moe, qwen2moe, olmoe and Mixtral-style
// llama files, as llama.cpp's build_moe_ffn computes it for them: a router picks each token's top
// n_expert_used experts by softmax probability, their weights are those probabilities
// (renormalized to sum to 1 where hp.expert_weights_norm), and the token's output is the
// weighted sum of the chosen experts' SiLU-gated feed-forward outputs. Qwen2-MoE adds a
// shared expert that every token runs, weighted by the sigmoid of its own one-row gate and
// added after the chosen experts; Granite's shared expert (granitemoeshared) has no gate
// (weight 1). No router bias.
// Tokens are grouped by expert so that each expert's matrices run once over all of its
// tokens in a step (a prompt of 512 tokens reads each expert once, not once per token).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/model.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"
#include "ggml-like/tensor.h"
#include "models/common_blocks.h"

namespace qrun::models {

// The most experts a layer may have (llama.cpp's LLAMA_MAX_EXPERTS).
inline constexpr int64_t kMaxExperts = 512;

// Reads "<arch>.expert_count" and "<arch>.expert_used_count" into hp (0 and 0 when the
// file has no experts and `required` is false), and the experts' feed-forward width from
// "<arch>.expert_feed_forward_length", else n_ff / n_expert_used for qwen3moe and qwen2moe
// as llama.cpp falls back, else n_ff. qwen2moe's shared expert is
// "<arch>.expert_shared_feed_forward_length" wide, else n_ff (granite's: where that key is
// present); qwen2moe's experts' weights, and olmoe's, are not renormalized. Counts out of range are
// kFormat errors naming the key.
Result<void> read_moe_hparams(const gguf::File& file, bool required, ModelHparams& hp);

struct MoeWeights {
  Tensor gate_inp;   // [n_embd, n_expert] the router
  Tensor gate_exps;  // [n_embd, n_ff_exp, n_expert]
  Tensor up_exps;    // [n_embd, n_ff_exp, n_expert]
  Tensor down_exps;  // [n_ff_exp, n_embd, n_expert]
  // The shared expert (hp.n_ff_shexp > 0), else unbound.
  Tensor gate_inp_shexp;  // [n_embd] its gate, as a [n_embd, 1] matrix (qwen2moe only)
  Tensor gate_shexp;      // [n_embd, n_ff_shexp]
  Tensor up_shexp;        // [n_embd, n_ff_shexp]
  Tensor down_shexp;      // [n_ff_shexp, n_embd]
};

// Binds blk.<il>.ffn_{gate_inp,gate_exps,up_exps,down_exps}.weight with hp's shapes; the
// router is any matmul type (llama-quantize keeps it F32). With hp.n_ff_shexp, also the
// shared expert's blk.<il>.ffn_{gate_inp,gate,up,down}_shexp.weight; without, they are
// refused by name, as are the per-expert tensors of old Mixtral conversions
// (ffn_gate.0.weight, ...).
Result<void> bind_moe_weights(const WeightBinder& b, const std::string& prefix,
                              const ModelHparams& hp, MoeWeights* out);

// check_op on the block's matrices and its row moves.
Result<void> check_moe_ops(const Backend& backend, const MoeWeights& w);

// Where one step's routing lives: host buffers outside the model's scratch scope (the
// router's logits are read on the host to choose the experts), sized once for n_batch.
struct MoeStep;  // one call of moe_ffn (moe.cpp)

class MoeScratch {
 public:
  void allocate(const ModelHparams& hp, int64_t n_batch);
  // The buffers only the backend's ops read and write, for the model's scratch scope
  // (DecoderScratch::use): the grouped rows and the experts' activations.
  std::array<std::span<float>, 6> device_buffers() {
    return {x_, out_, gate_, up_, shexp_gate_, shexp_up_};
  }

 private:
  friend struct MoeStep;
  std::vector<float> probs_;      // [n_batch, n_expert] router logits, then probabilities
  std::vector<float> weights_;    // [n_batch * k] token t's j-th expert's weight at t k + j
  std::vector<int32_t> experts_;  // [n_batch * k] token t's j-th expert at t k + j
  std::vector<int32_t> tokens_;   // [n_batch * k] the token of each grouped row
  std::vector<int32_t> grouped_;  // [n_batch * k] where t k + j's row is in the groups
  std::vector<int32_t> starts_;   // [n_expert + 1] each expert's first grouped row
  std::vector<int32_t> order_;    // [n_expert] scratch for the top-k selection
  // [n_batch * k (+ n_batch with a shared expert), n_embd] grouped inputs and outputs; the
  // shared expert's outputs follow the routed ones
  std::vector<float> x_, out_;
  // With a shared expert: its gate's logit per token, its activations, and the rows and
  // weights of the final sum, k + 1 per token (the shared expert last)
  std::vector<float> shexp_logits_;           // [n_batch]
  std::vector<float> shexp_gate_, shexp_up_;  // [n_batch, n_ff_shexp]
  std::vector<int32_t> sum_rows_;             // [n_batch * (k + 1)]
  std::vector<float> sum_weights_;            // [n_batch * (k + 1)]
  // [max(n_batch, n_expert), n_ff_exp]: one expert's activations, or those of every
  // expert when each has at most one row
  std::vector<float> gate_, up_;
  std::vector<Tensor> views_;               // [3 n_expert] the experts' matrices
  std::vector<Backend::Product> products_;  // [2 n_expert + 2] a step's products
};

// out = the block's output for xn: [n, n_embd]. out may alias xn. all_experts (a warm-up,
// Model::set_warmup): every expert runs for each token, weighted by its probability, and
// n may be at most 1 + (n_batch - 1) * n_expert_used / n_expert.
void moe_ffn(Backend& backend, const MoeWeights& w, const ModelHparams& hp, const float* xn,
             int64_t n, MoeScratch& s, float* out, bool all_experts = false);

}  // namespace qrun::models
