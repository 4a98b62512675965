// CudaBackend: host-side glue from the Backend ops to the kernels of ops.h (see
// cuda_backend.h for what is copied where).
#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml-like/fp16.h"
#include "ggml-like/result.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

// From this many tokens on, a quantized matmul dequantizes the weights to F16 tiles and
// multiplies them through cuBLAS (ops_gemm.cu) instead of running MMVQ, which reads the
// weights once per token: the dequantized tile costs about as much traffic as four passes.
constexpr int64_t kGemmMinTokens = 5;

// The most decode rows (set_decode_rows) that take MMVQ and the split-K attention, so that
// each row has the bits of its token alone (a speculative pass of 16 drafted tokens and the
// pending one fits). Three passes of 8 tokens: on an H100, 8 tokens of an 8B layer's Q4_0
// matmuls ran at 818 GB/s of weights against 1255 for one (docs/PERFORMANCE_CUDA.md), so
// three passes cost about 4.6 one-token passes, what the F16 dequantization alone costs
// (23.8 us a 4096x4096 matrix, 3.2 passes) before its GEMM. Not measured as a whole.
constexpr int64_t kMaxDecodeRows = 24;

// The most rows of an F32 matrix that a prefill multiplies in float (mmv_float) rather
// than through the F16 GEMM: a mixture of experts' router has at most 512 (kMaxExperts).
constexpr int64_t kMaxExactF32Rows = 512;

// The most elements a gated activation quantizes for the matmul after it: it cannot tell
// a decode step's few rows (mmvq) from a prefill chunk's many (gemm, which does not read
// them), so it quantizes up to 4 rows of 32768 (n_ff of most models up to 70B) and at most
// that much work is wasted on a small prefill chunk.
constexpr int64_t kMaxFusedGated = 4 * 32768;

// Whether the environment variable `name` is set, and to something other than 0.
bool env_on(const char* name, bool unset) {
  const char* v = std::getenv(name);
  return v == nullptr ? unset : std::strcmp(v, "0") != 0;
}

}  // namespace

// Graphs are off unless asked for: on an H200 decode without them was faster every time it
// was measured (8B-shaped Q4_0 tg128 304.1 and 304.4 against 272.5 and 287.6 tok/s, 1.1B
// 752 and 783 against 705 and 668; docs/PERFORMANCE_CUDA.md): a step re-captured each token
// is launched only once its whole capture is done, where eager launches overlap the GPU.
CudaBackend::CudaBackend() : CudaBackend(env_on("QRUN_CUDA_GRAPHS", false)) {}

CudaBackend::CudaBackend(bool graphs) : CudaBackend(graphs, env_on("QRUN_CUDA_FUSE", true)) {}

CudaBackend::CudaBackend(bool graphs, bool fuse)
    : fuse_(fuse), honour_decode_rows_(env_on("QRUN_CUDA_DECODE_ROWS", true)), graphs_(graphs) {}

CudaBackend::~CudaBackend() {
  if (stream_.handle == nullptr) return;
  end_capture(false);
  synchronize(stream());
  destroy_graph(graph_);
  destroy_stream(stream());
}

bool CudaBackend::as_decode_rows(int64_t n_tokens) const {
  return decode_rows_ && n_tokens <= kMaxDecodeRows;
}

bool CudaBackend::mmvq_rows(int64_t n_tokens) const {
  return n_tokens < kGemmMinTokens || as_decode_rows(n_tokens);
}

Stream CudaBackend::stream() {
  if (stream_.handle == nullptr) stream_ = create_stream();
  return stream_;
}

void CudaBackend::end_capture(bool early) {
  if (!capturing_) return;
  capturing_ = false;
  if (early) ++stats_.flushes;
  switch (end_capture_and_launch(stream_, graph_)) {
    case GraphRun::kEmpty:
      return;
    case GraphRun::kUpdated:
      ++stats_.updates;
      break;
    case GraphRun::kInstantiated:
      ++stats_.instantiations;
      break;
  }
  ++stats_.launches;
}

void* CudaBackend::scratch(int slot, size_t bytes) {
  DeviceArray<uint8_t>& s = scratch_[slot];
  if (s.size() < bytes) {
    flush();
    s = DeviceArray<uint8_t>(bytes);
  }
  return s.data();
}

bool CudaBackend::supports(Op op, DType type) const {
  switch (op) {
    case Op::kMatMul:
      return mmvq_supports(type) || type == DType::kF16 || type == DType::kF32;
    case Op::kGetRows:
      return type_traits(type).to_float != nullptr;
    case Op::kKvStore:
    case Op::kAttention:
      return type == DType::kF16;
    case Op::kRmsNorm:
    case Op::kRope:
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kAdd:
    case Op::kScale:
    case Op::kSoftcap:
    case Op::kMoeRows:
      return type == DType::kF32;
  }
  return false;
}

