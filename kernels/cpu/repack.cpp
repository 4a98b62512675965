// The x16 decode layouts of repack.h, written with plain byte copies: repacking runs once
// per tensor, and memory speed bounds it.
#include "kernels/cpu/repack.h"

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "ggml-like/quants.h"
#include "ggml-like/result.h"

namespace qrun::kernels {
namespace {

// Writes the 4-byte columns of `bytes` bytes at src (rows src_stride apart) to dst, column
// k of row j at dst + (k * 16 + j) * 4.
void interleave(const uint8_t* src, size_t src_stride, int bytes, uint8_t* dst) {
  // Column by column, so that dst is written in order.
  for (int k = 0; k < bytes / 4; ++k) {
    for (int64_t j = 0; j < kRepackRows; ++j) {
      std::memcpy(dst + (k * kRepackRows + j) * 4,
                  src + static_cast<size_t>(j) * src_stride + 4 * k, 4);
    }
  }
}

// One group of 16 rows, nb blocks each. Block has members d and qs; kQBytes quant bytes
// per block go out in 4-byte columns, each XORed with kFlip.
template <class Block, int kQBytes, uint8_t kFlip>
void repack_group(int64_t nb, const uint8_t* src, size_t row_bytes, uint8_t* dst) {
  constexpr int kCols = kQBytes / 4;
  auto* d = reinterpret_cast<uint16_t*>(dst);
  uint8_t* q = dst + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* first = src + static_cast<size_t>(b) * sizeof(Block);
    for (int64_t j = 0; j < kRepackRows; ++j) {
      std::memcpy(&d[b * kRepackRows + j],
                  first + static_cast<size_t>(j) * row_bytes + offsetof(Block, d),
                  sizeof(uint16_t));
    }
    uint8_t* out = q + static_cast<size_t>(b) * kCols * kRepackRows * 4;
    interleave(first + offsetof(Block, qs), row_bytes, kQBytes, out);
    if constexpr (kFlip != 0) {
      for (int i = 0; i < kCols * kRepackRows * 4; ++i)
        out[i] = static_cast<uint8_t>(out[i] ^ kFlip);
    }
  }
}

// Q4_K and Q5_K super-blocks (repack.h): the rows' d and dmin, then the 4-byte columns of
// their scales, of Q5_K's qh and of their qs.
template <class Block>
void repack_group_k_super(int64_t nb, const uint8_t* src, size_t row_bytes, uint8_t* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* first = src + static_cast<size_t>(b) * sizeof(Block);
    uint8_t* out = dst + static_cast<size_t>(b) * kRepackRows * sizeof(Block);
    auto* d = reinterpret_cast<uint16_t*>(out);
    for (int64_t j = 0; j < kRepackRows; ++j) {
      const auto* block =
          reinterpret_cast<const Block*>(first + static_cast<size_t>(j) * row_bytes);
      std::memcpy(&d[j], &block->d, sizeof(uint16_t));
      std::memcpy(&d[kRepackRows + j], &block->dmin, sizeof(uint16_t));
    }
    uint8_t* next = out + 2 * kRepackRows * sizeof(uint16_t);
    interleave(first + offsetof(Block, scales), row_bytes, kKScaleBytes, next);
    next += kRepackRows * kKScaleBytes;
    if constexpr (std::is_same_v<Block, BlockQ5_K>) {
      interleave(first + offsetof(Block, qh), row_bytes, kQKK / 8, next);
      next += kRepackRows * kQKK / 8;
    }
    interleave(first + offsetof(Block, qs), row_bytes, kQKK / 2, next);
  }
}

