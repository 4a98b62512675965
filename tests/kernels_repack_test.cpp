// The x16 decode layouts (kernels/cpu/repack.h) and the kernels and backend path that read
// them:
// - repack_rows puts every byte where the header says, copies the rows after the last
//   whole group unchanged, and gives the same bytes when split over whole groups;
// - each ISA's gemv_repacked equals its vec_dot bit for bit, on group counts around the
//   kernels' multi-group passes, with NaN guards after the output and with extreme levels;
// - CpuBackend decodes the same bits with and without repacking, for row counts with a
//   tail, several tokens and 1 or 2 threads, notices when other weights appear at an
//   address it has already repacked, and holds no more copies than its budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
const DType kRepackTypes[] = {DType::kQ4_0, DType::kIQ4_NL, DType::kQ5_0, DType::kQ8_0,
                              DType::kQ4_K, DType::kQ5_K,   DType::kQ6_K};

// n_rows random rows of `type` (n columns), rows at varied scales.
std::vector<uint8_t> random_weights(DType type, int64_t n, int64_t n_rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> x(static_cast<size_t>(n * n_rows));
  for (size_t i = 0; i < x.size(); ++i) {
    std::normal_distribution<float> dist(0.0f,
                                         (i / static_cast<size_t>(n)) % 3 == 0 ? 30.0f : 0.7f);
    x[i] = dist(rng);
  }
  std::vector<uint8_t> w(row_size(type, n) * static_cast<size_t>(n_rows));
  quantize_rows(type, x.data(), w.data(), n_rows, n);
  return w;
}

std::vector<uint8_t> random_act(const MatmulKernels& mk, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  std::vector<uint8_t> a(row_size(mk.act_type, n));
  mk.quantize_act(x.data(), a.data(), n);
  return a;
}

TEST(KernelsRepack, LayoutIsTheDocumentedOne) {
  const int64_t n = 3 * kQK;
  const int64_t nb = n / kQK;
  const int64_t n_rows = 2 * kRepackRows + 5;
  for (DType type : {DType::kQ4_0, DType::kIQ4_NL, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(type));
    const bool q4 = type != DType::kQ8_0;
    const size_t row_bytes = row_size(type, n);
    const size_t block_bytes = row_bytes / nb;
    const int q_bytes = q4 ? 16 : 32;  // quant bytes per block
    const std::vector<uint8_t> w = random_weights(type, n, n_rows, 11);
    std::vector<uint8_t> p(w.size() + 8, 0xA5);
    repack_rows(type, n, w.data(), n_rows, p.data());
    for (int64_t g = 0; g < 2; ++g) {
      const uint8_t* group = p.data() + g * kRepackRows * row_bytes;
      const uint8_t* q = group + nb * kRepackRows * 2;
      for (int64_t b = 0; b < nb; ++b) {
        for (int64_t j = 0; j < kRepackRows; ++j) {
          const uint8_t* block = w.data() + (g * kRepackRows + j) * row_bytes + b * block_bytes;
          ASSERT_EQ(std::memcmp(group + (b * kRepackRows + j) * 2, block, 2), 0)
              << "scale of group " << g << " block " << b << " row " << j;
          for (int k = 0; k < q_bytes / 4; ++k) {
            for (int i = 0; i < 4; ++i) {
              const uint8_t want = static_cast<uint8_t>(block[2 + 4 * k + i] ^ (q4 ? 0 : 0x80));
              ASSERT_EQ(q[((b * (q_bytes / 4) + k) * kRepackRows + j) * 4 + i], want)
                  << "group " << g << " block " << b << " row " << j << " byte " << 4 * k + i;
            }
          }
        }
      }
    }
    const size_t tail = 2 * kRepackRows * row_bytes;
    EXPECT_EQ(std::memcmp(p.data() + tail, w.data() + tail, w.size() - tail), 0);
    for (size_t i = w.size(); i < p.size(); ++i) EXPECT_EQ(p[i], 0xA5) << "wrote past the end";
    // Split over whole groups, as CpuBackend does: the same bytes.
    std::vector<uint8_t> split(w.size());
    repack_rows(type, n, w.data(), kRepackRows, split.data());
    repack_rows(type, n, w.data() + kRepackRows * row_bytes, n_rows - kRepackRows,
                split.data() + kRepackRows * row_bytes);
    EXPECT_EQ(std::memcmp(split.data(), p.data(), split.size()), 0);
  }
}

