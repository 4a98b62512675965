// The host runtime (runtime.h) for the emulated build: device memory is host memory and
// every call completes before it returns. New allocations are filled with NaN bytes so
// that a kernel reading what nobody wrote shows up in the tests.
// Graphs: work is run as it is queued, captured or not, so a capture changes nothing but
// is checked against what the CUDA runtime would refuse while a stream captures (an
// allocation, a free, a copy from or to pageable host memory, a synchronize of that
// stream), and end_capture_and_launch reports, as the CUDA runtime does, an empty capture,
// the first instantiation and then updates of the kept graph.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "ggml-like/fp16.h"
#include "ggml-like/result.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

namespace {

// What the emulated runtime knows of streams and pinned memory.
struct State {
  std::mutex mutex;
  std::map<const void*, int64_t> capturing;  // stream -> kernels and copies captured
  std::map<uintptr_t, size_t> pinned;        // start -> bytes
};
State& state() {
  static State s;
  return s;
}

void check_not_capturing(const char* what) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  QRUN_CHECK(s.capturing.empty(),
             "emulated %s while a stream captures (the CUDA runtime would refuse it)", what);
}

// Records one operation queued on `stream`; while it captures, `host` (if not null) must
// lie in pinned memory.
void note_queued(Stream stream, const void* host, size_t bytes, const char* what) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.capturing.find(stream.handle);
  if (it == s.capturing.end()) return;
  ++it->second;
  if (host == nullptr || bytes == 0) return;
  const auto begin = reinterpret_cast<uintptr_t>(host);
  auto p = s.pinned.upper_bound(begin);
  const bool pinned =
      p != s.pinned.begin() && begin + bytes <= std::prev(p)->first + std::prev(p)->second;
  QRUN_CHECK(pinned, "emulated %s of %zu bytes from pageable host memory while the stream captures",
             what, bytes);
}

}  // namespace

const char* runtime_name() {
  return "emulated";
}

bool programmatic_launch() {
  return false;
}

void* device_alloc(size_t bytes) {
  check_not_capturing("device_alloc");
  const size_t rounded = (bytes + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  QRUN_CHECK(p != nullptr, "emulated device_alloc of %zu bytes failed", bytes);
  std::memset(p, 0xff, rounded == 0 ? 256 : rounded);  // 0xffffffff is a NaN as a float
  return p;
}

void device_free(void* ptr) {
  check_not_capturing("device_free");
  std::free(ptr);
}

void* pinned_alloc(size_t bytes) {
  check_not_capturing("pinned_alloc");
  const size_t n = bytes == 0 ? 1 : bytes;
  void* p = std::malloc(n);
  QRUN_CHECK(p != nullptr, "emulated pinned_alloc of %zu bytes failed", bytes);
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  s.pinned[reinterpret_cast<uintptr_t>(p)] = n;
  return p;
}

void pinned_free(void* ptr) {
  check_not_capturing("pinned_free");
  if (ptr == nullptr) return;
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    QRUN_CHECK(s.pinned.erase(reinterpret_cast<uintptr_t>(ptr)) == 1,
               "emulated pinned_free of memory pinned_alloc did not return");
  }
  std::free(ptr);
}

Stream create_stream() {
  return Stream{new char};  // a unique handle
}

void destroy_stream(Stream stream) {
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    QRUN_CHECK(s.capturing.count(stream.handle) == 0,
               "emulated destroy_stream of a capturing stream");
  }
  delete static_cast<char*>(stream.handle);
}

void begin_capture(Stream stream) {
  QRUN_CHECK(stream.handle != nullptr, "begin_capture: the default stream cannot be captured");
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  QRUN_CHECK(s.capturing.emplace(stream.handle, 0).second,
             "begin_capture: the stream is already capturing");
}

GraphRun end_capture_and_launch(Stream stream, GraphExec& exec) {
  int64_t n_ops = 0;
  {
    State& s = state();
    const std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.capturing.find(stream.handle);
    QRUN_CHECK(it != s.capturing.end(), "end_capture_and_launch: the stream is not capturing");
    n_ops = it->second;
    s.capturing.erase(it);
  }
  if (n_ops == 0) return GraphRun::kEmpty;
  if (exec.handle != nullptr) return GraphRun::kUpdated;
  exec.handle = &exec;  // any non-null handle: there is nothing to keep
  return GraphRun::kInstantiated;
}

