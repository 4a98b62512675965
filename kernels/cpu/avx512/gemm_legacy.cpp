// AVX-512 VNNI gemm micro-kernels of the 32-element weight types against Q8_0 activations
// (Q4_0, Q5_0, Q8_0, IQ4_NL), on the 16-token packing of gemm_common.h: R weight rows x 2
// vectors of 16 tokens, accumulators in registers. vpdpbusd multiplies unsigned by signed
// bytes, so each weight is kept as an unsigned level u with value u - offset (Q4_0: u as
// stored, offset 8; Q5_0: offset 16; Q8_0: u = q + 128, offset 128; IQ4_NL: u =
// kIq4Values[q] + 128, 1 .. 241, offset 128), and dot(u - offset, a) =
// dot(u, a) - offset * sum(a). -offset * sum(a) is computed once per token at packing and
// seeds each row's int32 accumulator; |dot| <= 32 * 255 * 127 + 128 * 32 * 127 fits int32.
#include "kernels/cpu/avx512/avx512_kernels.h"
#include "kernels/cpu/avx512/gemm_common.h"

namespace qrun::kernels::avx512 {
namespace {

using gemm::bcast32;
using gemm::half_to_float;
using gemm::kLanes;
using gemm::load;

// One block of 16 tokens: q[g] holds levels 4g .. 4g + 3 of each token, d the token
// scales, corr = -offset * (sum of the token's 32 levels). Missing tokens are zero.
struct alignas(64) ActQ8_0 {
  int8_t q[8][kLanes][4];
  float d[kLanes];
  int32_t corr[kLanes];
};

template <int kOffset>
void pack_q8_0(const uint8_t* const* rows, int n_valid, int64_t block, ActQ8_0* dst) {
  const size_t offset = static_cast<size_t>(block) * sizeof(BlockQ8_0);
  __m512i v[8];
  gemm::gather_transpose(rows, n_valid, offset + offsetof(BlockQ8_0, qs), v);
  for (int g = 0; g < 8; ++g) _mm512_store_si512(dst->q[g], v[g]);
  const __m512i corr = _mm512_mullo_epi32(gemm::lane_sums_i8(v, 8), _mm512_set1_epi32(-kOffset));
  _mm512_store_si512(dst->corr, corr);
  for (int t = 0; t < kLanes; ++t) {
    uint16_t d = 0;
    if (t < n_valid) std::memcpy(&d, rows[t] + offset, sizeof(d));
    dst->d[t] = half_to_float(d);
  }
}

// An unpacked block: unsigned levels in element order and the weight scale.
struct WtU8 {
  uint8_t q[32];
  float d;
};

// The micro-kernel shared by the three types, R rows by V vectors of 16 tokens (vector v's
// blocks a_stride apart in a): f += (d_w * d_a) * (corr + dot(u, a)).
template <int R, int V>
void tile_u8(const WtU8* const* w, const ActQ8_0* a, int64_t a_stride, int kb, float* acc,
             int64_t ld) {
  __m512 f[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) f[r][v] = _mm512_loadu_ps(acc + r * ld + v * kLanes);
  }
  for (int b = 0; b < kb; ++b) {
    __m512i s[R][V];
    for (int v = 0; v < V; ++v) {
      const __m512i corr = load(a[v * a_stride + b].corr);
      for (int r = 0; r < R; ++r) s[r][v] = corr;
    }
    for (int g = 0; g < 8; ++g) {
      __m512i ag[V];
      for (int v = 0; v < V; ++v) ag[v] = load(a[v * a_stride + b].q[g]);
      for (int r = 0; r < R; ++r) {
        const __m512i wg = bcast32(w[r][b].q + 4 * g);
        for (int v = 0; v < V; ++v) s[r][v] = _mm512_dpbusd_epi32(s[r][v], wg, ag[v]);
      }
    }
    for (int v = 0; v < V; ++v) {
      const __m512 da = _mm512_load_ps(a[v * a_stride + b].d);
      for (int r = 0; r < R; ++r) {
        const __m512 d = _mm512_mul_ps(da, _mm512_set1_ps(w[r][b].d));
        f[r][v] = _mm512_fmadd_ps(gemm::to_float(s[r][v]), d, f[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc + r * ld + v * kLanes, f[r][v]);
  }
}

// Kernel traits for gemm::Gemm; Unpack turns one weight block into a WtU8.
template <int kOffset, void (*Unpack)(const uint8_t*, int64_t, WtU8*)>
struct Legacy {
  static constexpr int64_t kBlockElems = 32;
  static constexpr int kChunk = 16;
  static constexpr int kRows = 6;  // 6 x 2 int32 and 6 x 2 float accumulators
  static constexpr int kVecs = 2;
  using Act = ActQ8_0;
  using Wt = WtU8;

  static void pack(const uint8_t* const* rows, int n_valid, int64_t block, Act* dst) {
    pack_q8_0<kOffset>(rows, n_valid, block, dst);
  }
  static void unpack(const uint8_t* row, int64_t block, Wt* dst) { Unpack(row, block, dst); }
  template <int R, int V>
  static void tile(const Wt* const* w, const Act* a, int64_t a_stride, int kb, float* acc,
                   int64_t ld) {
    tile_u8<R, V>(w, a, a_stride, kb, acc, ld);
  }
};

void unpack_q4_0(const uint8_t* row, int64_t block, WtU8* dst) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + block;
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i m4 = _mm_set1_epi8(15);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q), _mm_and_si128(qs, m4));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q + 16),
                   _mm_and_si128(_mm_srli_epi16(qs, 4), m4));
  dst->d = half_to_float(b->d);
}