const void* CudaBackend::device_copy(const void* host, size_t bytes) {
  return device_copy(host, bytes, WeightLayout::kBlocks, DType::kF32, 0);
}

const void* CudaBackend::device_matrix(const Tensor& w, WeightLayout layout) {
  return device_copy(w.data, w.n_bytes(), layout, w.type, w.ne[0]);
}

const void* CudaBackend::device_copy(const void* host, size_t bytes, WeightLayout layout,
                                     DType type, int64_t n_in) {
  // The first and last 64 bytes, checked on every use (as the CPU backend checks its
  // repacked copies), so that other data later at the same address is never read through
  // a stale copy.
  std::array<uint8_t, 128> ends{};
  const auto* h = static_cast<const uint8_t*>(host);
  const size_t edge = std::min<size_t>(64, bytes);
  std::memcpy(ends.data(), h, edge);
  std::memcpy(ends.data() + 64, h + bytes - edge, edge);
  auto it = weights_.find(host);
  if (it == weights_.end() || it->second.bytes.size() != bytes || it->second.ends != ends ||
      it->second.layout != layout) {
    flush();
    WeightCopy copy{DeviceArray<uint8_t>(bytes), ends, layout};
    if (layout == WeightLayout::kBlocks) {
      copy.bytes.upload(std::span(h, bytes), stream());
    } else {
      upload_groups8(type, h, bytes, n_in, copy.bytes.data());
    }
    it = weights_.insert_or_assign(host, std::move(copy)).first;
  }
  return it->second.bytes.data();
}

void CudaBackend::upload_groups8(DType type, const uint8_t* host, size_t bytes, int64_t n_in,
                                 uint8_t* device) {
  // Whole rows at a time through a staging buffer of at most kRepackStagingBytes (the
  // GPU plan's scratch counts it), each repacked into place before the next overwrites it.
  const size_t row_bytes = row_size(type, n_in);
  const size_t rows_per_chunk = std::max<size_t>(1, kRepackStagingBytes / row_bytes);
  DeviceArray<uint8_t> staging(std::min(bytes, rows_per_chunk * row_bytes));
  for (size_t at = 0; at < bytes; at += rows_per_chunk * row_bytes) {
    const size_t chunk = std::min(bytes - at, rows_per_chunk * row_bytes);
    copy_to_device(staging.data(), host + at, chunk, stream());
    repack_groups8(type, staging.data(), n_in, static_cast<int64_t>(chunk / row_bytes), device + at,
                   stream());
  }
  synchronize(stream());  // before the staging buffer is freed
}

void CudaBackend::begin_scratch(std::span<const std::span<float>> buffers) {
  flush();  // (a scope left open: none is captured across scopes)
  bool same = buffers.size() == resident_.size();
  std::vector<ResidentBuffer> next;
  next.reserve(buffers.size());
  for (const std::span<float> b : buffers) {
    if (b.empty()) continue;
    auto kept = std::find_if(resident_.begin(), resident_.end(), [&](const ResidentBuffer& r) {
      return r.host == b.data() && r.n == b.size();
    });
    if (kept != resident_.end()) {
      next.push_back(std::move(*kept));
    } else {
      same = false;
      next.push_back(ResidentBuffer{b.data(), b.size(), DeviceArray<float>(b.size())});
    }
  }
  resident_ = std::move(next);
  scope_open_ = true;
  scope_decode_ = false;
  if (!same) decode_warm_ = false;
}

void CudaBackend::end_scratch() {
  end_capture(false);
  scope_open_ = false;
  decode_warm_ = scope_decode_;
}

float* CudaBackend::resident(const float* host, int64_t n) {
  if (!scope_open_) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(host);
  const uintptr_t end = begin + static_cast<uintptr_t>(n) * sizeof(float);
  for (ResidentBuffer& r : resident_) {
    const auto rb = reinterpret_cast<uintptr_t>(r.host);
    if (begin >= rb && end <= rb + r.n * sizeof(float)) {
      return r.device.data() + (begin - rb) / sizeof(float);
    }
  }
  return nullptr;
}

float* CudaBackend::input(int slot, const float* host, int64_t n) {
  if (float* d = resident(host, n)) return d;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  void* d = scratch(slot, bytes);
  flush();  // an upload from pageable memory
  copy_to_device(d, host, bytes, stream());
  wrote(static_cast<const float*>(d), n);
  return static_cast<float*>(d);
}