void destroy_graph(GraphExec& exec) {
  exec.handle = nullptr;
}

namespace {
std::atomic<int64_t> g_kernels{0};
}  // namespace

void note_kernel(Stream stream) {
  g_kernels.fetch_add(1, std::memory_order_relaxed);
  note_queued(stream, nullptr, 0, "kernel");
}

int64_t kernels_launched() {
  return g_kernels.load(std::memory_order_relaxed);
}

void copy_to_device(void* dst, const void* src, size_t bytes, Stream stream) {
  note_queued(stream, src, bytes, "copy_to_device");
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void copy_to_host(void* dst, const void* src, size_t bytes, Stream stream) {
  note_queued(stream, dst, bytes, "copy_to_host");
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void copy_on_device(void* dst, const void* src, size_t bytes, Stream stream) {
  note_queued(stream, nullptr, 0, "copy_on_device");
  if (bytes != 0) std::memcpy(dst, src, bytes);
}

void fill_zero(void* dst, size_t bytes, Stream stream) {
  note_queued(stream, nullptr, 0, "fill_zero");
  if (bytes != 0) std::memset(dst, 0, bytes);
}

void synchronize(Stream stream) {
  State& s = state();
  const std::lock_guard<std::mutex> lock(s.mutex);
  QRUN_CHECK(s.capturing.count(stream.handle) == 0,
             "emulated synchronize of a capturing stream (the CUDA runtime would refuse it)");
}

// Each dot in float, p ascending: the F16 values are exact in float, each product rounds
// once and each addition once (cuBLAS sums in another order; the tests bound both).
void gemm_f16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, const uint16_t* b,
              int64_t ldb, float* c, int64_t ldc, Stream stream) {
  note_queued(stream, nullptr, 0, "gemm_f16");
  QRUN_CHECK(m >= 0 && n >= 0 && k >= 0 && lda >= k && ldb >= k && ldc >= m,
             "gemm_f16: m %lld n %lld k %lld, lda %lld ldb %lld ldc %lld",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
             static_cast<long long>(lda), static_cast<long long>(ldb), static_cast<long long>(ldc));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) row[p] = fp16_to_fp32(a[i * lda + p]);
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* bj = b + j * ldb;
      float sum = 0.0f;
      for (int64_t p = 0; p < k; ++p) sum += row[p] * fp16_to_fp32(bj[p]);
      c[j * ldc + i] = sum;
    }
  }
}

// Each dot in float, p ascending, as gemm_f16; with beta 1 the sum is then added to c.
void gemm_f16_batched(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda,
                      int64_t stride_a, bool a_rows, const uint16_t* b, int64_t ldb,
                      int64_t stride_b, float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                      float beta, Stream) {
  QRUN_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0 && lda >= (a_rows ? k : m) && ldb >= k &&
                 ldc >= m && (beta == 0.0f || beta == 1.0f),
             "gemm_f16_batched: m %lld n %lld k %lld, lda %lld ldb %lld ldc %lld, batch %lld, "
             "beta %g",
             static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
             static_cast<long long>(lda), static_cast<long long>(ldb), static_cast<long long>(ldc),
             static_cast<long long>(batch), static_cast<double>(beta));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t l = 0; l < batch; ++l) {
    const uint16_t* al = a + l * stride_a;
    const uint16_t* bl = b + l * stride_b;
    float* cl = c + l * stride_c;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p)
        row[p] = fp16_to_fp32(a_rows ? al[i * lda + p] : al[p * lda + i]);
      for (int64_t j = 0; j < n; ++j) {
        const uint16_t* bj = bl + j * ldb;
        float sum = 0.0f;
        for (int64_t p = 0; p < k; ++p) sum += row[p] * fp16_to_fp32(bj[p]);
        cl[j * ldc + i] = beta == 0.0f ? sum : cl[j * ldc + i] + sum;
      }
    }
  }
}

QRUN_CUDA_NAMESPACE_END
