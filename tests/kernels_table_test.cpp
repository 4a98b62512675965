// The kernel table: ISA names and selection (QRUN_FORCE_ISA), and that every ISA table
// this host can run is complete, entry for entry, where the generic one is.
#include <gtest/gtest.h>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

namespace qrun::kernels {
namespace {

TEST(KernelTable, NamesRoundTrip) {
  for (Isa isa : all_isas()) {
    ASSERT_TRUE(isa_from_name(isa_name(isa)).has_value());
    EXPECT_EQ(*isa_from_name(isa_name(isa)), isa);
  }
  EXPECT_EQ(isa_from_name("AVX2"), Isa::kAvx2);
  EXPECT_FALSE(isa_from_name("sse9").has_value());
}

TEST(KernelTable, ResolveHonoursAndChecksTheForcedIsa) {
  const CpuFeatures none;  // a CPU with nothing beyond the baseline
  Result<Isa> best = resolve_isa(nullptr, none);
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(*best, Isa::kGeneric);
  for (const char* name : {"", "generic", "GENERIC"}) {
    Result<Isa> isa = resolve_isa(name, none);
    ASSERT_TRUE(isa.ok()) << name;
    EXPECT_EQ(*isa, Isa::kGeneric);
  }

  Result<Isa> bad = resolve_isa("sse9", none);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kUsage);
  EXPECT_NE(bad.error().message.find("QRUN_FORCE_ISA=sse9"), std::string::npos);

  Result<Isa> missing = resolve_isa("avx2", none);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(missing.error().message.find("QRUN_FORCE_ISA=avx2"), std::string::npos);
}

TEST(KernelTable, BestIsaFollowsTheFeatures) {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = true;
  EXPECT_EQ(best_isa(f), isa_compiled(Isa::kAvx2) ? Isa::kAvx2 : Isa::kGeneric);
  f.avx512f = f.avx512bw = f.avx512vl = true;  // Skylake-X: no VNNI, so AVX2
  EXPECT_EQ(best_isa(f), isa_compiled(Isa::kAvx2) ? Isa::kAvx2 : Isa::kGeneric);
  f.avx512dq = f.avx512vnni = true;
  EXPECT_EQ(best_isa(f), isa_compiled(Isa::kAvx512) ? Isa::kAvx512 : Isa::kGeneric);
}

TEST(KernelTable, EveryRunnableTableIsComplete) {
  const CpuKernels& generic = cpu_kernels(Isa::kGeneric);
  for (Isa isa : host_isas()) {
    SCOPED_TRACE(isa_name(isa));
    const CpuKernels& k = cpu_kernels(isa);
    EXPECT_EQ(k.isa, isa);
    EXPECT_NE(k.attend_f32, nullptr);
    EXPECT_NE(k.attend_f16, nullptr);
    EXPECT_NE(k.rms_norm_row, nullptr);
    EXPECT_NE(k.swiglu, nullptr);
    EXPECT_NE(k.add, nullptr);
    EXPECT_NE(k.to_f16, nullptr);
    for (size_t i = 0; i < kTypeSlots; ++i) {
      const MatmulKernels& g = generic.matmul[i];
      const MatmulKernels& m = k.matmul[i];
      if (g.vec_dot == nullptr) continue;
      SCOPED_TRACE(i);
      EXPECT_NE(m.vec_dot, nullptr);
      EXPECT_EQ(m.act_type, g.act_type);
      EXPECT_EQ(m.quantize_act == nullptr, g.quantize_act == nullptr);
    }
    CpuBackend backend(1, isa);
    EXPECT_EQ(backend.isa(), isa);
  }
}

TEST(KernelTable, GenericTableCoversTheSupportedWeightTypes) {
  const CpuKernels& generic = cpu_kernels(Isa::kGeneric);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ5_0, DType::kQ8_0,
                  DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_NE(generic.for_type(t).vec_dot, nullptr);
  }
}

}  // namespace
}  // namespace qrun::kernels