void CudaBackend::wrote(const float* device, int64_t n) {
  const auto b = reinterpret_cast<uintptr_t>(device);
  const auto q = reinterpret_cast<uintptr_t>(quantized_from_);
  const auto float_bytes = [](int64_t count) {
    return static_cast<uintptr_t>(count) * sizeof(float);
  };
  if (q < b + float_bytes(n) && b < q + float_bytes(quantized_n_)) quantized_from_ = nullptr;
}

float* CudaBackend::output(int slot, float* host, int64_t n) {
  if (float* d = resident(host, n)) return d;
  return static_cast<float*>(scratch(slot, static_cast<size_t>(n) * sizeof(float)));
}

void CudaBackend::finish_output(float* host, const float* device, int64_t n) {
  wrote(device, n);
  if (resident(host, n) == device) return;
  end_capture(false);  // the step's logits (or another result the host reads)
  copy_to_host(host, device, static_cast<size_t>(n) * sizeof(float), stream());
  sync_stream();
}

void CudaBackend::sync_stream() {
  synchronize(stream());
  if (n_staged_ == 0) return;
  positions_queued_ = false;
  for (auto& [host, table] : block_tables_) table.queued = false;
  for (StagedCopy& s : moe_rows_) s.queued = false;
  n_staged_ = 0;
}

void CudaBackend::staged(bool& queued) {
  if (!queued) ++n_staged_;
  queued = true;
}

void CudaBackend::matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) {
  QRUN_CHECK(supports(Op::kMatMul, w.type), "cuda matmul: no kernel for %s weights",
             dtype_name(w.type));
  const int64_t n_in = w.ne[0];
  const int64_t n_out = w.n_rows();
  const WeightLayout layout =
      mmvq_supports(w.type) ? mmvq_layout(w.type, n_in) : WeightLayout::kBlocks;
  const void* dw = device_matrix(w, layout);
  const float* dx = input(kIn0, x, n_tokens * n_in);
  float* dy = output(kOut, y, n_tokens * n_out);
  // F32 matrices of few rows, a mixture of experts' router above all (llama-quantize keeps
  // it F32), stay in float: rounded to F16 for the GEMM, its logits move by ~1e-3, enough
  // to swap two near-tied experts, and the output with them.
  const bool exact = w.type == DType::kF32 && n_out <= kMaxExactF32Rows;
  if (!mmvq_rows(n_tokens) && gemm_supports(w.type) && !exact) {
    const size_t bytes = matmul_gemm_scratch_bytes(n_in, n_out, n_tokens);
    matmul_gemm(w.type, layout, dw, n_in, n_out, dx, n_tokens, dy, scratch(kGemm, bytes), bytes,
                stream());
  } else if (mmvq_supports(w.type)) {
    mmvq(w.type, dw, n_in, n_out, quantized(dx, n_tokens, n_in), n_tokens, dy, stream());
  } else {
    mmv_float(w.type, dw, n_in, n_out, dx, n_tokens, dy, stream());
  }
  finish_output(y, dy, n_tokens * n_out);
}

const BlockQ8_1* CudaBackend::quantized(const float* dx, int64_t n_tokens, int64_t n_in) {
  // Q, K and V (and gate and up) multiply the same activations: quantize them once.
  auto* dq = static_cast<BlockQ8_1*>(
      scratch(kAux, static_cast<size_t>(n_tokens * n_in / 32) * sizeof(BlockQ8_1)));
  if (quantized_from_ != dx || quantized_n_ != n_tokens * n_in || quantized_to_ != dq) {
    quantize_q8_1(dx, n_tokens, n_in, dq, stream());
    quantized_as(dx, n_tokens * n_in, dq);
  }
  return dq;
}

BlockQ8_1* CudaBackend::fused_quantized(const float* host_out, int64_t n, bool for_mmvq) {
  if (!fuse_ || !for_mmvq || n % 32 != 0 || resident(host_out, n) == nullptr) return nullptr;
  return static_cast<BlockQ8_1*>(scratch(kAux, static_cast<size_t>(n / 32) * sizeof(BlockQ8_1)));
}

void CudaBackend::quantized_as(const float* dy, int64_t n, const BlockQ8_1* q) {
  quantized_from_ = dy;
  quantized_n_ = n;
  quantized_to_ = q;
}

