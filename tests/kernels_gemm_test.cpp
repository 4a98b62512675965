// The gemm kernels of every ISA this host runs, against the generic vec_dot: packed (group
// by group, in reverse order, into a garbage-filled buffer) and called directly on awkward
// tiles (rows 1, 3, 5, 8, 9, 67; tokens 1, 2, 3, 5, 16, 17, 33, 65; one block and odd block
// counts that cross the kernels' K chunks; and tiles of more than 128 rows and tokens, past
// one driver tile) with NaN-prefilled outputs wider than the tile, on row slices of one
// packed batch, on raw blocks with extreme levels and scales, and through
// CpuBackend::matmul with 1 and 2 threads against the generic backend, the packed buffer
// reused across shapes. Kernels sum the exact integer block
// products in their own float order, so the tolerance is a float-rounding one:
// |y - ref| <= 1e-5 * sum_i |w_i * a_i| (dequantized weights and activations).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/fp16.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kRelTol = 1e-5;
// Micro-tiles: AVX2 4 rows by 8 tokens, AVX-512 6 rows by 2 x 16 tokens (1 x 16 at the end),
// NEON 4 rows by 8 tokens in driver tiles of 16 rows by 64 tokens.
const int64_t kRows[] = {1, 3, 5, 8, 9, 67};
const int64_t kTokens[] = {1, 2, 3, 5, 16, 17, 33, 65};

// Weight types that have a gemm kernel in some table.
const DType kWeightTypes[] = {DType::kQ4_0, DType::kQ5_0,   DType::kQ8_0,   DType::kQ4_1,
                              DType::kQ5_1, DType::kIQ4_NL, DType::kIQ4_XS, DType::kQ2_K,
                              DType::kQ3_K, DType::kQ4_K,   DType::kQ5_K,   DType::kQ6_K,
                              DType::kF16,  DType::kBF16,   DType::kF32};

std::vector<Isa> simd_isas() {
  std::vector<Isa> out = host_isas();
  std::erase(out, Isa::kGeneric);
  return out;
}

// Row lengths: one block, then odd block counts up to past two K chunks of any kernel.
std::vector<int64_t> row_lengths(DType type) {
  const int64_t block = type_traits(type).block_elems;
  if (block == 256) return {256, 3 * 256, 5 * 256};
  if (block == 32) return {32, 7 * 32, 37 * 32};
  return {16, 7 * 16, 37 * 16};
}

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  // A few outliers, as real activations have.
  for (size_t i = 0; i < n; i += 97) v[i] *= 12.0f;
  return v;
}

