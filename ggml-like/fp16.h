// IEEE half and bfloat16 conversions, bit-exact with the F16C instructions (checked
// exhaustively by tests/quant_fp16_test.cpp): float -> half rounds to nearest even, and
// NaNs stay NaN and come out quiet in both directions.
#pragma once

#include <bit>
#include <cstdint>

namespace qrun {

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) {  // inf, or NaN: made quiet (bit 22 set) as the F16C instruction does
    const uint32_t quiet = mant != 0 ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mant << 13));
  }
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal or zero: value = mant * 2^-24.
  const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7e00 | ((abs >> 13) & 0x3ff));  // nan
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00);    // overflows to inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: add 0.5 (the magic 2^-1 trick) and let the FPU round.
    const float r = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(r) - 0x3f000000u));
  }
  // Normal: rebias the exponent and round the mantissa to nearest even.
  const uint32_t mant_odd = (abs >> 13) & 1;
  const uint32_t rounded = abs + 0xc8000fffu + mant_odd;  // (-112 << 23) + 0xfff
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

inline float bf16_to_fp32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Round to nearest even; NaN is quietened, as GGML does.
inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 64);
  return static_cast<uint16_t>((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

}  // namespace qrun
