// Prompt cache files in process, without a model: a saved state comes back row for row
// (full layers and sliding-window rings of another size), only the common prefix is
// restored, the checksum sees every byte, and every truncation, flipped byte, wrong magic,
// other fingerprint, other cache type or shape leaves the cache empty with a reason.
#include "core/prompt_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

constexpr uint64_t kFingerprint = 0x1234abcd5678ef00ULL;
constexpr int64_t kLayers = 3;
constexpr int64_t kHeads = 2;
constexpr int64_t kHeadDim = 32;
const std::vector<int64_t> kWindows = {0, 8, 0};  // layer 1: a sliding window of 8

KvCache make_cache(int64_t n_ctx, int64_t n_batch, KvTypes types = {}) {
  Result<KvCache> kv = KvCache::create(kLayers, n_ctx, kHeads, kHeadDim, types, kWindows, n_batch);
  EXPECT_TRUE(kv.ok());
  return std::move(*kv);
}

// A byte that depends on layer, position, K or V and offset, so misplaced rows show.
uint8_t pattern(int64_t il, int64_t pos, bool is_k, size_t i) {
  return static_cast<uint8_t>(il * 31 + pos * 7 + (is_k ? 0 : 101) + static_cast<int64_t>(i));
}

// Writes positions 0 .. n - 1 as a model would (in batches of n_batch), then marks them.
void fill(KvCache& kv, int64_t n, int64_t n_batch) {
  for (int64_t done = 0; done < n; done += n_batch) {
    const int64_t end = std::min(n, done + n_batch);
    for (int64_t il = 0; il < kLayers; ++il) {
      for (int64_t p = done; p < end; ++p) {
        for (const bool is_k : {true, false}) {
          std::span<uint8_t> row = is_k ? kv.k_row(il, p) : kv.v_row(il, p);
          for (size_t i = 0; i < row.size(); ++i) row[i] = pattern(il, p, is_k, i);
        }
      }
    }
    kv.set_n_tokens(end);
  }
}

// Whether the rows every layer must hold for the next token after n match the pattern.
void expect_rows(const KvCache& kv, int64_t n) {
  for (int64_t il = 0; il < kLayers; ++il) {
    const int64_t from = kv.layer_window(il) > 0 ? std::max<int64_t>(0, n - kWindows[il] + 1) : 0;
    for (int64_t p = from; p < n; ++p) {
      for (const bool is_k : {true, false}) {
        std::span<const uint8_t> row = is_k ? kv.k_row(il, p) : kv.v_row(il, p);
        for (size_t i = 0; i < row.size(); ++i) {
          ASSERT_EQ(row[i], pattern(il, p, is_k, i))
              << "layer " << il << " position " << p << (is_k ? " K" : " V") << " byte " << i;
        }
      }
    }
  }
}

std::vector<int32_t> iota_tokens(int64_t n, int32_t from = 100) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), from);
  return t;
}

void write_bytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

TEST(PromptCache, ChecksumDependsOnEveryByteAndNotOnHowTheStreamIsSplit) {
  std::vector<uint8_t> bytes(301);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13);
  const uint64_t whole = prompt_cache_fingerprint(bytes);
  for (size_t cut : {1, 7, 31, 32, 33, 100, 300}) {
    PromptCacheChecksum sum;
    sum.update(std::span<const uint8_t>(bytes).first(cut));
    sum.update(std::span<const uint8_t>(bytes).subspan(cut));
    EXPECT_EQ(sum.digest(), whole) << "cut at " << cut;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> flipped = bytes;
    flipped[i] ^= 0x10;
    EXPECT_NE(prompt_cache_fingerprint(flipped), whole) << "byte " << i;
  }
  bytes.push_back(0);  // a trailing zero byte is not the same stream
  EXPECT_NE(prompt_cache_fingerprint(bytes), whole);
}

