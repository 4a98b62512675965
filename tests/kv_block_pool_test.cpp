// KvBlockPool and paged KvCache bookkeeping, on a small pool whose rows the tests write
// through KvCache::k_row/v_row (no model): allocation, reference counts and the free list;
// the prefix cache (publish, lookup of the longest cached prefix, a hit verified against the
// block's tokens and its parent so that a forced hash collision never gives another
// sequence's rows, LRU eviction once the free list is empty, a stale key taken over); and a
// paged sequence: reserve() grows the block table and refuses when the pool runs out,
// truncate() releases, attach_prefix() shares, and a write into a shared block goes to a
// private copy (the rows before it copied), so the other sequence's rows never change.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "core/kv_block_pool.h"
#include "core/kv_cache.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/support/recording_backend.h"

namespace qrun {
namespace {

constexpr int64_t kLayers = 2, kRows = 16, kHeads = 1, kHeadDim = 32;

// The backend that copies shared blocks (KvCache::reserve): the rows are host memory.
Backend& host() {
  static kernels::CpuBackend backend(1);
  return backend;
}

std::shared_ptr<KvBlockPool> make_pool(int64_t n_blocks, KvBlockHashFn hash = kv_block_hash) {
  Result<std::shared_ptr<KvBlockPool>> p =
      KvBlockPool::create(kLayers, n_blocks, kRows, kHeads, kHeadDim, DType::kF32, hash);
  EXPECT_TRUE(p.ok()) << p.error().message;
  return *p;
}

std::vector<int32_t> iota_tokens(int32_t first, size_t n) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

uint64_t constant_hash(uint64_t, std::span<const int32_t>) {
  return 42;  // every block collides
}

// Writes `value` + pos into every element of positions [pos0, pos1) of every layer.
void fill(KvCache& kv, int64_t pos0, int64_t pos1, float value) {
  for (int64_t il = 0; il < kv.n_layer(); ++il) {
    for (int64_t p = pos0; p < pos1; ++p) {
      std::vector<float> row(static_cast<size_t>(kHeads * kHeadDim), value + static_cast<float>(p));
      std::memcpy(kv.k_row(il, p).data(), row.data(), kv.k_row_bytes());
      std::memcpy(kv.v_row(il, p).data(), row.data(), kv.v_row_bytes());
    }
  }
}

float k_at(const KvCache& kv, int64_t il, int64_t pos) {
  float x;
  std::memcpy(&x, kv.k_row(il, pos).data(), sizeof(x));
  return x;
}

KvCache sequence(const std::shared_ptr<KvBlockPool>& pool, int64_t n_ctx = 256) {
  Result<KvCache> kv = KvCache::create_paged(pool, n_ctx);
  EXPECT_TRUE(kv.ok()) << kv.error().message;
  return std::move(*kv);
}

// A sequence that ran `tokens` (rows filled with `value` + position) and published them.
KvCache ran(const std::shared_ptr<KvBlockPool>& pool, const std::vector<int32_t>& tokens,
            float value) {
  KvCache kv = sequence(pool);
  const auto n = static_cast<int64_t>(tokens.size());
  EXPECT_TRUE(kv.reserve(0, n, host()).ok());
  fill(kv, 0, n, value);
  kv.set_n_tokens(n);
  kv.publish(tokens);
  return kv;
}

TEST(KvBlockPool, RejectsBadBlockSizes) {
  EXPECT_FALSE(KvBlockPool::create(1, 4, 24, 1, 32, DType::kF16).ok());
  EXPECT_FALSE(KvBlockPool::create(1, 4, 8, 1, 32, DType::kF16).ok());
  EXPECT_FALSE(KvBlockPool::create(1, 0, 16, 1, 32, DType::kF16).ok());
  EXPECT_FALSE(KvBlockPool::create(1, 4, 16, 1, 33, DType::kQ8_0).ok());
  EXPECT_TRUE(KvBlockPool::create(1, 4, 16, 1, 32, DType::kQ8_0).ok());
}

TEST(KvBlockPool, AllocateRetainRelease) {
  auto pool = make_pool(3);
  EXPECT_EQ(pool->n_available(), 3);
  const int32_t a = pool->allocate(), b = pool->allocate(), c = pool->allocate();
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_EQ(pool->allocate(), -1);
  EXPECT_EQ(pool->n_used(), 3);
  pool->retain(b);
  EXPECT_EQ(pool->ref_count(b), 2);
  pool->release(b);
  EXPECT_EQ(pool->n_available(), 0);
  pool->release(b);
  EXPECT_EQ(pool->n_available(), 1);
  EXPECT_EQ(pool->allocate(), b);  // the free list hands it out again
  pool->release(a);
  pool->release(b);
  pool->release(c);
  EXPECT_EQ(pool->n_available(), 3);
}

TEST(KvBlockPool, SequencesReserveTruncateAndFreeTheirBlocks) {
  auto pool = make_pool(6);
  {
    KvCache kv = sequence(pool, 100);
    EXPECT_EQ(kv.blocks_needed(0, 17), 2);
    ASSERT_TRUE(kv.reserve(0, 17, host()).ok());
    EXPECT_EQ(kv.block_table().size(), 2u);
    EXPECT_EQ(kv.layer(1).n_rows, 32);
    EXPECT_EQ(kv.layer(1).block_table, kv.block_table().data());
    kv.set_n_tokens(17);
    ASSERT_TRUE(kv.reserve(17, 15, host()).ok());  // still in block 1
    EXPECT_EQ(kv.block_table().size(), 2u);
    const Result<void> too_many = kv.reserve(17, 80, host());  // 97 positions: 7 blocks
    ASSERT_FALSE(too_many.ok());
    EXPECT_NE(too_many.error().message.find("4 free blocks"), std::string::npos)
        << too_many.error().message;
    EXPECT_EQ(kv.block_table().size(), 2u);  // nothing changed
    EXPECT_EQ(kv.n_bytes(), pool->block_bytes() * 2);
    kv.truncate(16);
    EXPECT_EQ(kv.block_table().size(), 1u);
    EXPECT_EQ(pool->n_available(), 5);
    KvCache moved = std::move(kv);
    EXPECT_EQ(moved.block_table().size(), 1u);
    EXPECT_EQ(pool->n_available(), 5);
  }
  EXPECT_EQ(pool->n_available(), 6);  // the sequence's destructor released its block
}

TEST(KvBlockPool, LongestCachedPrefixIsShared) {
  auto pool = make_pool(16);
  const std::vector<int32_t> prompt = iota_tokens(100, 40);  // blocks 0..15, 16..31, + 8
  KvCache a = ran(pool, prompt, 1000.0f);
  EXPECT_EQ(pool->n_cached(), 2);  // only full blocks
  // A prompt sharing 20 tokens shares the first block only.
  std::vector<int32_t> other = prompt;
  other[20] = 7;
  KvCache b = sequence(pool);
  EXPECT_EQ(b.attach_prefix(other), 16);
  EXPECT_EQ(b.n_tokens(), 16);
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  EXPECT_EQ(pool->ref_count(a.block_table()[0]), 2);
  EXPECT_EQ(k_at(b, 1, 5), 1005.0f);
  // The whole prompt: both full blocks (32 tokens), never the last token's block.
  KvCache c = sequence(pool);
  EXPECT_EQ(c.attach_prefix(std::span(prompt).first(32)), 16);  // 31 tokens looked up
  KvCache d = sequence(pool);
  EXPECT_EQ(d.attach_prefix(prompt), 32);
  // A different first block shares nothing, even with the same later tokens.
  std::vector<int32_t> shifted = prompt;
  shifted[0] = 1;
  KvCache e = sequence(pool);
  EXPECT_EQ(e.attach_prefix(shifted), 0);
}

TEST(KvBlockPool, WritingIntoASharedBlockCopiesIt) {
  auto pool = make_pool(16);
  const std::vector<int32_t> prompt = iota_tokens(100, 40);
  KvCache a = ran(pool, prompt, 1000.0f);
  KvCache b = sequence(pool);
  ASSERT_EQ(b.attach_prefix(prompt), 32);
  // b rewinds into its second (shared) block and writes from position 20.
  b.truncate(20);
  EXPECT_EQ(b.blocks_needed(20, 4), 1);
  // The copy goes through the backend, which holds the rows (Backend::kv_copy).
  test::RecordingBackend copier(host());
  ASSERT_TRUE(b.reserve(20, 4, copier).ok());
  EXPECT_EQ(copier.count("kv_copy"), kLayers);
  EXPECT_NE(b.block_table()[1], a.block_table()[1]);
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  fill(b, 20, 24, 5000.0f);
  b.set_n_tokens(24);
  for (int64_t il = 0; il < kLayers; ++il) {
    EXPECT_EQ(k_at(b, il, 19), 1019.0f);  // copied
    EXPECT_EQ(k_at(b, il, 21), 5021.0f);
    EXPECT_EQ(k_at(a, il, 21), 1021.0f);  // a's rows are untouched
  }
  // A published block only this sequence holds is written in place, leaving the cache.
  KvCache c = ran(pool, iota_tokens(500, 16), 0.0f);
  const int32_t only = c.block_table()[0];
  ASSERT_TRUE(pool->is_published(only));
  ASSERT_TRUE(c.reserve(8, 1, host()).ok());
  EXPECT_EQ(c.block_table()[0], only);
  EXPECT_FALSE(pool->is_published(only));
}

TEST(KvBlockPool, UnreferencedCachedBlocksAreEvictedLeastRecentlyUsedFirst) {
  auto pool = make_pool(4);
  {
    KvCache a = ran(pool, iota_tokens(0, 16), 0.0f);
    KvCache b = ran(pool, iota_tokens(100, 16), 100.0f);
    KvCache c = ran(pool, iota_tokens(200, 16), 200.0f);
    a = sequence(pool);  // released in this order: a's block, b's, c's
    b = sequence(pool);
    c = sequence(pool);
  }
  EXPECT_EQ(pool->n_cached(), 3);
  EXPECT_EQ(pool->n_available(), 4);
  // Touch a's prefix: it becomes the most recently used.
  {
    KvCache again = sequence(pool);
    EXPECT_EQ(again.attach_prefix(iota_tokens(0, 17)), 16);
  }
  // Two new blocks: the free one, then the least recently used cached one (b's).
  KvCache d = sequence(pool);
  ASSERT_TRUE(d.reserve(0, 32, host()).ok());
  EXPECT_EQ(pool->n_evicted(), 1);
  EXPECT_EQ(pool->n_cached(), 2);
  KvCache probe = sequence(pool);
  EXPECT_EQ(probe.attach_prefix(iota_tokens(100, 17)), 0);  // b's: evicted
  probe = sequence(pool);
  EXPECT_EQ(probe.attach_prefix(iota_tokens(0, 17)), 16);  // a's: kept
  probe = sequence(pool);
  EXPECT_EQ(probe.attach_prefix(iota_tokens(200, 17)), 16);  // c's: kept
}

TEST(KvBlockPool, HashCollisionsNeverShareOtherTokens) {
  auto pool = make_pool(8, constant_hash);
  KvCache a = ran(pool, iota_tokens(0, 16), 0.0f);
  EXPECT_EQ(pool->n_cached(), 1);
  // Same key, other tokens: b's block is not published, and no lookup returns a's for it.
  KvCache b = ran(pool, iota_tokens(50, 16), 50.0f);
  EXPECT_EQ(pool->n_cached(), 1);
  EXPECT_FALSE(pool->is_published(b.block_table()[0]));
  KvCache c = sequence(pool);
  EXPECT_EQ(c.attach_prefix(iota_tokens(50, 17)), 0);
  KvCache d = sequence(pool);
  EXPECT_EQ(d.attach_prefix(iota_tokens(0, 17)), 16);
  EXPECT_EQ(k_at(d, 0, 3), 3.0f);
}

uint64_t tokens_only_hash(uint64_t, std::span<const int32_t> tokens) {
  return kv_block_hash(0, tokens);  // ignores the parent: equal blocks collide across chains
}

TEST(KvBlockPool, AHitNeedsTheSameParentBlock) {
  auto pool = make_pool(8, tokens_only_hash);
  // Chains X = [0..15][500..515] and Y = [900..915][500..515]: Y's second block has X's
  // second block's key and tokens, but follows another block.
  std::vector<int32_t> x = iota_tokens(0, 33), y = iota_tokens(900, 33);
  for (int i = 16; i < 33; ++i) x[i] = y[i] = 500 + i - 16;
  KvCache a = ran(pool, std::vector<int32_t>(x.begin(), x.begin() + 32), 0.0f);
  KvCache b = ran(pool, std::vector<int32_t>(y.begin(), y.begin() + 32), 5000.0f);
  EXPECT_FALSE(pool->is_published(b.block_table()[1]));
  KvCache c = sequence(pool);
  EXPECT_EQ(c.attach_prefix(y), 16);  // Y's first block only, never X's second
  EXPECT_EQ(k_at(c, 0, 3), 5003.0f);
  KvCache d = sequence(pool);
  EXPECT_EQ(d.attach_prefix(x), 32);
  EXPECT_EQ(k_at(d, 1, 20), 20.0f);
}

TEST(KvBlockPool, IdenticalBlocksAreDeduplicatedOnPublish) {
  auto pool = make_pool(8);
  const std::vector<int32_t> tokens = iota_tokens(0, 20);
  KvCache a = ran(pool, tokens, 0.0f);
  KvCache b = ran(pool, tokens, 0.0f);  // computed again, not attached
  EXPECT_EQ(b.block_table()[0], a.block_table()[0]);
  EXPECT_EQ(pool->ref_count(a.block_table()[0]), 2);
  EXPECT_NE(b.block_table()[1], a.block_table()[1]);  // partial blocks stay private
  EXPECT_EQ(pool->n_used(), 3);
}

TEST(KvBlockPool, PagedCachesCannotBeShifted) {
  auto pool = make_pool(4);
  KvCache kv = ran(pool, iota_tokens(0, 20), 0.0f);
  EXPECT_NE(kv.shift_problem(4, 4), "");
}

}  // namespace
}  // namespace qrun
