// The CUDA backend behind the Backend interface, on the kernels of ops.h. The same class
// builds for the GPU (qrun_kernels_cuda) and, under the SIMT emulator, for the host
// (qrun_kernels_cuda_emu), where the tests run it against the CPU backend.
// Activations: buffers declared with begin_scratch (a model's scratch, for one forward
// chunk) live in device memory for the scope, so a forward pass queues its kernels back to
// back and copies only the logits out. Any other host memory keeps the Backend contract:
// an op copies such inputs in and such outputs back before it returns.
// Weights are copied to the device the first time an op meets them and kept, keyed by
// their host address and checked against their first and last bytes (weights must stay
// mapped and unchanged while the backend lives).
// KV cache: each layer lives in device memory, keyed by the host cache's k pointer; the
// host cache's own memory is read and written only through kv_from_host and kv_to_host (a
// new layer starts as zeros, or, after kv_from_host, as the host rows). Only F16 caches.
// A paged layer is its pool's whole storage, shared by every sequence's view; kv_copy
// copies rows within it (a block shared by sequences copied before one writes it).
// Numerics differ from the CPU backend where ops.h says so: a matmul of up to 4 tokens
// (decode) quantizes activations to blocks of 32 for every weight type (Q8_1-style, not
// Q8_K for the k-quants); from 5 tokens on (prefill) both operands are rounded to F16 and
// multiplied by cuBLAS, as llama.cpp's CUDA backend does for batches; attention sums in
// float rather than in llama.cpp's F16 accumulator. Decode rows (set_decode_rows) of up to
// kMaxDecodeRows take MMVQ and the split-K attention whatever their number: each row's
// numbers are then bit for bit those of its token alone. get_rows dequantizes on the host (one
// row per token) and uploads. Not thread-safe: one caller at a time.
// Graphs: everything is queued on one stream of the backend's own. A one-token forward
// chunk (decode) inside a scratch scope, after one such chunk ran eagerly on the same
// buffers, is captured from the moment get_rows has uploaded its embedding until the
// logits go to the host (or end_scratch), then launched as one CUDA graph: re-captured
// each token and the kept executable graph updated to it (instantiated anew only when
// the update fails), as llama.cpp does. Whatever a capture cannot hold (an allocation, a
// first weight copy, a new KV layer, an upload from pageable memory, a copy to the host)
// first ends the capture and launches what it holds, so the work runs in order either
// way. Off by default (measured slower, see cuda_backend.cpp); QRUN_CUDA_GRAPHS=1 turns
// them on.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ggml-like/backend.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

class CudaBackend final : public Backend {
 public:
  // The device memory a weight's upload borrows while it repacks (WeightLayout::kGroups8):
  // at most this much, or one row.
  static constexpr size_t kRepackStagingBytes = size_t{16} << 20;

  // What the graph logic decided, for the tests.
  struct GraphStats {
    int64_t captures = 0;        // decode steps whose capture began
    int64_t flushes = 0;         // captures ended early by work a graph cannot hold
    int64_t launches = 0;        // captures that held work, launched as a graph
    int64_t instantiations = 0;  // of the launches, those on a new executable graph
    int64_t updates = 0;         // of the launches, those on the kept one, updated
  };

  // Graphs as QRUN_CUDA_GRAPHS says (off unless set and not 0) and decode fusions as
  // QRUN_CUDA_FUSE says (on unless it is 0), or as given.
  CudaBackend();
  explicit CudaBackend(bool graphs);
  CudaBackend(bool graphs, bool fuse);
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override;

  const GraphStats& graph_stats() const { return stats_; }
  // The device memory attention's partial results hold now, for the tests: the memory plan
  // (cli/gpu_offload.cpp) counts that of one token at the cache's last row.
  size_t attention_scratch_bytes() const { return scratch_[kAttnScratch].size(); }

  std::string_view name() const override { return "cuda"; }
  bool supports(Op op, DType type) const override;
  // Paged views: a pool's layer is mirrored whole (KvLayerView::storage_rows), and each
  // sequence's block table is copied to the device when it changes.
  bool supports_paged_kv() const override { return true; }

