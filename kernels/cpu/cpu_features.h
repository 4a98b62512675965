// What the host CPU can run, read once from cpuid (x86-64) or the auxiliary vector (arm64).
#pragma once

#include <string>

namespace qrun::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool neon = false;
  bool neon_dotprod = false;  // SDOT/UDOT (Armv8.2 dotprod, HWCAP_ASIMDDP)
  bool neon_i8mm = false;     // SMMLA and friends (Armv8.6 I8MM, HWCAP2_I8MM)

  bool has_avx2_set() const { return avx2 && fma && f16c; }
  // The AVX-512 kernels use F, BW, VL, DQ and VNNI (Ice Lake, Zen 4 and later); CPUs with
  // only part of that (Skylake-X) run the AVX2 kernels.
  bool has_avx512_set() const {
    return has_avx2_set() && avx512f && avx512bw && avx512vl && avx512dq && avx512vnni;
  }
  std::string to_string() const;  // "avx2 fma f16c avx512f ..."
};

CpuFeatures detect_cpu_features();

}  // namespace qrun::kernels