// Every Q5_0 level read back from the layout as repack.h describes it (scale at d[b][j],
// nibbles from q[c][j], high bit at bit 2c + s of byte i of row j's h) is the GGML one.
TEST(KernelsRepack, Q5_0LayoutIsTheDocumentedOne) {
  const int64_t n = 3 * kQK;
  const int64_t nb = n / kQK;
  const int64_t n_rows = 2 * kRepackRows + 7;
  const size_t row_bytes = row_size(DType::kQ5_0, n);
  const std::vector<uint8_t> w = random_weights(DType::kQ5_0, n, n_rows, 14);
  std::vector<uint8_t> p(w.size() + 8, 0xA5);
  repack_rows(DType::kQ5_0, n, w.data(), n_rows, p.data());
  for (int64_t g = 0; g < 2; ++g) {
    const uint8_t* group = p.data() + g * kRepackRows * row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* h = group + nb * kRepackRows * 2 + b * (kRepackRows * 20);
      const uint8_t* q = h + kRepackRows * 4;
      for (int64_t j = 0; j < kRepackRows; ++j) {
        const auto* block =
            reinterpret_cast<const BlockQ5_0*>(w.data() + (g * kRepackRows + j) * row_bytes) + b;
        ASSERT_EQ(std::memcmp(group + (b * kRepackRows + j) * 2, &block->d, 2), 0)
            << "scale of group " << g << " block " << b << " row " << j;
        uint32_t qh;
        std::memcpy(&qh, block->qh, 4);
        for (int e = 0; e < kQK; ++e) {
          const int want = ((block->qs[e % 16] >> (4 * (e / 16))) & 15) | (((qh >> e) & 1) << 4);
          const int s = e / 16, c = (e % 16) / 4, i = e % 4;
          const uint8_t qbyte = q[(c * kRepackRows + j) * 4 + i];
          const int high = (h[4 * j + i] >> (2 * c + s)) & 1;
          ASSERT_EQ(((qbyte >> (4 * s)) & 15) | (high << 4), want)
              << "group " << g << " block " << b << " row " << j << " element " << e;
        }
      }
    }
  }
  const size_t tail = 2 * kRepackRows * row_bytes;
  EXPECT_EQ(std::memcmp(p.data() + tail, w.data() + tail, w.size() - tail), 0);
  for (size_t i = w.size(); i < p.size(); ++i) EXPECT_EQ(p[i], 0xA5) << "wrote past the end";
}

// Q4_K and Q5_K: d, dmin, then the scale columns, Q5_K's qh columns and the qs columns of
// each super-block of the 16 rows.
template <class Block>
void expect_k_super_layout(DType type, int64_t n_rows, uint32_t seed) {
  const int64_t n = 2 * kQKK;
  const size_t row_bytes = row_size(type, n);
  const std::vector<uint8_t> w = random_weights(type, n, n_rows, seed);
  std::vector<uint8_t> p(w.size());
  repack_rows(type, n, w.data(), n_rows, p.data());
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const uint8_t* super = p.data() + b * kRepackRows * sizeof(Block);
    for (int64_t j = 0; j < kRepackRows; ++j) {
      const auto* block = reinterpret_cast<const Block*>(w.data() + j * row_bytes) + b;
      ASSERT_EQ(std::memcmp(super + 2 * j, &block->d, 2), 0) << "d, block " << b << " row " << j;
      ASSERT_EQ(std::memcmp(super + 32 + 2 * j, &block->dmin, 2), 0) << "dmin, row " << j;
      const uint8_t* field = super + 64;
      const auto expect_columns = [&](const uint8_t* row_field, int bytes, const char* name) {
        for (int k = 0; k < bytes / 4; ++k) {
          ASSERT_EQ(std::memcmp(field + (k * kRepackRows + j) * 4, row_field + 4 * k, 4), 0)
              << name << ", block " << b << " row " << j << " column " << k;
        }
        field += kRepackRows * bytes;
      };
      expect_columns(block->scales, sizeof(block->scales), "scales");
      if constexpr (std::is_same_v<Block, BlockQ5_K>) {
        expect_columns(block->qh, sizeof(block->qh), "qh");
      }
      expect_columns(block->qs, sizeof(block->qs), "qs");
    }
  }
  const size_t tail = kRepackRows * row_bytes;
  EXPECT_EQ(std::memcmp(p.data() + tail, w.data() + tail, w.size() - tail), 0);
}

