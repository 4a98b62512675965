// The host runtime (runtime.h) on the CUDA runtime API, and gemm_f16 on cuBLAS.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "ggml-like/result.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

void check(cudaError_t err, const char* what) {
  QRUN_CHECK(err == cudaSuccess, "%s: %s", what, cudaGetErrorString(err));
}
cudaStream_t handle(Stream s) {
  return static_cast<cudaStream_t>(s.handle);
}
void check(cublasStatus_t status, const char* what) {
  QRUN_CHECK(status == CUBLAS_STATUS_SUCCESS, "%s: %s (%s)", what, cublasGetStatusName(status),
             cublasGetStatusString(status));
}

// The one cuBLAS handle, created on first use (after the backend has made its device
// current) and kept for the life of the process: destroying it from a static destructor
// could run after the CUDA runtime has shut down. Each call binds it to its stream, so it
// serves one host thread at a time, as the backend calls it.
cublasHandle_t cublas() {
  static const cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    check(cublasCreate(&created), "cublasCreate");
    return created;
  }();
  return h;
}

}  // namespace

const char* runtime_name() {
  return "cuda";
}

bool programmatic_launch() {
  static const bool on = [] {
    const char* env = std::getenv("QRUN_CUDA_PDL");
    QRUN_CHECK(env == nullptr || std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0,
               "QRUN_CUDA_PDL=%s: not 0 or 1", env);
    if (env != nullptr && env[0] == '0') return false;
    int device = 0;
    int major = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
          "cudaDeviceGetAttribute");
    return major >= 9;
  }();
  return on;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc");
  return p;
}

void device_free(void* ptr) {
  check(cudaFree(ptr), "cudaFree");
}

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost");
  return p;
}

void pinned_free(void* ptr) {
  check(cudaFreeHost(ptr), "cudaFreeHost");
}

Stream create_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return Stream{s};
}

void destroy_stream(Stream stream) {
  check(cudaStreamDestroy(handle(stream)), "cudaStreamDestroy");
}

void begin_capture(Stream stream) {
  QRUN_CHECK(stream.handle != nullptr, "begin_capture: the default stream cannot be captured");
  // Relaxed, as llama.cpp: calls such as cudaMalloc from other threads (or from this one)
  // do not invalidate the capture; the backend flushes before its own allocations anyway.
  check(cudaStreamBeginCapture(handle(stream), cudaStreamCaptureModeRelaxed),
        "cudaStreamBeginCapture");
}

GraphRun end_capture_and_launch(Stream stream, GraphExec& exec) {
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(handle(stream), &graph), "cudaStreamEndCapture");
  size_t n_nodes = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n_nodes), "cudaGraphGetNodes");
  GraphRun run = GraphRun::kEmpty;
  if (n_nodes != 0) {
    run = GraphRun::kUpdated;
    auto kept = static_cast<cudaGraphExec_t>(exec.handle);
    cudaGraphExecUpdateResultInfo info{};
    if (kept != nullptr && cudaGraphExecUpdate(kept, graph, &info) != cudaSuccess) {
      // A failed update is an expected answer (another topology), not an error, but it
      // is also recorded as the thread's last error: clear it, or the next kernel
      // launch's cudaGetLastError would report it.
      (void)cudaGetLastError();
      check(cudaGraphExecDestroy(kept), "cudaGraphExecDestroy");
      kept = nullptr;
      exec.handle = nullptr;
    }
    if (kept == nullptr) {
      check(cudaGraphInstantiate(&kept, graph, 0), "cudaGraphInstantiate");
      exec.handle = kept;
      run = GraphRun::kInstantiated;
    }
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec.handle), handle(stream)),
          "cudaGraphLaunch");
  }
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  return run;
}

void destroy_graph(GraphExec& exec) {
  if (exec.handle != nullptr) {
    check(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec.handle)), "cudaGraphExecDestroy");
  }
  exec.handle = nullptr;
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, handle(stream)),
        "cudaMemcpyAsync (to device)");
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, handle(stream)),
        "cudaMemcpyAsync (to host)");
}

void copy_on_device(void* dst, const void* src, size_t bytes, Stream stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, handle(stream)),
        "cudaMemcpyAsync (on device)");
}

void fill_zero(void* dst, size_t bytes, Stream stream) {
  check(cudaMemsetAsync(dst, 0, bytes, handle(stream)), "cudaMemsetAsync");
}

void synchronize(Stream stream) {
  check(cudaStreamSynchronize(handle(stream)), "cudaStreamSynchronize");
}

void gemm_f16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, float* c, int64_t ldc, Stream stream) {
  QRUN_CHECK(m >= 0 && n >= 0 && k >= 0 && lda >= k && ldb >= k && ldc >= m && lda <= INT_MAX &&
                 ldb <= INT_MAX && ldc <= INT_MAX && m <= INT_MAX && n <= INT_MAX && k <= INT_MAX,
             "gemm_f16: m %lld n %lld k %lld, lda %lld ldb %lld ldc %lld",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
             static_cast<long long>(lda), static_cast<long long>(ldb), static_cast<long long>(ldc));
  if (m == 0 || n == 0) return;
  // cuBLAS is column-major. c, read column-major with leading dimension ldc, is the m x n
  // matrix C[i][j] = c[j * ldc + i]; a is the k x m column-major matrix whose column i is
  // row i of a, so C = op(a) * b with op = transpose, where b is the k x n column-major
  // matrix whose column j is row j of b.
  cublasHandle_t h = cublas();
  check(cublasSetStream(h, handle(stream)), "cublasSetStream");
  const float alpha = 1.0f, beta = 0.0f;
  check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                     static_cast<int>(k), &alpha, a, CUDA_R_16F, static_cast<int>(lda), b,
                     CUDA_R_16F, static_cast<int>(ldb), &beta, c, CUDA_R_32F, static_cast<int>(ldc),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

void gemm_f16_batched(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                      int64_t stride_a, bool a_rows, const uint16_t* b, int64_t ldb,
                      int64_t stride_b, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                      float beta, Stream stream) {
  QRUN_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0 && lda >= (a_rows ? k : m) && ldb >= k &&
                 ldc >= m && lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX && m <= INT_MAX &&
                 n <= INT_MAX && k <= INT_MAX && batch <= INT_MAX && (beta == 0.0f || beta == 1.0f),
             "gemm_f16_batched: m %lld n %lld k %lld, lda %lld ldb %lld ldc %lld, batch %lld, "
             "beta %g",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
             static_cast<long long>(lda), static_cast<long long>(ldb), static_cast<long long>(ldc),
             static_cast<long long>(batch), static_cast<double>(beta));
  if (m == 0 || n == 0 || batch == 0) return;
  // Column-major, as gemm_f16: C (m x n, ldc) = op(A) * B with B the k x n matrix whose
  // column j is row j of b. a_rows: a is the k x m matrix whose column i is row i of a,
  // op = transpose; otherwise a read column-major is the m x k matrix A itself, op = none.
  cublasHandle_t h = cublas();
  check(cublasSetStream(h, handle(stream)), "cublasSetStream");
  const float alpha = 1.0f;
  check(cublasGemmStridedBatchedEx(
            h, a_rows ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m),
            static_cast<int>(n), static_cast<int>(k), &alpha, a, CUDA_R_16F, static_cast<int>(lda),
            static_cast<long long>(stride_a), b, CUDA_R_16F, static_cast<int>(ldb),
            static_cast<long long>(stride_b), &beta, c, CUDA_R_32F, static_cast<int>(ldc),
            static_cast<long long>(stride_c), static_cast<int>(batch), CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
}

QRUN_CUDA_NAMESPACE_END