TEST(PromptCache, RestoresTheCommonPrefixIntoFullLayersAndRingsOfAnotherSize) {
  const std::filesystem::path file = temp_dir() / "state.bin";
  const int64_t n = 29;
  KvCache saved = make_cache(64, 4);  // layer 1: a ring of 8 - 1 + 4 = 11 rows
  fill(saved, n, 4);
  const std::vector<int32_t> tokens = iota_tokens(n);
  ASSERT_TRUE(save_prompt_cache(file.string(), kFingerprint, saved, tokens).ok());
  EXPECT_FALSE(std::filesystem::exists(file.string() + ".tmp"));
  // Only the positions used are stored: the ring's 11, the full layers' 29.
  const size_t row = saved.k_row_bytes() + saved.v_row_bytes();
  EXPECT_EQ(std::filesystem::file_size(file), 64 + 16 * kLayers + 4 * n + (2 * n + 11) * row + 8);

  for (const int64_t n_batch : {2, 4, 16}) {  // rings of 9, 11 and 23 rows
    SCOPED_TRACE("n_batch " + std::to_string(n_batch));
    // A prompt that extends the cached tokens: all of them come back.
    std::vector<int32_t> longer = iota_tokens(n + 5);
    KvCache kv = make_cache(64, n_batch);
    PromptCacheLoad r = load_prompt_cache(file.string(), kFingerprint, kv, longer, n + 4);
    EXPECT_TRUE(r.found);
    EXPECT_EQ(r.problem, "");
    EXPECT_EQ(r.n_common, n);
    ASSERT_EQ(r.n_restored, n);
    EXPECT_EQ(kv.n_tokens(), n);
    expect_rows(kv, n);

    // A prompt that diverges at 25: 25 positions, still within what the ring holds.
    std::vector<int32_t> diverging = longer;
    diverging[25] = 7;
    KvCache kv2 = make_cache(64, n_batch);
    r = load_prompt_cache(file.string(), kFingerprint, kv2, diverging, n + 4);
    EXPECT_EQ(r.n_common, 25);
    ASSERT_EQ(r.n_restored, 25);
    expect_rows(kv2, 25);
    // The restored ring holds nothing below position 18 (29 - 11): keepable says so.
    EXPECT_EQ(kv2.keepable(25), 25);
    EXPECT_EQ(kv2.keepable(20), 0);

    // max_keep: the prompt equals the cached tokens, one is left to feed.
    KvCache kv3 = make_cache(64, n_batch);
    r = load_prompt_cache(file.string(), kFingerprint, kv3, tokens, n - 1);
    EXPECT_EQ(r.n_common, n);
    EXPECT_EQ(r.n_restored, n - 1);
    expect_rows(kv3, n - 1);
  }

  // Diverging at 10: the ring no longer holds position 3, which position 10 reads.
  std::vector<int32_t> early = tokens;
  early[10] = 7;
  KvCache kv = make_cache(64, 4);
  const PromptCacheLoad r = load_prompt_cache(file.string(), kFingerprint, kv, early, n);
  EXPECT_EQ(r.n_common, 10);
  EXPECT_EQ(r.n_restored, 0);
  EXPECT_NE(r.problem.find("sliding-window"), std::string::npos) << r.problem;
  EXPECT_EQ(kv.n_tokens(), 0);
}

TEST(PromptCache, KeepAlignsTheLastBatchFedWithAColdRuns) {
  // A cold run of 200 tokens in batches of 32 ends with a batch of 8: keep whatever leaves
  // a last batch of more than one token.
  EXPECT_EQ(prompt_cache_keep(100, 199, 200, 32), 100);
  EXPECT_EQ(prompt_cache_keep(199, 199, 200, 32), 198);  // not one token alone
  EXPECT_EQ(prompt_cache_keep(167, 199, 200, 32), 166);  // 32 + 1 left: a batch of one last
  // 193 tokens end with a batch of one: so must the warm run's.
  EXPECT_EQ(prompt_cache_keep(192, 192, 193, 32), 192);
  EXPECT_EQ(prompt_cache_keep(150, 192, 193, 32), 128);
  EXPECT_EQ(prompt_cache_keep(20, 192, 193, 32), 0);
  // Batches of one, or no alignment asked for: the prefix as far as allowed.
  EXPECT_EQ(prompt_cache_keep(150, 192, 193, 1), 150);
  EXPECT_EQ(prompt_cache_keep(199, 199, 200, 0), 199);
  EXPECT_EQ(prompt_cache_keep(300, 199, 200, 0), 199);
}

TEST(PromptCache, MoreTokensThanTheContextRestoresOnlyThePrefixThatFits) {
  const std::filesystem::path file = temp_dir() / "state.bin";
  KvCache saved = make_cache(64, 64);  // every layer holds the whole context
  fill(saved, 40, 16);
  ASSERT_TRUE(save_prompt_cache(file.string(), kFingerprint, saved, iota_tokens(40)).ok());
  KvCache small = make_cache(16, 4);
  const PromptCacheLoad r =
      load_prompt_cache(file.string(), kFingerprint, small, iota_tokens(12), 11);
  EXPECT_EQ(r.n_restored, 11);
  expect_rows(small, 11);
}

TEST(PromptCache, MissingFileIsAColdStartThatIsNotAProblem) {
  KvCache kv = make_cache(64, 4);
  const PromptCacheLoad r =
      load_prompt_cache((temp_dir() / "none.bin").string(), kFingerprint, kv, iota_tokens(3), 2);
  EXPECT_FALSE(r.found);
  EXPECT_EQ(r.n_restored, 0);
}

