// CpuBackend construction and its support table. The ops themselves live in ops_*.cpp,
// one family per file.
#include "kernels/cpu/cpu_backend.h"

#include "ggml-like/dtype.h"

namespace qrun::kernels {

CpuBackend::CpuBackend(int n_threads, Isa isa) : pool_(n_threads), kernels_(&cpu_kernels(isa)) {}

bool CpuBackend::supports(Op op, DType type) const {
  const TypeTraits* t = find_type(static_cast<uint32_t>(type));
  if (t == nullptr) return false;
  switch (op) {
    case Op::kMatMul: {
      const MatmulKernels& mk = kernels_->for_type(type);
      return mk.vec_dot != nullptr && (mk.act_type == DType::kF32 || mk.quantize_act != nullptr);
    }
    case Op::kGetRows:
      return t->to_float != nullptr;
    case Op::kKvStore:
    case Op::kAttention:
      return type == DType::kF32 || type == DType::kF16;
    case Op::kRmsNorm:
    case Op::kRope:
    case Op::kSwiglu:
    case Op::kAdd:
      return type == DType::kF32;
  }
  return false;
}

}  // namespace qrun::kernels