TEST(KernelsRepack, Q4KLayoutIsTheDocumentedOne) {
  expect_k_super_layout<BlockQ4_K>(DType::kQ4_K, kRepackRows + 3, 12);
}

TEST(KernelsRepack, Q5KLayoutIsTheDocumentedOne) {
  expect_k_super_layout<BlockQ5_K>(DType::kQ5_K, kRepackRows + 5, 14);
}

TEST(KernelsRepack, Q6KLayoutIsTheDocumentedOne) {
  const int64_t n = 2 * kQKK;
  const int64_t nb = n / kQKK;
  const int64_t n_rows = kRepackRows + 1;
  const size_t row_bytes = row_size(DType::kQ6_K, n);
  const std::vector<uint8_t> w = random_weights(DType::kQ6_K, n, n_rows, 13);
  std::vector<uint8_t> p(w.size());
  repack_rows(DType::kQ6_K, n, w.data(), n_rows, p.data());
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* super = p.data() + nb * kRepackRows * 2 + b * kRepackRows * 208;
    for (int64_t j = 0; j < kRepackRows; ++j) {
      const auto* block = reinterpret_cast<const BlockQ6_K*>(w.data() + j * row_bytes) + b;
      ASSERT_EQ(std::memcmp(p.data() + (b * kRepackRows + j) * 2, &block->d, 2), 0) << "d " << j;
      const struct {
        const void* field;
        int bytes;
        size_t offset;
      } fields[] = {{block->ql, 128, 0}, {block->qh, 64, 2048}, {block->scales, 16, 3072}};
      for (const auto& f : fields) {
        for (int k = 0; k < f.bytes / 4; ++k) {
          ASSERT_EQ(std::memcmp(super + f.offset + (k * kRepackRows + j) * 4,
                                static_cast<const uint8_t*>(f.field) + 4 * k, 4),
                    0)
              << "block " << b << " row " << j << " field at " << f.offset << " column " << k;
        }
      }
    }
  }
  const size_t tail = kRepackRows * row_bytes;
  EXPECT_EQ(std::memcmp(p.data() + tail, w.data() + tail, w.size() - tail), 0);
}

void expect_gemv_matches_vec_dot(const MatmulKernels& mk, DType type, int64_t n,
                                 const std::vector<uint8_t>& w, const std::vector<uint8_t>& a) {
  const size_t row_bytes = row_size(type, n);
  const int64_t n_groups = static_cast<int64_t>(w.size() / row_bytes) / kRepackRows;
  std::vector<uint8_t> p(w.size());
  repack_rows(type, n, w.data(), n_groups * kRepackRows, p.data());
  std::vector<float> y(static_cast<size_t>(n_groups * kRepackRows + 5), kNaN);
  mk.gemv_repacked(n, p.data(), n_groups, a.data(), y.data());
  for (int64_t r = 0; r < n_groups * kRepackRows; ++r) {
    const float want = mk.vec_dot(n, w.data() + static_cast<size_t>(r) * row_bytes, a.data());
    ASSERT_EQ(std::bit_cast<uint32_t>(y[static_cast<size_t>(r)]), std::bit_cast<uint32_t>(want))
        << "row " << r << ": " << y[static_cast<size_t>(r)] << " vs " << want;
  }
  for (size_t i = static_cast<size_t>(n_groups * kRepackRows); i < y.size(); ++i) {
    EXPECT_TRUE(std::isnan(y[i])) << "wrote past the groups at " << i;
  }
}

