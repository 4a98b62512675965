// KvCache with sliding-window layers: a window layer is a ring of window - 1 + n_batch rows
// (never more than n_ctx), the memory figures follow, and keepable()/truncate() refuse a
// rewind to a point whose window the ring has already overwritten; K and V of different
// types (quantized rows are GGML blocks: 34 bytes per 32 Q8_0 values, 18 per 32 Q4_0).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/kv_cache.h"

namespace qrun {
namespace {

constexpr int64_t kCtx = 32, kHeads = 2, kHeadDim = 8, kBatch = 3;

KvCache make(const std::vector<int64_t>& windows) {
  Result<KvCache> kv = KvCache::create(static_cast<int64_t>(windows.size()), kCtx, kHeads, kHeadDim,
                                       DType::kF16, windows, kBatch);
  EXPECT_TRUE(kv.ok()) << kv.error().message;
  return std::move(*kv);
}

TEST(KvCache, WindowLayersAreRings) {
  // 4 - 1 + 3 = 6 rows; a window of 40 is longer than the context, so the layer is full.
  const KvCache kv = make({0, 4, 40});
  EXPECT_EQ(kv.layer_rows(0), kCtx);
  EXPECT_EQ(kv.layer_rows(1), 6);
  EXPECT_EQ(kv.layer_rows(2), kCtx);
  const size_t row = 2 * kHeads * kHeadDim;  // F16 bytes of one K (or V) row
  EXPECT_EQ(kv.n_bytes(), 2 * row * (kCtx + 6 + kCtx));
  EXPECT_EQ(kv.n_bytes_full(), 2 * row * 3 * kCtx);
  EXPECT_NE(kv_memory_summary(kv).find("less than full layers"), std::string::npos)
      << kv_memory_summary(kv);
  EXPECT_EQ(kv_memory_summary(make({0, 0})).find("less than full"), std::string::npos);
}

TEST(KvCache, LayerViewsDoNotOverlap) {
  KvCache kv = make({0, 4, 0});
  const KvLayerView a = kv.layer(0);
  const KvLayerView b = kv.layer(1);
  const KvLayerView c = kv.layer(2);
  EXPECT_EQ(a.n_rows, kCtx);
  EXPECT_EQ(b.n_rows, 6);
  const size_t row = 2 * kHeads * kHeadDim;
  EXPECT_EQ(static_cast<uint8_t*>(b.k) - static_cast<uint8_t*>(a.k),
            static_cast<std::ptrdiff_t>(row * kCtx));
  EXPECT_EQ(static_cast<uint8_t*>(c.v) - static_cast<uint8_t*>(b.v),
            static_cast<std::ptrdiff_t>(row * 6));
}

TEST(KvCache, RewindOnlyWhereTheRingStillHoldsTheWindow) {
  KvCache kv = make({0, 4});
  kv.set_n_tokens(20);
  // The ring (6 rows) holds positions 14 .. 19. The token at n reads n - 3 .. n.
  EXPECT_EQ(kv.keepable(20), 20);
  EXPECT_EQ(kv.keepable(19), 19);
  EXPECT_EQ(kv.keepable(17), 17);  // reads 14 ..
  EXPECT_EQ(kv.keepable(16), 0);   // would read 13, overwritten
  EXPECT_EQ(kv.keepable(5), 0);
  EXPECT_EQ(kv.keepable(0), 0);
  kv.truncate(17);
  EXPECT_EQ(kv.n_tokens(), 17);
  // Rows 17 .. 19 still hold stale positions, so the ring's reach is unchanged.
  EXPECT_EQ(kv.keepable(16), 0);
  kv.clear();
  EXPECT_EQ(kv.n_tokens(), 0);
  kv.set_n_tokens(4);
  EXPECT_EQ(kv.keepable(1), 1);  // nothing overwritten since the cache was cleared
}

TEST(KvCache, FullLayersKeepAnyPrefix) {
  KvCache kv = make({0, 0});
  kv.set_n_tokens(kCtx);
  for (int64_t n = 0; n <= kCtx; ++n) EXPECT_EQ(kv.keepable(n), n);
  kv.truncate(3);
  EXPECT_EQ(kv.n_tokens(), 3);
  EXPECT_EQ(kv.n_free(), kCtx - 3);
}

TEST(KvCache, KAndVOfDifferentTypes) {
  const int64_t head_dim = 64;
  const std::vector<int64_t> windows = {0, 4};
  Result<KvCache> kv = KvCache::create(2, kCtx, kHeads, head_dim,
                                       KvTypes(DType::kQ8_0, DType::kQ4_0), windows, kBatch);
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  const size_t k_row = 34 * kHeads * head_dim / 32;
  const size_t v_row = 18 * kHeads * head_dim / 32;
  EXPECT_EQ(kv->k_type(), DType::kQ8_0);
  EXPECT_EQ(kv->v_type(), DType::kQ4_0);
  EXPECT_EQ(kv->n_bytes(), (k_row + v_row) * (kCtx + 6));
  EXPECT_EQ(kv->n_bytes_full(), (k_row + v_row) * 2 * kCtx);
  const KvLayerView a = kv->layer(0);
  const KvLayerView b = kv->layer(1);
  EXPECT_EQ(a.k_type, DType::kQ8_0);
  EXPECT_EQ(a.v_type, DType::kQ4_0);
  EXPECT_EQ(a.k_row_bytes(), k_row);
  EXPECT_EQ(a.v_row_bytes(), v_row);
  EXPECT_EQ(static_cast<uint8_t*>(b.k) - static_cast<uint8_t*>(a.k),
            static_cast<std::ptrdiff_t>(k_row * kCtx));
  EXPECT_EQ(static_cast<uint8_t*>(b.v) - static_cast<uint8_t*>(a.v),
            static_cast<std::ptrdiff_t>(v_row * kCtx));
  const std::string summary = kv_memory_summary(*kv);
  EXPECT_NE(summary.find("K q8_0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("V q4_0"), std::string::npos) << summary;
  // Q8_0 K and V: 17/32 of F16, and BF16 the same as F16.
  Result<KvCache> f16 = KvCache::create(2, kCtx, kHeads, head_dim, DType::kF16);
  Result<KvCache> q8 = KvCache::create(2, kCtx, kHeads, head_dim, DType::kQ8_0);
  Result<KvCache> bf16 = KvCache::create(2, kCtx, kHeads, head_dim, DType::kBF16);
  EXPECT_EQ(q8->n_bytes() * 32, f16->n_bytes() * 17);
  EXPECT_EQ(bf16->n_bytes(), f16->n_bytes());
}

TEST(KvCache, RefusesBadTypesAndSizes) {
  // kHeadDim (8) is not a multiple of a Q8_0 block: a usage error naming K or V and the size.
  Result<KvCache> q8 =
      KvCache::create(2, kCtx, kHeads, kHeadDim, KvTypes(DType::kF16, DType::kQ8_0));
  EXPECT_EQ(q8.error().code, ErrorCode::kUsage);
  EXPECT_NE(q8.error().message.find("V cache type q8_0"), std::string::npos) << q8.error().message;
  EXPECT_NE(q8.error().message.find("multiple of 32; this model's is 8"), std::string::npos);
  EXPECT_EQ(KvCache::create(2, kCtx, kHeads, kHeadDim, DType::kQ4_K).error().code,
            ErrorCode::kUnsupported);
  EXPECT_TRUE(KvCache::create(2, kCtx, kHeads, kHeadDim, DType::kBF16).ok());
  EXPECT_EQ(KvCache::create(2, 0, kHeads, kHeadDim).error().code, ErrorCode::kUsage);
  EXPECT_EQ(KvCache::create(2, int64_t{1} << 60, kHeads, kHeadDim).error().code, ErrorCode::kUsage);
}

}  // namespace
}  // namespace qrun
