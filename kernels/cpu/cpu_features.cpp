// CPU feature detection. x86-64 reads cpuid and checks that the OS saves the AVX and
// AVX-512 register state (xgetbv); arm64 reads HWCAP and HWCAP2 from the auxiliary vector.
#include "kernels/cpu/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

namespace qrun::kernels {

#if defined(__x86_64__)
namespace {
unsigned long long read_xcr0() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}
}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = (ecx >> 27) & 1;
  const unsigned long long xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;       // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;  // plus opmask and ZMM state
  f.fma = os_avx && ((ecx >> 12) & 1);
  f.f16c = os_avx && ((ecx >> 29) & 1);
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = os_avx && ((ebx >> 5) & 1);
    f.avx512f = os_avx512 && ((ebx >> 16) & 1);
    f.avx512bw = os_avx512 && ((ebx >> 30) & 1);
    f.avx512vl = os_avx512 && ((ebx >> 31) & 1);
    f.avx512dq = os_avx512 && ((ebx >> 17) & 1);
    f.avx512vnni = os_avx512 && ((ecx >> 11) & 1);
  }
  return f;
}
#elif defined(__aarch64__)
CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  f.neon = true;  // Advanced SIMD is mandatory on AArch64.
  const unsigned long hwcap = getauxval(AT_HWCAP);
  const unsigned long hwcap2 = getauxval(AT_HWCAP2);
  f.neon_dotprod = (hwcap >> 20) & 1;  // HWCAP_ASIMDDP
  f.neon_i8mm = (hwcap2 >> 13) & 1;    // HWCAP2_I8MM
  return f;
}
#else
CpuFeatures detect_cpu_features() {
  return CpuFeatures{};
}
#endif

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&s](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(neon, "neon");
  add(neon_dotprod, "dotprod");
  add(neon_i8mm, "i8mm");
  return s.empty() ? "none" : s;
}

}  // namespace qrun::kernels
