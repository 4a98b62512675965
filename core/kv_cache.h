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
// A paged cache (create_paged) is one sequence of a KvBlockPool (core/kv_block_pool.h): its
// rows live in blocks of the pool, listed in its block table, which reserve() grows before
// each forward pass and truncate() shrinks; models run on it unchanged (their views carry
// the table). In a paged cache every layer keeps every position, windowed or not (a window
// only limits what attention reads): a ring's rows would be overwritten, and a shared
// prefix must hold every layer's rows. Blocks it shares with other sequences (a cached
// prefix, attach_prefix) are full and never written: reserve() gives the sequence a
// private copy of any shared block it is about to write into.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
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

class KvBlockPool;

// The blocks a paged KvCache holds a reference to, released when it goes.
struct KvBlockRefs {
  std::shared_ptr<KvBlockPool> pool;
  std::vector<int32_t> table;  // the block of positions i * block_rows .. in table[i]
  int64_t n_published = 0;     // leading blocks published in the pool's prefix cache
  KvBlockRefs() = default;
  KvBlockRefs(KvBlockRefs&& o) noexcept { *this = std::move(o); }
  KvBlockRefs& operator=(KvBlockRefs&& o) noexcept;
  ~KvBlockRefs() { release_from(0); }
  // Releases the blocks of table[first ..] and drops them from the table.
  void release_from(size_t first);
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

  // A sequence of `pool` (K and V types, shapes and layers as the pool's) of n_ctx
  // positions at most, holding no block yet. windows: as create's (reported by
  // layer_window(); every position is kept all the same).
  static Result<KvCache> create_paged(std::shared_ptr<KvBlockPool> pool, int64_t n_ctx,
                                      std::span<const int64_t> windows = {});

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
  // A paged cache: the bytes of the blocks it holds, both.
  size_t n_bytes() const;
  size_t n_bytes_full() const;

  // Paged caches (create_paged). Whether this is one:
  bool paged() const { return blocks_.pool != nullptr; }
  const std::shared_ptr<KvBlockPool>& pool() const { return blocks_.pool; }
  std::span<const int32_t> block_table() const { return blocks_.table; }
  // Blocks reserve(pos, n) would take from the pool.
  int64_t blocks_needed(int64_t pos, int64_t n) const;
  // Before forward() writes positions pos .. pos + n - 1 (pos <= n_tokens(),
  // pos + n <= n_ctx()): allocates the blocks they need, and gives the sequence a private
  // copy of any shared or published block among them (its rows before pos copied, by
  // `backend`, which holds the rows: Backend::kv_copy). When the pool has fewer than
  // blocks_needed(pos, n) available: kRuntime, nothing changed.
  Result<void> reserve(int64_t pos, int64_t n, Backend& backend);
  // An empty paged cache takes the pool's cached blocks of the longest prefix of `tokens`
  // in whole blocks, short of the last token (left for a forward pass to give logits) and
  // within n_ctx, sharing them; returns the positions it now holds.
  int64_t attach_prefix(std::span<const int32_t> tokens);
  // Publishes the full blocks of positions 0 .. n_tokens() - 1, whose tokens are
  // tokens[0 .. n_tokens() - 1], in the pool's prefix cache (a block already cached with
  // the same prefix replaces the sequence's own copy).
  void publish(std::span<const int32_t> tokens);

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
  // A paged cache: the rows its blocks hold, and where position pos (below that) is
  // stored in the pool's rows.
  int64_t capacity() const;
  int64_t paged_row(int64_t pos) const;
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
  KvBlockRefs blocks_;  // a paged cache's blocks (k_ and v_ are then null)
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