TEST(PromptCache, WriteErrorsNameTheFileAndLeaveNothingBehind) {
  const std::filesystem::path dir = temp_dir();
  KvCache kv = make_cache(64, 4);
  fill(kv, 5, 4);
  const Result<void> r =
      save_prompt_cache((dir / "no" / "such" / "dir.bin").string(), 1, kv, iota_tokens(5));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kIo);
  EXPECT_NE(r.error().message.find("dir.bin"), std::string::npos) << r.error().message;
  // A directory in the way of the rename.
  std::filesystem::create_directory(dir / "taken");
  std::filesystem::create_directory(dir / "taken" / "x");
  ASSERT_FALSE(save_prompt_cache((dir / "taken").string(), 1, kv, iota_tokens(5)).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "taken.tmp"));
}

class PromptCacheCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir();
    KvCache saved = make_cache(64, 4);
    fill(saved, 13, 4);
    const std::filesystem::path good = dir_ / "good.bin";
    ASSERT_TRUE(save_prompt_cache(good.string(), kFingerprint, saved, iota_tokens(13)).ok());
    bytes_ = read_bytes(good);
  }
  // Loads `bytes` with a prompt that extends the saved tokens: nothing may be restored and
  // the reason must name the file.
  std::string expect_cold(const std::vector<uint8_t>& bytes, KvTypes types = {},
                          uint64_t fingerprint = kFingerprint) {
    const std::filesystem::path path = dir_ / "bad.bin";
    write_bytes(path, bytes);
    KvCache kv = make_cache(64, 4, types);
    const PromptCacheLoad r =
        load_prompt_cache(path.string(), fingerprint, kv, iota_tokens(20), 19);
    EXPECT_EQ(r.n_restored, 0);
    EXPECT_EQ(kv.n_tokens(), 0);
    EXPECT_TRUE(r.found);
    EXPECT_EQ(r.problem.rfind(path.string() + ": ", 0), 0u) << r.problem;
    return r.problem;
  }
  // Every offset of the header, tables and tokens and the last rows, and every 13th of the
  // rest (about a thousand loads in all).
  bool probe(size_t offset) const {
    return offset < 256 || offset + 300 >= bytes_.size() || offset % 13 == 0;
  }
  std::filesystem::path dir_;
  std::vector<uint8_t> bytes_;
};

TEST_F(PromptCacheCorrupt, EveryTruncation) {
  for (size_t size = 0; size < bytes_.size(); ++size) {
    if (!probe(size)) continue;
    SCOPED_TRACE("truncated to " + std::to_string(size));
    expect_cold(std::vector<uint8_t>(bytes_.begin(), bytes_.begin() + static_cast<long>(size)));
  }
}

TEST_F(PromptCacheCorrupt, EveryFlippedByte) {
  for (size_t i = 0; i < bytes_.size(); ++i) {
    if (!probe(i)) continue;
    SCOPED_TRACE("byte " + std::to_string(i));
    std::vector<uint8_t> b = bytes_;
    b[i] ^= 0x40;
    expect_cold(b);
  }
}

TEST_F(PromptCacheCorrupt, WrongMagicModelTypesOrShape) {
  std::vector<uint8_t> b = bytes_;
  b[0] = 'X';
  EXPECT_NE(expect_cold(b).find("bad magic"), std::string::npos);
  EXPECT_NE(expect_cold(bytes_, {}, kFingerprint + 1).find("another model"), std::string::npos);
  EXPECT_NE(expect_cold(bytes_, KvTypes(DType::kQ8_0)).find("cache types K f16, V f16"),
            std::string::npos);
  EXPECT_NE(expect_cold(std::vector<uint8_t>(bytes_.begin(), bytes_.end() - 1)).find("truncated"),
            std::string::npos);
  std::vector<uint8_t> longer = bytes_;
  longer.push_back(0);
  expect_cold(longer);
  // A shape mismatch (another head count) with an otherwise valid file.
  const std::filesystem::path path = dir_ / "shape.bin";
  write_bytes(path, bytes_);
  Result<KvCache> other = KvCache::create(kLayers, 64, 1, kHeadDim, {}, kWindows, 4);
  ASSERT_TRUE(other.ok());
  const PromptCacheLoad r =
      load_prompt_cache(path.string(), kFingerprint, *other, iota_tokens(20), 19);
  EXPECT_EQ(r.n_restored, 0);
  EXPECT_NE(r.problem.find("KV heads"), std::string::npos) << r.problem;
}

}  // namespace
}  // namespace qrun::test
