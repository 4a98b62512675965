// Host entry points of the CUDA kernels. Every pointer is device memory (runtime.h); the
// call queues the kernel on `stream` and returns. Each op computes the function its
// Backend counterpart documents (ggml-like/backend.h); where the GPU's rounding differs
// from the scalar reference, the kernel's file says how and by how much.
#pragma once

#include <cstdint>
#include <span>

#include "ggml-like/backend.h"
#include "ggml-like/dtype.h"
#include "kernels/cuda/namespace.h"
#include "kernels/cuda/runtime.h"

QRUN_CUDA_NAMESPACE_BEGIN

// The activation blocks the integer dot products read: 32 values x[i] ~ d * qs[i], and
// the sum of qs (for the weight types with an offset or a min). Quantized as llama.cpp's
// x86 CPU backend quantizes Q8_0 activations (quantize_q8_0_act in ggml-like/quants.h):
// d = amax / 127 rounded to F16, qs = round-half-even(x * 127 / amax). d is kept as a
// float (holding the F16 value) so the block is 4-byte aligned for 32-bit loads.
struct BlockQ8_1 {
  float d;
  int32_t sum;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 40, "q8_1 activation block must be 40 bytes");

// Decode fusions: the ops that produce a matmul's input (RMS norm, SwiGLU, GELU-gated)
// take an optional `q`: when it is not null (and the element count a multiple of 32) the
// kernel also writes its output quantized into q, the blocks quantize_q8_1 would make from
// it, so the matmul that follows needs no quantize launch of its own.

// ---- element-wise (ops_elementwise.cu); out may alias an input ----
void add(const float* a, const float* b, int64_t n, float* out, Stream stream);
void scale(const float* x, int64_t n, float s, float* out, Stream stream);
void softcap(const float* x, int64_t n, float cap, float* out, Stream stream);
void swiglu(const float* gate, const float* up, int64_t n, float* out, Stream stream,
            BlockQ8_1* q = nullptr);
void geglu(const float* gate, const float* up, int64_t n, float* out, Stream stream,
           BlockQ8_1* q = nullptr);

// ---- mixture-of-experts row moves (ops_moe.cu); out must not overlap the source ----
// Backend::gather_rows: out[i] = x[rows[i]] for i < n_rows, rows of n floats.
void gather_rows(const float* x, int64_t n, const int32_t* rows, int64_t n_rows, float* out,
                 Stream stream);
// Backend::weighted_row_sum for t < n_out: out[t] = sum over j < k of
// weights[t k + j] * src[rows[t k + j]], each product rounded, summed in j order.
void weighted_row_sum(const float* src, int64_t n, const int32_t* rows, const float* weights,
                      int64_t k, int64_t n_out, float* out, Stream stream);

// Where position p of a cache layer is stored (KvLayerView::storage_row, for the kernels:
// kv_storage_row in kv_rows.cuh): view row p % n_rows, which, when table is not null, lies
// in block table[row >> block_shift] of 1 << block_shift rows. table is device memory.
struct KvRowMap {
  int64_t n_rows = 0;
  const int32_t* table = nullptr;
  int block_shift = 0;
};
// The map of `cache`, whose block_table (if any) is in device memory.
KvRowMap kv_row_map(const KvLayerView& cache);

// Writes n_tokens rows of row_elems floats from k and from v, rounded to F16 (round to
// nearest even, as the CPU backend's F16 cache), to the rows of positions pos + t in
// k_dst and v_dst: kv_store, in one launch.
void store_kv_f16(const float* k, const float* v, int64_t n_tokens, int64_t row_elems, int64_t pos,
                  const KvRowMap& rows, uint16_t* k_dst, uint16_t* v_dst, Stream stream);

// ---- ops_norm.cu ----
// y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w for n_rows rows of n; y may alias x.
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* y,
              Stream stream, BlockQ8_1* q = nullptr);
// x[i] += delta[i], then rms_norm of x into y, in one launch (Backend::add_rms_norm); y may
// alias x or delta.
void add_rms_norm(float* x, const float* delta, const float* w, int64_t n_rows, int64_t n,
                  float eps, float* y, Stream stream, BlockQ8_1* q = nullptr);
// delta = rms_norm(delta) with w_delta, then add_rms_norm(x, delta, w, ...), in one launch
// with the same bits as the two (Backend::norm_add_rms_norm); y may alias x or delta. Only
// where norm_add_rms_norm_fits(n): rows of up to 8192, and not under QRUN_CUDA_NORM=v1.
bool norm_add_rms_norm_fits(int64_t n);
void norm_add_rms_norm(float* x, float* delta, const float* w_delta, const float* w, int64_t n_rows,
                       int64_t n, float eps, float* y, Stream stream, BlockQ8_1* q = nullptr);

// ---- ops_rope.cu ----
// Backend::rope on x: [n_tokens, n_head, head_dim]; positions: [n_tokens] and
// params.freq_factors ([n_rot / 2] or null) in device memory.
void rope(float* x, int64_t n_tokens, int64_t n_head, int64_t head_dim, const int32_t* positions,
          const RopeParams& params, Stream stream);