// Weights of n_rows rows with every level at an extreme, and an activation row at +-127 (see
// GemvMatchesVecDotBitForBit).
void make_extremes(DType type, const MatmulKernels& mk, int64_t n, int64_t n_rows, uint32_t seed,
                   std::vector<uint8_t>& w, std::vector<uint8_t>& a) {
  const int64_t block = type_traits(type).block_elems;
  w = random_weights(type, n, n_rows, seed);
  a = random_act(mk, n, seed + 1);
  const size_t block_bytes = row_size(type, block);
  // The bytes after d (and dmin), or for Q6_K all but d at the end.
  const size_t first_level = type == DType::kQ4_K || type == DType::kQ5_K ? 4
                             : type == DType::kQ6_K                       ? 0
                                                                          : 2;
  const size_t last_level = type == DType::kQ6_K ? block_bytes - 2 : block_bytes;
  const uint8_t q8_levels[] = {0x7F, 0x81, 0x80};  // 127, -127, -128
  for (size_t off = 0; off < w.size(); off += block_bytes) {
    for (size_t i = first_level; i < last_level; ++i) {
      w[off + i] = type == DType::kQ8_0 ? q8_levels[(off / block_bytes) % 3]
                                        : ((off / block_bytes) % 2 ? 0x00 : 0xFF);
    }
  }
  if (mk.act_type == DType::kQ8_K) {
    for (size_t off = 0; off < a.size(); off += sizeof(BlockQ8_K)) {
      auto* ab = reinterpret_cast<BlockQ8_K*>(a.data() + off);
      const int8_t v = (off / sizeof(BlockQ8_K)) % 3 ? -127 : 127;
      for (int8_t& q : ab->qs) q = v;
      for (int16_t& s : ab->bsums) s = static_cast<int16_t>(16 * v);
    }
  } else {
    for (size_t off = 0; off < a.size(); off += sizeof(BlockQ8_0)) {
      for (size_t i = 2; i < sizeof(BlockQ8_0); ++i) a[off + i] = (off / 34) % 3 ? 0x81 : 0x7F;
    }
  }
}

TEST(KernelsRepack, GemvMatchesVecDotBitForBit) {
  uint32_t seed = 100;
  int tested = 0;
  for (Isa isa : host_isas()) {
    for (DType type : kRepackTypes) {
      const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
      if (mk.gemv_repacked == nullptr) continue;
      ++tested;
      const int64_t block = type_traits(type).block_elems;
      // Every count of blocks mod 4 (the NEON kernels write out steps of 4 blocks).
      for (int64_t n : {block, 3 * block, 6 * block, 17 * block}) {
        for (int64_t n_groups : {1, 2, 3, 4, 5, 7, 9}) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                          << " groups " << n_groups);
          const std::vector<uint8_t> w = random_weights(type, n, n_groups * kRepackRows, ++seed);
          expect_gemv_matches_vec_dot(mk, type, n, w, random_act(mk, n, ++seed));
        }
      }
      // Every level at an extreme against activations at +-127: the largest int32 sums, and
      // for Q8_0 the largest vpmaddubsw pairs of kernels without VNNI (|q| = 127 or 128
      // times 127, twice: 32512; stored q + 128 = 255 must not reach vpmaddubsw unsigned).
      // The 3 Q8_0 levels cycle over blocks, the activation's over its 4 blocks: every pair.
      // IQ4_NL: every nibble 0 or 15, the table's ends (-127 and 113, stored 1 and 241 for
      // vpdpbusd: with +-127 activations its largest products);
      // Q5_K: as Q4_K with the high bits (levels 0 or 31);
      // Q5_0: all levels 0 or 31 (high bits and nibbles); Q4_K: levels, scales and mins all
      // at 0 or at their maximum (15, 63, 63); Q6_K: levels and scales all-zero bits or
      // all-one bits (63 and -1).
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " extremes");
      const int64_t n = 4 * block;
      std::vector<uint8_t> w;
      std::vector<uint8_t> a;
      make_extremes(type, mk, n, 5 * kRepackRows, ++seed, w, a);
      ++seed;
      expect_gemv_matches_vec_dot(mk, type, n, w, a);
    }
  }
  if (tested == 0) GTEST_SKIP() << "no ISA on this host has a repacked gemv";
}

