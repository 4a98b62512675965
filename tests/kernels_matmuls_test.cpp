// CpuBackend::matmuls, which runs decode products over repacked weights in one parallel
// region: every product equals the same product run alone through matmul bit for bit, with
// weights of several types and row counts with a tail, activations shared and per product,
// one and several tokens, 1 and 2 threads, and products that matmul runs another way (an
// F16 weight, a weight of fewer rows than a repacked group, a batch big enough for gemm),
// which send the call one product at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/quants.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/repack.h"
#include "tests/support/random_data.h"

namespace qrun::kernels {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Wide enough for one super-block of the K types and several blocks of the others.
constexpr int64_t kN = 2 * kQKK;

struct Weight {
  DType type;
  int64_t n_out;
  std::vector<uint8_t> bytes;
  Tensor tensor() const { return Tensor{type, 2, {kN, n_out, 1, 1}, bytes.data(), "w"}; }
};

Weight random_weight(DType type, int64_t n_out, uint32_t seed) {
  const std::vector<float> x = test::random_activations(kN * n_out, seed);
  Weight w{type, n_out, std::vector<uint8_t>(row_size(type, kN) * static_cast<size_t>(n_out))};
  quantize_rows(type, x.data(), w.bytes.data(), n_out, kN);
  return w;
}

// The products' outputs from one matmuls call against each product alone through matmul,
// bit for bit (and nothing written past an output).
void expect_matmuls_match(CpuBackend& backend, const std::vector<Weight>& weights,
                          const std::vector<int>& x_of, int64_t n_tokens, uint32_t seed) {
  std::vector<std::vector<float>> xs;
  for (int i = 0; i <= *std::max_element(x_of.begin(), x_of.end()); ++i)
    xs.push_back(test::random_activations(kN * n_tokens, seed + static_cast<uint32_t>(i)));
  std::vector<Tensor> tensors;
  for (const Weight& w : weights) tensors.push_back(w.tensor());
  std::vector<std::vector<float>> got(weights.size());
  std::vector<Backend::Product> products;
  for (size_t i = 0; i < weights.size(); ++i) {
    got[i].assign(static_cast<size_t>(weights[i].n_out * n_tokens) + 1, kNaN);
    // Product 0's x is the call's; the others name theirs (the same one where they share).
    const float* x = i == 0 ? nullptr : xs[static_cast<size_t>(x_of[i])].data();
    products.push_back({&tensors[i], got[i].data(), x});
  }
  backend.matmuls(xs[static_cast<size_t>(x_of[0])].data(), n_tokens, products);
  for (size_t i = 0; i < weights.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "product " << i << " " << dtype_name(weights[i].type)
                                    << " n_out " << weights[i].n_out);
    std::vector<float> want(got[i].size(), kNaN);
    backend.matmul(tensors[i], xs[static_cast<size_t>(x_of[i])].data(), n_tokens, want.data());
    EXPECT_EQ(std::memcmp(want.data(), got[i].data(), want.size() * sizeof(float)), 0);
  }
}

TEST(KernelsMatmuls, EachProductIsThatProductAloneBitForBit) {
  uint32_t seed = 700;
  for (Isa isa : host_isas()) {
    for (int threads : {1, 2}) {
      CpuBackend backend(threads, isa);
      backend.set_repack_enabled(true);
      // Mixed types (the act types Q8_0 and Q8_K side by side), full groups and tails.
      const std::vector<Weight> weights = {
          random_weight(DType::kQ4_0, 16 * 9, ++seed), random_weight(DType::kQ8_0, 37, ++seed),
          random_weight(DType::kQ4_K, 16, ++seed),     random_weight(DType::kQ6_K, 53, ++seed),
          random_weight(DType::kQ5_0, 16 * 3, ++seed), random_weight(DType::kQ4_0, 21, ++seed)};
      for (int64_t n_tokens : {1, 3}) {
        SCOPED_TRACE(testing::Message()
                     << isa_name(isa) << " threads " << threads << " tokens " << n_tokens);
        {
          SCOPED_TRACE("one x for all");
          expect_matmuls_match(backend, weights, {0, 0, 0, 0, 0, 0}, n_tokens, ++seed);
        }
        {
          SCOPED_TRACE("an x per product, two shared");
          expect_matmuls_match(backend, weights, {0, 1, 2, 3, 1, 4}, n_tokens, ++seed);
        }
      }
    }
  }
}

// A product matmul runs another way sends every product of the call through matmul.
TEST(KernelsMatmuls, ProductsMatmulRunsOtherwiseStillMatch) {
  uint32_t seed = 800;
  for (Isa isa : host_isas()) {
    CpuBackend backend(2, isa);
    backend.set_repack_enabled(true);
    const Weight q4 = random_weight(DType::kQ4_0, 16 * 5, ++seed);
    for (const Weight& other :
         {random_weight(DType::kF16, 33, ++seed), random_weight(DType::kQ8_0, 15, ++seed),
          random_weight(DType::kQ2_K, 19, ++seed), random_weight(DType::kQ3_K, 16 * 2, ++seed)}) {
      SCOPED_TRACE(testing::Message()
                   << isa_name(isa) << " with " << dtype_name(other.type) << " x" << other.n_out);
      expect_matmuls_match(backend, {q4, other}, {0, 1}, 1, ++seed);
    }
    // A prompt's batch, through gemm where the ISA has it.
    SCOPED_TRACE(testing::Message() << isa_name(isa) << " 40 tokens");
    expect_matmuls_match(
        backend,
        {q4, random_weight(DType::kQ4_K, 16 * 2, ++seed), random_weight(DType::kQ2_K, 21, ++seed),
         random_weight(DType::kQ3_K, 16 * 2, ++seed)},
        {0, 0, 1, 2}, 40, ++seed);
  }
  // Without repacking, the same.
  CpuBackend plain(2);
  plain.set_repack_enabled(false);
  expect_matmuls_match(
      plain,
      {random_weight(DType::kQ4_0, 16 * 5, ++seed), random_weight(DType::kQ6_K, 16 * 2, ++seed)},
      {0, 1}, 1, ++seed);
  EXPECT_EQ(plain.repacked_bytes(), 0u);
}

}  // namespace
}  // namespace qrun::kernels
