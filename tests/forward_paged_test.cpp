// A real model (Gemma 3 270M Q4_K_M: head size 256, one KV head, a 512-token sliding
// window on five of six layers) on a paged KV cache, Model::forward unchanged:
// - the `swa` golden prompt (781 tokens, past the window) and 8 teacher-forced decode steps
//   give bit for bit the logits of a contiguous cache (rings for the windowed layers), with
//   the paged sequence's blocks interleaved with another sequence's;
// - a second sequence whose prompt shares 600 tokens with the first attaches the cached
//   blocks of that prefix (576 positions), rewinds into a shared block (so reserve() gives
//   it a private copy) and runs the rest: its logits equal, bit for bit, those of a
//   contiguous cache that computed the same prefix in the same chunks, rewound and ran
//   the same rest; and the first sequence, decoding on, still matches its contiguous twin.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/kv_block_pool.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/golden.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

constexpr const char* kModel = "gemma-3-270m-q4_k_m";
constexpr int64_t kCtx = 1024, kBlockRows = 32;

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ForwardPaged, PagedCacheAndCachedPrefixGiveTheSameLogits) {
  QRUN_REAL_MODEL_OR_SKIP(path, std::string(kModel) + ".gguf");
  Result<gguf::File> file = gguf::File::open(path.string());
  ASSERT_TRUE(file.ok()) << file.error().message;
  Result<std::unique_ptr<Model>> loaded = models::load_model(*file, ModelOptions{128});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  Model& m = **loaded;
  const ModelHparams& hp = m.hparams();
  kernels::CpuBackend backend(2);
  ASSERT_TRUE(backend.supports_paged_kv());
  const test::Golden g = test::load_golden(std::string("golden/real/") + kModel + ".swa", false);
  ASSERT_GT(g.prompt.size(), 700u);
  const auto n_vocab = static_cast<size_t>(hp.n_vocab);

  Result<std::shared_ptr<KvBlockPool>> pool =
      make_kv_block_pool(m, 3 * kCtx / kBlockRows, kBlockRows, DType::kF16);
  ASSERT_TRUE(pool.ok()) << pool.error().message;
  Result<KvCache> flat = make_kv_cache(m, kCtx);
  Result<KvCache> paged = make_paged_kv_cache(m, *pool, kCtx);
  Result<KvCache> other = make_paged_kv_cache(m, *pool, kCtx);
  ASSERT_TRUE(flat.ok() && paged.ok() && other.ok());
  std::vector<float> want(n_vocab), got(n_vocab);

  // The prompt in two calls (the second across block edges), the other sequence taking
  // blocks in between, then decode steps.
  std::vector<int32_t> tokens = g.prompt;
  const auto n_prompt = static_cast<int64_t>(tokens.size());
  const int64_t split = 301;
  ASSERT_TRUE(paged->reserve(0, split, backend).ok());
  ASSERT_TRUE(other->reserve(0, 40, backend).ok());
  const std::span<const int32_t> head = std::span(g.prompt).first(split);
  ASSERT_TRUE(m.forward(backend, head, 0, *flat, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, head, 0, *paged, false, got.data()).ok());
  EXPECT_TRUE(same_floats(got, want));
  ASSERT_TRUE(paged->reserve(split, n_prompt - split, backend).ok());
  const std::span<const int32_t> rest = std::span(g.prompt).subspan(split);
  ASSERT_TRUE(m.forward(backend, rest, split, *flat, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, rest, split, *paged, false, got.data()).ok());
  EXPECT_TRUE(same_floats(got, want));
  for (int i = 0; i < 8; ++i) {
    const int32_t tok = g.greedy[static_cast<size_t>(i)];
    const auto pos = static_cast<int64_t>(tokens.size());
    tokens.push_back(tok);
    ASSERT_TRUE(paged->reserve(pos, 1, backend).ok());
    ASSERT_TRUE(m.forward(backend, std::span(&tok, 1), pos, *flat, false, want.data()).ok());
    ASSERT_TRUE(m.forward(backend, std::span(&tok, 1), pos, *paged, false, got.data()).ok());
    EXPECT_TRUE(same_floats(got, want)) << "decode step " << i;
  }
  paged->publish(tokens);
  EXPECT_EQ((*pool)->n_cached(), static_cast<int64_t>(tokens.size()) / kBlockRows);

  // A second prompt: the first 600 tokens, then the golden prompt's first 150 again.
  std::vector<int32_t> second(g.prompt.begin(), g.prompt.begin() + 600);
  second.insert(second.end(), g.prompt.begin(), g.prompt.begin() + 150);
  Result<KvCache> b = make_paged_kv_cache(m, *pool, kCtx);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->attach_prefix(second), 576);
  const int64_t from = 570;  // inside the last shared block
  b->truncate(from);
  EXPECT_EQ(b->blocks_needed(from, static_cast<int64_t>(second.size()) - from),
            1 + (750 + kBlockRows - 1) / kBlockRows - 576 / kBlockRows);
  ASSERT_TRUE(b->reserve(from, static_cast<int64_t>(second.size()) - from, backend).ok());
  // The reference: every layer full (no ring), so it can rewind to `from`.
  Result<KvCache> fresh = KvCache::create(hp.n_layer, kCtx, hp.n_head_kv, hp.head_dim, DType::kF16);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(m.forward(backend, head, 0, *fresh, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, rest, split, *fresh, false, want.data()).ok());
  fresh->truncate(from);
  const std::span<const int32_t> tail = std::span(second).subspan(static_cast<size_t>(from));
  ASSERT_TRUE(m.forward(backend, tail, from, *fresh, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, tail, from, *b, false, got.data()).ok());
  EXPECT_TRUE(same_floats(got, want)) << "the second sequence on the cached prefix";

  // The first sequence decodes on: its shared blocks were not written.
  const int32_t tok = g.greedy[8];
  const auto pos = static_cast<int64_t>(tokens.size());
  ASSERT_TRUE(paged->reserve(pos, 1, backend).ok());
  ASSERT_TRUE(m.forward(backend, std::span(&tok, 1), pos, *flat, false, want.data()).ok());
  ASSERT_TRUE(m.forward(backend, std::span(&tok, 1), pos, *paged, false, got.data()).ok());
  EXPECT_TRUE(same_floats(got, want)) << "the first sequence after the second ran";
}

}  // namespace
}  // namespace qrun
