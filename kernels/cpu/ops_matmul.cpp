// Matrix multiplication of a weight tensor by a batch of F32 activations, as llama.cpp's
// CPU backend does it: each activation row is first converted to the weight type's
// vec_dot_type (F32 stays as is, F16/BF16 round to nearest even, quantized weights meet
// Q8_0 or Q8_K activations), then every output is one reference vec_dot of a weight row
// with an activation row. Threads split the output rows; each weight row is read once and
// dotted with every token while it is hot in cache. Kernels come from the ISA's table; a
// type with gemm kernels packs a batch once into the kernel's layout and multiplies it
// tile by tile, and one with a gemv kernel runs the small batches (decoding) a group of
// rows at a time, with the same results.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "ggml-like/result.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels {
namespace {

// Below this many multiply-adds per thread, splitting costs more than it saves.
constexpr int64_t kMinMacsPerThread = 32 * 1024;
// Weight rows per gemm call: a few tiles per thread even for the narrow K/V projections
// of grouped-query attention (256 rows), large enough to amortize the unpacking of
// weights and the transposed store of a tile.
constexpr int64_t kGemmRows = 128;
// Weight rows per gemv call (a multiple of every kernel's row group).
constexpr int64_t kGemvRows = 16;
// Repacked row groups (of 16 rows) that a thread takes at a time.
constexpr int64_t kRepackChunkGroups = 8;

}  // namespace

