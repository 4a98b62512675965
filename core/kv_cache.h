// The KV cache of one sequence: per layer, K and V rows for the positions a model reads,
// allocated once (F16 by default; K and V each F32, F16, BF16, Q8_0 or Q4_0, quantized
// rows in GGML's block layout). A layer attends either every position
// (n_ctx rows, row p for position p) or a sliding window of the last `window` positions,
// kept as a ring of window - 1 + n_batch rows (position p in row p % rows), so a long context
// costs O(window) there. n_tokens() positions hold valid rows; models append at n_tokens()
// (or overwrite from an earlier position) and advance it, and truncate() drops a tail so a
// chat can rewind, as far as the rings still hold what the next token reads; shift() drops
// a middle span and moves the later positions down (a context shift). Memory is not touched
// until written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ggml-like/backend.h"
#include "ggml-like/dtype.h"
#include "ggml-like/result.h"

namespace qrun {

// The element types of the K and V rows. A single type converts to both.
struct KvTypes {
  DType k = DType::kF16;
  DType v = DType::kF16;
  KvTypes() = default;
  KvTypes(DType both) : k(both), v(both) {}  // NOLINT(google-explicit-constructor)
  KvTypes(DType k_type, DType v_type) : k(k_type), v(v_type) {}
};

// Whether `type` can hold KV rows: F32, F16, BF16, Q8_0 or Q4_0.
bool is_kv_cache_type(DType type);
// Why `type` cannot hold rows of head_dim elements per head ("needs a head size that is a
// multiple of 32; ..."), or an empty string when it can. is_kv_cache_type(type).
std::string kv_head_dim_problem(DType type, int64_t head_dim);

class KvCache {
 public:
  // n_layer layers of n_head_kv * head_dim elements per row, for n_ctx positions. windows:
  // empty, or one entry per layer, 0 for a layer that reads every position, w > 0 for a
  // sliding window of w positions; n_batch (> 0 when any window is set) is the most tokens a
  // model writes in one pass, which a ring must hold beside the window. types: each
  // is_kv_cache_type (else ErrorCode::kUnsupported), a quantized one with head_dim a
  // multiple of its block size (else kUsage, saying which of K and V); sizes must be
  // positive (kUsage).
  static Result<KvCache> create(int64_t n_layer, int64_t n_ctx, int64_t n_head_kv, int64_t head_dim,
                                KvTypes types = {}, std::span<const int64_t> windows = {},
                                int64_t n_batch = 0);

  KvCache(KvCache&&) noexcept = default;
  KvCache& operator=(KvCache&&) noexcept = default;

