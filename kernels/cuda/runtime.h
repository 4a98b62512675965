// The host side of the CUDA backend: device memory, copies and streams. runtime.cu
// implements it with the CUDA runtime; emu/runtime_emu.cpp with host memory for the
// emulated build, where every call is synchronous. Failures are bugs or exhausted device
// memory and abort with the runtime's message (the backend plans its memory up front).
// Graphs: the work queued on a stream between begin_capture and end_capture_and_launch is
// recorded instead of run, then launched as one CUDA graph. While a stream captures, only
// kernels, gemm_f16, fill_zero, copies within device memory and copies between device
// memory and pinned host memory (pinned_alloc) may be queued on it: no allocation, no
// free, no copy from or to pageable memory, no synchronize (the emulated runtime checks
// this; it runs everything eagerly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "kernels/cuda/namespace.h"

QRUN_CUDA_NAMESPACE_BEGIN

// A CUDA stream (cudaStream_t); the null handle is the default stream.
struct Stream {
  void* handle = nullptr;
};

// "cuda" or "emulated".
const char* runtime_name();
// 256-byte aligned device memory (never null: aborts when exhausted).
void* device_alloc(size_t bytes);
void device_free(void* ptr);
// Page-locked host memory, which copies may read or write while a stream captures.
void* pinned_alloc(size_t bytes);
void pinned_free(void* ptr);
// A stream of its own (non-blocking: no implicit order with the default stream), which
// can be captured; the default stream cannot.
Stream create_stream();
void destroy_stream(Stream stream);

// Whether launch() (simt.h) lets each kernel start while the one queued ahead of it on the
// stream still runs (programmatic dependent launch): on devices of compute capability 9.0
// and later, unless QRUN_CUDA_PDL=0. Kernels then overlap their launch, and the weights
// they prefetch, with the kernel before them. Always false for the emulated runtime,
// which runs kernels one after another.
bool programmatic_launch();

// The executable graph end_capture_and_launch keeps between captures (cudaGraphExec_t).
struct GraphExec {
  void* handle = nullptr;
};
// How end_capture_and_launch ran what was captured.
enum class GraphRun {
  kEmpty,         // nothing was captured: nothing launched
  kUpdated,       // the kept executable graph took the new one's parameters
  kInstantiated,  // the first graph, or one the kept one could not be updated to
};
// Starts recording the work queued on `stream` (not the default stream).
void begin_capture(Stream stream);
// Ends the capture, brings `exec` to the recorded graph (cudaGraphExecUpdate, or a new
// instantiation when the update fails: another topology) and launches it on `stream`.
GraphRun end_capture_and_launch(Stream stream, GraphExec& exec);
void destroy_graph(GraphExec& exec);

#if defined(QRUN_SIMT_EMU)
// The emulated runtime's record of a kernel queued on `stream` (simt.h's launch), and
// the number of kernels launched in this process so far (for tests that count them).
void note_kernel(Stream stream);
int64_t kernels_launched();
#endif
void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream = {});
void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream = {});
// Device memory to device memory (the ranges do not overlap).
void copy_on_device(void* dst, const void* src, size_t bytes, Stream stream = {});
void fill_zero(void* dst, size_t bytes, Stream stream = {});
// Waits for everything queued on the stream.
void synchronize(Stream stream = {});

// c[j * ldc + i] = sum_p a[i * lda + p] * b[j * ldb + p] for i < m, j < n, p < k: a and
// b hold F16 rows of k elements (m of them and n of them), and c receives, for each of
// the n rows of b, the m dots with the rows of a. Products of F16 values are summed in
// float (cuBLAS's CUBLAS_COMPUTE_32F on the GPU, in its own order). Queued on `stream`.
void gemm_f16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, float* c, int64_t ldc, Stream stream = {});

// gemm_f16 over `batch` independent problems, with either layout of a and an optional
// accumulation: for each l < batch, with a_l = a + l * stride_a (b_l, c_l likewise),
//   c_l[j * ldc + i] = beta * c_l[j * ldc + i] + sum_p A_l(i, p) * b_l[j * ldb + p]
// for i < m, j < n, p < k, where A_l(i, p) = a_l[i * lda + p] when a_rows (a holds m rows
// of k elements, as for gemm_f16) and a_l[p * lda + i] otherwise (k rows of m elements).
// beta is 0 (c is only written) or 1. Sums in float as gemm_f16
// (cublasGemmStridedBatchedEx on the GPU). Queued on `stream`.
void gemm_f16_batched(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                      int64_t stride_a, bool a_rows, const uint16_t* b, int64_t ldb,
                      int64_t stride_b, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                      float beta, Stream stream = {});

// An owned device array of n trivially copyable T.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n), ptr_(static_cast<T*>(device_alloc(n * sizeof(T)))) {}
  explicit DeviceArray(std::span<const T> host) : DeviceArray(host.size()) { upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept
      : n_(std::exchange(o.n_, 0)), ptr_(std::exchange(o.ptr_, nullptr)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~DeviceArray() {
    if (ptr_ != nullptr) device_free(ptr_);
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(std::span<const T> host, Stream stream = {}) {
    copy_to_device(ptr_, host.data(), host.size_bytes(), stream);
  }
  std::vector<T> download(Stream stream = {}) const {
    std::vector<T> out(n_);
    copy_to_host(out.data(), ptr_, n_ * sizeof(T), stream);
    synchronize(stream);
    return out;
  }

 private:
  size_t n_ = 0;
  T* ptr_ = nullptr;
};

// An owned pinned host array of n trivially copyable T (its elements uninitialized).
template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  explicit PinnedArray(size_t n) : n_(n), ptr_(static_cast<T*>(pinned_alloc(n * sizeof(T)))) {}
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  PinnedArray(PinnedArray&& o) noexcept
      : n_(std::exchange(o.n_, 0)), ptr_(std::exchange(o.ptr_, nullptr)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    std::swap(n_, o.n_);
    std::swap(ptr_, o.ptr_);
    return *this;
  }
  ~PinnedArray() {
    if (ptr_ != nullptr) pinned_free(ptr_);
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  size_t size() const { return n_; }

 private:
  size_t n_ = 0;
  T* ptr_ = nullptr;
};

QRUN_CUDA_NAMESPACE_END