// n_rows rows of `type` (row_size bytes each) quantized from random floats.
std::vector<uint8_t> random_rows(DType type, int64_t n, int64_t n_rows, uint32_t seed,
                                 FromFloatFn quantize = nullptr) {
  const std::vector<float> src = random_floats(static_cast<size_t>(n * n_rows), seed, 0.7f);
  const size_t row = row_size(type, n);
  std::vector<uint8_t> out(row * static_cast<size_t>(n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    if (quantize != nullptr) {
      quantize(src.data() + r * n, out.data() + row * static_cast<size_t>(r), n);
    } else if (type == DType::kF32) {
      std::memcpy(out.data() + row * static_cast<size_t>(r), src.data() + r * n, row);
    } else {
      quantize_rows(type, src.data() + r * n, out.data() + row * static_cast<size_t>(r), 1, n);
    }
  }
  return out;
}

// Activation rows in the weight's dot type, as the generic backend converts them.
std::vector<uint8_t> act_rows(DType w_type, int64_t n, int64_t n_tokens, uint32_t seed) {
  const MatmulKernels& mk = cpu_kernels(Isa::kGeneric).for_type(w_type);
  return random_rows(mk.act_type, n, n_tokens, seed, mk.quantize_act);
}

std::vector<float> dequantized(DType type, const uint8_t* data, int64_t n, int64_t n_rows) {
  std::vector<float> out(static_cast<size_t>(n * n_rows));
  for (int64_t r = 0; r < n_rows; ++r) {
    dequantize_row(type, data + row_size(type, n) * static_cast<size_t>(r), out.data() + r * n, n);
  }
  return out;
}

// Checks y (ldy floats per token, NaN beyond n_rows) against the generic vec_dot.
void expect_matches_generic(DType w_type, int64_t n, const std::vector<uint8_t>& w, int64_t n_rows,
                            const std::vector<uint8_t>& act, int64_t n_tokens,
                            const std::vector<float>& y, int64_t ldy) {
  const MatmulKernels& gk = cpu_kernels(Isa::kGeneric).for_type(w_type);
  const size_t w_row = row_size(w_type, n);
  const size_t a_row = row_size(gk.act_type, n);
  const std::vector<float> wd = dequantized(w_type, w.data(), n, n_rows);
  const std::vector<float> ad = dequantized(gk.act_type, act.data(), n, n_tokens);
  int bad = 0;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t r = 0; r < ldy; ++r) {
      const float got = y[static_cast<size_t>(t * ldy + r)];
      if (r >= n_rows) {
        if (!std::isnan(got) && ++bad <= 3) ADD_FAILURE() << "wrote outside the tile: " << r;
        continue;
      }
      const float ref = gk.vec_dot(n, w.data() + w_row * static_cast<size_t>(r),
                                   act.data() + a_row * static_cast<size_t>(t));
      double mag = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        mag += std::fabs(double{wd[static_cast<size_t>(r * n + i)]} *
                         ad[static_cast<size_t>(t * n + i)]);
      }
      if (!(std::fabs(double{got} - ref) <= kRelTol * mag + 1e-30) && ++bad <= 3) {
        ADD_FAILURE() << "token " << t << " row " << r << ": " << got << " vs " << ref
                      << " (magnitude " << mag << ")";
      }
    }
  }
}

// A 64-byte aligned buffer of `bytes` bytes of garbage, so that a byte the packing forgets
// shows up.
struct PackedBuffer {
  explicit PackedBuffer(size_t bytes) : storage(bytes + 64, 0xa5) {}
  uint8_t* data() {
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    return storage.data() + (64 - base % 64) % 64;
  }
  std::vector<uint8_t> storage;
};

// Packs n_tokens activation rows into `packed` through gk, the last group first.
void pack_all(const GemmKernels& gk, int64_t n, const std::vector<uint8_t>& act, size_t act_stride,
              int64_t n_tokens, uint8_t* packed) {
  const int64_t n_groups = (n_tokens + gk.group_tokens - 1) / gk.group_tokens;
  const size_t group_bytes = gk.group_bytes(n);
  EXPECT_EQ(group_bytes % 64, 0u);
  for (int64_t g = n_groups - 1; g >= 0; --g) {
    const int64_t t0 = g * gk.group_tokens;
    gk.pack_act(n, act.data() + static_cast<size_t>(t0) * act_stride, act_stride,
                std::min(gk.group_tokens, n_tokens - t0),
                packed + static_cast<size_t>(g) * group_bytes);
  }
}

// y[t * ldy + r] for r < n_rows, t < n_tokens through gk: pack, then one gemm call.
void run_gemm(const GemmKernels& gk, int64_t n, const std::vector<uint8_t>& w, size_t w_stride,
              int64_t n_rows, const std::vector<uint8_t>& act, size_t act_stride, int64_t n_tokens,
              float* y, int64_t ldy) {
  PackedBuffer packed(gk.packed_bytes(n, n_tokens));
  pack_all(gk, n, act, act_stride, n_tokens, packed.data());
  gk.gemm(n, w.data(), w_stride, n_rows, packed.data(), n_tokens, y, ldy);
}