  void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) override;
  void matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) override;
  void get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) override;
  void rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                float* y) override;
  void add_rms_norm(float* x, const float* delta, const Tensor& weight, int64_t n_rows, int64_t n,
                    float eps, float* y) override;
  // One launch where x and delta are resident, fusions are on and the rows fit
  // (cuda::norm_add_rms_norm_fits); else the default's two.
  void norm_add_rms_norm(float* x, float* delta, const Tensor& delta_weight, const Tensor& weight,
                         int64_t n_rows, int64_t n, float eps, float* y) override;
  void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
            std::span<const int32_t> positions, const RopeParams& params) override;
  void rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
               int64_t head_dim, std::span<const int32_t> positions,
               const RopeParams& params) override;
  void kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                const float* v) override;
  // rope_qk with the K/V store in the same launch, where q, k and v are resident (a
  // scratch scope's buffers) and fusions are on.
  void rope_qk_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                     int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                     const RopeParams& params, const KvLayerView& cache, int64_t pos) override;
  // All of it in one launch where rope_qk_store's is and the heads fit
  // (cuda::norm_rope_fits); else the default's ops.
  void norm_rope_qk_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                          int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                          const RopeParams& params, const HeadNorms& norms,
                          const KvLayerView& cache, int64_t pos) override;
  void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                 const AttentionParams& params, float* out) override;
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override;
  void geglu(const float* gate, const float* up, int64_t n, float* out) override;
  void add(const float* a, const float* b, int64_t n, float* out) override;
  void scale(const float* x, int64_t n, float s, float* out) override;
  void softcap(const float* x, int64_t n, float cap, float* out) override;
  // The row ids (and weights) go to the device through pinned staging memory, so that a
  // captured decode step holds their copies as it holds the positions'.
  void gather_rows(const float* x, int64_t n, std::span<const int32_t> rows, float* out) override;
  void weighted_row_sum(const float* src, int64_t n, std::span<const int32_t> rows,
                        std::span<const float> weights, int64_t k, float* out) override;
  void kv_to_host(const KvLayerView& cache) override;
  void kv_from_host(const KvLayerView& cache) override;
  void kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n) override;
  // Ignored under QRUN_CUDA_DECODE_ROWS=0 (read at construction), for A/B measurement.
  void set_decode_rows(bool on) override { decode_rows_ = on && honour_decode_rows_; }
  void begin_scratch(std::span<const std::span<float>> buffers) override;
  void end_scratch() override;

 private:
  // The backend's stream, created on first use.
  Stream stream();
  // Whether n_tokens rows are decode rows this backend computes as each token alone.
  bool as_decode_rows(int64_t n_tokens) const;
  // Whether a matmul of n_tokens rows runs MMVQ (and the op before it quantizes for it)
  // rather than the F16 GEMM: a decode step's few rows, or decode rows.
  bool mmvq_rows(int64_t n_tokens) const;
  // Ends an open capture and launches what it holds; `early` when the capture ends before
  // the step's logits are out (the work that follows runs eagerly).
  void end_capture(bool early);
  void flush() { end_capture(true); }
  // Scratch slots: an op's inputs, its output, and what else it needs on the device.
  enum Slot { kIn0, kIn1, kOut, kAux, kAttnScratch, kGemm, kSlots };
  // Scratch slot `slot` (a device buffer that grows to the largest request and is then
  // reused) with at least `bytes`.
  void* scratch(int slot, size_t bytes);
  // The device copy of a weight (or norm weight, or RoPE factor table) at `host`.
  const void* device_copy(const void* host, size_t bytes);
  // The device copy of matrix w in `layout` (kGroups8: repacked once, at upload).
  const void* device_matrix(const Tensor& w, WeightLayout layout);
  const void* device_copy(const void* host, size_t bytes, WeightLayout layout, DType type,
                          int64_t n_in);
  // host[0 .. bytes) (rows of n_in elements of `type`) into device, repacked to kGroups8.
  void upload_groups8(DType type, const uint8_t* host, size_t bytes, int64_t n_in, uint8_t* device);
  // The device memory behind host[0 .. n) when it lies in a scratch buffer of the open
  // scope, else null.
  float* resident(const float* host, int64_t n);
  // An op's input: its resident copy, or host[0 .. n) uploaded into scratch slot `slot`
  // (device memory the op may also write, as rope does in place).
  float* input(int slot, const float* host, int64_t n);
  // Where an op writes host[0 .. n): its resident copy, or scratch slot `slot`; then
  // finish_output copies a non-resident result back to the host and waits for it.
  float* output(int slot, float* host, int64_t n);
  void finish_output(float* host, const float* device, int64_t n);
  // Records that device[0 .. n) was written: forgets the quantized activations if they
  // were made from there.
  void wrote(const float* device, int64_t n);
  // The device copy of an RMS norm's weight for rows of n (checked: F32, n elements).
  const float* norm_weight(const Tensor& weight, int64_t n, const char* op);
  // rope_qk_store's and norm_rope_qk_store's launch, where q, k and v are resident and
  // fusions are on; false (nothing done) where not.
  bool fused_rope_store(float* q, int64_t n_head, float* k, const float* v, int64_t n_head_kv,
                        int64_t n_tokens, int64_t head_dim, std::span<const int32_t> positions,
                        const RopeParams& params, const cuda::HeadNormWeights& norms,
                        const KvLayerView& cache, int64_t pos);
  // params with its freq_factors table (if any) in device memory.
  RopeParams device_rope_params(const RopeParams& params);
  // positions in device memory, uploaded (through pinned memory, so a capture can hold
  // the copy) only when they differ from the last ones.
  const int32_t* device_positions(std::span<const int32_t> positions);
  // x (device memory, n_tokens rows of n_in) quantized for mmvq in the kAux slot, where
  // the last quantization is reused if it was of the same memory and nothing wrote it since.
  const BlockQ8_1* quantized(const float* dx, int64_t n_tokens, int64_t n_in);
  // Decode fusions: where an op writing n floats for host_out also writes them quantized,
  // for the matmul that takes them next (for_mmvq: the op's rows are whole blocks, and few
  // enough for mmvq); null when it should not (fusions off, host_out not resident). After
  // the op's finish_output, quantized_as(dy, n, q) records what q holds.
  BlockQ8_1* fused_quantized(const float* host_out, int64_t n, bool for_mmvq);
  void quantized_as(const float* dy, int64_t n, const BlockQ8_1* q);
  void gated(void (*op)(const float*, const float*, int64_t, float*, Stream, BlockQ8_1*),
             const float* gate, const float* up, int64_t n, float* out);
  void elementwise2(void (*op)(const float*, const float*, int64_t, float*, Stream), const float* a,
                    const float* b, int64_t n, float* out);

  struct DeviceKv {
    DeviceArray<uint16_t> k, v;
  };
  // At least n zeroed attention counters (grown, and zeroed, on demand).
  unsigned* attention_counters(int64_t n);
  // The device copy of a cache layer for a store of n_tokens rows at pos (checked), made
  // on first use.
  DeviceKv& device_kv(const KvLayerView& cache, int64_t pos, int64_t n_tokens);
  // `cache` as the kernels read it: layer's device rows, and for a paged view its block
  // table's entries for the positions before `end`, in device memory.
  KvLayerView device_view(const KvLayerView& cache, DeviceKv& layer, int64_t end);
  // The first n entries of the block table at `host` in device memory, copied (through
  // pinned memory, so a capture can hold the copy) only when they differ from the entries
  // that table's copy holds; its device copy has room for `capacity` entries (the pool's
  // blocks: as many as any table can hold), so that a decode step that crosses into a new block
  // neither allocates nor waits.
  const int32_t* device_block_table(const int32_t* host, int64_t n, int64_t capacity);
  // A small host array's device copy (gather_rows' and weighted_row_sum's row ids and
  // weights), staged in pinned memory. Unlike the positions' it is copied on every use.
  struct StagedCopy {
    PinnedArray<uint8_t> staging;
    DeviceArray<uint8_t> device;
    bool queued = false;  // a copy from staging may not have run yet
  };
  // The bytes of `parts`, one after the other, copied to s's device memory (grown when
  // short, which ends a capture; a copy from staging still queued waits first); returns it.
  const uint8_t* upload_staged(StagedCopy& s,
                               std::initializer_list<std::span<const std::byte>> parts);
  // Waits for all the work queued on the stream; then no copy from a staging buffer (the
  // positions', a block table's, a StagedCopy's) is still queued, and each may be written
  // again at once.
  void sync_stream();
  // Marks a staging buffer's flag: a copy from it is queued (n_staged_ counts the flags set).
  void staged(bool& queued);
  struct WeightCopy {
    DeviceArray<uint8_t> bytes;
    std::array<uint8_t, 128> ends;  // the host data's first and last 64 bytes
    WeightLayout layout;
  };
  struct ResidentBuffer {
    const float* host = nullptr;
    size_t n = 0;
    DeviceArray<float> device;
  };
  std::unordered_map<const void*, WeightCopy> weights_;
  // The scratch buffers of the last scope, kept between scopes so that a model's fixed
  // buffers are allocated once.
  std::vector<ResidentBuffer> resident_;
  bool scope_open_ = false;
  std::vector<float> rows_;                       // get_rows' host staging
  std::unordered_map<const void*, DeviceKv> kv_;  // keyed by the host cache's k
  // Layers (by the host cache's k) whose host rows kv_from_host made their content: read
  // when kv_store next makes the layer's device copy.
  std::unordered_set<const void*> kv_on_host_;
  struct BlockTableCopy {
    PinnedArray<int32_t> staging;  // what was copied last
    DeviceArray<int32_t> device;
    size_t n = 0;         // entries both hold
    bool queued = false;  // a copy from staging may not have run yet
  };
  // By the host table's address (its entries compared on each use, so a table that moved
  // or a reused address cannot serve stale entries); cleared past kMaxBlockTables.
  static constexpr size_t kMaxBlockTables = 256;
  std::unordered_map<const int32_t*, BlockTableCopy> block_tables_;
  DeviceArray<uint8_t> scratch_[kSlots];  // by Slot
  // Decode attention's per-(token, head) counters (cuda::attention): zero between launches.
  DeviceArray<unsigned> attention_counters_;
  // The activations the kAux slot holds quantized (matmul): made from quantized_n_ floats
  // at quantized_from_ (device memory), into quantized_to_; null when none.
  const float* quantized_from_ = nullptr;
  int64_t quantized_n_ = 0;
  const void* quantized_to_ = nullptr;
  // The positions device_positions_ holds (the first n_positions_), staged in pinned
  // memory; positions_queued_ while a copy from it may not have run yet.
  PinnedArray<int32_t> positions_;
  size_t n_positions_ = 0;
  bool positions_queued_ = false;
  // gather_rows' rows and weighted_row_sum's rows and weights: one copy each, so that the
  // two ops of a layer need not wait for each other's copy.
  StagedCopy moe_rows_[2];
  size_t n_staged_ = 0;  // staging buffers whose copy may not have run (positions, tables, moe)
  DeviceArray<int32_t> device_positions_;
  Stream stream_{};
  // Graphs: whether to use them; whether the stream is capturing; whether this scope ran a
  // one-token step, and whether the last scope did on the same buffers (then the next
  // step's allocations are done and it is captured).
  // QRUN_CUDA_FUSE=0 turns off the decode fusions (matmuls, add_rms_norm and the
  // quantized outputs of RMS norm and the gated activations), for A/B measurement.
  bool fuse_ = true;
  bool decode_rows_ = false;  // set_decode_rows
  bool honour_decode_rows_ = true;
  bool graphs_ = true;
  bool capturing_ = false;
  bool scope_decode_ = false;
  bool decode_warm_ = false;
  GraphExec graph_;
  GraphStats stats_;
};

QRUN_CUDA_NAMESPACE_END
