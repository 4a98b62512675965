// The CUDA backend behind the Backend interface, on the kernels of ops.h. The same class
// builds for the GPU (qrun_kernels_cuda) and, under the SIMT emulator, for the host
// (qrun_kernels_cuda_emu), where the tests run it against the CPU backend.
// This first version keeps the Backend contract of host-memory activations: each op
// copies its inputs to the device and its outputs back (correct, not fast; keeping
// activations on the device is the next step). Weights are copied to the device the first
// time an op meets them and kept, keyed by their host address and checked against their
// first and last bytes (weights must stay mapped and unchanged while the backend lives). The KV
// cache stays the caller's host memory, as the contract says; kv_store also writes each row to a
// device mirror of the layer, which attention reads. Numerics differ from the CPU backend where
// ops.h says so: matmul quantizes activations to blocks of 32 for every weight type (Q8_1-style,
// not Q8_K for the k-quants), and attention sums in float rather than in llama.cpp's F16
// accumulator. get_rows dequantizes on the host (an embedding lookup, one row per token). Not
// thread-safe: one caller at a time.
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>

#include "ggml-like/backend.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

class CudaBackend final : public Backend {
 public:
  CudaBackend() = default;

  std::string_view name() const override { return "cuda"; }
  bool supports(Op op, DType type) const override;

  void matmul(const Tensor& w, const float* x, int64_t n_tokens, float* y) override;
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
  // A device buffer that grows to the largest request and is then reused.
  struct Scratch {
    DeviceArray<uint8_t> bytes;
    void* get(size_t n) {
      if (bytes.size() < n) bytes = DeviceArray<uint8_t>(n);
      return bytes.data();
    }
  };
  // The device copy of a weight (or norm weight, or RoPE factor table) at `host`.
  const void* device_copy(const void* host, size_t bytes);
  // Uploads n floats into scratch slot `slot`.
  float* upload(int slot, const float* host, int64_t n);
  void elementwise2(void (*op)(const float*, const float*, int64_t, float*, Stream), const float* a,
                    const float* b, int64_t n, float* out);

  struct DeviceKv {
    DeviceArray<uint16_t> k, v;
  };
  struct WeightCopy {
    DeviceArray<uint8_t> bytes;
    std::array<uint8_t, 128> ends;  // the host data's first and last 64 bytes
  };
  std::unordered_map<const void*, WeightCopy> weights_;
  std::unordered_map<const void*, DeviceKv> kv_;  // keyed by the host cache's k
  Scratch scratch_[6];
  Stream stream_{};
};

QRUN_CUDA_NAMESPACE_END