// gemv_repacked_rows of `w` (whole groups) with the activation rows `acts` against vec_dot,
// bit for bit: the rows sit a little more than a row apart (a strided buffer) and the
// outputs ldy apart with NaN guards between them.
void expect_rows_match_vec_dot(const MatmulKernels& mk, DType type, int64_t n,
                               const std::vector<uint8_t>& w,
                               const std::vector<std::vector<uint8_t>>& acts) {
  const size_t row_bytes = row_size(type, n);
  const int64_t n_groups = static_cast<int64_t>(w.size() / row_bytes) / kRepackRows;
  const auto n_act = static_cast<int64_t>(acts.size());
  std::vector<uint8_t> p(w.size());
  repack_rows(type, n, w.data(), n_groups * kRepackRows, p.data());
  // 8 bytes more than a row: a stride the kernels must not assume away, that keeps every
  // block as aligned as in a row (Q8_K's float d needs 4 bytes, as the backend's rows give).
  const size_t act_stride = row_size(mk.act_type, n) + 8;
  std::vector<uint8_t> packed_acts(act_stride * acts.size());
  for (size_t t = 0; t < acts.size(); ++t) {
    std::memcpy(packed_acts.data() + t * act_stride, acts[t].data(), acts[t].size());
  }
  const int64_t ldy = n_groups * kRepackRows + 3;
  std::vector<float> y(static_cast<size_t>(ldy * n_act), kNaN);
  mk.gemv_repacked_rows(n, p.data(), n_groups, packed_acts.data(), act_stride, n_act, y.data(),
                        ldy);
  for (int64_t t = 0; t < n_act; ++t) {
    for (int64_t r = 0; r < ldy; ++r) {
      const float got = y[static_cast<size_t>(t * ldy + r)];
      if (r >= n_groups * kRepackRows) {
        ASSERT_TRUE(std::isnan(got)) << "wrote past the groups at row " << t << ", " << r;
        continue;
      }
      const float want = mk.vec_dot(n, w.data() + static_cast<size_t>(r) * row_bytes,
                                    acts[static_cast<size_t>(t)].data());
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
          << "activation row " << t << ", weight row " << r << ": " << got << " vs " << want;
    }
  }
}