  int64_t n_layer() const { return n_layer_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_head_kv() const { return n_head_kv_; }
  int64_t head_dim() const { return head_dim_; }
  DType k_type() const { return types_.k; }
  DType v_type() const { return types_.v; }
  // Positions that hold valid K/V rows.
  int64_t n_tokens() const { return n_tokens_; }
  int64_t n_free() const { return n_ctx_ - n_tokens_; }
  // Rows of layer il (n_ctx, or fewer for a sliding-window ring).
  int64_t layer_rows(int64_t il) const { return layers_[static_cast<size_t>(il)].rows; }
  // Bytes of K and V storage together, and what they would be with every layer holding the
  // whole context (the two differ only with sliding windows).
  size_t n_bytes() const {
    return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(total_rows_);
  }
  size_t n_bytes_full() const {
    return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(n_ctx_) *
           static_cast<size_t>(n_layer_);
  }

  // The storage of layer il, for the backend's kv_store and attention.
  KvLayerView layer(int64_t il);
  // Marks positions 0 .. n - 1 valid (after a model wrote rows up to n). n <= n_ctx.
  void set_n_tokens(int64_t n);
  // The longest prefix of at most n cached tokens that truncate() can keep: n, or 0 when a
  // sliding-window ring has already overwritten a row that the token at position n reads.
  int64_t keepable(int64_t n) const;
  // Forgets positions n and beyond. n <= n_tokens() and keepable(n) == n.
  void truncate(int64_t n);
  void clear() { truncate(0); }

  // Saving and restoring a state (core/prompt_cache.h). Bytes of one K and one V row:
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  // The sliding window of layer il (0: it reads every position).
  int64_t layer_window(int64_t il) const { return layers_[static_cast<size_t>(il)].window; }
  // The lowest position whose rows layer il still holds: 0 for a layer that reads every
  // position; for a windowed one, what its ring (or a restored state) has not overwritten.
  int64_t first_held(int64_t il) const;
  // The K and V rows of position pos in layer il (first_held(il) <= pos < n_ctx).
  std::span<const uint8_t> k_row(int64_t il, int64_t pos) const;
  std::span<const uint8_t> v_row(int64_t il, int64_t pos) const;
  std::span<uint8_t> k_row(int64_t il, int64_t pos);
  std::span<uint8_t> v_row(int64_t il, int64_t pos);
  // After the rows of positions 0 .. n - 1 were written through k_row()/v_row() into an
  // empty cache, with windowed layers holding none below `floor`: marks them valid, and
  // keepable() from then on keeps no prefix whose next token reads below floor.
  void restore(int64_t n, int64_t floor);

  // A context shift (core/context_shift.h): positions n_keep .. n_keep + n_discard - 1 are
  // dropped and the rows of the later ones, up to n_tokens(), move down by n_discard.
  // shift_problem() says why a layer could then not give the next token (at
  // n_tokens() - n_discard) what it reads, or returns an empty string: only a
  // sliding-window ring can fail, when its window reaches kept positions it no longer holds.
  std::string shift_problem(int64_t n_keep, int64_t n_discard) const;
  // K rows of layer il are converted to F32, given to rotate_k(il, k, n_rows) (k: [n_rows,
  // n_head_kv * head_dim]), which turns them by -n_discard positions, and converted back as
  // the CPU backend's kv_store writes them; V rows move as they are. Needs
  // 0 <= n_keep, 0 < n_discard, n_keep + n_discard <= n_tokens() and an empty
  // shift_problem(); afterwards n_tokens() is n_discard fewer.
  using RotateK = std::function<void(int64_t il, float* k, int64_t n_rows)>;
  void shift(int64_t n_keep, int64_t n_discard, const RotateK& rotate_k);

 private:
  struct Layer {
    int64_t window = 0;  // 0: every position
    int64_t rows = 0;
    // A windowed layer holds no position below it (a restored state, a shifted ring).
    int64_t floor = 0;
    size_t k_offset = 0;  // bytes into k_
    size_t v_offset = 0;  // bytes into v_
  };

  KvCache() = default;
  int64_t n_layer_ = 0;
  int64_t n_ctx_ = 0;
  int64_t n_head_kv_ = 0;
  int64_t head_dim_ = 0;
  KvTypes types_;
  int64_t n_tokens_ = 0;
  int64_t n_written_ = 0;   // the furthest position written since the cache was empty, plus one
  size_t k_row_bytes_ = 0;  // bytes of one K row
  size_t v_row_bytes_ = 0;  // bytes of one V row
  int64_t total_rows_ = 0;
  std::vector<Layer> layers_;
  std::unique_ptr<uint8_t[]> k_;  // each layer's rows, one layer after the other
  std::unique_ptr<uint8_t[]> v_;
};

// The lowest position that a sliding-window ring of `rows` rows, holding positions
// held .. n_past - 1, holds after a shift that drops n_keep .. n_keep + n_discard - 1 and
// moves the later positions down: kept positions stay in their rows, moved ones take the
// rows of their new positions, and a row can hold only one of them.
int64_t ring_first_after_shift(int64_t held, int64_t n_past, int64_t rows, int64_t n_keep,
                               int64_t n_discard);

// "9.0 MiB KV", and with sliding-window rings "9.0 MiB KV, 81.0 MiB less than full layers".
// When K and V differ in type: "5.1 MiB KV (K q8_0 2.4 MiB, V f16 4.5 MiB)" and the like.
std::string kv_memory_summary(const KvCache& kv);

}  // namespace qrun
