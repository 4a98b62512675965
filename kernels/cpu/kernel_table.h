// The per-ISA kernel table. CpuBackend splits every op over its thread pool and calls
// row- or tile-level kernels through one CpuKernels table, chosen once at start-up: the
// generic table holds the scalar references (the oracle every SIMD kernel is tested
// against); an ISA's table starts as a copy of the generic one (AVX-512 from AVX2's) and
// overrides only what that ISA implements, so a missing SIMD kernel is never a hole.
// ISA code lives in avx2/, avx512/ and neon/, each folder compiled with its own flags.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "ggml-like/dtype.h"
#include "ggml-like/result.h"
#include "kernels/cpu/cpu_features.h"

namespace qrun::kernels {

// The arm64 kernel sets are three levels, each holding the one before: kNeon (armv8-a
// Advanced SIMD, every AArch64 CPU), kNeonDotprod (SDOT dot products, gemv and gemm tiles;
// Armv8.2 dotprod) and kNeonI8mm (the dotprod set with SMMLA gemm tiles; Armv8.6 I8MM).
// All three give the same bits for every integer dot product; the level only changes speed.
enum class Isa { kGeneric, kAvx2, kAvx512, kNeon, kNeonDotprod, kNeonI8mm };

// Every ISA, in enum order: `qrun --version` walks it.
std::span<const Isa> all_isas();
// The ISAs this binary carries and this CPU runs (detect_cpu_features), in all_isas()
// order, so generic first: the kernel tests run each of them against generic.
std::vector<Isa> host_isas();
// "generic", "avx2", "avx512", "neon", "dotprod", "i8mm" (QRUN_FORCE_ISA's values).
const char* isa_name(Isa isa);
std::optional<Isa> isa_from_name(std::string_view name);
// Whether this binary carries the ISA's kernels (x86-64 builds carry AVX2 and AVX-512,
// arm64 builds NEON).
bool isa_compiled(Isa isa);
// Whether the ISA's kernels are compiled in and can run on a CPU with `features`.
bool isa_runs_on(Isa isa, const CpuFeatures& features);
// The fastest ISA that runs on `features`.
Isa best_isa(const CpuFeatures& features);
// The ISA named by `forced` (QRUN_FORCE_ISA's value), or best_isa() when it is null or
// empty. Errors: an unknown name (kUsage), an ISA this binary or this CPU cannot run
// (kUnsupported); both name QRUN_FORCE_ISA.
Result<Isa> resolve_isa(const char* forced, const CpuFeatures& features);
// resolve_isa(getenv("QRUN_FORCE_ISA"), detect_cpu_features()), falling back to the best
// ISA when the variable is invalid (front ends report that error first via resolve_isa).
Isa default_isa();

// A batched matrix product in two steps, so that the activations are rearranged once per
// matmul rather than once per weight tile: pack_act puts groups of group_tokens activation
// rows (the weight's act_type) into the kernel's own layout, group_bytes(n) bytes per group
// (a multiple of 64; the buffer is 64-byte aligned); then gemm multiplies tiles of weight
// rows by the whole packed batch, several threads reading the same packed buffer.
//   pack_act(n, act, act_stride, n_valid, dst): packs the n_valid <= group_tokens rows at
//     act (act_stride bytes apart) into one group at dst, the missing tokens as zeros.
//   gemm(n, w, w_stride, n_rows, packed, n_tokens, y, ldy): y[t * ldy + r] = dot(w row r,
//     act row t) for r < n_rows, t < n_tokens, where packed holds the
//     ceil(n_tokens / group_tokens) groups of those rows back to back. w rows are w_stride
//     bytes apart; each output equals the ISA's vec_dot of the same two rows up to float
//     rounding.
using GemmGroupBytesFn = size_t (*)(int64_t n);
using GemmPackActFn = void (*)(int64_t n, const uint8_t* act, size_t act_stride, int64_t n_valid,
                               uint8_t* dst);
using GemmFn = void (*)(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* packed, int64_t n_tokens, float* y, int64_t ldy);

struct GemmKernels {
  int64_t group_tokens = 0;  // tokens per packed group
  GemmGroupBytesFn group_bytes = nullptr;
  GemmPackActFn pack_act = nullptr;
  GemmFn gemm = nullptr;   // null: the type has no gemm (batches loop over vec_dot)
  int64_t min_tokens = 2;  // batches smaller than this use vec_dot or gemv
  // The same for a batch of decode rows (Backend::set_decode_rows), where one pass per row
  // over the weights (bit for bit a one-token matmul) costs less than the tiles below it.
  // A repacked weight whose type has gemv_repacked_rows meets all the rows in one pass of
  // that kernel instead, which reads and unpacks each block once for them.
  int64_t min_decode_tokens = 2;

