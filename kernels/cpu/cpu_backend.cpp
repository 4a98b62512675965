// CpuBackend construction, its support table and its repacked weight copies. The ops
// themselves live in ops_*.cpp, one family per file.
#include "kernels/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ggml-like/dtype.h"
#include "kernels/cpu/mem_bandwidth.h"
#include "kernels/cpu/repack.h"

namespace qrun::kernels {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// matmuls' products before its job lists grow: a token's gate and up products in a
// mixture-of-experts layer of 16 chosen experts.
constexpr size_t kReservedProducts = 32;

bool repack_allowed_by_env() {
  const char* v = std::getenv("QRUN_NO_REPACK");
  return v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0;
}

}  // namespace

CpuBackend::CpuBackend(int n_threads, Isa isa)
    : pool_(n_threads),
      kernels_(&cpu_kernels(isa)),
      repack_(repack_allowed_by_env()),
      repack_budget_(physical_memory_bytes() > 0 ? physical_memory_bytes() / 4 : SIZE_MAX) {
  jobs_.reserve(kReservedProducts);
  act_sources_.reserve(kReservedProducts);
}

const uint8_t* CpuBackend::repacked(const Tensor& w) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  const size_t bytes = w.n_bytes();
  std::array<uint8_t, 128> ends{};
  const size_t edge = std::min<size_t>(64, bytes);
  std::memcpy(ends.data(), src, edge);
  std::memcpy(ends.data() + 64, src + bytes - edge, edge);
  auto it = repacked_.find(w.data);
  if (it != repacked_.end()) {
    const RepackedCopy& c = it->second;
    if (c.type == w.type && c.n == w.ne[0] && c.n_rows == w.n_rows() && c.ends == ends) {
      return c.bytes.get();
    }
    repacked_bytes_ -= row_size(c.type, c.n) * static_cast<size_t>(c.n_rows);  // stale
    repacked_.erase(it);
  }
  if (repacked_bytes_ + bytes > repack_budget_) return nullptr;  // decode from the file
  RepackedCopy& copy = repacked_[w.data];
  // Copies of a huge page or more start on a huge page boundary and ask for huge pages:
  // far fewer page faults while repacking and TLB misses while decoding.
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  copy.bytes.reset(
      static_cast<uint8_t*>(std::aligned_alloc(align, (bytes + align - 1) / align * align)));
  if (copy.bytes == nullptr) {  // no memory: decode from the GGML layout
    repacked_.erase(w.data);
    return nullptr;
  }
#ifdef MADV_HUGEPAGE
  if (align == kHugePage)
    madvise(copy.bytes.get(), (bytes + align - 1) / align * align, MADV_HUGEPAGE);
#endif
  copy.type = w.type;
  copy.n = w.ne[0];
  copy.n_rows = w.n_rows();
  copy.ends = ends;
  uint8_t* dst = copy.bytes.get();
  const size_t group_bytes = w.row_bytes() * kRepackRows;
  const int64_t n_groups = w.n_rows() / kRepackRows;
  // Whole groups split over the threads; the rows after them go with the last range.
  pool_.parallel_for(n_groups + 1, [&](int64_t begin, int64_t end) {
    const int64_t last = std::min(end, n_groups);
    const int64_t rows =
        end > n_groups ? w.n_rows() - begin * kRepackRows : (last - begin) * kRepackRows;
    const size_t offset = static_cast<size_t>(begin) * group_bytes;
    repack_rows(w.type, w.ne[0], src + offset, rows, dst + offset);
  });
  repacked_bytes_ += bytes;
  return dst;
}

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
      return type == DType::kF32 || type == DType::kF16 || type == DType::kBF16 ||
             type == DType::kQ8_0 || type == DType::kQ4_0;
    case Op::kRmsNorm:
    case Op::kRope:
    case Op::kSwiglu:
    case Op::kGeglu:
    case Op::kAdd:
    case Op::kScale:
    case Op::kSoftcap:
    case Op::kMoeRows:
      return type == DType::kF32;
  }
  return false;
}

}  // namespace qrun::kernels
