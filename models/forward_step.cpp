// The argument checks and the output projection of multi-sequence forward steps.
#include "models/forward_step.h"

#include <cstring>

namespace qrun::models {

Result<void> check_batch_args(const ModelHparams& hp, std::span<const SeqForward> seqs) {
  for (size_t i = 0; i < seqs.size(); ++i) {
    QRUN_CHECK(seqs[i].kv != nullptr, "forward_batch: part %zu has no KV cache", i);
    for (size_t j = 0; j < i; ++j) {
      if (seqs[i].kv == seqs[j].kv) {
        return make_error(ErrorCode::kUsage,
                          format("forward_batch: parts %zu and %zu share one KV cache", j, i));
      }
    }
    QRUN_TRY(check_forward_args(hp, seqs[i].tokens, seqs[i].pos, *seqs[i].kv));
  }
  return {};
}

void step_logits(Backend& backend, const ModelHparams& hp, const EmbeddingWeights& w,
                 DecoderScratch& scratch, const ForwardStep& step) {
  const int64_t n_embd = hp.n_embd;
  const float* x = scratch.x();
  float* xn = scratch.xn();
  // Every row of a piece that wants them all: xn: [p.n, n_embd] at the piece's rows.
  for (const StepPiece& p : step.pieces) {
    if (p.logits == nullptr || !p.all_logits) continue;
    float* rows = xn + p.offset * n_embd;
    backend.rms_norm(x + p.offset * n_embd, w.output_norm, p.n, n_embd, hp.norm_eps, rows);
    backend.matmul(w.output, rows, p.n, p.logits);
  }
  // The last rows of the others, gathered into xn: [k, n_embd] (its rows were read above
  // already); runs of adjacent rows (decode pieces) are normed in one call.
  int64_t k = 0;
  float* only = nullptr;
  for (size_t i = 0; i < step.pieces.size();) {
    const StepPiece& p = step.pieces[i];
    if (p.logits == nullptr || p.all_logits) {
      ++i;
      continue;
    }
    const int64_t first = p.offset + p.n - 1;
    int64_t run = 1;
    only = p.logits;
    for (++i; i < step.pieces.size(); ++i) {
      const StepPiece& q = step.pieces[i];
      if (q.logits == nullptr || q.all_logits || q.n != 1 || q.offset != first + run) break;
      ++run;
    }
    backend.rms_norm(x + first * n_embd, w.output_norm, run, n_embd, hp.norm_eps, xn + k * n_embd);
    k += run;
  }
  if (k == 0) return;
  if (k == 1) {
    backend.matmul(w.output, xn, 1, only);
    return;
  }
  // logits: [k, n_vocab], then each row to its piece's buffer
  float* logits = scratch.logits();
  backend.matmul(w.output, xn, k, logits);
  int64_t r = 0;
  for (const StepPiece& p : step.pieces) {
    if (p.logits == nullptr || p.all_logits) continue;
    std::memcpy(p.logits, logits + r++ * hp.n_vocab,
                static_cast<size_t>(hp.n_vocab) * sizeof(float));
  }
}

}  // namespace qrun::models
