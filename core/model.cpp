// Model::forward_batch's default: each sequence through forward() on its own.
#include "core/model.h"

namespace qrun {

Result<void> Model::forward_batch(Backend& backend, std::span<const SeqForward> seqs) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (seqs[i].kv == seqs[j].kv) {
        return make_error(ErrorCode::kUsage,
                          format("forward_batch: parts %zu and %zu share one KV cache", j, i));
      }
    }
  }
  for (const SeqForward& s : seqs) {
    QRUN_CHECK(s.kv != nullptr, "forward_batch: a part without a KV cache");
    QRUN_TRY(forward(backend, s.tokens, s.pos, *s.kv, s.all_logits, s.logits));
  }
  return {};
}

}  // namespace qrun