void unpack_q5_0(const uint8_t* row, int64_t block, WtU8* dst) {
  const auto* b = reinterpret_cast<const BlockQ5_0*>(row) + block;
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i m4 = _mm_set1_epi8(15);
  const __m256i low =
      _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
  uint32_t qh;
  std::memcpy(&qh, b->qh, sizeof(qh));
  // Bit i of qh is bit 4 of level i.
  const __m256i high = _mm256_maskz_mov_epi8(qh, _mm256_set1_epi8(16));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q), _mm256_or_si256(low, high));
  dst->d = half_to_float(b->d);
}

void unpack_q8_0(const uint8_t* row, int64_t block, WtU8* dst) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + block;
  const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
  // q + 128 as an unsigned byte flips the sign bit.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst->q),
                      _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80))));
  dst->d = half_to_float(b->d);
}

void unpack_iq4_nl(const uint8_t* row, int64_t block, WtU8* dst) {
  const auto* b = reinterpret_cast<const BlockIQ4_NL*>(row) + block;
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
  const __m128i m4 = _mm_set1_epi8(15);
  // The table plus 128: each level's sign bit flipped.
  const __m128i table = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4Values)),
                                      _mm_set1_epi8(static_cast<char>(0x80)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q),
                   _mm_shuffle_epi8(table, _mm_and_si128(qs, m4)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst->q + 16),
                   _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), m4)));
  dst->d = half_to_float(b->d);
}

}  // namespace

void fill_gemm_legacy(CpuKernels& k) {
  k.for_type(DType::kQ4_0).gemm = gemm::Gemm<Legacy<8, unpack_q4_0>>::kernels();
  k.for_type(DType::kQ5_0).gemm = gemm::Gemm<Legacy<16, unpack_q5_0>>::kernels();
  k.for_type(DType::kQ8_0).gemm = gemm::Gemm<Legacy<128, unpack_q8_0>>::kernels();
  k.for_type(DType::kIQ4_NL).gemm = gemm::Gemm<Legacy<128, unpack_iq4_nl>>::kernels();
}

}  // namespace qrun::kernels::avx512
