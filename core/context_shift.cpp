// Context shift: the checks before generation, and the shift itself on a Model's RoPE and a
// Backend's rope op (KvCache::shift moves the rows).
#include "core/context_shift.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/kv_host_sync.h"

namespace qrun {
namespace {

// Whether a ring of `rows` rows for a window of `window` positions, in a context of n_ctx
// filled from empty and shifted keeping n_keep each time it is full, still holds every
// position the token after each shift reads.
bool ring_survives_shifts(int64_t window, int64_t rows, int64_t n_ctx, int64_t n_keep) {
  const int64_t n_discard = (n_ctx - n_keep) / 2;
  int64_t held = std::max<int64_t>(0, n_ctx - rows);  // the full cache, filled from empty
  // A second shift starts from what the first left, filled up again; later ones repeat it.
  for (int shift = 0; shift < 2; ++shift) {
    const int64_t after = ring_first_after_shift(held, n_ctx, rows, n_keep, n_discard);
    const int64_t first_read = std::max<int64_t>(0, n_ctx - n_discard - window + 1);
    if (first_read < after) return false;
    held = std::max(after, n_ctx - rows);
  }
  return true;
}

Result<std::vector<RopeParams>> key_ropes(const Model& model, const KvCache& kv) {
  std::vector<RopeParams> ropes;
  for (int64_t il = 0; il < kv.n_layer(); ++il) {
    const std::optional<RopeParams> rope = model.key_rope(il, kv.n_ctx());
    if (!rope) {
      return make_error(ErrorCode::kUnsupported,
                        format("context shift: the %s model does not say how its keys are "
                               "rotated, so its cache cannot be shifted",
                               model.hparams().arch.c_str()));
    }
    ropes.push_back(*rope);
    ropes.back().attn_factor = 1.0f;  // turn only
  }
  return ropes;
}

}  // namespace

int64_t resolve_keep(int64_t keep, int64_t n_prompt, bool prompt_starts_with_added_bos) {
  if (keep < 0 || keep > n_prompt) return n_prompt;
  return std::min(n_prompt, keep + (prompt_starts_with_added_bos ? 1 : 0));
}

Result<void> check_context_shift(const Model& model, const KvCache& kv, int64_t n_keep) {
  Result<std::vector<RopeParams>> ropes = key_ropes(model, kv);
  if (!ropes.ok()) return ropes.error();
  const int64_t n_ctx = kv.n_ctx();
  if ((n_ctx - n_keep) / 2 <= 0) {
    return make_error(ErrorCode::kUsage,
                      format("--context-shift: keeping %lld of a context of %lld leaves nothing to "
                             "drop; lower --keep or raise -c/--ctx-size",
                             static_cast<long long>(n_keep), static_cast<long long>(n_ctx)));
  }
  for (int64_t il = 0; il < kv.n_layer(); ++il) {
    const int64_t window = kv.layer_window(il);
    const int64_t rows = kv.layer_rows(il);
    if (window == 0 || ring_survives_shifts(window, rows, n_ctx, n_keep)) continue;
    // A larger context keeps the same ring; find the smallest that works (it exists: past
    // n_keep + 2 * window, the window after a shift reads moved positions only).
    int64_t enough = n_ctx + 1;
    while (!ring_survives_shifts(window, rows, enough, n_keep)) ++enough;
    return make_error(
        ErrorCode::kUsage,
        format("--context-shift: layer %lld attends a sliding window of %lld positions, kept in a "
               "ring of %lld rows; after a shift of a context of %lld keeping %lld, that window "
               "would reach kept positions the ring no longer holds. Use -c %lld or more, or a "
               "smaller --keep",
               static_cast<long long>(il), static_cast<long long>(window),
               static_cast<long long>(rows), static_cast<long long>(n_ctx),
               static_cast<long long>(n_keep), static_cast<long long>(enough)));
  }
  return {};
}

Result<void> shift_context(const Model& model, Backend& backend, KvCache& kv, int64_t n_keep,
                           int64_t n_discard) {
  Result<std::vector<RopeParams>> ropes = key_ropes(model, kv);
  if (!ropes.ok()) return ropes.error();
  const std::string problem = kv.shift_problem(n_keep, n_discard);
  if (!problem.empty()) return make_error(ErrorCode::kUnsupported, "context shift: " + problem);
  std::vector<int32_t> positions;  // every row moves by the same -n_discard
  sync_kv_to_host(backend, kv);
  kv.shift(n_keep, n_discard, [&](int64_t il, float* k, int64_t n_rows) {
    const RopeParams& rope = (*ropes)[static_cast<size_t>(il)];
    if (rope.n_rot == 0) return;  // keys without RoPE keep their values
    positions.assign(static_cast<size_t>(n_rows), static_cast<int32_t>(-n_discard));
    backend.rope(k, n_rows, kv.n_head_kv(), kv.head_dim(), positions, rope);
  });
  sync_kv_from_host(backend, kv);
  return {};
}

}  // namespace qrun
