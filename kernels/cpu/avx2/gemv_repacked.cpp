// AVX2 decode gemv over the x16 layouts of kernels/cpu/repack.h, bit-identical to this
// table's vec_dot (dot_legacy.cpp). A ymm holds 4 bytes of 8 rows, the first or second half
// of a 64-byte x16 vector; row j's int32 and float lanes are lane j mod 8 of half j / 8, so
// nothing is summed across rows. Without VNNI the byte products go through vpmaddubsw
// (unsigned x signed bytes -> saturating int16 pairs) and vpmaddwd with ones (-> int32).
//   Q4_0: levels 0..15 against activations in [-128, 127]: one vpmaddubsw pair is at most
//     2 * 15 * 128 = 3840 in magnitude, so the 8 pair vectors of a block (4 columns, low
//     and high nibbles) sum in int16 to at most 30720 < 32767: exact. vpmaddwd widens them,
//     -8 * sum(a) is added in int32, and each row's float chain is vec_dot_q4_0_q8_0's:
//     acc = fma(float(block sum), d_x * d_y, acc), block after block.
//   Q8_0: q + 128 reaches 255 and would saturate vpmaddubsw, so the bytes are xored back to
//     q and go through dot_s8s8 (|q| times a with q's sign), the very pairs vec_dot forms:
//     int32 lane k of a row is vec_dot's lane k for every input, saturating or not. Each
//     row keeps vec_dot's 8 lane accumulators, acc_k = fma(d_x * d_y, float(lane_k), acc_k),
//     reduced in hsum_f32x8's order at the end.
// Two groups go side by side and each prefetches its quants 2 KiB ahead (x86 prefetches never
// fault): on the 2-core Xeon host, over an 850 MB matrix, that streamed best of 1, 2 or 4
// groups and 0, 512, 1024 or 2048 bytes (Q4_0 ~1.6x, Q8_0 ~1.4x the row-wise AVX2 gemv).
#include "ggml-like/quants.h"
#include "kernels/cpu/avx2/dot_common.h"
#include "kernels/cpu/avx2/dot_kernels.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels::avx2 {
namespace {

// The 4 bytes at p, broadcast to all 8 lanes.
inline __m256i bcast32(const void* p) {
  return _mm256_set1_epi32(static_cast<int32_t>(load_u32(p)));
}

// The fp16 scales of rows 8h .. 8h + 7 of block b (d[b][16] at the group's start) times da.
inline __m256 row_scales(const uint8_t* group, int64_t b, int h, __m256 da) {
  const auto* d = reinterpret_cast<const uint16_t*>(group) + b * kRepackRows + 8 * h;
  return _mm256_mul_ps(_mm256_cvtph_ps(load128(d)), da);
}

// How far ahead of the block being read each group prefetches its quants.
constexpr size_t kPrefetchBytes = 2048;

// Prefetches the `lines` cache lines at kPrefetchBytes past p.
inline void prefetch_ahead(const uint8_t* p, int lines) {
  for (int l = 0; l < lines; ++l) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * l), _MM_HINT_T0);
  }
}

// kG groups side by side (kG memory streams, which keeps more loads in flight than one).
template <int kG>
void q4_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m256i eight = _mm256_set1_epi8(8);
  const __m256i ones = _mm256_set1_epi16(1);
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m256 acc[kG][2];
  for (auto& g : acc) {
    for (auto& v : g) v = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m256i corr = _mm256_set1_epi32(-hsum_i32x8(dot_u8s8(eight, load256(aq))));
    const __m256 da = _mm256_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 4 * 64;
      prefetch_ahead(qb, 4);
      for (int h = 0; h < 2; ++h) {
        __m256i s = _mm256_setzero_si256();
        for (int k = 0; k < 4; ++k) {
          const __m256i w = load256(qb + 64 * k + 32 * h);
          s = _mm256_add_epi16(s, pairs_u8s8(low_nibbles(w), bcast32(aq + 4 * k)));
          s = _mm256_add_epi16(s, pairs_u8s8(high_nibbles(w), bcast32(aq + 16 + 4 * k)));
        }
        const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s, ones), corr);
        acc[i][h] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), row_scales(gbase, b, h, da), acc[i][h]);
      }
    }
  }
  for (int i = 0; i < kG; ++i) {
    _mm256_storeu_ps(y + i * kRepackRows, acc[i][0]);
    _mm256_storeu_ps(y + i * kRepackRows + 8, acc[i][1]);
  }
}

template <int kG>
void q8_0_groups(int64_t nb, const uint8_t* base, size_t group_bytes, const BlockQ8_0* a,
                 float* y) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const size_t q_offset = static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  __m256 acc[kG][2][8];
  for (auto& g : acc) {
    for (auto& half : g) {
      for (auto& v : half) v = _mm256_setzero_ps();
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    const int8_t* aq = a[b].qs;
    const __m256 da = _mm256_set1_ps(fp16_load(a[b].d));
    for (int i = 0; i < kG; ++i) {
      const uint8_t* gbase = base + static_cast<size_t>(i) * group_bytes;
      const uint8_t* qb = gbase + q_offset + static_cast<size_t>(b) * 8 * 64;
      prefetch_ahead(qb, 8);
      for (int h = 0; h < 2; ++h) {
        const __m256 ds = row_scales(gbase, b, h, da);
        for (int k = 0; k < 8; ++k) {
          const __m256i q = _mm256_xor_si256(load256(qb + 64 * k + 32 * h), bias);
          const __m256i lanes = dot_s8s8(q, bcast32(aq + 4 * k));
          acc[i][h][k] = _mm256_fmadd_ps(ds, _mm256_cvtepi32_ps(lanes), acc[i][h][k]);
        }
      }
    }
  }
  // hsum_f32x8's order: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)).
  for (int i = 0; i < kG; ++i) {
    for (int h = 0; h < 2; ++h) {
      const __m256* l = acc[i][h];
      const __m256 even = _mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6]));
      const __m256 odd = _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7]));
      _mm256_storeu_ps(y + i * kRepackRows + 8 * h, _mm256_add_ps(even, odd));
    }
  }
}

}  // namespace

void gemv_q4_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(BlockQ4_0);
  int64_t g = 0;
  for (; g + 2 <= n_groups; g += 2) {
    q4_0_groups<2>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
  for (; g < n_groups; ++g) {
    q4_0_groups<1>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
}

void gemv_q8_0_x16(int64_t n, const uint8_t* groups, int64_t n_groups, const uint8_t* act,
                   float* y) {
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  const int64_t nb = n / kQK;
  const size_t group_bytes = static_cast<size_t>(nb) * kRepackRows * sizeof(BlockQ8_0);
  int64_t g = 0;
  for (; g + 2 <= n_groups; g += 2) {
    q8_0_groups<2>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
  for (; g < n_groups; ++g) {
    q8_0_groups<1>(nb, groups + g * group_bytes, group_bytes, a, y + g * kRepackRows);
  }
}

}  // namespace qrun::kernels::avx2