void repack_group_q5_0(int64_t nb, const uint8_t* src, size_t row_bytes, uint8_t* dst) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* first = src + static_cast<size_t>(b) * sizeof(BlockQ5_0);
    uint8_t* out = dst + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t) +
                   static_cast<size_t>(b) * kQ5_0GroupBlockBytes;
    for (int64_t j = 0; j < kRepackRows; ++j) {
      const auto* block =
          reinterpret_cast<const BlockQ5_0*>(first + static_cast<size_t>(j) * row_bytes);
      std::memcpy(&d[b * kRepackRows + j], &block->d, sizeof(uint16_t));
      uint32_t qh;
      std::memcpy(&qh, block->qh, sizeof(qh));
      const uint32_t h = regroup_q5_0_high_bits(qh);
      std::memcpy(out + 4 * j, &h, sizeof(h));
    }
    interleave(first + offsetof(BlockQ5_0, qs), row_bytes, kQK / 2, out + kRepackRows * 4);
  }
}

void repack_group_q6_k(int64_t nb, const uint8_t* src, size_t row_bytes, uint8_t* dst) {
  auto* d = reinterpret_cast<uint16_t*>(dst);
  constexpr size_t kSuperBytes = kRepackRows * (sizeof(BlockQ6_K) - sizeof(uint16_t));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* first = src + static_cast<size_t>(b) * sizeof(BlockQ6_K);
    for (int64_t j = 0; j < kRepackRows; ++j) {
      const auto* block =
          reinterpret_cast<const BlockQ6_K*>(first + static_cast<size_t>(j) * row_bytes);
      std::memcpy(&d[b * kRepackRows + j], &block->d, sizeof(uint16_t));
    }
    uint8_t* out = dst + static_cast<size_t>(nb) * kRepackRows * sizeof(uint16_t) +
                   static_cast<size_t>(b) * kSuperBytes;
    interleave(first + offsetof(BlockQ6_K, ql), row_bytes, kQKK / 2, out);
    out += kRepackRows * kQKK / 2;
    interleave(first + offsetof(BlockQ6_K, qh), row_bytes, kQKK / 4, out);
    out += kRepackRows * kQKK / 4;
    interleave(first + offsetof(BlockQ6_K, scales), row_bytes, kQKK / 16, out);
  }
}

}  // namespace

bool has_repacked_layout(DType type) {
  return type == DType::kQ4_0 || type == DType::kIQ4_NL || type == DType::kQ5_0 ||
         type == DType::kQ8_0 || type == DType::kQ4_K || type == DType::kQ5_K ||
         type == DType::kQ6_K;
}

void repack_rows(DType type, int64_t n, const uint8_t* src, int64_t n_rows, uint8_t* dst) {
  QRUN_CHECK(has_repacked_layout(type), "repack_rows: %s has no repacked layout", dtype_name(type));
  const size_t row_bytes = row_size(type, n);
  const size_t group_bytes = row_bytes * kRepackRows;
  const int64_t nb = n / type_traits(type).block_elems;
  const int64_t n_groups = n_rows / kRepackRows;
  for (int64_t g = 0; g < n_groups; ++g) {
    const uint8_t* s = src + static_cast<size_t>(g) * group_bytes;
    uint8_t* o = dst + static_cast<size_t>(g) * group_bytes;
    if (type == DType::kQ4_0) {
      repack_group<BlockQ4_0, kQK / 2, 0>(nb, s, row_bytes, o);
    } else if (type == DType::kIQ4_NL) {
      repack_group<BlockIQ4_NL, kQK / 2, 0>(nb, s, row_bytes, o);
    } else if (type == DType::kQ5_0) {
      repack_group_q5_0(nb, s, row_bytes, o);
    } else if (type == DType::kQ4_K) {
      repack_group_k_super<BlockQ4_K>(nb, s, row_bytes, o);
    } else if (type == DType::kQ5_K) {
      repack_group_k_super<BlockQ5_K>(nb, s, row_bytes, o);
    } else if (type == DType::kQ6_K) {
      repack_group_q6_k(nb, s, row_bytes, o);
    } else {
      repack_group<BlockQ8_0, kQK, 0x80>(nb, s, row_bytes, o);
    }
  }
  const size_t done = static_cast<size_t>(n_groups) * group_bytes;
  std::memcpy(dst + done, src + done, static_cast<size_t>(n_rows) * row_bytes - done);
}

}  // namespace qrun::kernels
