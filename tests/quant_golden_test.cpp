// Golden checks against llama.cpp: bytes of one block of every type as llama.cpp's
// reference quantizers write them, dot products as its generic (non-SIMD) CPU kernels
// compute them, and the error of its reference quantizers. The expectations were produced
// once by a program built outside this repository against llama.cpp's ggml (commit
// c392e5094, all SIMD off; Q4_1, Q5_1, Q8_1, IQ4_NL, IQ4_XS, Q2_K and Q3_K at d8a24cce, its
// reference quantizers (for IQ4_NL quantize_iq4_nl, what llama-quantize calls) and its generic dot
// products compiled without FMA) on the deterministic input below; only its output is here.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/quants.h"

namespace qrun {
namespace {

// A reproducible input: an LCG mapped exactly onto [-1, 1) / 4, every 37th value x4.
std::vector<float> golden_input(int64_t n, uint32_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  uint32_t s = seed;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    float v = static_cast<float>(static_cast<int32_t>(s >> 8) - (1 << 23)) * (1.0f / (1 << 23));
    if (i % 37 == 5) v *= 4.0f;
    x[static_cast<size_t>(i)] = v * 0.25f;
  }
  return x;
}

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

// One block (32 elements for the float types) of golden_input(n, 42), as llama.cpp writes it.
struct GoldenBlock {
  DType type;
  const char* hex;
};
const GoldenBlock kGoldenBlocks[] = {
    {DType::kQ4_0, "972f67a6a8a787708876aa9a7998896a6886"},
    {DType::kQ5_0, "972b447f5e9bde4d413e0fd000ed4334d33001c3c10d"},
    {DType::kQ8_0, "a61fefe405edf881fce6192118000a1806e5e81e1c1a03eb03f01e16e916fee3e002"},
    {DType::kQ4_1, "1a2d97bbaaf9fceacba0ccaafeefaeeccd9e9dc9"},
    {DType::kQ5_1, "f02897bbdfffffff45e3eae597409854eddf4dd98a3d2a93"},
    {DType::kQ8_1, "a61f93baefe405edf881fce6192118000a1806e5e81e1c1a03eb03f01e16e916fee3e002"},
    {DType::kIQ4_NL, "a51f66a6a8a687608866aaab6aa8895a5886"},
    {DType::kIQ4_XS,
     "a58b60df508da7f766a6a8a687608866aaab6aa8895a5886aa7a6967586979a9bb68a08678755ab93d43544995"
     "cbdd786d2b965598dcdb407f3ea2c5c3a83e5f62f439f3f6a0fb057a98787484a66589b7066b596886444bb7a6"
     "bba8977a865b75789967975b0977cb8ccab442d3f1d5e72dab8dc40c7615a669696067a77a5877756a6a668566"
     "9a"},
    {DType::kQ2_K,
     "ff35dd4627354646462b462c34453f25ceee6f5a5e8ccede4f4b935a5b0b8f7ebc77a7b79284466d6ff75ceb"
     "d584c03e793e22db4b560b116e7634395a73571831a0b1b19034b1f47457e1a5b145ad057a26052c"},
    {DType::kQ3_K,
     "7efad326a38eaf9ea767d9f137450fb2fa7179793dfc65567329664b6d9c4ca3e7a7a0c3f010a4c7a5d131fc"
     "c06d54c31a9f6b5b547abcceffca9ee6dc3df55ce6781010041a49223ff26f75e4e2fc679485645474e1b32c"
     "e1e0538f971c8393807685a6ad58f5866879d4b5909f"},
    {DType::kQ4_K,
     "23159f23fff762d97f764f10050508ddeae9dcbacbd0dcd9febf0e9cbd9eecc9eabfafae8caaaceaff9eeace"
     "aca999fcf1ca29644873d1e5315286486502a25e7a4998b9b491316667fb34e8f490e0094264044747255602"
     "74352042430637400412152523423574504e35572574f7475a1c29f442330135375d0a0d546b47051c485c5b"
     "540d4f5d3e3259484b204710"},
    {DType::kQ5_K,
     "0f11b223fff760d97f354f1000f409dc4b4f479317020b0b0343494703431b0747474f4f0b4b4343431f434f"
     "4b0b3b17c5d3a96597a0b8b3fd7f0d387a2dba93c46e3e4d094459d5ee3cd49d585322f9f19653ca91f7b2dc"
     "62a51e80cb0445bff5833064693372ccdfe87ad2ea20d10494b90880903cbd05e96b5185870d608009151b3b"
     "48846ce8a09f5caf4cd9f080a52842f88477035a6eb9041aa9c69d0b2790a8a6a8098eb97c65b29096509e21"},
    {DType::kQ6_K,
     "0cf9413b8e81ff0af6a8c68002c6b21988cd4ca9636b83d06d1559064ed3b1b2f747a49e22f464b4ca4f201a"
     "af09a572e4f96de1e171e589aedce8c5e554d80fc14d70e140b20b3dbc63ceabf3fea04ffe241dcc1146eb30"
     "9aa16b17db0fc535b8432213d8ef6100fe9c6665b580ca6649b8585565df31167cbe43dcd547c03ff9c91a65"
     "5968e9e92a6692566626aa494c079387a2b4365d5fc32cdbe5b4f00e6bbda20848418c925d75a7ba4a60549b"
     "e92a39291af6793676442925298511c580e097e03421e0e11f5de164e6e07f1dd58b"},
    {DType::kQ8_K,
     "bbc5f43befe405edf881fce6192118000a1806e5e81e1c1a03eb03f01e16e916fee3e00216170cf8060d0e0f"
     "21fd94ebfce7120614f9edf1e0f1f51a1feb1906f5f4e720e51c14fc0ef3e601e6ef070dffedee341a150d17"
     "f9e9e7030a21fb11fbe2e4162014eaf8f1ff171cecf402f0fadf0af7fef0060d0e07eef8fb1dee1c1e051ce0"
     "f003001e200e15f3040ce2f5fd1220e105f30a0bfef00f00e15c0f1b100221200813e20308ef11e01dfdf605"
     "05e1fa06e3e8e6f0f104fb200b07f70df11c66040a1106f1e8eee5f5fc130a16f20dfbf60f02110cf1141f14"
     "19e906010ddffce216eef87f0b07e600051de8e9151f12e6ee13191918e50c1d08051a1211fc13ee7fff1300"
     "f9ffe4fff0ff2d00e5ff3d003e00c400e3ff3e00e1ff39009200a000"},
    {DType::kF16,
     "edaf97b2f22870b0f5ab97bbbfa61bb2fb31ea33a7314c898b2cc9312d2a8cb2c2b13433cb323b3277261db1"
     "6926b7af1733253184b145313ca407b3a4b3c624"},
    {DType::kBF16,
     "febd53be1e3d0ebe7fbd73bfd8bc43be3f3e7d3e353e2ab9913d393e463d52be38be663e593e473ecf3c24be"
     "cd3cf7bd633e253e30be293e87bc61be75be993c"},
};

TEST(QuantGolden, OneBlockOfEachTypeIsBitIdenticalToLlamaCpp) {
  for (const GoldenBlock& g : kGoldenBlocks) {
    const TypeTraits& t = type_traits(g.type);
    const int64_t n = t.block_elems == 1 ? 32 : t.block_elems;
    const std::vector<float> x = golden_input(n, 42);
    std::vector<uint8_t> q(row_size(g.type, n), 0xAB);
    t.from_float(x.data(), q.data(), n);
    EXPECT_EQ(to_hex(q), g.hex) << t.name;
  }
}

// Dot products of golden_input(512, 1) (as the weight type) with golden_input(512, 2) +
// golden_input(512, 1) (as its activation type); the exact float dot is 14.6995653.
struct GoldenDot {
  DType type;
  uint32_t bits;
};
const GoldenDot kGoldenDots[] = {
    {DType::kF32, 0x416b316bu},     // 14.6995649
    {DType::kF16, 0x416b3052u},     // 14.699297
    {DType::kBF16, 0x416b4e8bu},    // 14.7066755
    {DType::kQ4_0, 0x416cd0d2u},    // 14.8009815
    {DType::kQ5_0, 0x416adce2u},    // 14.6789265
    {DType::kQ8_0, 0x416b2a05u},    // 14.6977587
    {DType::kQ4_1, 0x416bbf8eu},    // 14.7342663
    {DType::kQ5_1, 0x416af709u},    // 14.6853113
    {DType::kIQ4_NL, 0x416c1064u},  // 14.7540016
    {DType::kIQ4_XS, 0x416ccc62u},  // 14.7998981
    {DType::kQ2_K, 0x4167682bu},    // 14.4629316
    {DType::kQ3_K, 0x4169bce8u},    // 14.6086197
    {DType::kQ4_K, 0x416932c1u},    // 14.5748911
    {DType::kQ5_K, 0x416af3d0u},    // 14.6845245
    {DType::kQ6_K, 0x416af074u},    // 14.6837044
};

TEST(QuantGolden, DotProductsAreBitIdenticalToLlamaCppGeneric) {
  constexpr int64_t kN = 512;
  const std::vector<float> x = golden_input(kN, 1);
  std::vector<float> y = golden_input(kN, 2);
  for (int64_t i = 0; i < kN; ++i) y[static_cast<size_t>(i)] += x[static_cast<size_t>(i)];
  for (const GoldenDot& g : kGoldenDots) {
    const TypeTraits& t = type_traits(g.type);
    const TypeTraits& act = type_traits(t.vec_dot_type);
    std::vector<uint8_t> qx(row_size(g.type, kN));
    std::vector<uint8_t> qy(row_size(act.type, kN));
    t.from_float(x.data(), qx.data(), kN);
    act.from_float(y.data(), qy.data(), kN);
    const float dot = t.vec_dot(kN, qx.data(), qy.data());
    EXPECT_EQ(std::bit_cast<uint32_t>(dot), g.bits)
        << t.name << ": " << dot << " vs " << std::bit_cast<float>(g.bits);
  }
}

// Relative RMS error of llama.cpp's reference quantizers on golden_input(4096, 3).
struct GoldenError {
  DType type;
  double rel_rmse;
};
const GoldenError kGoldenErrors[] = {
    {DType::kQ4_0, 0.112292},    {DType::kQ5_0, 0.055647},   {DType::kQ8_0, 0.00696214},
    {DType::kQ4_K, 0.0757729},   {DType::kQ5_K, 0.0388396},  {DType::kQ6_K, 0.0209468},
    {DType::kQ8_K, 0.0110856},   {DType::kF16, 0.000190513}, {DType::kBF16, 0.00149503},
    {DType::kQ4_1, 0.0822363},   {DType::kQ5_1, 0.0401938},  {DType::kIQ4_NL, 0.0907801},
    {DType::kIQ4_XS, 0.0916245}, {DType::kQ2_K, 0.291043},   {DType::kQ3_K, 0.171871},
};

TEST(QuantGolden, ErrorIsNoWorseThanLlamaCppReference) {
  constexpr int64_t kN = 4096;
  const std::vector<float> x = golden_input(kN, 3);
  std::vector<float> back(kN);
  for (const GoldenError& g : kGoldenErrors) {
    const TypeTraits& t = type_traits(g.type);
    std::vector<uint8_t> q(row_size(g.type, kN));
    t.from_float(x.data(), q.data(), kN);
    t.to_float(q.data(), back.data(), kN);
    double err = 0;
    double ref = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (static_cast<double>(back[i]) - x[i]) * (static_cast<double>(back[i]) - x[i]);
      ref += static_cast<double>(x[i]) * x[i];
    }
    const double rel = std::sqrt(err / ref);
    // The figures are printed to 6 digits; allow for that rounding only.
    EXPECT_LE(rel, g.rel_rmse * (1 + 1e-5)) << t.name;
    EXPECT_GT(rel, 0.0) << t.name;
  }
}

}  // namespace
}  // namespace qrun