// gemv_repacked_rows against vec_dot on activation-row counts around the kernels' passes
// (up to 8 rows per pass), and with the extremes of GemvMatchesVecDotBitForBit.
TEST(KernelsRepack, GemvRowsMatchVecDotBitForBit) {
  uint32_t seed = 200;
  int tested = 0;
  for (Isa isa : host_isas()) {
    for (DType type : kRepackTypes) {
      const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
      if (mk.gemv_repacked_rows == nullptr) continue;
      ++tested;
      const int64_t block = type_traits(type).block_elems;
      for (int64_t n : {block, 3 * block, 17 * block}) {
        for (int64_t n_groups : {1, 2, 5}) {
          for (int64_t n_act : {1, 2, 3, 7, 8, 9, 16, 19}) {
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n "
                                            << n << " groups " << n_groups << " rows " << n_act);
            const std::vector<uint8_t> w = random_weights(type, n, n_groups * kRepackRows, ++seed);
            std::vector<std::vector<uint8_t>> acts;
            for (int64_t t = 0; t < n_act; ++t) acts.push_back(random_act(mk, n, ++seed));
            expect_rows_match_vec_dot(mk, type, n, w, acts);
          }
        }
      }
      SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " extremes");
      const int64_t n = 4 * block;
      std::vector<uint8_t> w;
      std::vector<uint8_t> a;
      make_extremes(type, mk, n, 3 * kRepackRows, ++seed, w, a);
      ++seed;
      // 9 rows (a pass of 8 and one more): the extreme row rotated by t blocks, so that the
      // rows differ and every block meets each activation level.
      std::vector<std::vector<uint8_t>> acts;
      const auto act_block = static_cast<int64_t>(row_size(mk.act_type, block));
      for (int64_t t = 0; t < 9; ++t) {
        acts.push_back(a);
        std::rotate(acts.back().begin(), acts.back().begin() + act_block * (t % 4),
                    acts.back().end());
      }
      expect_rows_match_vec_dot(mk, type, n, w, acts);
    }
  }
  if (tested == 0) GTEST_SKIP() << "no ISA on this host has a multi-row repacked gemv";
}

// A batch of decode rows over a type with a rows kernel takes it below the type's
// min_decode_tokens: each row is bit for bit the token decoded alone, also for the rows
// after the last whole group (n_out 37) and on 1 or 2 threads.
TEST(KernelsRepack, BackendDecodeRowsThroughTheRowsKernelAreEachRowAlone) {
  uint32_t seed = 250;
  int tested = 0;
  for (Isa isa : host_isas()) {
    for (int threads : {1, 2}) {
      CpuBackend backend(threads, isa);
      backend.set_repack_enabled(true);
      for (DType type : kRepackTypes) {
        const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
        if (mk.gemv_repacked_rows == nullptr) continue;
        ++tested;
        const int64_t n = type_traits(type).block_elems == kQKK ? 2 * kQKK : 9 * kQK;
        for (int64_t n_out : {37, 16 * 9}) {
          const std::vector<uint8_t> w = random_weights(type, n, n_out, ++seed);
          const Tensor t{type, 2, {n, n_out, 1, 1}, w.data(), "w"};
          for (int64_t n_tokens : {int64_t{2}, int64_t{9}, mk.gemm.min_decode_tokens - 1}) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << " threads " << threads << " " << dtype_name(type)
                         << " n_out " << n_out << " tokens " << n_tokens);
            std::mt19937 rng(++seed);
            std::normal_distribution<float> dist(0.0f, 1.0f);
            std::vector<float> x(static_cast<size_t>(n * n_tokens));
            for (float& v : x) v = dist(rng);
            std::vector<float> batch(static_cast<size_t>(n_out * n_tokens), kNaN);
            backend.set_decode_rows(true);
            backend.matmul(t, x.data(), n_tokens, batch.data());
            backend.set_decode_rows(false);
            for (int64_t r = 0; r < n_tokens; ++r) {
              std::vector<float> alone(static_cast<size_t>(n_out), kNaN);
              backend.matmul(t, x.data() + r * n, 1, alone.data());
              ASSERT_EQ(
                  std::memcmp(alone.data(), batch.data() + r * n_out, alone.size() * sizeof(float)),
                  0)
                  << "row " << r;
            }
          }
        }
      }
    }
  }
  if (tested == 0) GTEST_SKIP() << "no ISA on this host has a multi-row repacked gemv";
}

