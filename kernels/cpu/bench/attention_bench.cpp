// Attention over a paged KV view against the same cache stored contiguously, through
// CpuBackend: one decode token (or a prefill batch) at a given context length, the best of
// several runs of each, interleaved so that both see the same machine. The paged view's
// table takes every other block of a pool twice as large, in reverse order (no two
// neighbouring rows of different blocks are neighbours in memory).
// Usage: cpu_attention_bench [threads] [isa]   (isa: generic, avx2, avx512, neon)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/kernel_table.h"

namespace {

using qrun::AttentionParams;
using qrun::DType;
using qrun::KvLayerView;
using qrun::kernels::CpuBackend;
using qrun::kernels::Isa;

struct Case {
  int64_t n_head, n_head_kv, head_dim, n_ctx, n_tokens;
  DType type;
};

double seconds_of(const auto& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_case(CpuBackend& be, const Case& c, int64_t block_rows) {
  const int64_t row = c.n_head_kv * c.head_dim;
  const int64_t n_blocks = (c.n_ctx + block_rows - 1) / block_rows;
  const int64_t n_rows = n_blocks * block_rows;
  const KvLayerView shape{c.type, c.type, nullptr, nullptr, n_rows, c.n_head_kv, c.head_dim};
  const size_t pool_rows = static_cast<size_t>(2 * n_rows + block_rows);
  std::vector<uint8_t> k_flat(shape.k_row_bytes() * static_cast<size_t>(n_rows));
  std::vector<uint8_t> v_flat(k_flat.size());
  std::vector<uint8_t> k_pool(shape.k_row_bytes() * pool_rows);
  std::vector<uint8_t> v_pool(k_pool.size());
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t i = 0; i < n_blocks; ++i) table[i] = static_cast<int32_t>(2 * (n_blocks - i));
  KvLayerView flat{c.type, c.type, k_flat.data(), v_flat.data(), n_rows, c.n_head_kv, c.head_dim};
  KvLayerView paged{c.type, c.type, k_pool.data(), v_pool.data(), n_rows, c.n_head_kv, c.head_dim};
  paged.block_table = table.data();
  paged.block_rows = block_rows;
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> kv(static_cast<size_t>(c.n_ctx * row));
  for (float& x : kv) x = dist(rng);
  be.kv_store(flat, 0, c.n_ctx, kv.data(), kv.data());
  be.kv_store(paged, 0, c.n_ctx, kv.data(), kv.data());
  std::vector<float> q(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim));
  for (float& x : q) x = dist(rng);
  std::vector<float> out(q.size());
  const AttentionParams params{c.n_head, c.n_head_kv, c.head_dim, 0.1f, 0};
  const int64_t pos0 = c.n_ctx - c.n_tokens;
  double best_flat = 1e30, best_paged = 1e30;
  const int reps = std::max<int64_t>(3, 20000 * 1024 / (c.n_ctx * c.n_tokens * c.n_head));
  for (int r = 0; r < reps; ++r) {
    best_flat = std::min(best_flat, seconds_of([&] {
                           be.attention(q.data(), c.n_tokens, pos0, flat, params, out.data());
                         }));
    best_paged = std::min(best_paged, seconds_of([&] {
                            be.attention(q.data(), c.n_tokens, pos0, paged, params, out.data());
                          }));
  }
  std::printf(
      "%-5s %3lld/%-2lld d%-3lld ctx %5lld tokens %3lld blocks %3lld: contiguous %9.1f us"
      "  paged %9.1f us  paged/contiguous %.3f\n",
      qrun::dtype_name(c.type), static_cast<long long>(c.n_head),
      static_cast<long long>(c.n_head_kv), static_cast<long long>(c.head_dim),
      static_cast<long long>(c.n_ctx), static_cast<long long>(c.n_tokens),
      static_cast<long long>(block_rows), best_flat * 1e6, best_paged * 1e6,
      best_paged / best_flat);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  Isa isa = qrun::kernels::default_isa();
  if (argc > 2) {
    bool found = false;
    for (const Isa i : qrun::kernels::host_isas()) {
      if (std::string(qrun::kernels::isa_name(i)) == argv[2]) {
        isa = i;
        found = true;
      }
    }
    if (!found) {
      std::fprintf(stderr, "cpu_attention_bench: this host does not run %s\n", argv[2]);
      return 2;
    }
  }
  CpuBackend be(threads, isa);
  std::printf("cpu_attention_bench: %d threads, %s kernels\n", threads,
              qrun::kernels::isa_name(isa));
  const Case cases[] = {
      {8, 1, 256, 1024, 1, DType::kF16},   {32, 8, 128, 4096, 1, DType::kF16},
      {32, 8, 128, 4096, 1, DType::kQ8_0}, {32, 8, 128, 1024, 64, DType::kF16},
      {32, 8, 64, 2048, 1, DType::kF32},
  };
  for (const Case& c : cases) {
    for (const int64_t block_rows : {16, 32, 256}) run_case(be, c, block_rows);
  }
  return 0;
}