void CudaBackend::matmuls(const float* x, int64_t n_tokens, std::span<const Product> products) {
  // In decode, one launch for the products of each type (of one width, into resident
  // outputs): a layer's Q, K and V, or its gate and up, are of one type in most files, but
  // Gemma 3 270M's V is Q8_0 in layers whose Q and K are Q5_0.
  const int64_t n_in = products.front().w->ne[0];
  // Products with activations of their own run one by one.
  bool fused = fuse_ && x != nullptr && products.size() > 1 && products.size() <= kMaxGroup &&
               mmvq_rows(n_tokens);
  std::array<float*, kMaxGroup> dy{};
  for (size_t i = 0; fused && i < products.size(); ++i) {
    const Tensor& w = *products[i].w;
    dy[i] = resident(products[i].y, n_tokens * w.n_rows());
    fused = mmvq_supports(w.type) && w.ne[0] == n_in && dy[i] != nullptr &&
            (products[i].x == nullptr || products[i].x == x);
  }
  if (!fused) {
    Backend::matmuls(x, n_tokens, products);
    return;
  }
  const float* dx = input(kIn0, x, n_tokens * n_in);
  std::array<bool, kMaxGroup> done{};
  for (size_t i = 0; i < products.size(); ++i) {
    if (done[i]) continue;
    const DType type = products[i].w->type;
    std::array<MmvqJob, kMaxGroup> jobs{};
    size_t n_jobs = 0;
    for (size_t j = i; j < products.size(); ++j) {
      const Tensor& w = *products[j].w;
      if (done[j] || w.type != type) continue;
      jobs[n_jobs++] = MmvqJob{device_matrix(w, mmvq_layout(type, n_in)), w.n_rows(), dy[j]};
      done[j] = true;
    }
    const std::span<const MmvqJob> group(jobs.data(), n_jobs);
    mmvq_group(type, n_in, group, quantized(dx, n_tokens, n_in), n_tokens, stream());
    for (const MmvqJob& job : group) wrote(job.y, n_tokens * job.n_out);
  }
}

void CudaBackend::get_rows(const Tensor& table, std::span<const int32_t> ids, float* out) {
  const TypeTraits& tt = type_traits(table.type);
  QRUN_CHECK(tt.to_float != nullptr, "get_rows: type %s cannot be dequantized", tt.name);
  const int64_t n = table.ne[0];
  const auto n_ids = static_cast<int64_t>(ids.size());
  rows_.resize(static_cast<size_t>(n_ids * n));
  for (int64_t i = 0; i < n_ids; ++i) {
    QRUN_CHECK(ids[i] >= 0 && ids[i] < table.n_rows(), "get_rows: row %d out of range [0, %lld)",
               ids[i], static_cast<long long>(table.n_rows()));
    tt.to_float(table.row(ids[i]), rows_.data() + i * n, n);
  }
  float* d = resident(out, n_ids * n);
  if (d == nullptr) {
    std::copy(rows_.begin(), rows_.end(), out);
    return;
  }
  flush();  // an upload from pageable memory
  copy_to_device(d, rows_.data(), rows_.size() * sizeof(float), stream());
  wrote(d, n_ids * n);
  if (n_ids != 1) return;
  // A decode step: captured from here on if the last scope was one on these buffers.
  if (graphs_ && decode_warm_) {
    if (n_staged_ > 0) {
      // (after a scope that did not read its result back) so that RoPE's upload of the
      // new positions, or a block table's, need not end the capture to wait for the last one
      sync_stream();
    }
    begin_capture(stream());
    capturing_ = true;
    ++stats_.captures;
  }
  scope_decode_ = true;
}

const float* CudaBackend::norm_weight(const Tensor& weight, int64_t n, const char* op) {
  QRUN_CHECK(weight.type == DType::kF32 && weight.n_elements() == n,
             "cuda %s: weight %s of %lld elements for rows of %lld", op, dtype_name(weight.type),
             static_cast<long long>(weight.n_elements()), static_cast<long long>(n));
  return static_cast<const float*>(device_copy(weight.data, weight.n_bytes()));
}

void CudaBackend::rms_norm(const float* x, const Tensor& weight, int64_t n_rows, int64_t n,
                           float eps, float* y) {
  const float* dw = norm_weight(weight, n, "rms_norm");
  const float* dx = input(kIn0, x, n_rows * n);
  float* dy = output(kOut, y, n_rows * n);
  BlockQ8_1* q = fused_quantized(y, n_rows * n, mmvq_rows(n_rows) && n % 32 == 0);
  cuda::rms_norm(dx, dw, n_rows, n, eps, dy, stream(), q);
  finish_output(y, dy, n_rows * n);
  if (q != nullptr) quantized_as(dy, n_rows * n, q);
}

void CudaBackend::add_rms_norm(float* x, const float* delta, const Tensor& weight, int64_t n_rows,
                               int64_t n, float eps, float* y) {
  float* dx = resident(x, n_rows * n);
  if (!fuse_ || dx == nullptr) {  // (the fused kernel writes x in place)
    Backend::add_rms_norm(x, delta, weight, n_rows, n, eps, y);
    return;
  }
  const float* dw = norm_weight(weight, n, "add_rms_norm");
  const float* dd = input(kIn1, delta, n_rows * n);
  float* dy = output(kOut, y, n_rows * n);
  BlockQ8_1* q = fused_quantized(y, n_rows * n, mmvq_rows(n_rows) && n % 32 == 0);
  cuda::add_rms_norm(dx, dd, dw, n_rows, n, eps, dy, stream(), q);
  wrote(dx, n_rows * n);
  finish_output(y, dy, n_rows * n);
  if (q != nullptr) quantized_as(dy, n_rows * n, q);
}

