// Context shift (llama.cpp's --context-shift): when generation has filled the KV cache, keep
// the first n_keep positions, drop half of the rest and move the later ones down, so that
// generation goes on past the context. Moved keys are turned back by the number dropped
// with their layer's RoPE (Model::key_rope) on the backend, as llama.cpp's K-shift does
// (F16, BF16 and quantized rows through F32); values just move. A shifted cache then gives
// what a fresh forward pass over the kept and moved tokens at their new positions gives,
// up to rounding (tests/context_shift_test.cpp measures how much).
#pragma once

#include <cstdint>

#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/backend.h"
#include "ggml-like/result.h"

namespace qrun {

// One shift, as reported to GenerateParams::context_shift.on_shift.
struct ContextShift {
  int64_t n_past = 0;     // positions held before it (the context size: the cache was full)
  int64_t n_keep = 0;     // positions 0 .. n_keep - 1 stay
  int64_t n_discard = 0;  // (n_past - n_keep) / 2 positions after them are dropped
  double ms = 0.0;        // time the shift took
};

// The positions kept for llama.cpp's --keep with a prompt of n_prompt tokens: the whole
// prompt for -1 or for more than the prompt holds, else `keep` plus the BOS token the
// tokenizer put first, if it did (llama.cpp always keeps BOS).
int64_t resolve_keep(int64_t keep, int64_t n_prompt, bool prompt_starts_with_added_bos);

// Whether a cache shaped like `kv`, once full, can be shifted keeping n_keep positions,
// again and again: kUnsupported when the model does not say how its keys are rotated;
// kUsage when a shift would drop nothing (n_keep too close to the context size) or when a
// sliding-window ring would no longer hold kept positions its window reads after a shift
// (the message says how large a context avoids that).
Result<void> check_context_shift(const Model& model, const KvCache& kv, int64_t n_keep);

// Drops positions n_keep .. n_keep + n_discard - 1 of what kv holds and moves the later
// ones down (KvCache::shift), rotating their keys by -n_discard positions. RoPE's attention
// factor is not applied again: a key is only turned, its length stays (llama.cpp passes the
// YaRN attention factor here too, which scales keys once more on every shift). Errors:
// kUnsupported when the model does not say how its keys are rotated or kv.shift_problem()
// is not empty (a case check_context_shift rules out for a cache filled from empty).
Result<void> shift_context(const Model& model, Backend& backend, KvCache& kv, int64_t n_keep,
                           int64_t n_discard);

}  // namespace qrun