TEST(KernelsGemm, TilesMatchGenericVecDot) {
  uint32_t seed = 100;
  for (Isa isa : simd_isas()) {
    for (DType type : kWeightTypes) {
      const GemmKernels& gk = cpu_kernels(isa).for_type(type).gemm;
      if (gk.gemm == nullptr) continue;
      const DType act_type = cpu_kernels(Isa::kGeneric).for_type(type).act_type;
      for (int64_t n : row_lengths(type)) {
        for (int64_t n_rows : kRows) {
          for (int64_t n_tokens : kTokens) {
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n "
                                            << n << " rows " << n_rows << " tokens " << n_tokens);
            const std::vector<uint8_t> w = random_rows(type, n, n_rows, ++seed);
            const std::vector<uint8_t> act = act_rows(type, n, n_tokens, ++seed);
            const int64_t ldy = n_rows + 3;
            std::vector<float> y(static_cast<size_t>(n_tokens * ldy), kNaN);
            run_gemm(gk, n, w, row_size(type, n), n_rows, act, row_size(act_type, n), n_tokens,
                     y.data(), ldy);
            expect_matches_generic(type, n, w, n_rows, act, n_tokens, y, ldy);
          }
        }
      }
    }
  }
}

// Past one driver tile of 128 rows by 128 tokens in both directions, and a long batch.
TEST(KernelsGemm, LargeTilesMatchGenericVecDot) {
  uint32_t seed = 500;
  const int64_t shapes[][2] = {{131, 129}, {129, 300}, {7, 257}};  // rows, tokens
  for (Isa isa : simd_isas()) {
    for (DType type : kWeightTypes) {
      const GemmKernels& gk = cpu_kernels(isa).for_type(type).gemm;
      if (gk.gemm == nullptr) continue;
      const DType act_type = cpu_kernels(Isa::kGeneric).for_type(type).act_type;
      const int64_t n = row_lengths(type)[1];
      for (const auto& shape : shapes) {
        const int64_t n_rows = shape[0];
        const int64_t n_tokens = shape[1];
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                        << " rows " << n_rows << " tokens " << n_tokens);
        const std::vector<uint8_t> w = random_rows(type, n, n_rows, ++seed);
        const std::vector<uint8_t> act = act_rows(type, n, n_tokens, ++seed);
        const int64_t ldy = n_rows + 1;
        std::vector<float> y(static_cast<size_t>(n_tokens * ldy), kNaN);
        run_gemm(gk, n, w, row_size(type, n), n_rows, act, row_size(act_type, n), n_tokens,
                 y.data(), ldy);
        expect_matches_generic(type, n, w, n_rows, act, n_tokens, y, ldy);
      }
    }
  }
}

// One packed batch serves every row slice, as CpuBackend::matmul's threads share it: the
// rows in slices of 128 (the backend's tiles) and of odd sizes, each written at its offset.
TEST(KernelsGemm, RowSlicesShareOnePackedBatch) {
  uint32_t seed = 700;
  const int64_t n_rows = 300;
  const int64_t slice_sizes[] = {128, 7, 67};
  for (Isa isa : simd_isas()) {
    for (DType type : kWeightTypes) {
      const GemmKernels& gk = cpu_kernels(isa).for_type(type).gemm;
      if (gk.gemm == nullptr) continue;
      const DType act_type = cpu_kernels(Isa::kGeneric).for_type(type).act_type;
      const int64_t n = row_lengths(type)[1];
      const size_t w_row = row_size(type, n);
      const size_t a_row = row_size(act_type, n);
      for (int64_t n_tokens : {int64_t{37}, int64_t{130}}) {
        const std::vector<uint8_t> w = random_rows(type, n, n_rows, ++seed);
        const std::vector<uint8_t> act = act_rows(type, n, n_tokens, ++seed);
        PackedBuffer packed(gk.packed_bytes(n, n_tokens));
        pack_all(gk, n, act, a_row, n_tokens, packed.data());
        for (int64_t slice : slice_sizes) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                          << " tokens " << n_tokens << " slices of " << slice);
          std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), kNaN);
          for (int64_t r0 = 0; r0 < n_rows; r0 += slice) {
            gk.gemm(n, w.data() + static_cast<size_t>(r0) * w_row, w_row,
                    std::min(slice, n_rows - r0), packed.data(), n_tokens, y.data() + r0, n_rows);
          }
          expect_matches_generic(type, n, w, n_rows, act, n_tokens, y, n_rows);
        }
      }
    }
  }
}

