// A pool of KV cache blocks shared by many sequences (a paged KV cache): per layer, K and V
// storage for n_blocks blocks of block_rows rows each; block b of every layer belongs to
// the same owner, so one block table per sequence serves all layers (KvLayerView). Blocks
// are reference-counted; a free list holds the unused ones.
// Prefix caching: a full block can be published under a key chained over the tokens of
// its sequence up to it (hash(parent's key, its block_rows tokens)); a later sequence finds
// the blocks of its longest published prefix and shares them. A hit is verified (the
// block's own tokens, and its parent's block id and generation), so a hash collision can
// cost a hit but never give wrong K/V. Published blocks are immutable; one whose last
// reference goes stays cached until the free list runs out, then the least recently used
// is evicted. Not thread-safe: one scheduler owns it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/kv_cache.h"
#include "core/model.h"
#include "ggml-like/result.h"

namespace qrun {

// The key of a block: hash(the key of the block before it, or 0 for the first, its tokens).
using KvBlockHashFn = uint64_t (*)(uint64_t parent, std::span<const int32_t> tokens);
// A 64-bit hash (each token mixed in by the splitmix64 finalizer): the default.
uint64_t kv_block_hash(uint64_t parent, std::span<const int32_t> tokens);

class KvBlockPool {
 public:
  // n_layer layers of n_head_kv * head_dim elements per row, in n_blocks blocks of
  // block_rows rows (a power of two, a multiple of kKvBlockAlign). Errors as
  // KvCache::create, and kUsage for a bad block size. `hash` may be replaced (tests force
  // collisions with it).
  static Result<std::shared_ptr<KvBlockPool>> create(int64_t n_layer, int64_t n_blocks,
                                                     int64_t block_rows, int64_t n_head_kv,
                                                     int64_t head_dim, KvTypes types = {},
                                                     KvBlockHashFn hash = kv_block_hash);

  int64_t n_layer() const { return n_layer_; }
  int64_t n_blocks() const { return n_blocks_; }
  int64_t block_rows() const { return block_rows_; }
  int64_t n_head_kv() const { return n_head_kv_; }
  int64_t head_dim() const { return head_dim_; }
  KvTypes types() const { return types_; }
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  // Bytes of K and V of one block, over all layers.
  size_t block_bytes() const {
    return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(block_rows_ * n_layer_);
  }
  // Layer il's K and V storage: block b's rows start at row b * block_rows.
  uint8_t* k(int64_t il) const { return k_.get() + k_layer_bytes() * static_cast<size_t>(il); }
  uint8_t* v(int64_t il) const { return v_.get() + v_layer_bytes() * static_cast<size_t>(il); }

  // Blocks allocate() can hand out: free ones, and cached ones no sequence references.
  int64_t n_available() const {
    return static_cast<int64_t>(free_.size()) + static_cast<int64_t>(lru_.size());
  }
  // Blocks referenced by a sequence, and published blocks (referenced or not).
  int64_t n_used() const { return n_blocks_ - n_available(); }
  int64_t n_cached() const { return static_cast<int64_t>(by_key_.size()); }
  int64_t n_evicted() const { return n_evicted_; }

  // A private block with one reference: a free one, else the least recently used cached
  // block no sequence references (evicted from the cache). -1 when there is none.
  int32_t allocate();
  void retain(int32_t b);
  // Drops a reference; at none, a published block stays cached (most recently used), any
  // other returns to the free list.
  void release(int32_t b);
  int32_t ref_count(int32_t b) const { return meta(b).refs; }
  bool is_published(int32_t b) const { return meta(b).published; }

  // Publishes block b (full, holding `tokens`, block_rows of them) whose predecessor in
  // its sequence is `parent` (-1: b holds positions 0 .. block_rows - 1; else published).
  // Returns the block now cached under that key: b, or an earlier block with the same
  // parent and tokens (b stays private then; the caller may switch to the one returned,
  // retaining it). When the key is held by a block with other content (a collision), b is
  // not published and -1 is returned.
  int32_t publish(int32_t b, int32_t parent, std::span<const int32_t> tokens);
  // Takes published block b out of the cache (to the free list when unreferenced), as
  // before its owner writes into it.
  void unpublish(int32_t b);
  // The published blocks holding the longest prefix of `tokens` in whole blocks, first
  // block first, each retained once for the caller (and made most recently used).
  std::vector<int32_t> lookup(std::span<const int32_t> tokens);

 private:
  struct Meta {
    int32_t refs = 0;
    bool published = false;
    uint64_t key = 0;
    int32_t parent = -1;          // the block before it, when published
    uint64_t parent_gen = 0;      // that block's generation when this one was published
    uint64_t gen = 0;             // bumped whenever the block leaves the cache
    std::vector<int32_t> tokens;  // its tokens, when published
    std::list<int32_t>::iterator lru;
  };
  KvBlockPool() = default;
  const Meta& meta(int32_t b) const;
  size_t k_layer_bytes() const {
    return k_row_bytes_ * static_cast<size_t>(n_blocks_ * block_rows_);
  }
  size_t v_layer_bytes() const {
    return v_row_bytes_ * static_cast<size_t>(n_blocks_ * block_rows_);
  }
  // Whether every block before published block b is still the one it followed.
  bool reachable(int32_t b) const;
  // Whether published block b holds `tokens` after block parent (-1: first).
  bool matches(int32_t b, int32_t parent, std::span<const int32_t> tokens) const;

  int64_t n_layer_ = 0;
  int64_t n_blocks_ = 0;
  int64_t block_rows_ = 0;
  int64_t n_head_kv_ = 0;
  int64_t head_dim_ = 0;
  KvTypes types_;
  size_t k_row_bytes_ = 0;
  size_t v_row_bytes_ = 0;
  KvBlockHashFn hash_ = kv_block_hash;
  int64_t n_evicted_ = 0;
  std::vector<Meta> meta_;
  std::vector<int32_t> free_;                     // a stack: the last freed is reused first
  std::list<int32_t> lru_;                        // unreferenced published blocks, oldest first
  std::unordered_map<uint64_t, int32_t> by_key_;  // published blocks
  std::unique_ptr<uint8_t[]> k_;                  // layer after layer, block after block
  std::unique_ptr<uint8_t[]> v_;
};

// A pool shaped for `model`: n_blocks blocks of block_rows rows (see KvBlockPool::create).
inline Result<std::shared_ptr<KvBlockPool>> make_kv_block_pool(const Model& model, int64_t n_blocks,
                                                               int64_t block_rows = 32,
                                                               KvTypes types = {}) {
  const ModelHparams& hp = model.hparams();
  return KvBlockPool::create(hp.n_layer, n_blocks, block_rows, hp.n_head_kv, hp.head_dim, types);
}

// A sequence of `pool` for `model`, of n_ctx positions at most (<= 0: the training context
// length), its windowed layers paged too (KvCache::create_paged). A scheduler acquires one
// per request, attach_prefix()es the prompt, and reserve()s before each forward pass.
inline Result<KvCache> make_paged_kv_cache(const Model& model, std::shared_ptr<KvBlockPool> pool,
                                           int64_t n_ctx) {
  const ModelHparams& hp = model.hparams();
  return KvCache::create_paged(std::move(pool), n_ctx > 0 ? n_ctx : hp.n_ctx_train, hp.attn_window);
}

}  // namespace qrun
