// ISA names and selection, and the construction of each ISA's kernel table: generic
// first, then the ISA's overrides, so every entry is always callable.
#include "kernels/cpu/kernel_table.h"

#include <cctype>
#include <cstdlib>

namespace qrun::kernels {
namespace {

constexpr Isa kAllIsas[] = {Isa::kGeneric, Isa::kAvx2,        Isa::kAvx512,
                            Isa::kNeon,    Isa::kNeonDotprod, Isa::kNeonI8mm};

#if defined(QRUN_HAVE_NEON)
bool is_neon_level(Isa isa) {
  return isa == Isa::kNeon || isa == Isa::kNeonDotprod || isa == Isa::kNeonI8mm;
}
#endif

CpuKernels build_table(Isa isa) {
  CpuKernels k;
  fill_generic_kernels(k);
#if defined(QRUN_HAVE_AVX2)
  if (isa == Isa::kAvx2 || isa == Isa::kAvx512) fill_avx2_kernels(k);
#endif
#if defined(QRUN_HAVE_AVX512)
  if (isa == Isa::kAvx512) fill_avx512_kernels(k);
#endif
#if defined(QRUN_HAVE_NEON)
  if (is_neon_level(isa)) fill_neon_kernels(k, isa);
#endif
  k.isa = isa;
  return k;
}

}  // namespace

std::span<const Isa> all_isas() {
  return kAllIsas;
}

std::vector<Isa> host_isas() {
  const CpuFeatures features = detect_cpu_features();
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (isa_runs_on(isa, features)) out.push_back(isa);
  }
  return out;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return "generic";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
    case Isa::kNeonDotprod:
      return "dotprod";
    case Isa::kNeonI8mm:
      return "i8mm";
  }
  return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
  for (Isa isa : kAllIsas) {
    std::string_view n = isa_name(isa);
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(), [](char a, char b) {
          return a == std::tolower(static_cast<unsigned char>(b));
        })) {
      return isa;
    }
  }
  return std::nullopt;
}

bool isa_compiled(Isa isa) {
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
#if defined(QRUN_HAVE_AVX2)
      return true;
#else
      return false;
#endif
    case Isa::kAvx512:
#if defined(QRUN_HAVE_AVX512)
      return true;
#else
      return false;
#endif
    case Isa::kNeon:
    case Isa::kNeonDotprod:
    case Isa::kNeonI8mm:
#if defined(QRUN_HAVE_NEON)
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool isa_runs_on(Isa isa, const CpuFeatures& features) {
  if (!isa_compiled(isa)) return false;
  switch (isa) {
    case Isa::kGeneric:
      return true;
    case Isa::kAvx2:
      return features.has_avx2_set();
    case Isa::kAvx512:
      return features.has_avx512_set();
    case Isa::kNeon:
      return features.neon;
    case Isa::kNeonDotprod:
      return features.neon && features.neon_dotprod;
    case Isa::kNeonI8mm:  // its vec_dot and gemv are the dotprod level's
      return features.neon && features.neon_dotprod && features.neon_i8mm;
  }
  return false;
}

Isa best_isa(const CpuFeatures& features) {
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeonI8mm, Isa::kNeonDotprod, Isa::kNeon}) {
    if (isa_runs_on(isa, features)) return isa;
  }
  return Isa::kGeneric;
}

Result<Isa> resolve_isa(const char* forced, const CpuFeatures& features) {
  if (forced == nullptr || *forced == '\0') return best_isa(features);
  const std::optional<Isa> isa = isa_from_name(forced);
  if (!isa) {
    return make_error(
        ErrorCode::kUsage,
        format("QRUN_FORCE_ISA=%s: unknown ISA (use generic, avx2, avx512, neon, dotprod or i8mm)",
               forced));
  }
  if (!isa_compiled(*isa)) {
    return make_error(
        ErrorCode::kUnsupported,
        format("QRUN_FORCE_ISA=%s: this build has no %s kernels", forced, isa_name(*isa)));
  }
  if (!isa_runs_on(*isa, features)) {
    return make_error(ErrorCode::kUnsupported,
                      format("QRUN_FORCE_ISA=%s: this CPU lacks it (it has: %s)", forced,
                             features.to_string().c_str()));
  }
  return *isa;
}

Isa default_isa() {
  const CpuFeatures features = detect_cpu_features();
  Result<Isa> isa = resolve_isa(std::getenv("QRUN_FORCE_ISA"), features);
  return isa.ok() ? *isa : best_isa(features);
}

const CpuKernels& cpu_kernels(Isa isa) {
  QRUN_CHECK(isa_compiled(isa), "cpu_kernels: %s kernels are not compiled in", isa_name(isa));
  // One immutable table per ISA, built on first use (thread-safe static initialisation).
  static const CpuKernels kGenericTable = build_table(Isa::kGeneric);
  static const CpuKernels kAvx2Table = build_table(Isa::kAvx2);
  static const CpuKernels kAvx512Table = build_table(Isa::kAvx512);
  static const CpuKernels kNeonTable = build_table(Isa::kNeon);
  static const CpuKernels kNeonDotprodTable = build_table(Isa::kNeonDotprod);
  static const CpuKernels kNeonI8mmTable = build_table(Isa::kNeonI8mm);
  switch (isa) {
    case Isa::kGeneric:
      return kGenericTable;
    case Isa::kAvx2:
      return kAvx2Table;
    case Isa::kAvx512:
      return kAvx512Table;
    case Isa::kNeon:
      return kNeonTable;
    case Isa::kNeonDotprod:
      return kNeonDotprodTable;
    case Isa::kNeonI8mm:
      return kNeonI8mmTable;
  }
  return kGenericTable;
}

}  // namespace qrun::kernels