// Raw blocks: every level byte random or at its extreme, scales at their largest, so that
// integer lanes meet their worst case. Activation levels stay in [-127, 127], the range
// of the activation quantizers.
void fill_raw_weights(DType type, uint8_t* row, int64_t n, std::mt19937& rng, bool extreme) {
  std::uniform_int_distribution<int> byte(0, 255);
  const size_t bytes = row_size(type, n);
  for (size_t i = 0; i < bytes; ++i) row[i] = static_cast<uint8_t>(extreme ? 255 : byte(rng));
  const uint16_t one = fp32_to_fp16(1.0f);
  const uint16_t neg = fp32_to_fp16(-0.5f);
  const int64_t n_blocks = n / type_traits(type).block_elems;
  for (int64_t b = 0; b < n_blocks; ++b) {
    switch (type) {
      case DType::kQ4_0:
        std::memcpy(&reinterpret_cast<BlockQ4_0*>(row)[b].d, &one, 2);
        break;
      case DType::kQ5_0:
        std::memcpy(&reinterpret_cast<BlockQ5_0*>(row)[b].d, &one, 2);
        break;
      case DType::kQ4_1: {
        auto& blk = reinterpret_cast<BlockQ4_1*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        std::memcpy(&blk.m, &neg, 2);
        break;
      }
      case DType::kQ5_1: {
        auto& blk = reinterpret_cast<BlockQ5_1*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        std::memcpy(&blk.m, &neg, 2);
        break;
      }
      case DType::kIQ4_NL:
        std::memcpy(&reinterpret_cast<BlockIQ4_NL*>(row)[b].d, &one, 2);
        break;
      case DType::kIQ4_XS: {  // bytes 255: every block scale ls = 63, the largest
        std::memcpy(&reinterpret_cast<BlockIQ4_XS*>(row)[b].d, &one, 2);
        break;
      }
      case DType::kQ8_0: {
        auto& blk = reinterpret_cast<BlockQ8_0*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        if (extreme) std::memset(blk.qs, 0x80, sizeof(blk.qs));  // -128 everywhere
        break;
      }
      case DType::kQ2_K: {  // bytes 255: levels 3, scales and mins 15
        auto& blk = reinterpret_cast<BlockQ2_K*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        std::memcpy(&blk.dmin, &neg, 2);
        if (!extreme) {  // a zero scale with the largest min, and the reverse
          blk.scales[0] = 0xf0;
          blk.scales[15] = 0x0f;
        }
        break;
      }
      case DType::kQ3_K: {
        // Bytes 255: levels 3, scales sc - 32 = 31; extreme odd blocks all zero bytes:
        // levels -4 and scales -32, both the largest magnitudes.
        auto& blk = reinterpret_cast<BlockQ3_K*>(row)[b];
        if (extreme && b % 2 == 1) std::memset(&blk, 0, sizeof(blk));
        std::memcpy(&blk.d, &one, 2);
        break;
      }
      case DType::kQ4_K: {
        auto& blk = reinterpret_cast<BlockQ4_K*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        std::memcpy(&blk.dmin, &neg, 2);
        break;
      }
      case DType::kQ5_K: {
        auto& blk = reinterpret_cast<BlockQ5_K*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        std::memcpy(&blk.dmin, &neg, 2);
        break;
      }
      case DType::kQ6_K: {
        auto& blk = reinterpret_cast<BlockQ6_K*>(row)[b];
        std::memcpy(&blk.d, &one, 2);
        if (extreme) std::memset(blk.scales, 0x80, sizeof(blk.scales));  // -128
        break;
      }
      default:
        break;
    }
  }
}