void CpuBackend::matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  const MatmulKernels& mk = kernels_->for_type(w.type);
  QRUN_CHECK(mk.vec_dot != nullptr, "matmul: weight '%.*s' has type %s, which has no dot product",
             static_cast<int>(w.name.size()), w.name.data(), dtype_name(w.type));
  const int64_t n_in = w.ne[0];
  const int64_t n_out = w.n_rows();
  const size_t w_row_bytes = w.row_bytes();
  const auto* w_data = static_cast<const uint8_t*>(w.data);
  if (n_tokens <= 0 || n_out <= 0) return;

  // Activations in the dot type: [n_tokens] rows of act_row_bytes, converted by
  // quantize_rows(begin, end) into act_buf_.
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);
  size_t act_row_bytes = static_cast<size_t>(n_in) * sizeof(float);
  const FromFloatFn quantize = mk.quantize_act;
  if (mk.act_type != DType::kF32) {
    QRUN_CHECK(quantize != nullptr, "matmul: activation type %s has no quantizer",
               dtype_name(mk.act_type));
    act_row_bytes = row_size(mk.act_type, n_in);
    const size_t need = act_row_bytes * static_cast<size_t>(n_tokens);
    if (act_buf_.size() < need) act_buf_.resize(need);
    act = act_buf_.data();
  }
  uint8_t* const act_out = act_buf_.data();
  auto quantize_rows = [&](int64_t begin, int64_t end) {
    if (mk.act_type == DType::kF32) return;
    for (int64_t t = begin; t < end; ++t) {
      quantize(x + t * n_in, act_out + static_cast<size_t>(t) * act_row_bytes, n_in);
    }
  };

  const GemmKernels& gk = mk.gemm;
  if (gk.usable(n_tokens, decode_rows_)) {
    // Each group of tokens is converted and packed by one thread, once for the whole
    // matmul; then tiles of kGemmRows weight rows meet every token of the shared packed
    // buffer. Threads take groups and tiles in turn, so one slowed by other load on its
    // core leaves the rest to the others.
    const int64_t group = gk.group_tokens;
    const int64_t n_groups = (n_tokens + group - 1) / group;
    const size_t group_bytes = gk.group_bytes(n_in);
    uint8_t* const packed = packed_buffer(group_bytes * static_cast<size_t>(n_groups));
    std::atomic<int64_t> next_group{0};
    pool_.parallel_for(std::min<int64_t>(pool_.n_threads(), n_groups), [&](int64_t, int64_t) {
      for (int64_t g = next_group.fetch_add(1); g < n_groups; g = next_group.fetch_add(1)) {
        const int64_t t0 = g * group;
        const int64_t n_valid = std::min(group, n_tokens - t0);
        quantize_rows(t0, t0 + n_valid);
        gk.pack_act(n_in, act + static_cast<size_t>(t0) * act_row_bytes, act_row_bytes, n_valid,
                    packed + static_cast<size_t>(g) * group_bytes);
      }
    });
    const int64_t n_tiles = (n_out + kGemmRows - 1) / kGemmRows;
    std::atomic<int64_t> next_tile{0};
    pool_.parallel_for(std::min<int64_t>(pool_.n_threads(), n_tiles), [&](int64_t, int64_t) {
      for (int64_t tile = next_tile.fetch_add(1); tile < n_tiles; tile = next_tile.fetch_add(1)) {
        const int64_t r0 = tile * kGemmRows;
        gk.gemm(n_in, w_data + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes,
                std::min(kGemmRows, n_out - r0), packed, n_tokens, y + r0, n_out);
      }
    });
    return;
  }

  if (mk.act_type != DType::kF32) pool_.parallel_for(n_tokens, quantize_rows);
  const int64_t macs_per_row = std::max<int64_t>(1, n_in * n_tokens);
  const int64_t min_rows = std::max<int64_t>(1, kMinMacsPerThread / macs_per_row);
  const VecDotFn dot = mk.vec_dot;
  const uint8_t* packed = nullptr;
  if (mk.gemv_repacked != nullptr && repack_ && n_out >= kRepackRows) packed = repacked(w);
  if (packed != nullptr) {
    // Threads take chunks of whole row groups in turn, so one slowed by other load on its
    // core leaves the rest to the others; every token passes over a chunk while it is in
    // cache. Rows after the last group keep their GGML layout.
    const GemvRepackedFn gemv = mk.gemv_repacked;
    // Several tokens meet each weight block once through the rows kernel where there is one.
    const GemvRepackedRowsFn gemv_rows = n_tokens > 1 ? mk.gemv_repacked_rows : nullptr;
    const int64_t n_groups = n_out / kRepackRows;
    const size_t group_bytes = w_row_bytes * kRepackRows;
    const int64_t n_chunks = (n_groups + kRepackChunkGroups - 1) / kRepackChunkGroups;
    const int64_t n_workers = std::min<int64_t>(
        {pool_.n_threads(), n_chunks, std::max<int64_t>(1, n_groups * kRepackRows / min_rows)});
    std::atomic<int64_t> next{0};
    pool_.parallel_for(n_workers, [&](int64_t, int64_t) {
      for (int64_t c = next.fetch_add(1); c < n_chunks; c = next.fetch_add(1)) {
        const int64_t g = c * kRepackChunkGroups;
        const int64_t groups = std::min(kRepackChunkGroups, n_groups - g);
        if (gemv_rows != nullptr) {
          gemv_rows(n_in, packed + static_cast<size_t>(g) * group_bytes, groups, act, act_row_bytes,
                    n_tokens, y + g * kRepackRows, n_out);
          continue;
        }
        for (int64_t t = 0; t < n_tokens; ++t) {
          gemv(n_in, packed + static_cast<size_t>(g) * group_bytes, groups,
               act + static_cast<size_t>(t) * act_row_bytes, y + t * n_out + g * kRepackRows);
        }
      }
    });
    for (int64_t r = n_groups * kRepackRows; r < n_out; ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * n_out + r] = dot(n_in, packed + static_cast<size_t>(r) * w_row_bytes,
                               act + static_cast<size_t>(t) * act_row_bytes);
      }
    }
    return;
  }
  const GemvFn gemv = mk.gemv;
  pool_.parallel_for(
      n_out,
      [&](int64_t begin, int64_t end) {
        if (gemv != nullptr) {
          // Groups of kGemvRows rows stay in cache while every token passes over them.
          for (int64_t r = begin; r < end; r += kGemvRows) {
            const int64_t rows = std::min(kGemvRows, end - r);
            for (int64_t t = 0; t < n_tokens; ++t) {
              gemv(n_in, w_data + static_cast<size_t>(r) * w_row_bytes, w_row_bytes, rows,
                   act + static_cast<size_t>(t) * act_row_bytes, y + t * n_out + r);
            }
          }
          return;
        }
        for (int64_t r = begin; r < end; ++r) {
          const uint8_t* w_row = w_data + static_cast<size_t>(r) * w_row_bytes;
          for (int64_t t = 0; t < n_tokens; ++t) {
            y[t * n_out + r] = dot(n_in, w_row, act + static_cast<size_t>(t) * act_row_bytes);
          }
        }
      },
      min_rows);
}

uint8_t* CpuBackend::packed_buffer(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (packed_buf_.size() < bytes + kAlign) packed_buf_.resize(bytes + kAlign);
  const auto base = reinterpret_cast<uintptr_t>(packed_buf_.data());
  return packed_buf_.data() + ((kAlign - base % kAlign) % kAlign);
}

}  // namespace qrun::kernels