  bool usable(int64_t n_tokens, bool decode_rows = false) const {
    return gemm != nullptr && n_tokens >= (decode_rows ? min_decode_tokens : min_tokens);
  }
  // Bytes of the packed form of n_tokens rows of n elements.
  size_t packed_bytes(int64_t n, int64_t n_tokens) const {
    const int64_t n_groups = (n_tokens + group_tokens - 1) / group_tokens;
    return group_bytes(n) * static_cast<size_t>(n_groups);
  }
};

// Several weight rows times one activation row: y[r] = the ISA's vec_dot(w row r, act) bit
// for bit, for r < n_rows (w rows w_stride bytes apart). The rows share each activation
// load and interleave their float chains, which makes decoding cheaper than n_rows calls.
using GemvFn = void (*)(int64_t n, const uint8_t* w, size_t w_stride, int64_t n_rows,
                        const uint8_t* act, float* y);

// Whole groups of kRepackRows rows in the type's repacked decode layout (repack.h) times
// one activation row: y[16g + j] = the ISA's vec_dot(row 16g + j, act) bit for bit.
using GemvRepackedFn = void (*)(int64_t n, const uint8_t* groups, int64_t n_groups,
                                const uint8_t* act, float* y);

// gemv_repacked for n_act activation rows at once (act rows act_stride bytes apart):
// y[t * ldy + 16g + j] = the ISA's vec_dot(row 16g + j, act row t) bit for bit, for
// t < n_act. Each weight block is loaded and unpacked once for all the rows, so a batch of
// decode rows (Backend::set_decode_rows) costs less than n_act passes of gemv_repacked.
using GemvRepackedRowsFn = void (*)(int64_t n, const uint8_t* groups, int64_t n_groups,
                                    const uint8_t* act, size_t act_stride, int64_t n_act, float* y,
                                    int64_t ldy);

// How weights of one type are multiplied. A null vec_dot means the type is not a weight.
struct MatmulKernels {
  DType act_type = DType::kF32;            // the activation row type (the weight's vec_dot_type)
  FromFloatFn quantize_act = nullptr;      // F32 -> act_type; null when act_type is kF32
  VecDotFn vec_dot = nullptr;              // one weight row . one activation row
  GemvFn gemv = nullptr;                   // optional: rows . one activation row, as vec_dot
  GemvRepackedFn gemv_repacked = nullptr;  // optional: gemv over a repacked copy (repack.h)
  GemvRepackedRowsFn gemv_repacked_rows = nullptr;  // optional: the same for several rows
  GemmKernels gemm;                                 // optional: batches on packed activations
};

// Row r (< 2 * n_ring) of a ring of n_ring rows, as stored: wrapped once, then looked up
// in the block table when there is one.
inline int64_t kv_storage_row(int64_t r, int64_t n_ring, const int32_t* table, int block_shift) {
  r = r < n_ring ? r : r - n_ring;
  if (table == nullptr) return r;
  return static_cast<int64_t>(table[r >> block_shift]) << block_shift |
         (r & ((int64_t{1} << block_shift) - 1));
}

// How many rows from ring row r on are stored one after the other (at least 1): up to the
// end of the ring and, paged, of r's block, and at most `left`.
inline int64_t kv_storage_run(int64_t r, int64_t left, int64_t n_ring, const int32_t* table,
                              int block_shift) {
  r = r < n_ring ? r : r - n_ring;
  int64_t run = left < n_ring - r ? left : n_ring - r;
  if (table != nullptr) {
    const int64_t to_block_end =
        (int64_t{1} << block_shift) - (r & ((int64_t{1} << block_shift) - 1));
    run = run < to_block_end ? run : to_block_end;
  }
  return run;
}

// The cache rows one attention call reads, oldest position first: rows first, first + 1,
// ... (n of them), wrapping from row n_ring - 1 to row 0 (a sliding-window ring; a cache
// that is not a ring has first + n <= n_ring). k and v point at the first KV head's first
// element of row 0; rows are `stride` elements apart, of the cache type. A paged cache
// (table not null) stores ring row r in row table[r / 2^block_shift] * 2^block_shift +
// r % 2^block_shift from k and v (KvLayerView's block table; blocks are 2^block_shift rows).
// The call reads n_heads KV heads, head g's values head_stride * g elements into each row.
struct KvRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t stride = 0;
  int64_t first = 0;  // < n_ring
  int64_t n = 0;      // <= n_ring
  int64_t n_ring = 0;
  const int32_t* table = nullptr;  // null: not paged
  int block_shift = 0;
  int64_t n_heads = 1;
  int64_t head_stride = 0;
  // The row index of the j-th row read, j < n.
  int64_t row(int64_t j) const { return kv_storage_row(first + j, n_ring, table, block_shift); }
  // How many of the rows read from the j-th on (at most `left`) follow row(j) in storage.
  int64_t run(int64_t j, int64_t left) const {
    return kv_storage_run(first + j, left, n_ring, table, block_shift);
  }
};