void CudaBackend::norm_add_rms_norm(float* x, float* delta, const Tensor& delta_weight,
                                    const Tensor& weight, int64_t n_rows, int64_t n, float eps,
                                    float* y) {
  float* dx = resident(x, n_rows * n);
  float* dd = resident(delta, n_rows * n);
  if (!fuse_ || dx == nullptr || dd == nullptr || !cuda::norm_add_rms_norm_fits(n)) {
    Backend::norm_add_rms_norm(x, delta, delta_weight, weight, n_rows, n, eps, y);
    return;
  }
  const float* dwd = norm_weight(delta_weight, n, "norm_add_rms_norm");
  const float* dw = norm_weight(weight, n, "norm_add_rms_norm");
  float* dy = output(kOut, y, n_rows * n);
  BlockQ8_1* q = fused_quantized(y, n_rows * n, mmvq_rows(n_rows) && n % 32 == 0);
  cuda::norm_add_rms_norm(dx, dd, dwd, dw, n_rows, n, eps, dy, stream(), q);
  wrote(dx, n_rows * n);
  wrote(dd, n_rows * n);
  finish_output(y, dy, n_rows * n);
  if (q != nullptr) quantized_as(dy, n_rows * n, q);
}

void CudaBackend::rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim,
                       std::span<const int32_t> positions, const RopeParams& params) {
  QRUN_CHECK(static_cast<int64_t>(positions.size()) >= n_tokens,
             "rope: %zu positions for %lld tokens", positions.size(),
             static_cast<long long>(n_tokens));
  const int64_t n = n_tokens * n_head * head_dim;
  float* dx = input(kIn0, x, n);  // rotated in place
  const int32_t* dpos = device_positions(positions.first(static_cast<size_t>(n_tokens)));
  cuda::rope(dx, n_tokens, n_head, head_dim, dpos, device_rope_params(params), stream());
  finish_output(x, dx, n);
}

void CudaBackend::rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
                          int64_t head_dim, std::span<const int32_t> positions,
                          const RopeParams& params) {
  const int64_t nq = n_tokens * n_head * head_dim;
  const int64_t nk = n_tokens * n_head_kv * head_dim;
  float* dq = resident(q, nq);
  float* dk = resident(k, nk);
  if (!fuse_ || dq == nullptr || dk == nullptr) {  // (both rotated in place, in one launch)
    Backend::rope_qk(q, n_head, k, n_head_kv, n_tokens, head_dim, positions, params);
    return;
  }
  QRUN_CHECK(static_cast<int64_t>(positions.size()) >= n_tokens,
             "rope: %zu positions for %lld tokens", positions.size(),
             static_cast<long long>(n_tokens));
  const int32_t* dpos = device_positions(positions.first(static_cast<size_t>(n_tokens)));
  cuda::rope_qk(dq, n_head, dk, n_head_kv, n_tokens, head_dim, dpos, device_rope_params(params),
                stream());
  wrote(dq, nq);
  wrote(dk, nk);
}

RopeParams CudaBackend::device_rope_params(const RopeParams& params) {
  RopeParams dp = params;
  if (params.freq_factors != nullptr) {
    dp.freq_factors = static_cast<const float*>(
        device_copy(params.freq_factors, static_cast<size_t>(params.n_rot / 2) * sizeof(float)));
  }
  return dp;
}

const int32_t* CudaBackend::device_positions(std::span<const int32_t> positions) {
  // A forward pass ropes Q and K of every layer at the same positions: one upload per
  // pass, not two per layer.
  const int32_t* held = positions_.data();
  if (std::equal(positions.begin(), positions.end(), held, held + n_positions_)) {
    return device_positions_.data();
  }
  if (positions_.size() < positions.size()) {
    flush();
    positions_ = PinnedArray<int32_t>(positions.size());
    device_positions_ = DeviceArray<int32_t>(positions.size());
  }
  if (positions_queued_) {
    // The last copy from the staging memory may still be queued (or captured).
    flush();
    sync_stream();
  }
  std::copy(positions.begin(), positions.end(), positions_.data());
  n_positions_ = positions.size();
  copy_to_device(device_positions_.data(), positions_.data(), positions.size_bytes(), stream());
  staged(positions_queued_);
  return device_positions_.data();
}

