// The paged side of KvCache: a sequence of a KvBlockPool. Its block table grows in
// reserve() and shrinks in truncate(); blocks shared with other sequences (a cached prefix)
// or published in the prefix cache are never written: reserve() swaps in a private copy of
// any of them that a forward pass is about to write into, so no copy-on-write is needed
// anywhere else.
#include <algorithm>
#include <utility>

#include "core/kv_block_pool.h"
#include "core/kv_cache.h"

namespace qrun {

KvBlockRefs& KvBlockRefs::operator=(KvBlockRefs&& o) noexcept {
  if (this != &o) {
    release_from(0);
    pool = std::move(o.pool);
    table = std::move(o.table);
    n_published = o.n_published;
    o.pool.reset();
    o.table.clear();
    o.n_published = 0;
  }
  return *this;
}

void KvBlockRefs::release_from(size_t first) {
  if (pool == nullptr || first >= table.size()) return;
  for (size_t i = first; i < table.size(); ++i) pool->release(table[i]);
  table.resize(first);
  n_published = std::min(n_published, static_cast<int64_t>(first));
}

Result<KvCache> KvCache::create_paged(std::shared_ptr<KvBlockPool> pool, int64_t n_ctx,
                                      std::span<const int64_t> windows) {
  QRUN_CHECK(pool != nullptr, "KV cache: no block pool");
  if (n_ctx <= 0) {
    return make_error(ErrorCode::kUsage,
                      format("a paged KV cache of %lld positions", static_cast<long long>(n_ctx)));
  }
  QRUN_CHECK(windows.empty() || static_cast<int64_t>(windows.size()) == pool->n_layer(),
             "KV cache: %zu windows for %lld layers", windows.size(),
             static_cast<long long>(pool->n_layer()));
  KvCache c;
  c.n_layer_ = pool->n_layer();
  c.n_ctx_ = n_ctx;
  c.n_head_kv_ = pool->n_head_kv();
  c.head_dim_ = pool->head_dim();
  c.types_ = pool->types();
  c.k_row_bytes_ = pool->k_row_bytes();
  c.v_row_bytes_ = pool->v_row_bytes();
  c.layers_.resize(static_cast<size_t>(c.n_layer_));
  for (size_t il = 0; il < c.layers_.size(); ++il) {
    c.layers_[il].window = windows.empty() ? 0 : windows[il];
    c.layers_[il].rows = n_ctx;  // every position, never a ring
  }
  // Room for a whole context's blocks, so that a decode step that crosses a block edge
  // allocates no memory of its own.
  c.blocks_.table.reserve(
      static_cast<size_t>((n_ctx + pool->block_rows() - 1) / pool->block_rows()));
  c.blocks_.pool = std::move(pool);
  return c;
}

int64_t KvCache::capacity() const {
  return static_cast<int64_t>(blocks_.table.size()) * blocks_.pool->block_rows();
}

int64_t KvCache::paged_row(int64_t pos) const {
  QRUN_CHECK(pos >= 0 && pos < capacity(), "KV cache: position %lld of %lld reserved",
             static_cast<long long>(pos), static_cast<long long>(capacity()));
  const int64_t rows = blocks_.pool->block_rows();
  return static_cast<int64_t>(blocks_.table[static_cast<size_t>(pos / rows)]) * rows + pos % rows;
}

size_t KvCache::n_bytes() const {
  if (paged()) return blocks_.pool->block_bytes() * blocks_.table.size();
  return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(total_rows_);
}

size_t KvCache::n_bytes_full() const {
  if (paged()) return n_bytes();
  return (k_row_bytes_ + v_row_bytes_) * static_cast<size_t>(n_ctx_) *
         static_cast<size_t>(n_layer_);
}

int64_t KvCache::blocks_needed(int64_t pos, int64_t n) const {
  QRUN_CHECK(paged() && pos >= 0 && n >= 0 && pos <= n_tokens_ && pos + n <= n_ctx_,
             "KV cache: reserve %lld positions at %lld of %lld (%lld held)",
             static_cast<long long>(n), static_cast<long long>(pos), static_cast<long long>(n_ctx_),
             static_cast<long long>(n_tokens_));
  if (n == 0) return 0;
  const KvBlockPool& pool = *blocks_.pool;
  const int64_t rows = pool.block_rows();
  const int64_t end = (pos + n + rows - 1) / rows;
  const auto held = static_cast<int64_t>(blocks_.table.size());
  int64_t needed = std::max<int64_t>(0, end - held);
  for (int64_t i = pos / rows; i < std::min(end, held); ++i) {
    if (pool.ref_count(blocks_.table[static_cast<size_t>(i)]) > 1) ++needed;  // to be copied
  }
  return needed;
}

Result<void> KvCache::reserve(int64_t pos, int64_t n, Backend& backend) {
  const int64_t needed = blocks_needed(pos, n);
  KvBlockPool& pool = *blocks_.pool;
  if (needed > pool.n_available()) {
    return make_error(ErrorCode::kRuntime,
                      format("the KV pool has %lld free blocks, and %lld positions at %lld "
                             "need %lld",
                             static_cast<long long>(pool.n_available()), static_cast<long long>(n),
                             static_cast<long long>(pos), static_cast<long long>(needed)));
  }
  if (n == 0) return {};
  const int64_t rows = pool.block_rows();
  const int64_t end = (pos + n + rows - 1) / rows;
  const auto held = static_cast<int64_t>(blocks_.table.size());
  for (int64_t i = pos / rows; i < std::min(end, held); ++i) {
    int32_t& b = blocks_.table[static_cast<size_t>(i)];
    if (pool.ref_count(b) == 1) {
      // Ours alone: written in place, out of the prefix cache if it was published.
      if (pool.is_published(b)) pool.unpublish(b);
    } else {
      // Shared: a private copy, with the rows before pos (the rest are about to be written).
      const int32_t copy = pool.allocate();
      const int64_t keep = std::clamp<int64_t>(pos - i * rows, 0, rows);
      if (keep > 0) {
        for (int64_t il = 0; il < n_layer_; ++il) {
          backend.kv_copy(layer(il), int64_t{b} * rows, int64_t{copy} * rows, keep);
        }
      }
      pool.release(b);
      b = copy;
    }
    blocks_.n_published = std::min(blocks_.n_published, i);
  }
  while (static_cast<int64_t>(blocks_.table.size()) < end) blocks_.table.push_back(pool.allocate());
  return {};
}

int64_t KvCache::attach_prefix(std::span<const int32_t> tokens) {
  QRUN_CHECK(paged() && n_tokens_ == 0 && blocks_.table.empty(),
             "KV cache: attach a prefix to a cache holding %lld positions",
             static_cast<long long>(n_tokens_));
  if (tokens.empty()) return 0;
  const size_t limit = std::min(tokens.size() - 1, static_cast<size_t>(n_ctx_));
  const std::vector<int32_t> found = blocks_.pool->lookup(tokens.first(limit));
  blocks_.table.assign(found.begin(), found.end());  // (keeping the table's room)
  blocks_.n_published = static_cast<int64_t>(blocks_.table.size());
  n_tokens_ = n_written_ = capacity();
  return n_tokens_;
}

void KvCache::publish(std::span<const int32_t> tokens) {
  QRUN_CHECK(paged() && static_cast<int64_t>(tokens.size()) >= n_tokens_,
             "KV cache: publish %zu tokens of %lld", tokens.size(),
             static_cast<long long>(n_tokens_));
  KvBlockPool& pool = *blocks_.pool;
  const int64_t rows = pool.block_rows();
  for (int64_t i = blocks_.n_published; i < n_tokens_ / rows; ++i) {
    int32_t& b = blocks_.table[static_cast<size_t>(i)];
    const int32_t parent = i == 0 ? -1 : blocks_.table[static_cast<size_t>(i - 1)];
    const int32_t cached = pool.publish(
        b, parent, tokens.subspan(static_cast<size_t>(i * rows), static_cast<size_t>(rows)));
    if (cached < 0) return;  // the key is taken by other tokens: the chain stops here
    if (cached != b) {
      pool.retain(cached);
      pool.release(b);
      b = cached;
    }
    blocks_.n_published = i + 1;
  }
}

}  // namespace qrun
