// KvBlockPool: block storage, reference counts, the free list, and the prefix cache (keys,
// verification, LRU eviction). Storage is allocated without initialisation, as KvCache's.
#include "core/kv_block_pool.h"

#include <algorithm>
#include <limits>
#include <new>

namespace qrun {

namespace {

uint64_t mix64(uint64_t x) {  // the splitmix64 finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t kv_block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ULL);
  for (const int32_t t : tokens) h = mix64(h + static_cast<uint32_t>(t) + 0x9e3779b97f4a7c15ULL);
  return h;
}

Result<std::shared_ptr<KvBlockPool>> KvBlockPool::create(int64_t n_layer, int64_t n_blocks,
                                                         int64_t block_rows, int64_t n_head_kv,
                                                         int64_t head_dim, KvTypes types,
                                                         KvBlockHashFn hash) {
  if (block_rows < kKvBlockAlign || (block_rows & (block_rows - 1)) != 0) {
    return make_error(
        ErrorCode::kUsage,
        format("KV block size %lld is not a power of two of at least %lld",
               static_cast<long long>(block_rows), static_cast<long long>(kKvBlockAlign)));
  }
  if (n_blocks <= 0 || n_blocks > std::numeric_limits<int32_t>::max() / block_rows) {
    return make_error(ErrorCode::kUsage,
                      format("a KV pool of %lld blocks", static_cast<long long>(n_blocks)));
  }
  // The shape and type checks of a cache as large as the pool.
  Result<KvCache> shape = KvCache::create(n_layer, block_rows, n_head_kv, head_dim, types);
  if (!shape.ok()) return shape.error();
  std::shared_ptr<KvBlockPool> p(new KvBlockPool());
  p->n_layer_ = n_layer;
  p->n_blocks_ = n_blocks;
  p->block_rows_ = block_rows;
  p->n_head_kv_ = n_head_kv;
  p->head_dim_ = head_dim;
  p->types_ = types;
  p->k_row_bytes_ = shape.value().k_row_bytes();
  p->v_row_bytes_ = shape.value().v_row_bytes();
  p->hash_ = hash;
  const double total = static_cast<double>(p->block_bytes()) * static_cast<double>(n_blocks);
  if (total > static_cast<double>(std::numeric_limits<int64_t>::max() / 2)) {
    return make_error(ErrorCode::kUsage, format("a KV pool of %lld blocks is too large",
                                                static_cast<long long>(n_blocks)));
  }
  p->k_.reset(new (std::nothrow) uint8_t[p->k_layer_bytes() * static_cast<size_t>(n_layer)]);
  p->v_.reset(new (std::nothrow) uint8_t[p->v_layer_bytes() * static_cast<size_t>(n_layer)]);
  if (!p->k_ || !p->v_) {
    return make_error(ErrorCode::kRuntime,
                      format("cannot allocate a KV pool of %.1f MiB (%lld blocks)",
                             total / (1024.0 * 1024.0), static_cast<long long>(n_blocks)));
  }
  p->meta_.resize(static_cast<size_t>(n_blocks));
  p->free_.reserve(static_cast<size_t>(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) p->free_.push_back(static_cast<int32_t>(b));
  return p;
}

const KvBlockPool::Meta& KvBlockPool::meta(int32_t b) const {
  QRUN_CHECK(b >= 0 && b < n_blocks_, "KV pool: block %d of %lld", b,
             static_cast<long long>(n_blocks_));
  return meta_[static_cast<size_t>(b)];
}

int32_t KvBlockPool::allocate() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    unpublish(b);
    free_.pop_back();
    ++n_evicted_;
  } else {
    return -1;
  }
  meta_[static_cast<size_t>(b)].refs = 1;
  return b;
}

void KvBlockPool::retain(int32_t b) {
  Meta& m = const_cast<Meta&>(meta(b));
  QRUN_CHECK(m.refs > 0 || m.published, "KV pool: retain of free block %d", b);
  if (m.refs == 0) lru_.erase(m.lru);
  ++m.refs;
}

void KvBlockPool::release(int32_t b) {
  Meta& m = const_cast<Meta&>(meta(b));
  QRUN_CHECK(m.refs > 0, "KV pool: release of unreferenced block %d", b);
  if (--m.refs > 0) return;
  if (m.published) {
    m.lru = lru_.insert(lru_.end(), b);
  } else {
    free_.push_back(b);
  }
}

void KvBlockPool::unpublish(int32_t b) {
  Meta& m = meta_[static_cast<size_t>(b)];
  by_key_.erase(m.key);
  m.published = false;
  m.tokens.clear();
  ++m.gen;  // blocks published after it no longer match it as their parent
  if (m.refs == 0) {
    lru_.erase(m.lru);
    free_.push_back(b);
  }
}

bool KvBlockPool::reachable(int32_t b) const {
  for (const Meta* m = &meta(b); m->parent >= 0; m = &meta(m->parent)) {
    const Meta& parent = meta(m->parent);
    if (!parent.published || parent.gen != m->parent_gen) return false;
  }
  return true;
}

bool KvBlockPool::matches(int32_t b, int32_t parent, std::span<const int32_t> tokens) const {
  const Meta& m = meta(b);
  if (!m.published || m.parent != parent) return false;
  if (parent >= 0 && (!meta(parent).published || meta(parent).gen != m.parent_gen)) return false;
  return std::equal(tokens.begin(), tokens.end(), m.tokens.begin(), m.tokens.end());
}

int32_t KvBlockPool::publish(int32_t b, int32_t parent, std::span<const int32_t> tokens) {
  QRUN_CHECK(static_cast<int64_t>(tokens.size()) == block_rows_ && meta(b).refs > 0 &&
                 (parent < 0 || meta(parent).published),
             "KV pool: publish block %d (%zu tokens, parent %d)", b, tokens.size(), parent);
  if (meta(b).published) return b;
  const uint64_t key = hash_(parent < 0 ? 0 : meta(parent).key, tokens);
  const auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    if (matches(it->second, parent, tokens)) return it->second;
    // The key's holder has other tokens (a collision: b stays private), or it follows a
    // parent that has since left the cache, so no lookup can reach it: b takes its place.
    if (reachable(it->second)) return -1;
    unpublish(it->second);
  }
  Meta& m = meta_[static_cast<size_t>(b)];
  m.published = true;
  m.key = key;
  m.parent = parent;
  m.parent_gen = parent < 0 ? 0 : meta(parent).gen;
  m.tokens.assign(tokens.begin(), tokens.end());
  by_key_.emplace(key, b);
  return b;
}

std::vector<int32_t> KvBlockPool::lookup(std::span<const int32_t> tokens) {
  std::vector<int32_t> found;
  uint64_t key = 0;
  int32_t parent = -1;
  const auto rows = static_cast<size_t>(block_rows_);
  for (size_t at = 0; at + rows <= tokens.size(); at += rows) {
    const std::span<const int32_t> block = tokens.subspan(at, rows);
    key = hash_(key, block);
    const auto it = by_key_.find(key);
    if (it == by_key_.end() || !matches(it->second, parent, block)) break;
    parent = it->second;
    found.push_back(parent);
  }
  for (const int32_t b : found) retain(b);
  return found;
}

}  // namespace qrun