void CudaBackend::kv_store(const KvLayerView& cache, int64_t pos, int64_t n_tokens, const float* k,
                           const float* v) {
  DeviceKv& layer = device_kv(cache, pos, n_tokens);
  const int64_t n = cache.row_elems();
  const float* dk = input(kIn0, k, n_tokens * n);
  const float* dv = input(kIn1, v, n_tokens * n);
  const KvLayerView dcache = device_view(cache, layer, pos + n_tokens);
  store_kv_f16(dk, dv, n_tokens, n, pos, kv_row_map(dcache), layer.k.data(), layer.v.data(),
               stream());
}

void CudaBackend::rope_qk_store(float* q, int64_t n_head, float* k, const float* v,
                                int64_t n_head_kv, int64_t n_tokens, int64_t head_dim,
                                std::span<const int32_t> positions, const RopeParams& params,
                                const KvLayerView& cache, int64_t pos) {
  if (!fused_rope_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params,
                        cuda::HeadNormWeights{}, cache, pos)) {
    Backend::rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params, cache,
                           pos);
  }
}

void CudaBackend::norm_rope_qk_store(float* q, int64_t n_head, float* k, const float* v,
                                     int64_t n_head_kv, int64_t n_tokens, int64_t head_dim,
                                     std::span<const int32_t> positions, const RopeParams& params,
                                     const HeadNorms& norms, const KvLayerView& cache,
                                     int64_t pos) {
  if (cuda::norm_rope_fits(head_dim)) {
    const auto weight = [&](const Tensor* w) {
      return w != nullptr ? norm_weight(*w, head_dim, "norm_rope_qk_store") : nullptr;
    };
    const cuda::HeadNormWeights dn{weight(norms.q), weight(norms.k), norms.eps, norms.q_scale};
    if (fused_rope_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params, dn,
                         cache, pos)) {
      return;
    }
  }
  Backend::norm_rope_qk_store(q, n_head, k, v, n_head_kv, n_tokens, head_dim, positions, params,
                              norms, cache, pos);
}

bool CudaBackend::fused_rope_store(float* q, int64_t n_head, float* k, const float* v,
                                   int64_t n_head_kv, int64_t n_tokens, int64_t head_dim,
                                   std::span<const int32_t> positions, const RopeParams& params,
                                   const cuda::HeadNormWeights& norms, const KvLayerView& cache,
                                   int64_t pos) {
  const int64_t nq = n_tokens * n_head * head_dim;
  const int64_t nk = n_tokens * n_head_kv * head_dim;
  float* dq = resident(q, nq);
  float* dk = resident(k, nk);
  const float* dv = resident(v, nk);
  if (!fuse_ || dq == nullptr || dk == nullptr || dv == nullptr ||
      cache.row_elems() != n_head_kv * head_dim ||
      static_cast<int64_t>(positions.size()) < n_tokens) {
    return false;
  }
  DeviceKv& layer = device_kv(cache, pos, n_tokens);
  const int32_t* dpos = device_positions(positions.first(static_cast<size_t>(n_tokens)));
  const KvLayerView dcache = device_view(cache, layer, pos + n_tokens);
  const KvDestination store{dv, pos, kv_row_map(dcache), layer.k.data(), layer.v.data()};
  cuda::norm_rope_qk(dq, n_head, dk, n_head_kv, n_tokens, head_dim, dpos,
                     device_rope_params(params), norms, stream(), &store);
  wrote(dq, nq);
  wrote(dk, nk);
  return true;
}

unsigned* CudaBackend::attention_counters(int64_t n) {
  if (attention_counters_.size() < static_cast<size_t>(n)) {
    flush();  // an allocation
    attention_counters_ = DeviceArray<unsigned>(static_cast<size_t>(n));
    fill_zero(attention_counters_.data(), attention_counters_.size() * sizeof(unsigned), stream());
  }
  return attention_counters_.data();
}

CudaBackend::DeviceKv& CudaBackend::device_kv(const KvLayerView& cache, int64_t pos,
                                              int64_t n_tokens) {
  QRUN_CHECK(cache.k_type == DType::kF16 && cache.v_type == DType::kF16,
             "cuda kv_store: %s K and %s V cache (only f16)", dtype_name(cache.k_type),
             dtype_name(cache.v_type));
  // (a paged view has a row for every position: it never wraps)
  QRUN_CHECK(pos >= 0 && n_tokens >= 0 && n_tokens <= cache.n_rows &&
                 (!cache.paged() || pos + n_tokens <= cache.n_rows),
             "kv_store: %lld tokens at position %lld in a cache of %lld rows",
             static_cast<long long>(n_tokens), static_cast<long long>(pos),
             static_cast<long long>(cache.n_rows));
  const int64_t n = cache.row_elems();
  const size_t elems = static_cast<size_t>(cache.storage_rows() * n);
  DeviceKv& layer = kv_[cache.k];
  if (layer.k.size() != elems) {
    // A new layer, or one whose shape changed: the host rows once kv_from_host made them
    // the content, else zeros, as a new host cache holds.
    flush();
    layer.k = DeviceArray<uint16_t>(elems);
    layer.v = DeviceArray<uint16_t>(elems);
    if (kv_on_host_.erase(cache.k) > 0) {
      copy_to_device(layer.k.data(), cache.k, elems * sizeof(uint16_t), stream());
      copy_to_device(layer.v.data(), cache.v, elems * sizeof(uint16_t), stream());
    } else {
      fill_zero(layer.k.data(), elems * sizeof(uint16_t), stream());
      fill_zero(layer.v.data(), elems * sizeof(uint16_t), stream());
    }
  }
  return layer;
}

