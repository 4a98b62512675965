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
    RepackedJob job{&mk, packed, w_row_bytes, act, act_row_bytes, n_in, n_out, y};
    run_repacked(std::span<RepackedJob>(&job, 1), n_tokens,
                 std::max<int64_t>(1, n_out / kRepackRows * kRepackRows / min_rows));
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

void CpuBackend::matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) {
  auto x_of = [x](const Product& p) { return p.x != nullptr ? p.x : x; };
  auto source_of = [&](const Product& p) {
    const MatmulKernels& mk = kernels_->for_type(p.w->type);
    return std::find_if(act_sources_.begin(), act_sources_.end(), [&](const ActSource& a) {
      return a.x == x_of(p) && a.n_in == p.w->ne[0] && a.mk->act_type == mk.act_type;
    });
  };
  // Each product as matmul would run it, through a repacked gemv: one that matmul would
  // run another way (a gemm batch, a type without repacked kernels, a weight of too few
  // rows or over the copies' budget) sends them all one by one.
  act_sources_.clear();
  jobs_.clear();
  size_t act_bytes = 0;
  int64_t n_rows = 0;
  for (const Product& p : products) {
    const Tensor& w = *p.w;
    const MatmulKernels& mk = kernels_->for_type(w.type);
    const bool repackable = products.size() > 1 && repack_ && n_tokens > 0 &&
                            mk.gemv_repacked != nullptr && w.n_rows() >= kRepackRows &&
                            !mk.gemm.usable(n_tokens, decode_rows_);
    const uint8_t* packed = repackable ? repacked(w) : nullptr;
    if (packed == nullptr) {
      Backend::matmuls(x, n_tokens, products);
      return;
    }
    // The activations are set below, once act_buf_ has its size.
    jobs_.push_back(RepackedJob{&mk, packed, w.row_bytes(), nullptr, 0, w.ne[0], w.n_rows(), p.y});
    n_rows += w.n_rows() / kRepackRows * kRepackRows;
    if (source_of(p) != act_sources_.end()) continue;
    act_sources_.push_back(ActSource{x_of(p), &mk, w.ne[0], act_bytes});
    if (mk.act_type != DType::kF32)
      act_bytes += row_size(mk.act_type, w.ne[0]) * static_cast<size_t>(n_tokens);
  }
  // Each distinct x converted once, a token at a time.
  if (act_buf_.size() < act_bytes) act_buf_.resize(act_bytes);
  const auto n_sources = static_cast<int64_t>(act_sources_.size());
  pool_.parallel_for(n_sources * n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const ActSource& a = act_sources_[static_cast<size_t>(i / n_tokens)];
      if (a.mk->act_type == DType::kF32) continue;
      const int64_t t = i % n_tokens;
      a.mk->quantize_act(
          a.x + t * a.n_in,
          act_buf_.data() + a.offset + static_cast<size_t>(t) * row_size(a.mk->act_type, a.n_in),
          a.n_in);
    }
  });
  for (size_t i = 0; i < products.size(); ++i) {
    const ActSource& a = *source_of(products[i]);
    const bool f32 = a.mk->act_type == DType::kF32;
    jobs_[i].act = f32 ? reinterpret_cast<const uint8_t*>(a.x) : act_buf_.data() + a.offset;
    jobs_[i].act_row_bytes =
        f32 ? static_cast<size_t>(a.n_in) * sizeof(float) : row_size(a.mk->act_type, a.n_in);
  }
  const int64_t min_rows = std::max<int64_t>(1, kMinMacsPerThread / (jobs_[0].n_in * n_tokens));
  run_repacked(jobs_, n_tokens, std::max<int64_t>(1, n_rows / min_rows));
}

void CpuBackend::run_repacked(std::span<RepackedJob> jobs, int64_t n_tokens, int64_t max_workers) {
  auto n_chunks_of = [](const RepackedJob& j) {
    return (j.n_out / kRepackRows + kRepackChunkGroups - 1) / kRepackChunkGroups;
  };
  int64_t n_chunks = 0;
  for (RepackedJob& j : jobs) {
    j.first_chunk = n_chunks;
    n_chunks += n_chunks_of(j);
  }
  // Threads take chunks of whole row groups in turn, so one slowed by other load on its
  // core leaves the rest to the others; every token passes over a chunk while it is in
  // cache. Chunks are taken in job order, so each thread's job index only moves forward.
  std::atomic<int64_t> next{0};
  const int64_t n_workers = std::min<int64_t>({pool_.n_threads(), n_chunks, max_workers});
  pool_.parallel_for(n_workers, [&](int64_t, int64_t) {
    size_t i = 0;
    for (int64_t c = next.fetch_add(1); c < n_chunks; c = next.fetch_add(1)) {
      while (c >= jobs[i].first_chunk + n_chunks_of(jobs[i])) ++i;
      const RepackedJob& j = jobs[i];
      const int64_t g = (c - j.first_chunk) * kRepackChunkGroups;
      const int64_t groups = std::min(kRepackChunkGroups, j.n_out / kRepackRows - g);
      const uint8_t* w = j.packed + static_cast<size_t>(g * kRepackRows) * j.row_bytes;
      float* y = j.y + g * kRepackRows;
      if (n_tokens > 1 && j.mk->gemv_repacked_rows != nullptr) {
        // Several tokens meet each weight block once.
        j.mk->gemv_repacked_rows(j.n_in, w, groups, j.act, j.act_row_bytes, n_tokens, y, j.n_out);
        continue;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        j.mk->gemv_repacked(j.n_in, w, groups, j.act + static_cast<size_t>(t) * j.act_row_bytes,
                            y + t * j.n_out);
      }
    }
  });
  // Rows after the last whole group keep their GGML layout.
  for (const RepackedJob& j : jobs) {
    for (int64_t r = j.n_out / kRepackRows * kRepackRows; r < j.n_out; ++r) {
      for (int64_t t = 0; t < n_tokens; ++t) {
        j.y[t * j.n_out + r] =
            j.mk->vec_dot(j.n_in, j.packed + static_cast<size_t>(r) * j.row_bytes,
                          j.act + static_cast<size_t>(t) * j.act_row_bytes);
      }
    }
  }
}

uint8_t* CpuBackend::packed_buffer(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (packed_buf_.size() < bytes + kAlign) packed_buf_.resize(bytes + kAlign);
  const auto base = reinterpret_cast<uintptr_t>(packed_buf_.data());
  return packed_buf_.data() + ((kAlign - base % kAlign) % kAlign);
}

}  // namespace qrun::kernels