// The logit of a score q.k: q.k * mul, then, with a soft-cap (softcap > 0), softcap *
// tanh of that, mul being scale / softcap (AttentionParams::score_scale): llama.cpp's flash
// attention, step for step. Converts from a bare scale, for attention without a cap.
struct KqScale {
  KqScale(float scale = 1.0f, float cap = 0.0f)  // NOLINT(google-explicit-constructor)
      : mul(cap > 0.0f ? scale / cap : scale), softcap(cap) {}
  bool capped() const { return softcap > 0.0f; }
  float cap(float s) const { return softcap * std::tanh(s); }  // s = q.k * mul
  float logit(float dot) const { return capped() ? cap(dot * mul) : dot * mul; }
  float mul;
  float softcap;
};

// Attention for one token: n_q query heads (rows q_stride floats apart) over the rows
// `kv` of its kv.n_heads KV heads, n_q / kv.n_heads query heads to a KV head, in order
// (n_q a multiple of kv.n_heads). out rows are out_stride floats apart. With `partial`
// null, out is the result. Otherwise out is each head's accumulator before the division by
// its softmax sum, and partial[2h], partial[2h + 1] are head h's running max m and sum l:
// the state CpuBackend::attention merges when it reads a long cache in chunks of rows.
// Each head's result is the same bits whichever KV heads share the call; the SIMD kernels
// read the rows of all of them in one pass when attend_reads_heads_together says so. A
// score's logit is scale.logit(q.k).
using AttendFn = void (*)(const float* q, int64_t q_stride, int64_t n_q, const KvRows& kv,
                          int64_t head_dim, KqScale scale, float* out, int64_t out_stride,
                          float* partial);