TEST(KernelsRepack, BackendDecodesTheSameBitsWithAndWithoutRepacking) {
  uint32_t seed = 300;
  for (Isa isa : host_isas()) {
    for (int threads : {1, 2}) {
      CpuBackend packed(threads, isa);
      packed.set_repack_enabled(true);
      CpuBackend plain(threads, isa);
      plain.set_repack_enabled(false);
      for (DType type : kRepackTypes) {
        const int64_t n = type_traits(type).block_elems == kQKK ? 2 * kQKK : 9 * kQK;
        for (int64_t n_out : {15, 16, 37, 16 * 9}) {
          for (int64_t n_tokens : {1, 3}) {
            SCOPED_TRACE(testing::Message()
                         << isa_name(isa) << " threads " << threads << " " << dtype_name(type)
                         << " n_out " << n_out << " tokens " << n_tokens);
            std::vector<uint8_t> w = random_weights(type, n, n_out, ++seed);
            const Tensor t{type, 2, {n, n_out, 1, 1}, w.data(), "w"};
            std::mt19937 rng(++seed);
            std::normal_distribution<float> dist(0.0f, 1.0f);
            std::vector<float> x(static_cast<size_t>(n * n_tokens));
            for (float& v : x) v = dist(rng);
            std::vector<float> want(static_cast<size_t>(n_out * n_tokens) + 2, kNaN);
            std::vector<float> got(want.size(), kNaN);
            plain.matmul(t, x.data(), n_tokens, want.data());
            packed.matmul(t, x.data(), n_tokens, got.data());
            EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0);
            // The repacked path really ran where the ISA has it, and only there.
            const bool repacks = cpu_kernels(isa).for_type(type).gemv_repacked != nullptr &&
                                 n_out >= kRepackRows &&
                                 !cpu_kernels(isa).for_type(type).gemm.usable(n_tokens);
            EXPECT_EQ(plain.repacked_bytes(), 0u);
            if (repacks) {
              EXPECT_GE(packed.repacked_bytes(), w.size());
            }
            // Other weights at the same address: the stale copy must not be used.
            const std::vector<uint8_t> other = random_weights(type, n, n_out, ++seed);
            std::memcpy(w.data(), other.data(), w.size());
            plain.matmul(t, x.data(), n_tokens, want.data());
            packed.matmul(t, x.data(), n_tokens, got.data());
            EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0)
                << "after the weights changed";
          }
        }
      }
    }
  }
}

// Copies stop at the budget: the weight that would pass it decodes from its GGML layout,
// with the same bits, and nothing more is held.
TEST(KernelsRepack, BackendKeepsItsCopiesWithinTheBudget) {
  int tested = 0;
  for (Isa isa : host_isas()) {
    if (cpu_kernels(isa).for_type(DType::kQ4_0).gemv_repacked == nullptr) continue;
    ++tested;
    SCOPED_TRACE(isa_name(isa));
    const int64_t n = 4 * kQK;
    const int64_t n_out = 2 * kRepackRows;
    const std::vector<uint8_t> w1 = random_weights(DType::kQ4_0, n, n_out, 400);
    const std::vector<uint8_t> w2 = random_weights(DType::kQ4_0, n, n_out, 401);
    const Tensor t1{DType::kQ4_0, 2, {n, n_out, 1, 1}, w1.data(), "w1"};
    const Tensor t2{DType::kQ4_0, 2, {n, n_out, 1, 1}, w2.data(), "w2"};
    CpuBackend packed(1, isa);
    packed.set_repack_enabled(true);
    packed.set_repack_budget(w1.size() + w2.size() / 2);
    CpuBackend plain(1, isa);
    plain.set_repack_enabled(false);
    std::vector<float> x(static_cast<size_t>(n), 0.25f);
    for (size_t i = 0; i < x.size(); i += 3) x[i] = -1.5f;
    for (const Tensor* t : {&t1, &t2, &t1}) {
      std::vector<float> want(static_cast<size_t>(n_out), kNaN);
      std::vector<float> got(want.size(), kNaN);
      plain.matmul(*t, x.data(), 1, want.data());
      packed.matmul(*t, x.data(), 1, got.data());
      EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0) << t->name;
      EXPECT_EQ(packed.repacked_bytes(), w1.size()) << "after " << t->name;
    }
  }
  if (tested == 0) GTEST_SKIP() << "no ISA on this host has a repacked Q4_0 gemv";
}

}  // namespace
}  // namespace qrun::kernels
