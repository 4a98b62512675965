// A Model that lets one forward() run at a time: several sequences (each with its own KV
// cache) share one model, whose activation scratch and backend are not reentrant. Each
// sequence's generate() loop calls forward() one token (or one prompt chunk) at a time, so
// sequences take turns step by step. This is time slicing, not batching: every sequence
// still reads the weights once per token of its own.
#pragma once

#include <mutex>

#include "core/model.h"

namespace qrun {

class SerializedModel : public Model {
 public:
  explicit SerializedModel(Model& inner) : inner_(inner) {}

  const ModelHparams& hparams() const override { return inner_.hparams(); }
  int64_t n_batch() const override { return inner_.n_batch(); }
  Result<void> forward(Backend& backend, std::span<const int32_t> tokens, int64_t pos, KvCache& kv,
                       bool all_logits, float* logits_out) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return inner_.forward(backend, tokens, pos, kv, all_logits, logits_out);
  }
  Result<void> check_backend(const Backend& backend) const override {
    return inner_.check_backend(backend);
  }
  std::optional<RopeParams> key_rope(int64_t il, int64_t n_ctx) const override {
    return inner_.key_rope(il, n_ctx);
  }

 private:
  Model& inner_;
  std::mutex mutex_;
};

}  // namespace qrun
