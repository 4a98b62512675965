// The CPU backend: every Backend op multithreaded over output rows (matmul), tokens (rope,
// norms) or (token, KV head) pairs (attention) with one persistent thread pool, calling the
// row and tile kernels of one ISA's table (kernel_table.h). With Isa::kGeneric it runs the
// scalar references, the oracle the SIMD tables are tested against.
// Decoding a weight type for which the ISA has a repacked gemv (repack.h) reads a copy of
// each weight in that layout, made the first time gemv meets the weight and kept for the
// backend's life, up to a quarter of physical memory (set QRUN_NO_REPACK=1 to decode from
// the GGML layout instead). Weights must therefore stay mapped and unchanged while the
// backend lives.
// Not thread-safe: one caller at a time.
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ggml-like/backend.h"
#include "ggml-like/thread_pool.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {

class CpuBackend final : public Backend {
 public:
  // n_threads <= 0: one thread per physical core. The ISA must run on this CPU (see
  // resolve_isa); the default honours QRUN_FORCE_ISA, else takes the best one.
  explicit CpuBackend(int n_threads = 0, Isa isa = default_isa());

  // Whether decoding may use repacked weight copies (default: QRUN_NO_REPACK unset or 0).
  void set_repack_enabled(bool on) { repack_ = on; }
  // The most bytes the copies may hold (default: a quarter of physical memory); weights
  // met after that decode from their GGML layout.
  void set_repack_budget(size_t bytes) { repack_budget_ = bytes; }
  // Bytes held in repacked weight copies.
  size_t repacked_bytes() const { return repacked_bytes_; }

  int n_threads() const { return pool_.n_threads(); }
  Isa isa() const { return kernels_->isa; }
  ThreadPool& pool() { return pool_; }

  std::string_view name() const override { return "cpu"; }
  bool supports(Op op, DType type) const override;
  bool supports_paged_kv() const override { return true; }
  void set_decode_rows(bool on) override { decode_rows_ = on; }

  void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) override;
  // Decode products over repacked weights run in one pass: one parallel region over all
  // their row groups, each distinct x converted once. Others run one by one.
  void matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) override;
  void get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) override;
  void rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
            std::span<const int32_t> positions, const RopeParams& params) override;
  void kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                const float* v) override;
  void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                 const AttentionParams& params, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void geglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void scale(const float* x, int64_t n, float s, float* out) override;
  void softcap(const float* x, int64_t n, float cap, float* out) override;

 private:
  // F32 -> a BF16, Q8_0 or Q4_0 cache row, as llama.cpp's CPU backend converts it (null for
  // F32 and F16, which kv_store copies or converts itself).
  FromFloatFn kv_row_converter(DType type) const;
  ThreadPool pool_;
  const CpuKernels* kernels_;
  // A 64-byte aligned view of at least `bytes` of packed_buf_.
  uint8_t* packed_buffer(size_t bytes);

  // Activations converted to a weight's vec_dot_type, and packed for a gemm kernel
  // (ops_matmul.cpp); each grows to the largest batch seen, then is reused (no allocation
  // per token).
  std::vector<uint8_t> act_buf_;
  std::vector<uint8_t> packed_buf_;
  // Split attention's per-chunk accumulators and softmax states (ops_attention.cpp), sized
  // once per model shape.
  std::vector<float> chunk_buf_;

  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // A weight's repacked copy (layout of repack.h), and what it was made from: the type,
  // shape and first and last 64 bytes, checked on every use so that other data later
  // mapped at the same address is never multiplied through a stale copy.
  struct RepackedCopy {
    std::unique_ptr<uint8_t, FreeDeleter> bytes;
    DType type = DType::kF32;
    int64_t n = 0;
    int64_t n_rows = 0;
    std::array<uint8_t, 128> ends{};
  };
  // w's repacked copy, made on first use (null when memory ran out).
  const uint8_t* repacked(const Tensor& w);

  // One weight's part of a pass of repacked gemvs (ops_matmul.cpp): its n_out rows times
  // n_tokens activation rows already in the kernels' act_type, act_row_bytes apart.
  struct RepackedJob {
    const MatmulKernels* mk;
    const uint8_t* packed;
    size_t row_bytes;  // of the weight
    const uint8_t* act;
    size_t act_row_bytes;
    int64_t n_in;
    int64_t n_out;
    float* y;
    int64_t first_chunk = 0;  // set by run_repacked
  };
  // Runs the jobs in one parallel region (threads take chunks of row groups in turn), on
  // at most max_workers threads, then each job's rows after its last whole group.
  void run_repacked(std::span<RepackedJob> jobs, int64_t n_tokens, int64_t max_workers);
  // matmuls' jobs, and the distinct activations they read: x, its type, and the offset of
  // its converted rows in act_buf_. Reserved once, reused (no allocation per token).
  struct ActSource {
    const float* x;
    const MatmulKernels* mk;
    int64_t n_in;
    size_t offset;
  };
  std::vector<RepackedJob> jobs_;
  std::vector<ActSource> act_sources_;
  bool repack_;
  size_t repack_budget_;
  bool decode_rows_ = false;  // set_decode_rows
  size_t repacked_bytes_ = 0;
  std::unordered_map<const void*, RepackedCopy> repacked_;  // keyed by GGML data
};

}  // namespace qrun::kernels