KvLayerView CudaBackend::device_view(const KvLayerView& cache, DeviceKv& layer, int64_t end) {
  KvLayerView d = cache;
  d.k = layer.k.data();
  d.v = layer.v.data();
  if (cache.paged()) {
    const auto blocks = [&](int64_t rows) {
      return (rows + cache.block_rows - 1) / cache.block_rows;
    };
    // (no table holds more entries than the pool has blocks)
    d.block_table =
        device_block_table(cache.block_table, blocks(end), blocks(cache.storage_rows()));
  }
  return d;
}

const int32_t* CudaBackend::device_block_table(const int32_t* host, int64_t n, int64_t capacity) {
  if (block_tables_.size() >= kMaxBlockTables && block_tables_.count(host) == 0) {
    // (tables of caches long gone: the copies may still be read by queued work)
    flush();
    sync_stream();
    block_tables_.clear();
  }
  BlockTableCopy& t = block_tables_[host];
  const auto want = static_cast<size_t>(n);
  if (want <= t.n && std::equal(host, host + n, t.staging.data())) return t.device.data();
  if (t.device.size() < want) {
    flush();  // an allocation (and the old copy may be read by queued work: freed after it)
    sync_stream();
    const size_t room = std::max({want, static_cast<size_t>(capacity), 2 * t.device.size()});
    t.staging = PinnedArray<int32_t>(room);
    t.device = DeviceArray<int32_t>(room);
  } else if (t.queued) {
    // The last copy from the staging memory may still be queued (or captured).
    flush();
    sync_stream();
  }
  std::copy(host, host + n, t.staging.data());
  t.n = want;
  copy_to_device(t.device.data(), t.staging.data(), want * sizeof(int32_t), stream());
  staged(t.queued);
  return t.device.data();
}

void CudaBackend::kv_copy(const KvLayerView& cache, int64_t from, int64_t to, int64_t n) {
  const auto it = kv_.find(cache.k);
  if (it == kv_.end()) {  // never stored here: the host rows are the content
    Backend::kv_copy(cache, from, to, n);
    return;
  }
  const int64_t rows = cache.storage_rows();
  QRUN_CHECK(from >= 0 && to >= 0 && n >= 0 && from + n <= rows && to + n <= rows,
             "cuda kv_copy: %lld rows from %lld to %lld in a layer of %lld",
             static_cast<long long>(n), static_cast<long long>(from), static_cast<long long>(to),
             static_cast<long long>(rows));
  const int64_t e = cache.row_elems();
  const size_t bytes = static_cast<size_t>(n * e) * sizeof(uint16_t);
  copy_on_device(it->second.k.data() + to * e, it->second.k.data() + from * e, bytes, stream());
  copy_on_device(it->second.v.data() + to * e, it->second.v.data() + from * e, bytes, stream());
}

void CudaBackend::kv_to_host(const KvLayerView& cache) {
  const auto it = kv_.find(cache.k);
  if (it == kv_.end()) return;  // never stored here: the host rows are the content
  const size_t bytes =
      static_cast<size_t>(cache.storage_rows() * cache.row_elems()) * sizeof(uint16_t);
  QRUN_CHECK(it->second.k.size() * sizeof(uint16_t) == bytes,
             "cuda kv_to_host: a layer of %zu bytes for a view of %zu", it->second.k.size() * 2,
             bytes);
  end_capture(false);
  copy_to_host(cache.k, it->second.k.data(), bytes, stream());
  copy_to_host(cache.v, it->second.v.data(), bytes, stream());
  sync_stream();
}

void CudaBackend::kv_from_host(const KvLayerView& cache) {
  flush();
  kv_.erase(cache.k);
  kv_on_host_.insert(cache.k);
}