void fill_raw_acts(DType act_type, uint8_t* row, int64_t n, std::mt19937& rng, int pattern) {
  std::uniform_int_distribution<int> level(-127, 127);
  auto pick = [&](int64_t i) {
    switch (pattern) {
      case 0:
        return 127;
      case 1:
        return -127;
      case 2:
        return i % 2 == 0 ? 127 : -127;
      default:
        return level(rng);
    }
  };
  if (act_type == DType::kQ8_0) {
    auto* blk = reinterpret_cast<BlockQ8_0*>(row);
    for (int64_t b = 0; b < n / 32; ++b) {
      blk[b].d = fp32_to_fp16(0.25f);
      for (int i = 0; i < 32; ++i) blk[b].qs[i] = static_cast<int8_t>(pick(i));
    }
  } else if (act_type == DType::kQ8_1) {
    auto* blk = reinterpret_cast<BlockQ8_1*>(row);
    for (int64_t b = 0; b < n / 32; ++b) {
      blk[b].d = fp32_to_fp16(0.25f);
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        blk[b].qs[i] = static_cast<int8_t>(pick(i));
        sum += blk[b].qs[i];
      }
      blk[b].s = fp32_to_fp16(0.25f * static_cast<float>(sum));
    }
  } else {
    ASSERT_EQ(act_type, DType::kQ8_K);
    auto* blk = reinterpret_cast<BlockQ8_K*>(row);
    for (int64_t b = 0; b < n / 256; ++b) {
      blk[b].d = 0.25f;
      for (int i = 0; i < 256; ++i) blk[b].qs[i] = static_cast<int8_t>(pick(i));
      for (int k = 0; k < 16; ++k) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += blk[b].qs[16 * k + i];
        blk[b].bsums[k] = static_cast<int16_t>(sum);
      }
    }
  }
}

TEST(KernelsGemm, ExtremeLevelsDoNotSaturate) {
  std::mt19937 rng(7);
  for (Isa isa : simd_isas()) {
    for (DType type : kWeightTypes) {
      const GemmKernels& gk = cpu_kernels(isa).for_type(type).gemm;
      if (gk.gemm == nullptr || type_traits(type).block_elems == 1) continue;
      const DType act_type = cpu_kernels(Isa::kGeneric).for_type(type).act_type;
      const int64_t n = 3 * type_traits(type).block_elems;
      const int64_t n_rows = 10;
      const int64_t n_tokens = 19;
      for (bool extreme : {true, false}) {
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type)
                                        << (extreme ? " all levels at their maximum" : ""));
        std::vector<uint8_t> w(row_size(type, n) * n_rows);
        for (int64_t r = 0; r < n_rows; ++r) {
          fill_raw_weights(type, w.data() + row_size(type, n) * r, n, rng, extreme);
        }
        std::vector<uint8_t> act(row_size(act_type, n) * n_tokens);
        for (int64_t t = 0; t < n_tokens; ++t) {
          fill_raw_acts(act_type, act.data() + row_size(act_type, n) * t, n, rng,
                        static_cast<int>(t % 4));
        }
        std::vector<float> y(static_cast<size_t>(n_tokens * n_rows), kNaN);
        run_gemm(gk, n, w, row_size(type, n), n_rows, act, row_size(act_type, n), n_tokens,
                 y.data(), n_rows);
        expect_matches_generic(type, n, w, n_rows, act, n_tokens, y, n_rows);
      }
    }
  }
}