// Where rope_qk also stores the rotated keys and the values v (n_tokens rows of
// n_head_kv * head_dim floats), as store_kv_f16 stores them: Backend::rope_qk_store.
struct KvDestination {
  const float* v;
  int64_t pos;
  KvRowMap rows;
  uint16_t* k_dst;
  uint16_t* v_dst;
};
// Backend::rope_qk: rope on q ([n_tokens, n_head, head_dim]) and on k (n_head_kv heads), in
// one launch; with `store`, then store_kv_f16 of k and store->v in the same launch.
void rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
             int64_t head_dim, const int32_t* positions, const RopeParams& params, Stream stream,
             const KvDestination* store = nullptr);
// The per-head RMS norms around RoPE (Backend::HeadNorms): weights of head_dim floats in
// device memory for q's and k's heads (null: not normed), and q's scale after RoPE.
struct HeadNormWeights {
  const float* q = nullptr;
  const float* k = nullptr;
  float eps = 0.0f;
  float q_scale = 1.0f;
};
// Whether norm_rope_qk takes heads of head_dim: up to 256 (a block holds four whole heads).
bool norm_rope_fits(int64_t head_dim);
// Backend::norm_rope_qk_store: rms_norm of each head of q and k as `norms` asks, rope_qk
// (with `store`, the K/V store), then q scaled by norms.q_scale, in one launch with the
// bits of the separate launches (rms_norm's sums in the same order).
void norm_rope_qk(float* q, int64_t n_head, float* k, int64_t n_head_kv, int64_t n_tokens,
                  int64_t head_dim, const int32_t* positions, const RopeParams& params,
                  const HeadNormWeights& norms, Stream stream,
                  const KvDestination* store = nullptr);

// ---- ops_attention.cu ----
// Backend::attention over an F16 cache in device memory (k, v, q, out device pointers),
// head_dim up to 256. scratch holds attention_scratch_floats(...) floats. Fewer than
// kPrefillMinTokens tokens run the split-K kernel, more run attention_prefill. out_q (a
// decode fusion, as rms_norm's q; fewer than kPrefillMinTokens tokens and head_dim a
// multiple of 32): also writes out quantized, as quantize_q8_1 would. counters (device
// memory, at least n_tokens * n_head of them, all zero, and left zero): the decode
// kernel's last block per head and token merges the splits (one launch); without them a
// second kernel does (the same bits). split_k: the split-K kernel however many tokens
// (decode rows, each token's output then bit for bit what it is alone; out_q allowed), its
// scratch n_tokens times attention_scratch_floats(1, pos0 + n_tokens - 1, ...).
// Positions per split of the split-K decode kernel: QRUN_CUDA_ATTN_SPLIT (read once per
// process), else kDefaultSplit.
inline constexpr int64_t kDefaultSplit = 32;
int64_t attention_split();
inline constexpr int64_t kPrefillMinTokens = 16;
// (paged: for a cache read through a block table, whose rows prefill gathers first)
size_t attention_scratch_floats(int64_t n_tokens, int64_t pos0, const AttentionParams& params,
                                bool paged = false);
void attention(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
               const AttentionParams& params, float* scratch, float* out, Stream stream,
               BlockQ8_1* out_q = nullptr, unsigned* counters = nullptr, bool split_k = false);

// ---- ops_attention_prefill.cu ----
// The same attention as matrix products on the tensor cores (gemm_f16_batched), for many
// tokens: chunks of chunk_tokens tokens, each scored against every position its tokens
// attend (q rounded to F16), masked, softmaxed and multiplied with V (weights rounded to
// F16). Any head_dim; scratch holds attention_prefill_scratch_floats(...) floats. A paged
// cache's rows of each chunk are first gathered into scratch, in position order (one
// product per chunk, as a contiguous cache that has not wrapped).
// The chunk attention() uses: scores of about 128 MiB at most, but at least 16 tokens.
int64_t prefill_chunk_tokens(int64_t n_tokens, int64_t pos0, const AttentionParams& params);
size_t attention_prefill_scratch_floats(int64_t n_tokens, int64_t pos0,
                                        const AttentionParams& params, int64_t chunk_tokens,
                                        bool paged = false);
void attention_prefill(const float* q, int64_t n_tokens, int64_t pos0, const KvLayerView& cache,
                       const AttentionParams& params, int64_t chunk_tokens, float* scratch,
                       float* out, Stream stream);

// ---- quantized matrix-vector products (ops_matmul.cu; quantize_q8_1 and mmv_float in
// ops_matmul_float.cu) ----
// Quantizes n_rows rows of n elements (n a multiple of 32) into n / 32 blocks per row.
void quantize_q8_1(const float* x, int64_t n_rows, int64_t n, BlockQ8_1* out, Stream stream);

// Whether mmvq has a kernel for weights of `type`.
bool mmvq_supports(DType type);

