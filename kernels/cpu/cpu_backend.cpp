// CpuBackend construction and its support table. The ops themselves live in ops_*.cpp,
// one family per file.
#include "kernels/cpu/cpu_backend.h"

#include "ggml-like/dtype.h"

namespace qrun::kernels {

CpuBackend::CpuBackend(int n_threads) : pool_(n_threads) {}

bool CpuBackend::supports(Op op, DType type) const {
  const TypeTraits* t = find_type(static_cast<uint32_t>(type));
  if (t == nullptr) return false;
  switch (op) {
    case Op::kMatMul: {
      if (t->vec_dot == nullptr) return false;
      const TypeTraits& act = type_traits(t->vec_dot_type);
      return act.type == DType::kF32 || act.from_float_act != nullptr;
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