void CudaBackend::attention(const float* q, int64_t n_tokens, int64_t pos0,
                            const KvLayerView& cache, const AttentionParams& params, float* out) {
  auto it = kv_.find(cache.k);
  QRUN_CHECK(it != kv_.end(), "cuda attention: the cache layer was never written by kv_store");
  const int64_t n = n_tokens * params.n_head * params.head_dim;
  const float* dq = input(kIn0, q, n);
  float* dout = output(kOut, out, n);
  // (decode rows: the split-K kernel, each token's output then as it is alone)
  const bool split_k = n_tokens < kPrefillMinTokens || as_decode_rows(n_tokens);
  // Sized, the first time a layer is seen, for a token at the last row its cache can reach
  // (a contiguous cache's last row, as the memory plan counts it; a paged view's pool's,
  // whose tables grow as sequences do), so that decode steps do not grow it as they go. A
  // split-K launch takes as many tokens as fit that: several far from the end, one a launch
  // near it (each token's output the same whatever the launch holds).
  const int64_t last_row =
      (cache.paged() ? std::max(cache.n_rows, cache.storage_rows()) : cache.n_rows) - 1;
  const size_t one_at_end = attention_scratch_floats(1, last_row, params, cache.paged());
  int64_t per_launch = n_tokens;
  size_t floats = one_at_end;
  if (split_k && n_tokens > 1) {
    const size_t last = attention_scratch_floats(1, pos0 + n_tokens - 1, params, cache.paged());
    per_launch = std::clamp<int64_t>(static_cast<int64_t>(one_at_end / std::max<size_t>(last, 1)),
                                     1, n_tokens);
    floats = std::max(floats, static_cast<size_t>(per_launch) * last);
  } else if (!split_k) {
    floats = std::max(floats, attention_scratch_floats(n_tokens, pos0, params, cache.paged()));
  }
  auto* dscratch = static_cast<float*>(scratch(kAttnScratch, floats * sizeof(float)));
  const KvLayerView dcache = device_view(cache, it->second, pos0 + n_tokens);
  // (O's matmul takes the output next: quantized here where it goes to mmvq, whose rows
  // always take the split-K kernel)
  BlockQ8_1* qo = fused_quantized(out, n, mmvq_rows(n_tokens) && params.head_dim % 32 == 0);
  // (counters only for the decode kernel, whose splits they merge)
  unsigned* counters = fuse_ && split_k ? attention_counters(per_launch * params.n_head) : nullptr;
  const int64_t token_floats = params.n_head * params.head_dim;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += per_launch) {
    const int64_t off = t0 * token_floats;
    cuda::attention(dq + off, std::min(per_launch, n_tokens - t0), pos0 + t0, dcache, params,
                    dscratch, dout + off, stream(), qo != nullptr ? qo + off / 32 : nullptr,
                    counters, split_k);
  }
  finish_output(out, dout, n);
  if (qo != nullptr) quantized_as(dout, n, qo);
}

void CudaBackend::elementwise2(void (*op)(const float*, const float*, int64_t, float*, Stream),
                               const float* a, const float* b, int64_t n, float* out) {
  const float* da = input(kIn0, a, n);
  const float* db = input(kIn1, b, n);
  float* dout = output(kOut, out, n);
  op(da, db, n, dout, stream());
  finish_output(out, dout, n);
}

void CudaBackend::gated(void (*op)(const float*, const float*, int64_t, float*, Stream, BlockQ8_1*),
                        const float* gate, const float* up, int64_t n, float* out) {
  const float* dg = input(kIn0, gate, n);
  const float* du = input(kIn1, up, n);
  float* dout = output(kOut, out, n);
  // (the rows of the matmul that follows are whole blocks: its weights are quantized)
  BlockQ8_1* q = fused_quantized(out, n, n <= kMaxFusedGated);
  op(dg, du, n, dout, stream(), q);
  finish_output(out, dout, n);
  if (q != nullptr) quantized_as(dout, n, q);
}

void CudaBackend::swiglu(const float* gate, const float* up, int64_t n, float* out) {
  gated(cuda::swiglu, gate, up, n, out);
}
void CudaBackend::geglu(const float* gate, const float* up, int64_t n, float* out) {
  gated(cuda::geglu, gate, up, n, out);
}
void CudaBackend::add(const float* a, const float* b, int64_t n, float* out) {
  elementwise2(cuda::add, a, b, n, out);
}

void CudaBackend::scale(const float* x, int64_t n, float s, float* out) {
  const float* dx = input(kIn0, x, n);
  float* dout = output(kOut, out, n);
  cuda::scale(dx, n, s, dout, stream());
  finish_output(out, dout, n);
}

void CudaBackend::softcap(const float* x, int64_t n, float cap, float* out) {
  const float* dx = input(kIn0, x, n);
  float* dout = output(kOut, out, n);
  cuda::softcap(dx, n, cap, dout, stream());
  finish_output(out, dout, n);
}
QRUN_CUDA_NAMESPACE_END
