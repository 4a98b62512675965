// cuda_mmvq_bench: times every mmvq kernel variant (ops.h: mmvq_variant) on the GPU for
// the weight types and the llama-3-8B matmul shapes, and checks each variant's output
// against v1's. Weights are the CPU reference quantization (ggml-like) of random normal
// rows with outliers, and each measurement rotates over enough copies (>= 80 MiB) that
// they do not stay in L2. Prints one line per (type, shape, tokens, variant): the median
// time of a launch, weight bytes / time, and the max error relative to v1 (max |y - y1| /
// max |y1|; above 1e-3 the line says WRONG); then a summary per (type, tokens): the
// bandwidth of one 8B layer's seven matmuls per variant, the best variant (WRONG ones
// excluded) and the fastest per shape.
// Run (under a minute on an H100/H200, all types; a build configured with -DQRUN_CUDA=ON):
//   build-cuda/kernels/cuda/cuda_mmvq_bench [--types q4_0,q4_k] [--tokens 1,2,4]
//       [--shapes 4096x4096,...] [--samples 5]
// The 4096x1024 launches are short enough (~1 us at 3 TB/s) that launch gaps show: the
// lines time launches back to back, as decoding queues them.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ggml-like/dtype.h"
#include "kernels/cuda/ops.h"

namespace {

namespace cuda = qrun::kernels::cuda;
using qrun::DType;

struct Shape {
  int64_t n_in, n_out;
  int per_layer;  // how many of the layer's seven matmuls have it
};
const std::vector<Shape> kShapes8B = {
    {4096, 4096, 2}, {4096, 1024, 2}, {4096, 14336, 2}, {14336, 4096, 1}};
constexpr size_t kRotateBytes = size_t{80} << 20;
constexpr size_t kSampleBytes = size_t{16} << 20;
constexpr int kMaxTokens = 8;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "cuda_mmvq_bench: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

std::vector<float> random_rows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  for (size_t i = 5; i < v.size(); i += 97) v[i] *= 20.0f;
  return v;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

struct Result {
  double seconds = 0.0;  // median per launch
  double max_rel = 0.0;
};

// Median time of one launch of `variant`, rotating over the copies.
Result measure(int variant, DType type, const Shape& s,
               const std::vector<cuda::DeviceArray<uint8_t>>& w, const cuda::BlockQ8_1* x,
               int64_t n_tokens, float* y, int samples, const std::vector<float>& y_ref,
               size_t& next) {
  Result r;
  const size_t n_y = static_cast<size_t>(s.n_out * n_tokens);
  check_cuda(cudaMemset(y, 0xff, n_y * sizeof(float)), "memset");  // NaN
  cuda::mmvq_variant(variant, type, w[0].data(), s.n_in, s.n_out, x, n_tokens, y, {});
  std::vector<float> got(n_y);
  check_cuda(cudaMemcpy(got.data(), y, n_y * sizeof(float), cudaMemcpyDeviceToHost), "download");
  double ref_max = 0.0, diff_max = 0.0;
  for (size_t i = 0; i < n_y; ++i) {
    ref_max = std::max(ref_max, std::fabs(static_cast<double>(y_ref[i])));
    const double d = std::fabs(static_cast<double>(got[i]) - y_ref[i]);
    diff_max = std::isnan(d) ? INFINITY : std::max(diff_max, d);
  }
  r.max_rel = ref_max > 0.0 ? diff_max / ref_max : diff_max;

  // Launches rotate over the copies across samples (next), so consecutive launches read
  // >= kRotateBytes; a sample reads at least kSampleBytes of weights.
  const size_t bytes = qrun::row_size(type, s.n_in) * static_cast<size_t>(s.n_out);
  const int per_sample =
      static_cast<int>(std::clamp<size_t>((kSampleBytes + bytes - 1) / bytes, 1, 64));
  cudaEvent_t start, stop;
  check_cuda(cudaEventCreate(&start), "event");
  check_cuda(cudaEventCreate(&stop), "event");
  std::vector<double> times;
  for (int sample = -1; sample < samples; ++sample) {  // sample -1: warm-up
    check_cuda(cudaEventRecord(start), "record");
    for (int i = 0; i < per_sample; ++i) {
      cuda::mmvq_variant(variant, type, w[next].data(), s.n_in, s.n_out, x, n_tokens, y, {});
      next = (next + 1) % w.size();
    }
    check_cuda(cudaEventRecord(stop), "record");
    check_cuda(cudaEventSynchronize(stop), "sync");
    float ms = 0.0f;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    if (sample >= 0) times.push_back(ms * 1e-3 / per_sample);
  }
  check_cuda(cudaEventDestroy(start), "event");
  check_cuda(cudaEventDestroy(stop), "event");
  std::sort(times.begin(), times.end());
  r.seconds = times[times.size() / 2];
  return r;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--types q4_0,...] [--tokens 1,2,4] [--shapes 4096x4096,...] "
               "[--samples 5]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> type_names = {"q4_0", "q8_0", "q4_k", "q5_k", "q6_k", "q5_0"};
  std::vector<int64_t> token_counts = {1, 2, 4};
  int samples = 5;
  std::vector<Shape> shapes = kShapes8B;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--types") {
      type_names = split(value);
    } else if (flag == "--tokens") {
      token_counts.clear();
      for (const std::string& t : split(value)) token_counts.push_back(std::stoll(t));
    } else if (flag == "--shapes") {  // n_in x n_out pairs: 2048x512,2048x8192
      shapes.clear();
      for (const std::string& sh : split(value)) {
        const size_t x = sh.find('x');
        if (x == std::string::npos) return usage(argv[0]);
        shapes.push_back({std::stoll(sh.substr(0, x)), std::stoll(sh.substr(x + 1)), 1});
      }
    } else if (flag == "--samples") {
      samples = std::max(1, std::stoi(value));
    } else {
      return usage(argv[0]);
    }
  }
  for (int64_t t : token_counts) {
    if (t < 1 || t > kMaxTokens) {
      std::fprintf(stderr, "cuda_mmvq_bench: --tokens: 1 to %d\n", kMaxTokens);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "device");
  std::printf("device: %s, L2 %d MiB; each measurement rotates over >= %zu MiB of weights\n",
              prop.name, prop.l2CacheSize >> 20, kRotateBytes >> 20);
  const int n_variants = cuda::mmvq_variant_count();
  std::printf("%-5s %12s %3s %-4s %10s %8s %10s\n", "type", "n_in x n_out", "tok", "var", "us",
              "GB/s", "max_rel");
  std::vector<std::string> summary;
  for (const std::string& name : type_names) {
    const auto type = qrun::dtype_from_name(name);
    if (!type || !cuda::mmvq_supports(*type)) {
      std::fprintf(stderr, "cuda_mmvq_bench: no mmvq kernel for '%s'\n", name.c_str());
      return 2;
    }
    const qrun::TypeTraits& tt = qrun::type_traits(*type);
    // layer[t][v]: seconds for one 8B layer's matmuls; bytes: their weight bytes.
    std::vector<std::vector<double>> layer(token_counts.size(), std::vector<double>(n_variants));
    double layer_bytes = 0.0;
    std::vector<std::vector<bool>> wrong(token_counts.size(), std::vector<bool>(n_variants));
    // per_shape[t]: each shape's fastest variant.
    std::vector<std::string> per_shape(token_counts.size());
    for (const Shape& s : shapes) {
      const size_t row_bytes = qrun::row_size(*type, s.n_in);
      const size_t bytes = row_bytes * static_cast<size_t>(s.n_out);
      layer_bytes += static_cast<double>(bytes) * s.per_layer;
      // 64 distinct quantized rows, repeated down the matrix.
      constexpr int64_t kPool = 64;
      const std::vector<float> wf = random_rows(kPool * s.n_in, 7);
      std::vector<uint8_t> pool(row_bytes * kPool), host(bytes);
      tt.from_float(wf.data(), pool.data(), kPool * s.n_in);
      for (int64_t o = 0; o < s.n_out; ++o)
        std::memcpy(host.data() + o * row_bytes, pool.data() + (o % kPool) * row_bytes, row_bytes);
      const size_t copies = std::max<size_t>(2, (kRotateBytes + bytes - 1) / bytes);
      std::vector<cuda::DeviceArray<uint8_t>> w;
      w.emplace_back(std::span<const uint8_t>(host));
      for (size_t c = 1; c < copies; ++c) {
        w.emplace_back(bytes);
        check_cuda(cudaMemcpy(w.back().data(), w[0].data(), bytes, cudaMemcpyDeviceToDevice),
                   "copy");
      }
      // The same copies repacked, for the variants that read WeightLayout::kGroups8.
      std::vector<cuda::DeviceArray<uint8_t>> grouped;
      for (size_t c = 0; c < copies; ++c) {
        if (cuda::mmvq_variant_layout(n_variants - 1, *type, s.n_in) !=
            cuda::WeightLayout::kGroups8)
          break;
        grouped.emplace_back(bytes);
        cuda::repack_groups8(*type, w[c].data(), s.n_in, s.n_out, grouped.back().data(), {});
      }
      const std::vector<float> xf = random_rows(kMaxTokens * s.n_in, 9);
      cuda::DeviceArray<float> dx{std::span<const float>(xf)};
      cuda::DeviceArray<cuda::BlockQ8_1> dq(static_cast<size_t>(kMaxTokens * s.n_in / 32));
      cuda::quantize_q8_1(dx.data(), kMaxTokens, s.n_in, dq.data(), {});
      cuda::DeviceArray<float> dy(static_cast<size_t>(kMaxTokens * s.n_out));
      size_t next = 0;  // the copy the next timed launch reads
      for (size_t ti = 0; ti < token_counts.size(); ++ti) {
        const int64_t n_tokens = token_counts[ti];
        cuda::mmvq_variant(0, *type, w[0].data(), s.n_in, s.n_out, dq.data(), n_tokens, dy.data(),
                           {});
        std::vector<float> y_ref(static_cast<size_t>(s.n_out * n_tokens));
        check_cuda(cudaMemcpy(y_ref.data(), dy.data(), y_ref.size() * sizeof(float),
                              cudaMemcpyDeviceToHost),
                   "download");
        int fastest = 0;
        double fastest_seconds = INFINITY;
        for (int v = 0; v < n_variants; ++v) {
          const bool repacked =
              cuda::mmvq_variant_layout(v, *type, s.n_in) == cuda::WeightLayout::kGroups8;
          const Result r = measure(v, *type, s, repacked ? grouped : w, dq.data(), n_tokens,
                                   dy.data(), samples, y_ref, next);
          layer[ti][v] += r.seconds * s.per_layer;
          if (!(r.max_rel <= 1e-3)) wrong[ti][v] = true;
          if (r.seconds < fastest_seconds && r.max_rel <= 1e-3) {
            fastest = v;
            fastest_seconds = r.seconds;
          }
          std::printf("%-5s %5lldx%-6lld %3lld %-4s %10.2f %8.0f %10.2e%s\n", name.c_str(),
                      static_cast<long long>(s.n_in), static_cast<long long>(s.n_out),
                      static_cast<long long>(n_tokens), cuda::mmvq_variant_name(v), r.seconds * 1e6,
                      static_cast<double>(bytes) / r.seconds / 1e9, r.max_rel,
                      !(r.max_rel <= 1e-3) ? "  WRONG" : "");
          std::fflush(stdout);
        }
        char shape[64];
        std::snprintf(shape, sizeof(shape), " %lldx%lld %s", static_cast<long long>(s.n_in),
                      static_cast<long long>(s.n_out), cuda::mmvq_variant_name(fastest));
        per_shape[ti].append(shape);
      }
    }
    for (size_t ti = 0; ti < token_counts.size(); ++ti) {
      std::string line = name + " tok " + std::to_string(token_counts[ti]) + ":";
      int best = 0;
      for (int v = 0; v < n_variants; ++v) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), " %s %.0f", cuda::mmvq_variant_name(v),
                      layer_bytes / layer[ti][v] / 1e9);
        line += buf;
        if (wrong[ti][v]) line += " WRONG";
        if (!wrong[ti][v] && (wrong[ti][best] || layer[ti][v] < layer[ti][best])) best = v;
      }
      line.append(" GB/s; best ").append(cuda::mmvq_variant_name(best));
      line.append("; per shape:").append(per_shape[ti]);
      summary.push_back(line);
    }
  }
  const bool layer_8b =
      shapes.size() == kShapes8B.size() &&
      std::equal(shapes.begin(), shapes.end(), kShapes8B.begin(),
                 [](const Shape& a, const Shape& b) {
                   return a.n_in == b.n_in && a.n_out == b.n_out && a.per_layer == b.per_layer;
                 });
  std::printf("\nsummary: weight bytes / summed median times of %s\n",
              layer_8b ? "one 8B layer's seven matmuls (2x 4096x4096, 2x 4096x1024, 2x "
                         "4096x14336, 14336x4096)"
                       : "the shapes, once each");
  for (const std::string& line : summary) std::printf("%s\n", line.c_str());
  return 0;
}
