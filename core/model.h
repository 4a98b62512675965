// The abstract model every architecture implements (models/), and its hyper-parameters.
// A Model holds weight views into a gguf::File (which must outlive it) and its own
// activation scratch, sized once at load for `n_batch` tokens and `n_seq` sequences;
// forward() runs a span of tokens through it on a Backend, appending their K/V to a KvCache,
// and forward_batch() runs several sequences' tokens, each with its own cache, through
// every weight matmul together; neither allocates.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kv_cache.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

struct ModelHparams {
  std::string arch;  // general.architecture, e.g. "llama"
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  // context length the model was trained with
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_rot = 0;  // rotated elements per head
  float norm_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  bool has_rope_freqs = false;  // per-pair frequency factors (Llama 3.1 rope_freqs)
  // The original context (rope.scaling.original_context_length, default the trained one:
  // YaRN's, and Llama 4's attention temperature's step); for rope.scaling.type yarn, YaRN's
  // beta_fast / beta_slow; rope_attn_factor is
  // rope.scaling.attn_factor times, for yarn, llama.cpp's magnitude correction before the
  // kernel's own (decoder_rope folds that in).
  bool rope_yarn = false;
  int64_t rope_yarn_orig_ctx = 0;
  float rope_yarn_beta_fast = 32.0f;
  float rope_yarn_beta_slow = 1.0f;
  float rope_attn_factor = 1.0f;
  // Per layer: the sliding attention window in positions, 0 for a layer that attends the
  // whole context; empty when no layer has a window.
  std::vector<int64_t> attn_window;
  // Mixture of experts (0 for a dense model): experts per layer, experts each token uses,
  // each expert's feed-forward width, the shared expert's width (0: none; Qwen2-MoE), and
  // whether a token's chosen experts' probabilities are renormalized to sum to 1.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  bool expert_weights_norm = true;
};

// Options fixed at load time.
struct ModelOptions {
  int64_t n_batch = 512;  // most tokens one matmul sees; longer inputs go in chunks
  int64_t n_seq = 1;      // most sequences one forward_batch() step holds; more go in steps
};

// One sequence's part of a Model::forward_batch() call.
struct SeqForward {
  std::span<const int32_t> tokens;  // non-empty
  int64_t pos = 0;                  // as forward()'s: tokens go to positions pos .. pos + n - 1
  KvCache* kv = nullptr;            // this sequence's own cache; no two parts share one
  bool all_logits = false;          // every token's row, else only the last token's
  float* logits = nullptr;          // as forward()'s logits_out; null: no logits wanted
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelHparams& hparams() const = 0;
  // Tokens per internal chunk (ModelOptions::n_batch).
  virtual int64_t n_batch() const = 0;

  // Runs tokens at positions pos .. pos + n - 1, in chunks of n_batch(), writing their K/V
  // to `kv` (pos <= kv.n_tokens(); afterwards kv.n_tokens() == pos + n). logits_out gets
  // n_vocab floats per token when all_logits, else only the last token's row; null: none.
  // Errors: empty input or pos past kv.n_tokens() (kUsage), a token id outside the
  // vocabulary (kUsage), pos + n > kv.n_ctx() (kContextOverflow).
  virtual Result<void> forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos,
                               KvCache& kv, bool all_logits, float* logits_out) = 0;

  // forward() for each sequence of `seqs`, with the same results up to the rounding of a
  // matmul over more rows (see models/common_blocks.h): an architecture that overrides it
  // runs all the sequences' tokens through each weight matmul as one batch, up to n_batch()
  // tokens and its n_seq sequences per step (more go in further steps), so the weights are
  // read once per step for all of them, while RoPE, kv_store and attention run per sequence
  // against its own cache. This default loops forward(). Errors: two parts with one cache
  // (kUsage), before anything runs; forward()'s, which an override also checks for every
  // part before running any (this default may have run the parts before the bad one).
  virtual Result<void> forward_batch(Backend& backend, std::span<const SeqForward> seqs);

  // kUnsupported naming the first weight whose type `backend` cannot multiply or look up.
  virtual Result<void> check_backend(const Backend& backend) const = 0;

  // While on, forward() may do more than the model does so that one token touches every
  // weight, for a warm-up pass: a mixture of experts then runs all its experts for each
  // token, as llama.cpp's warm-up does (a backend's first use of a weight, paging it in,
  // copying it to a faster layout or to a device, then happens there, not while decoding).
  // Logits computed while it is on are not the model's. Default: nothing to do.
  virtual void set_warmup(bool on) {}

  // The RoPE that forward() applies to layer il's keys with a cache of n_ctx positions, for
  // a context shift (core/context_shift.h), which turns cached keys to new positions; n_rot 0
  // for a layer whose keys are not rotated (SmolLM3's NoPE layers), which a shift leaves as
  // they are; nullopt when the model does not say, and then its cache cannot be shifted.
  virtual std::optional<RopeParams> key_rope(int64_t il, int64_t n_ctx) const {
    return std::nullopt;
  }
};

// A KV cache shaped for `model`, sliding-window layers as rings. n_ctx <= 0 means the
// training context length.
inline Result<KvCache> make_kv_cache(const Model& model, int64_t n_ctx, KvTypes types = {}) {
  const ModelHparams& hp = model.hparams();
  return KvCache::create(hp.n_layer, n_ctx > 0 ? n_ctx : hp.n_ctx_train, hp.n_head_kv, hp.head_dim,
                         types, hp.attn_window, model.n_batch());
}

}  // namespace qrun