TEST(KernelsGemm, BackendMatmulMatchesGenericBackend) {
  CpuBackend generic(1, Isa::kGeneric);
  uint32_t seed = 900;
  for (Isa isa : simd_isas()) {
    CpuBackend one(1, isa);
    CpuBackend two(2, isa);
    for (DType type : kWeightTypes) {
      const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
      if (mk.gemm.gemm == nullptr) continue;
      const DType act_type = cpu_kernels(Isa::kGeneric).for_type(type).act_type;
      const std::vector<int64_t> lengths = row_lengths(type);
      for (int64_t n : {lengths.front(), lengths.back()}) {
        for (int64_t n_out : kRows) {
          for (int64_t n_tokens : kTokens) {
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n "
                                            << n << " n_out " << n_out << " tokens " << n_tokens);
            const std::vector<uint8_t> w = random_rows(type, n, n_out, ++seed);
            const Tensor wt{type, 2, {n, n_out, 1, 1}, w.data(), "w"};
            const std::vector<float> x =
                random_floats(static_cast<size_t>(n * n_tokens), ++seed, 1.5f);
            std::vector<float> y_ref(static_cast<size_t>(n_out * n_tokens), kNaN);
            std::vector<float> y1(static_cast<size_t>(n_out * n_tokens), kNaN);
            std::vector<float> y2(y1.size(), kNaN);
            generic.matmul(wt, x.data(), n_tokens, y_ref.data());
            one.matmul(wt, x.data(), n_tokens, y1.data());
            two.matmul(wt, x.data(), n_tokens, y2.data());
            // Threads split rows only: not a bit changes.
            EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)), 0);
            // The generic backend's activations, to bound the rounding.
            std::vector<uint8_t> act(row_size(act_type, n) * n_tokens);
            const MatmulKernels& gk = cpu_kernels(Isa::kGeneric).for_type(type);
            for (int64_t t = 0; t < n_tokens; ++t) {
              if (gk.quantize_act != nullptr) {
                gk.quantize_act(x.data() + t * n, act.data() + row_size(act_type, n) * t, n);
              } else {
                std::memcpy(act.data() + row_size(act_type, n) * t, x.data() + t * n,
                            row_size(act_type, n));
              }
            }
            const std::vector<float> wd = dequantized(type, w.data(), n, n_out);
            const std::vector<float> ad = dequantized(act_type, act.data(), n, n_tokens);
            int bad = 0;
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t r = 0; r < n_out; ++r) {
                double mag = 0.0;
                for (int64_t i = 0; i < n; ++i) {
                  mag += std::fabs(double{wd[static_cast<size_t>(r * n + i)]} *
                                   ad[static_cast<size_t>(t * n + i)]);
                }
                const size_t i = static_cast<size_t>(t * n_out + r);
                if (!(std::fabs(double{y1[i]} - y_ref[i]) <= kRelTol * mag + 1e-30) && ++bad <= 3) {
                  ADD_FAILURE() << "token " << t << " row " << r << ": " << y1[i] << " vs "
                                << y_ref[i] << " (magnitude " << mag << ")";
                }
              }
            }
          }
        }
      }
    }
  }
}

// One backend through a sequence of shapes: its activation and packed buffers grow, shrink
// in use and change row length, and each result still matches the generic vec_dot (stale
// packed data would not). Batches past 128 tokens take several driver tiles.
TEST(KernelsGemm, BackendReusesPackedBuffer) {
  uint32_t seed = 1300;
  const int64_t shapes[][2] = {{3, 200}, {1, 17}, {5, 129}, {1, 2}, {3, 64}};  // blocks x3, tokens
  for (Isa isa : simd_isas()) {
    CpuBackend two(2, isa);
    for (DType type : kWeightTypes) {
      const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
      if (mk.gemm.gemm == nullptr) continue;
      const MatmulKernels& gk = cpu_kernels(Isa::kGeneric).for_type(type);
      const int64_t n_out = 131;
      for (const auto& shape : shapes) {
        const int64_t n = shape[0] * type_traits(type).block_elems;
        const int64_t n_tokens = shape[1];
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n " << n
                                        << " tokens " << n_tokens);
        const std::vector<uint8_t> w = random_rows(type, n, n_out, ++seed);
        const Tensor wt{type, 2, {n, n_out, 1, 1}, w.data(), "w"};
        const std::vector<float> x = random_floats(static_cast<size_t>(n * n_tokens), ++seed, 1.5f);
        std::vector<float> y(static_cast<size_t>(n_out * n_tokens), kNaN);
        two.matmul(wt, x.data(), n_tokens, y.data());
        std::vector<uint8_t> act(row_size(gk.act_type, n) * static_cast<size_t>(n_tokens));
        for (int64_t t = 0; t < n_tokens; ++t) {
          gk.quantize_act(x.data() + t * n, act.data() + row_size(gk.act_type, n) * t, n);
        }
        expect_matches_generic(type, n, w, n_out, act, n_tokens, y, n_out);
      }
    }
  }
}

