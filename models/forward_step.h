// Forward passes over several sequences at once, shared by every architecture's forward()
// and forward_batch(). The sequences' tokens are packed, in order, into steps of at most
// n_batch tokens and n_seq sequences (a long one continues in the next step); a step's
// activations hold its pieces' rows one piece after the other, so every matmul reads its
// weight once for all of them, while kv_store and attention run per piece on its own cache
// (self_attention). forward() is a batch of one, which makes the same calls as before
// batching existed. Nothing here allocates: the steps live in DecoderScratch.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>

#include "core/model.h"
#include "models/common_blocks.h"

namespace qrun::models {

// forward_batch()'s argument checks: every part has a cache of its own and passes
// check_forward_args.
Result<void> check_batch_args(const ModelHparams& hp, std::span<const SeqForward> seqs);

// Packs `seqs` into steps in `scratch` and runs `step(const ForwardStep&)` on each (the
// layer loop), then advances each piece's cache past its tokens. Logits pointers follow the
// tokens: a part's every row when all_logits, else only its last token's row.
template <class Step>
Result<void> forward_in_steps(const ModelHparams& hp, DecoderScratch& scratch,
                              std::span<const SeqForward> seqs, Step&& step) {
  QRUN_TRY(check_batch_args(hp, seqs));
  const int64_t n_batch = scratch.n_batch();
  const int64_t n_seq = scratch.n_seq();
  size_t seq = 0;    // the part the next step starts in
  int64_t done = 0;  // its tokens that earlier steps ran
  while (seq < seqs.size()) {
    int64_t n = 0;
    int64_t n_pieces = 0;
    while (seq < seqs.size() && n < n_batch && n_pieces < n_seq) {
      const SeqForward& s = seqs[seq];
      const auto n_tokens = static_cast<int64_t>(s.tokens.size());
      const int64_t take = std::min(n_batch - n, n_tokens - done);
      const bool last = done + take == n_tokens;
      StepPiece& p = scratch.pieces()[n_pieces++];
      p = StepPiece{n, take, s.pos + done, s.kv, s.all_logits, nullptr};
      if (s.logits != nullptr && (s.all_logits || last))
        p.logits = s.all_logits ? s.logits + done * hp.n_vocab : s.logits;
      for (int64_t t = 0; t < take; ++t) {
        scratch.tokens()[n + t] = s.tokens[static_cast<size_t>(done + t)];
        scratch.positions()[n + t] = static_cast<int32_t>(p.pos + t);
      }
      n += take;
      done += take;
      if (last) {
        ++seq;
        done = 0;
      }
    }
    const auto count = static_cast<size_t>(n);
    const ForwardStep fs{
        std::span<const int32_t>(scratch.tokens(), count),
        std::span<const int32_t>(scratch.positions(), count),
        std::span<const StepPiece>(scratch.pieces(), static_cast<size_t>(n_pieces))};
    step(fs);
    for (const StepPiece& p : fs.pieces) p.kv->set_n_tokens(p.pos + p.n);
  }
  return {};
}

// Rows of logits piece p gets from a step: 0, 1 or p.n.
inline int64_t logit_rows(const StepPiece& p) {
  return p.logits == nullptr ? 0 : (p.all_logits ? p.n : 1);
}

// The logits every piece of `step` asks for: x's rows RMS-normed (output_norm) into xn and
// projected by the output weight. A piece that wants every row gets them straight; the last
// rows of the others are gathered and projected together, into the one buffer that asks
// when there is one, else into scratch.logits() and copied out, so the output weight is read
// once for all the decoding sequences of a step.
void step_logits(Backend& backend, const ModelHparams& hp, const EmbeddingWeights& w,
                 DecoderScratch& scratch, const ForwardStep& step);

}  // namespace qrun::models