// Whether the SIMD attend kernels walk a call's KV heads in one pass over the rows (each
// tile of rows read whole, for every head, before the next tile), rather than one head
// after another: when the KV heads have at most kAttendWalkMaxGroup query heads each, there
// are at most kAttendWalkMaxHeads query heads, the KV heads' values take at most
// kAttendWalkMaxRowValues elements of a row, and the accumulators of all n_q heads fit in
// the walk's kAttendWalkFloats (head_dim rounded up to 16 floats each).
inline constexpr int64_t kAttendWalkMaxGroup = 8;
inline constexpr int64_t kAttendWalkMaxHeads = 64;
inline constexpr int64_t kAttendWalkMaxRowValues = 1024;
inline constexpr int64_t kAttendWalkFloats = 8192;
inline int64_t attend_head_floats(int64_t head_dim) {
  return (head_dim + 15) / 16 * 16;
}
inline bool attend_reads_heads_together(int64_t n_q, int64_t n_heads, int64_t head_dim) {
  return n_heads > 0 && n_q % n_heads == 0 && n_q / n_heads <= kAttendWalkMaxGroup &&
         n_q <= kAttendWalkMaxHeads && n_heads * head_dim <= kAttendWalkMaxRowValues &&
         n_q * attend_head_floats(head_dim) <= kAttendWalkFloats;
}
// The rows of KV heads for attention over any other pair of cache types (K and V each
// F32, F16, BF16, Q8_0 or Q4_0; both F32 or both F16 take attend_f32 / attend_f16), with
// the row functions that read them, as llama.cpp's CPU flash attention reads them: each
// query head is converted once to K's dot type by k_quantize (null: K is F32, q is used as
// it is), q.k is k_dot(head_dim, K row, converted q), so a quantized K is read by an
// integer dot product, never dequantized; each V row is widened by v_to_float and added,
// times its softmax weight, to an accumulator held in F16 (rounded at every step) when
// v_type is F16 and in float otherwise. k and v point at the first KV head's first byte of
// row 0; rows are k_stride and v_stride bytes apart, and head g's values k_head_bytes * g and
// v_head_bytes * g bytes into them. first, n, n_ring, table, block_shift, n_heads as in
// KvRows.
struct KvRowsMixed {
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  size_t k_stride = 0;
  size_t v_stride = 0;
  size_t k_head_bytes = 0;
  size_t v_head_bytes = 0;
  int64_t n_heads = 1;
  int64_t first = 0;
  int64_t n = 0;
  int64_t n_ring = 0;
  DType v_type = DType::kF32;
  FromFloatFn k_quantize = nullptr;
  VecDotFn k_dot = nullptr;
  ToFloatFn v_to_float = nullptr;
  const int32_t* table = nullptr;
  int block_shift = 0;
  int64_t row(int64_t j) const { return kv_storage_row(first + j, n_ring, table, block_shift); }
  int64_t run(int64_t j, int64_t left) const {
    return kv_storage_run(first + j, left, n_ring, table, block_shift);
  }
};
using AttendMixedFn = void (*)(const float* q, int64_t q_stride, int64_t n_q, const KvRowsMixed& kv,
                               int64_t head_dim, KqScale scale, float* out, int64_t out_stride,
                               float* partial);
// One row of RMS norm with an F32 weight (sum of squares in double): see Backend::rms_norm.
using RmsNormRowFn = void (*)(const float* x, const float* w, int64_t n, float eps, float* y);
// out[i] = f(a[i], b[i]) for n elements; out may alias a or b.
using BinaryFn = void (*)(const float* a, const float* b, int64_t n, float* out);
// F32 -> F16 with round to nearest even, n elements.
using ToF16Fn = void (*)(const float* src, uint16_t* dst, int64_t n);

inline constexpr size_t kTypeSlots = 40;  // DType ids are below this

struct CpuKernels {
  Isa isa = Isa::kGeneric;
  std::array<MatmulKernels, kTypeSlots> matmul{};  // indexed by DType id
  AttendFn attend_f32 = nullptr;
  AttendFn attend_f16 = nullptr;
  AttendMixedFn attend_mixed = nullptr;
  // Rows of a type widened to float (the reference dequantizers, or the ISA's for the KV
  // cache types), indexed by DType id; null for a type without a dequantizer.
  std::array<ToFloatFn, kTypeSlots> to_float{};
  RmsNormRowFn rms_norm_row = nullptr;
  BinaryFn swiglu = nullptr;
  BinaryFn geglu = nullptr;
  BinaryFn add = nullptr;
  ToF16Fn to_f16 = nullptr;

  const MatmulKernels& for_type(DType type) const { return matmul[static_cast<size_t>(type)]; }
  MatmulKernels& for_type(DType type) { return matmul[static_cast<size_t>(type)]; }
};

// Sets GemmKernels::min_decode_tokens of every type with a gemm in `k`.
inline void set_min_decode_tokens(CpuKernels& k, int64_t n) {
  for (MatmulKernels& m : k.matmul) {
    if (m.gemm.gemm != nullptr) m.gemm.min_decode_tokens = n;
  }
}

// The table of `isa`, built on first use. QRUN_CHECKs that the ISA is compiled in.
const CpuKernels& cpu_kernels(Isa isa);

// Filled in by each ISA folder (only those compiled in are called).
void fill_generic_kernels(CpuKernels& k);  // generic/reference kernels (kernels/cpu/ref_*.cpp)
void fill_avx2_kernels(CpuKernels& k);     // kernels/cpu/avx2/
void fill_avx512_kernels(CpuKernels& k);   // kernels/cpu/avx512/
void fill_neon_kernels(CpuKernels& k, Isa level);  // kernels/cpu/neon/, one of the 3 levels

}  // namespace qrun::kernels