// How a weight matrix's bytes are laid out in device memory.
//  kBlocks: the file's blocks as they are (GGML layout).
//  kGroups8 (Q4_0 and Q8_0, rows of a multiple of 256 elements): each run of 8 blocks of a
//    row holds their 8 quant arrays (16 or 32 bytes each) and then their 8 F16 scales, the
//    same bytes in the same room, so that a thread loads a block's quants with aligned
//    16-byte loads straight into registers (the kernels v7 and v8).
enum class WeightLayout { kBlocks, kGroups8 };
// The layout mmvq wants for weights of `type` with rows of n_in (that of the variant it
// runs), and that of a given variant.
WeightLayout mmvq_layout(DType type, int64_t n_in);
WeightLayout mmvq_variant_layout(int variant, DType type, int64_t n_in);
// dst = src (n_rows rows of n_in elements of `type` in GGML layout, device memory)
// rearranged into kGroups8. dst is 16-byte aligned and does not overlap src.
void repack_groups8(DType type, const void* src, int64_t n_in, int64_t n_rows, void* dst,
                    Stream stream);

// y[t][o] = sum_i w[o][i] * x[t][i] for t < n_tokens, o < n_out: w holds n_out rows of
// n_in elements of `type` in the layout mmvq_layout(type, n_in) (16-byte aligned where that
// is kGroups8), x n_tokens rows of n_in / 32 activation blocks. n_in must be a multiple of
// the type's block size.
void mmvq(DType type, const void* w, int64_t n_in, int64_t n_out, const BlockQ8_1* x,
          int64_t n_tokens, float* y, Stream stream);

// The products of up to kMaxGroup matrices of one type and width with the same
// activations (a layer's Q, K and V; gate and up): job g computes y = w x as mmvq(type,
// w, n_in, n_out, x, n_tokens, y), all in one launch where the kernel mmvq runs allows it
// (v5 on rows it tiles, v7 and v8 on kGroups8 weights), else one launch each. The results
// are the same either way.
inline constexpr int kMaxGroup = 4;
struct MmvqJob {
  const void* w;
  int64_t n_out;
  float* y;
};
void mmvq_group(DType type, int64_t n_in, std::span<const MmvqJob> jobs, const BlockQ8_1* x,
                int64_t n_tokens, Stream stream);

// The kernels behind mmvq, which all compute the same function with the same integer dot
// products and differ only in the order of the float sums (ops_matmul.cu): "v1" .. "v8".
// mmvq runs the one QRUN_CUDA_MMVQ names (read once per process; default v8); tests and
// cuda_mmvq_bench run each by index (0 .. mmvq_variant_count() - 1), on weights in
// mmvq_variant_layout(variant, type, n_in).
int mmvq_variant_count();
const char* mmvq_variant_name(int variant);
void mmvq_variant(int variant, DType type, const void* w, int64_t n_in, int64_t n_out,
                  const BlockQ8_1* x, int64_t n_tokens, float* y, Stream stream);

// y[t][o] = sum_i w[o][i] * x[t][i] for F16 or F32 weights (any n_in) and float x.
void mmv_float(DType type, const void* w, int64_t n_in, int64_t n_out, const float* x,
               int64_t n_tokens, float* y, Stream stream);

// ---- prefill products (ops_gemm.cu) ----
// Many tokens at once: the weights are dequantized to F16 a tile of rows at a time and
// multiplied with the activations rounded to F16 by an F16 x F16 GEMM that accumulates in
// float (gemm_f16, runtime.h: cuBLAS on the GPU).

// Whether dequantize_f16 and matmul_gemm take weights of `type`: Q4_0, Q5_0, Q4_1, Q5_1,
// Q8_0, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16 and F32.
bool gemm_supports(DType type);
// dst[i] = the F16 nearest to type_traits(type).to_float(src)[i], for n elements (a
// multiple of the type's block size; kGroups8: of 256) of `type` at src, in `layout`.
void dequantize_f16(DType type, WeightLayout layout, const void* src, int64_t n, uint16_t* dst,
                    Stream stream);
// out[i] = x[i] rounded to the nearest F16 (ties to even), for n elements.
void convert_f32_to_f16(const float* x, int64_t n, uint16_t* out, Stream stream);

// The scratch matmul_gemm needs: x in F16, and a tile of dequantized rows bounded to
// about 64 MiB (at least one row).
size_t matmul_gemm_scratch_bytes(int64_t n_in, int64_t n_out, int64_t n_tokens);
// y[t][o] = sum_i w[o][i] * x[t][i] for t < n_tokens, o < n_out (y row-major
// [n_tokens, n_out], as mmvq writes it): w holds n_out rows of n_in elements of `type`
// (n_in a multiple of its block size) in `layout`, x n_tokens rows of n_in floats. Both
// operands are rounded to F16 and the products summed in float. scratch (device memory,
// 256-byte aligned) bounds the tile: any size from the scratch of one row up works, with
// more tiles.
void matmul_gemm(DType type, WeightLayout layout, const void* w, int64_t n_in, int64_t n_out,
                 const float* x, int64_t n_tokens, float* y, void* scratch, size_t scratch_bytes,
                 Stream stream);

QRUN_CUDA_NAMESPACE_END