// Decode rows (Backend::set_decode_rows): a batch smaller than the ISA's
// min_decode_tokens gives each row bit for bit what a matmul of that row alone gives (the
// gemv path, repacked or not: 16 rows and more, 37 rows with a partial group), on every
// weight type with a gemm; from min_decode_tokens on, and without the hint, the tiles run.
TEST(KernelsGemm, DecodeRowsAreEachRowAlone) {
  uint32_t seed = 2100;
  for (Isa isa : simd_isas()) {
    CpuBackend two(2, isa);
    for (DType type : kWeightTypes) {
      const MatmulKernels& mk = cpu_kernels(isa).for_type(type);
      if (mk.gemm.gemm == nullptr) continue;
      const int64_t n =
          2 * type_traits(type).block_elems * (type_traits(type).block_elems < 256 ? 8 : 1);
      for (const int64_t n_out : {int64_t{37}, int64_t{64}}) {
        const std::vector<uint8_t> w = random_rows(type, n, n_out, ++seed);
        const Tensor wt{type, 2, {n, n_out, 1, 1}, w.data(), "w"};
        for (int64_t n_tokens = 2; n_tokens < mk.gemm.min_decode_tokens; ++n_tokens) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " n_out "
                                          << n_out << " tokens " << n_tokens);
          const std::vector<float> x =
              random_floats(static_cast<size_t>(n * n_tokens), ++seed, 1.5f);
          std::vector<float> batch(static_cast<size_t>(n_out * n_tokens), kNaN);
          two.set_decode_rows(true);
          two.matmul(wt, x.data(), n_tokens, batch.data());
          two.set_decode_rows(false);
          for (int64_t t = 0; t < n_tokens; ++t) {
            std::vector<float> alone(static_cast<size_t>(n_out), kNaN);
            two.matmul(wt, x.data() + t * n, 1, alone.data());
            ASSERT_EQ(
                std::memcmp(alone.data(), batch.data() + t * n_out, alone.size() * sizeof(float)),
                0)
                << "row " << t;
          }
        }
      }
    }
  }
}

// The thresholds the tables set: decode rows take the gemv below them, prompts from 2 on.
TEST(KernelsGemm, DecodeRowsThresholds) {
  for (Isa isa : simd_isas()) {
    const MatmulKernels& q4 = cpu_kernels(isa).for_type(DType::kQ4_0);
    ASSERT_NE(q4.gemm.gemm, nullptr) << isa_name(isa);
    EXPECT_EQ(q4.gemm.min_tokens, 2) << isa_name(isa);
    EXPECT_GE(q4.gemm.min_decode_tokens, 2) << isa_name(isa);
    EXPECT_TRUE(q4.gemm.usable(2));
    EXPECT_EQ(q4.gemm.usable(2, /*decode_rows=*/true), q4.gemm.min_decode_tokens <= 2);
    EXPECT_TRUE(q4.gemm.usable(q4.gemm.min_decode_tokens, true));
  }
}

}  // namespace
}  // namespace qrun::kernels
