// Context shift in process: RoPE turned by -d after p equals RoPE at p - d (normal and neox,
// scaled, with frequency factors), within a tolerance measured here; KvCache::shift moves
// the rows of full layers and sliding-window rings where the next token reads them; and,
// the real check, after one or more shifts the next token's logits equal those of a fresh
// forward pass over the kept and moved tokens at their new positions, on one-layer llama,
// qwen2, phi3 (LongRoPE factors, attention factor, partial rotation) and gemma3 (rings)
// models with every KV cache type (why one layer: see below); the same comparison without
// the rotation fails, so it can. In a six-layer gemma3, local and global layers turn their
// keys with their own RoPE bases, checked against a rotation in double.
#include "core/context_shift.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/generate.h"
#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "core/sampling/sampling.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "models/synth.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

// ---- RoPE: turning by -d after p is RoPE at p - d ----------------------------------------

// The largest difference between rope(rope(x, p), -d) and rope(x, p - d), over heads of
// `head_dim` elements with values in [-1, 1].
float shifted_rope_error(kernels::CpuBackend& backend, const RopeParams& rope, int64_t head_dim,
                         int32_t p, int32_t d) {
  constexpr int64_t kHeads = 4;
  std::mt19937 rng(static_cast<uint32_t>(p * 31 + d));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kHeads * head_dim));
  for (float& v : x) v = u(rng);
  std::vector<float> shifted = x;
  std::vector<float> direct = x;
  const int32_t at_p = p;
  const int32_t by_d = -d;
  const int32_t at_p_minus_d = p - d;
  backend.rope(shifted.data(), 1, kHeads, head_dim, {&at_p, 1}, rope);
  RopeParams turn = rope;
  turn.attn_factor = 1.0f;  // as shift_context turns keys
  backend.rope(shifted.data(), 1, kHeads, head_dim, {&by_d, 1}, turn);
  backend.rope(direct.data(), 1, kHeads, head_dim, {&at_p_minus_d, 1}, rope);
  float err = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) err = std::max(err, std::abs(shifted[i] - direct[i]));
  return err;
}

TEST(ContextShiftRope, TurningBackEqualsRopeAtTheShiftedPosition) {
  kernels::CpuBackend backend(1);
  constexpr int64_t kHeadDim = 64;
  std::vector<float> factors(24);  // for n_rot 48
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + 0.37f * static_cast<float>(i);
  struct Variant {
    const char* name;
    RopeParams rope;
  };
  const Variant variants[] = {
      {"normal", {64, 10000.0f, 1.0f, nullptr, RopeMode::kNormal, 1.0f}},
      {"neox", {64, 10000.0f, 1.0f, nullptr, RopeMode::kNeox, 1.0f}},
      {"neox, base 1e6, linear scale 1/4", {64, 1e6f, 0.25f, nullptr, RopeMode::kNeox, 1.0f}},
      {"normal, 48 of 64 rotated, factors, attention factor 1.19",
       {48, 500000.0f, 1.0f, factors.data(), RopeMode::kNormal, 1.19f}},
      {"neox, 48 of 64 rotated, factors",
       {48, 10000.0f, 1.0f, factors.data(), RopeMode::kNeox, 1.0f}},
  };
  // Measured: the angles of p, of -d and of p - d are each rounded to float (p times the
  // frequency, as ggml forms them), so the difference grows with p, about 5e-8 * p: at most
  // 3.8e-6 at p 100, 2.6e-5 at 511, 1.9e-4 at 4095, 1.6e-3 at 32000 (values in [-1, 1]).
  // The bound is about twice that: 1e-7 * p + 1e-6. A wrong base is off by 0.05 or more.
  for (const Variant& v : variants) {
    for (const int32_t p : {1, 7, 100, 511, 2000, 4095, 32000}) {
      for (const int32_t d : {1, p / 3, p / 2, p}) {
        if (d <= 0) continue;
        const float err = shifted_rope_error(backend, v.rope, kHeadDim, p, d);
        EXPECT_LE(err, 1e-7f * static_cast<float>(p) + 1e-6f)
            << v.name << ": p " << p << ", d " << d;
      }
    }
  }
  // The test can fail: turning with another base is far off.
  const RopeParams rope{64, 10000.0f, 1.0f, nullptr, RopeMode::kNormal, 1.0f};
  RopeParams wrong = rope;
  wrong.freq_base = 5000.0f;
  std::vector<float> a(kHeadDim, 0.5f), b(kHeadDim, 0.5f);
  const int32_t at = 90, by = -10, direct = 80;
  backend.rope(a.data(), 1, 1, kHeadDim, {&at, 1}, rope);
  backend.rope(a.data(), 1, 1, kHeadDim, {&by, 1}, wrong);
  backend.rope(b.data(), 1, 1, kHeadDim, {&direct, 1}, rope);
  float err = 0.0f;
  for (int64_t i = 0; i < kHeadDim; ++i) err = std::max(err, std::abs(a[i] - b[i]));
  EXPECT_GT(err, 0.05f);
}

// ---- KvCache::shift moves rows where the next token reads them ---------------------------

constexpr int64_t kHeads = 2;
constexpr int64_t kHeadDim = 32;

// A value that names layer, origin, K or V and element, so a misplaced row shows; exact
// in float, also with quarters added.
float pattern(int64_t il, int64_t origin, bool is_k, int64_t i) {
  return static_cast<float>(il * 100000 + origin * 100 + (is_k ? 0 : 50) + i % 50);
}

// What each position holds: the row written for `origin`, its K turned `turns` times.
struct Slot {
  int64_t origin = 0;
  int turns = 0;
};

// Writes positions kv.n_tokens() .. n_ctx - 1 (origins from *next on) in batches, as a model.
void fill(KvCache& kv, int64_t n_batch, std::vector<Slot>& slots, int64_t* next) {
  while (kv.n_tokens() < kv.n_ctx()) {
    const int64_t from = kv.n_tokens();
    const int64_t end = std::min(kv.n_ctx(), from + n_batch);
    for (int64_t p = from; p < end; ++p) slots.push_back({(*next)++, 0});
    for (int64_t il = 0; il < kv.n_layer(); ++il) {
      for (int64_t p = from; p < end; ++p) {
        for (const bool is_k : {true, false}) {
          std::span<uint8_t> row = is_k ? kv.k_row(il, p) : kv.v_row(il, p);
          auto* f = reinterpret_cast<float*>(row.data());
          for (int64_t i = 0; i < kHeads * kHeadDim; ++i) {
            f[i] = pattern(il, slots[static_cast<size_t>(p)].origin, is_k, i);
          }
        }
      }
    }
    kv.set_n_tokens(end);
  }
}

TEST(KvCacheShift, MovesFullLayersAndRingsAndTurnsMovedKeys) {
  // Layers: full, windows of 8 and 20, full; with n_batch b the rings have 7 + b and 19 + b
  // rows (fewer than the context, but for b 30 the second).
  const std::vector<int64_t> windows = {0, 8, 20, 0};
  const int64_t n_layer = static_cast<int64_t>(windows.size());
  for (const auto& [n_ctx, n_keep, n_batch] :
       {std::tuple{48, 4, 4}, std::tuple{48, 0, 4}, std::tuple{40, 10, 18}, std::tuple{40, 10, 30},
        std::tuple{64, 1, 1}}) {
    SCOPED_TRACE("n_ctx " + std::to_string(n_ctx) + ", keep " + std::to_string(n_keep) +
                 ", n_batch " + std::to_string(n_batch));
    Result<KvCache> made =
        KvCache::create(n_layer, n_ctx, kHeads, kHeadDim, DType::kF32, windows, n_batch);
    ASSERT_TRUE(made.ok());
    KvCache& kv = *made;
    std::vector<Slot> slots;
    int64_t next = 0;
    for (int shift = 0; shift < 3; ++shift) {
      fill(kv, n_batch, slots, &next);
      const int64_t d = (n_ctx - n_keep) / 2;
      ASSERT_EQ(kv.shift_problem(n_keep, d), "");
      std::vector<int64_t> turned(static_cast<size_t>(n_layer));
      kv.shift(n_keep, d, [&](int64_t il, float* k, int64_t n_rows) {
        turned[static_cast<size_t>(il)] += n_rows;
        for (int64_t i = 0; i < n_rows * kHeads * kHeadDim; ++i) k[i] += 0.25f;
      });
      ASSERT_EQ(kv.n_tokens(), n_ctx - d);
      slots.erase(slots.begin() + n_keep, slots.begin() + n_keep + d);
      for (size_t p = static_cast<size_t>(n_keep); p < slots.size(); ++p) ++slots[p].turns;
      // Full layers turn every moved row, rings at most those they hold.
      EXPECT_EQ(turned[0], n_ctx - d - n_keep);
      EXPECT_EQ(turned[3], n_ctx - d - n_keep);
      EXPECT_LE(turned[1], turned[0]);
      // Every row the next token reads holds its origin's, turned as often as it moved.
      const int64_t n = kv.n_tokens();
      for (int64_t il = 0; il < n_layer; ++il) {
        const int64_t w = windows[static_cast<size_t>(il)];
        for (int64_t p = w > 0 ? std::max<int64_t>(0, n - w + 1) : 0; p < n; ++p) {
          const Slot& s = slots[static_cast<size_t>(p)];
          for (const bool is_k : {true, false}) {
            std::span<const uint8_t> row =
                is_k ? std::as_const(kv).k_row(il, p) : std::as_const(kv).v_row(il, p);
            const auto* f = reinterpret_cast<const float*>(row.data());
            const float want = pattern(il, s.origin, is_k, 7) + (is_k ? 0.25f * s.turns : 0.0f);
            ASSERT_EQ(f[7], want) << "shift " << shift << ", layer " << il << ", position " << p
                                  << (is_k ? " K" : " V") << ", origin " << s.origin;
          }
        }
      }
      // The rings say they hold what the next token reads, and no more than the shift left.
      for (int64_t il = 1; il <= 2; ++il) {
        const int64_t first_read = std::max<int64_t>(0, n - windows[static_cast<size_t>(il)] + 1);
        EXPECT_LE(kv.first_held(il), first_read) << "layer " << il;
        EXPECT_GE(kv.first_held(il), std::max<int64_t>(0, n - kv.layer_rows(il))) << "layer " << il;
      }
    }
  }
}

TEST(KvCacheShift, ProblemWhenARingLostKeptPositionsItsWindowReads) {
  // A window of 16 in a ring of 19 rows (n_batch 4), context 32, keeping 4: the shift drops
  // 14, the next token (at 18) reads from 3, but the ring holds only 13 .. 31 before.
  const std::vector<int64_t> windows = {0, 16};
  Result<KvCache> kv = KvCache::create(2, 32, kHeads, kHeadDim, DType::kF32, windows, 4);
  ASSERT_TRUE(kv.ok());
  kv->set_n_tokens(32);
  const std::string problem = kv->shift_problem(4, 14);
  EXPECT_NE(problem.find("layer 1's sliding window of 16"), std::string::npos) << problem;
  EXPECT_NE(problem.find("ring of 19 rows"), std::string::npos) << problem;
  EXPECT_EQ(kv->shift_problem(0, 16), "") << "keeping nothing, the window reads moved rows";
}

// ---- After a shift, the next logits are a fresh pass's over what was kept ---------------
//
// Only for one-layer models can this hold exactly: there the cached K and V of a token
// depend on the token and its position alone. In deeper layers they also depend on what
// the token attended to when it was fed, dropped tokens included, and a shift (in qrun as
// in llama.cpp) keeps them; a fresh pass over the kept tokens computes them without the
// dropped ones. So the logits comparison runs on one-layer models of each architecture,
// and the per-layer RoPE of deeper models is checked on the cache rows (further below).

struct SynthCase {
  const char* arch;
  int64_t window = 0;     // gemma3: the local layers' window
  int64_t rope_dims = 0;  // phi3: rotate fewer than head_dim
  int64_t orig_ctx = 0;   // phi3: LongRoPE factors and attention factor below the training ctx
  int64_t n_layer = 1;
  float rope_base = 10000.0f;  // gemma3: the global layers' (the local ones keep 10000)
};

// A synthetic model of c.n_layer layers with heads of 32, F32 weights (gemma3: every
// sixth layer global, the others local).
gguf::File synth(const SynthCase& c) {
  Result<gguf::File> vocab =
      gguf::File::open(test::data_path("vocab/ggml-vocab-llama-spm.gguf").string());
  EXPECT_TRUE(vocab.ok());
  models::SynthOptions o;
  o.arch = c.arch;
  o.shape = *models::synth_preset("tiny");
  o.shape.head_dim = 32;
  o.shape.sliding_window = c.window;
  o.shape.rope_dims = c.rope_dims;
  o.shape.rope_orig_ctx = c.orig_ctx;
  o.shape.n_layer = c.n_layer;
  o.shape.rope_freq_base = c.rope_base;
  o.recipe = "f32";
  o.weight_std = 0.1f;
  const std::string path =
      (test::temp_dir() / (std::string(c.arch) + "-w" + std::to_string(c.window) + "-l" +
                           std::to_string(c.n_layer) + "-shift.gguf"))
          .string();
  EXPECT_TRUE(models::write_synthetic_model(o, *vocab, path).ok());
  Result<gguf::File> file = gguf::File::open(path);
  EXPECT_TRUE(file.ok()) << file.error().message;
  return std::move(*file);
}

// max |a - b| / max |b|
double relative_max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

struct ShiftRun {
  int64_t n_ctx = 48;
  int64_t n_keep = 4;
  int n_shifts = 3;
  bool turn = true;  // false: move keys without turning them (a wrong shift, to show failure)
};

// Fills a cache of r.n_ctx with tokens, shifts it, feeds one token, and compares its logits
// with a fresh pass over the tokens the shifted cache stands for; then fills up again and
// repeats, r.n_shifts times. Returns the largest relative_max_diff.
double shifted_against_fresh(const gguf::File& file, int64_t n_batch, KvTypes types,
                             const ShiftRun& r) {
  Result<std::unique_ptr<Model>> loaded = models::load_model(file, ModelOptions{n_batch});
  EXPECT_TRUE(loaded.ok()) << loaded.error().message;
  Model& m = **loaded;
  kernels::CpuBackend backend(2);
  Result<KvCache> made = make_kv_cache(m, r.n_ctx, types);
  EXPECT_TRUE(made.ok());
  KvCache& kv = *made;
  EXPECT_TRUE(check_context_shift(m, kv, r.n_keep).ok());
  const int64_t n_vocab = m.hparams().n_vocab;
  int64_t next = 0;
  const auto token = [&] { return static_cast<int32_t>((next++ * 7919 + 13) % n_vocab); };
  std::vector<int32_t> held;  // the tokens the cache stands for, in position order
  std::vector<float> shifted(static_cast<size_t>(n_vocab));
  std::vector<float> fresh(static_cast<size_t>(n_vocab));
  double worst = 0.0;
  for (int shift = 0; shift < r.n_shifts; ++shift) {
    std::vector<int32_t> fill;
    while (kv.n_tokens() + static_cast<int64_t>(fill.size()) < r.n_ctx) fill.push_back(token());
    EXPECT_TRUE(m.forward(backend, fill, kv.n_tokens(), kv, false, shifted.data()).ok());
    held.insert(held.end(), fill.begin(), fill.end());

    const int64_t d = (r.n_ctx - r.n_keep) / 2;
    if (r.turn) {
      const Result<void> ok = shift_context(m, backend, kv, r.n_keep, d);
      EXPECT_TRUE(ok.ok()) << ok.error().message;
    } else {
      kv.shift(r.n_keep, d, [](int64_t, float*, int64_t) {});
    }
    held.erase(held.begin() + r.n_keep, held.begin() + r.n_keep + d);
    const int32_t t = token();
    EXPECT_TRUE(m.forward(backend, {&t, 1}, kv.n_tokens(), kv, false, shifted.data()).ok());
    held.push_back(t);

    Result<KvCache> again = make_kv_cache(m, r.n_ctx, types);
    EXPECT_TRUE(again.ok());
    EXPECT_TRUE(m.forward(backend, held, 0, *again, false, fresh.data()).ok());
    worst = std::max(worst, relative_max_diff(shifted, fresh));
  }
  return worst;
}

// Measured (max |shifted - fresh| / max |fresh| over three shifts of a 48-position context
// keeping 4, or 40 keeping 10, worst over the five models): F32 K 6.3e-5 (llama; 3e-7 for
// neox models: the angles of p and of p - d are rounded differently), F16 1.0e-3, BF16
// 3.2e-3 (a turned key is rounded to the type once more), Q8_0 8.8e-3 and Q4_0 0.12
// (requantized, as llama.cpp does). The bounds are about twice that. Without the turn the
// difference is 0.3 or more.
double tolerance(DType k_type) {
  switch (k_type) {
    case DType::kF32:
      return 1.5e-4;
    case DType::kF16:
      return 2.5e-3;
    case DType::kBF16:
      return 7e-3;
    case DType::kQ8_0:
      return 2e-2;
    default:
      return 0.25;
  }
}

TEST(ContextShiftLogits, NextTokenAfterAShiftMatchesAFreshPass) {
  const SynthCase cases[] = {
      {"llama"},            // normal RoPE
      {"qwen2"},            // neox, Q/K/V biases
      {"phi3", 0, 24, 64},  // neox on 24 of 32, LongRoPE factors, attention factor
      {"gemma3", 8},        // rings that wrap many times
      {"gemma3", 20},       // windows that read kept positions after a shift
  };
  for (const SynthCase& c : cases) {
    const gguf::File file = synth(c);
    for (const DType k : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
      // gemma3 with a window of 20: batches of 18 make rings of 37 rows that still hold
      // kept positions; otherwise batches of 4.
      const int64_t n_batch = c.window == 20 ? 18 : 4;
      ShiftRun run;
      if (c.window == 20) {
        run.n_ctx = 40;
        run.n_keep = 10;
      }
      const double diff = shifted_against_fresh(file, n_batch, KvTypes(k, DType::kF16), run);
      std::printf("%-7s window %2lld  K %-4s: max relative logit difference %.3g\n", c.arch,
                  static_cast<long long>(c.window), dtype_name(k), diff);
      EXPECT_LE(diff, tolerance(k)) << c.arch << " window " << c.window << ", K " << dtype_name(k);
    }
  }
}

TEST(ContextShiftLogits, WithoutTurningTheKeysTheComparisonFails) {
  for (const SynthCase& c : {SynthCase{"llama"}, SynthCase{"phi3", 0, 24, 64}}) {
    const gguf::File file = synth(c);
    ShiftRun run;
    run.n_shifts = 1;
    run.turn = false;
    const double diff = shifted_against_fresh(file, 4, DType::kF32, run);
    std::printf("%-7s without the turn: max relative logit difference %.3g\n", c.arch, diff);
    EXPECT_GT(diff, 1000 * tolerance(DType::kF32)) << c.arch;
  }
}

TEST(ContextShiftLogits, AttentionFactorIsNotAppliedTwice) {
  // phi3's LongRoPE scales keys by its attention factor (about 1.22 here) when they are
  // stored; turning them with the factor again would scale them once more.
  const gguf::File file = synth({"phi3", 0, 24, 64});
  Result<std::unique_ptr<Model>> m = models::load_model(file, ModelOptions{4});
  ASSERT_TRUE(m.ok());
  const std::optional<RopeParams> rope = (*m)->key_rope(0, 48);
  ASSERT_TRUE(rope.has_value());
  EXPECT_GT(rope->attn_factor, 1.1f);
  EXPECT_NE(rope->freq_factors, nullptr);
}

// ---- Deeper models: each layer's keys turn with that layer's RoPE -----------------------

// Neox RoPE of every head of a row, turned by `delta` positions with `base`, in double.
std::vector<double> neox_turned(std::span<const float> row, int64_t head_dim, int64_t delta,
                                double base) {
  std::vector<double> out(row.begin(), row.end());
  const int64_t half = head_dim / 2;
  for (size_t h = 0; h * head_dim < row.size(); ++h) {
    for (int64_t i = 0; i < half; ++i) {
      const double theta = static_cast<double>(delta) * std::pow(base, -2.0 * i / head_dim);
      const size_t a = h * head_dim + i;
      const size_t b = a + half;
      out[a] = row[a] * std::cos(theta) - row[b] * std::sin(theta);
      out[b] = row[a] * std::sin(theta) + row[b] * std::cos(theta);
    }
  }
  return out;
}

TEST(ContextShiftLayers, EachLayerTurnsItsKeysWithItsOwnRope) {
  // gemma3, 6 layers: 0 .. 4 local (window 8, RoPE base 10000), 5 global (base 1e6).
  const gguf::File file = synth({"gemma3", 8, 0, 0, 6, 1e6f});
  Result<std::unique_ptr<Model>> m = models::load_model(file, ModelOptions{4});
  ASSERT_TRUE(m.ok());
  kernels::CpuBackend backend(2);
  Result<KvCache> kv = make_kv_cache(**m, 48, DType::kF32);
  ASSERT_TRUE(kv.ok());
  std::vector<int32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7919 % 32000);
  std::vector<float> logits(static_cast<size_t>((*m)->hparams().n_vocab));
  ASSERT_TRUE((*m)->forward(backend, tokens, 0, *kv, false, logits.data()).ok());
  const KvCache before = [&] {  // a copy of every row, through the row accessors
    Result<KvCache> c = make_kv_cache(**m, 48, DType::kF32);
    for (int64_t il = 0; il < kv->n_layer(); ++il) {
      for (int64_t p = kv->first_held(il); p < 48; ++p) {
        std::ranges::copy(std::as_const(*kv).k_row(il, p), c->k_row(il, p).begin());
        std::ranges::copy(std::as_const(*kv).v_row(il, p), c->v_row(il, p).begin());
      }
    }
    return std::move(*c);
  }();
  const int64_t keep = 4;
  const int64_t d = 22;
  ASSERT_TRUE(shift_context(**m, backend, *kv, keep, d).ok());
  const auto floats = [](std::span<const uint8_t> row) {
    return std::span<const float>(reinterpret_cast<const float*>(row.data()), row.size() / 4);
  };
  for (int64_t il = 0; il < kv->n_layer(); ++il) {
    const double base = il == 5 ? 1e6 : 1e4;
    double err = 0.0;
    double err_other_base = 0.0;  // what a layer turned with the other layers' base is off by
    for (int64_t q = std::max(keep, kv->first_held(il)); q < 48 - d; ++q) {
      const std::span<const float> src = floats(before.k_row(il, q + d));
      const std::span<const float> got = floats(std::as_const(*kv).k_row(il, q));
      const std::vector<double> want = neox_turned(src, kHeadDim, -d, base);
      const std::vector<double> other = neox_turned(src, kHeadDim, -d, il == 5 ? 1e4 : 1e6);
      for (size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, std::abs(got[i] - want[i]));
        err_other_base = std::max(err_other_base, std::abs(got[i] - other[i]));
      }
      ASSERT_TRUE(std::ranges::equal(std::as_const(*kv).v_row(il, q), before.v_row(il, q + d)))
          << "layer " << il << " position " << q;
    }
    // Measured: at most 1.7e-6 per element; with the other base, 5 or more.
    EXPECT_LT(err, 1e-5) << "layer " << il;
    EXPECT_GT(err_other_base, 0.5) << "layer " << il;
  }
}

TEST(ContextShiftLayers, LayersWithoutRopeKeepTheirKeys) {
  // smollm3, 4 layers: layer 3 attends without RoPE, so a shift moves its keys unturned;
  // the others' keys turn (llama's normal RoPE, checked above).
  const gguf::File file = synth({"smollm3", 0, 0, 0, 4});
  Result<std::unique_ptr<Model>> m = models::load_model(file, ModelOptions{4});
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ((*m)->key_rope(3, 48)->n_rot, 0);
  EXPECT_EQ((*m)->key_rope(2, 48)->n_rot, kHeadDim);
  kernels::CpuBackend backend(2);
  Result<KvCache> kv = make_kv_cache(**m, 48, DType::kF32);
  ASSERT_TRUE(kv.ok());
  std::vector<int32_t> tokens(48);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 7919 % 32000);
  std::vector<float> logits(static_cast<size_t>((*m)->hparams().n_vocab));
  ASSERT_TRUE((*m)->forward(backend, tokens, 0, *kv, false, logits.data()).ok());
  const int64_t keep = 4;
  const int64_t d = 22;
  std::vector<std::vector<uint8_t>> k3, k2;  // layers 3 and 2's moved keys, before the shift
  for (int64_t q = keep; q < 48 - d; ++q) {
    const std::span<const uint8_t> r3 = std::as_const(*kv).k_row(3, q + d);
    const std::span<const uint8_t> r2 = std::as_const(*kv).k_row(2, q + d);
    k3.emplace_back(r3.begin(), r3.end());
    k2.emplace_back(r2.begin(), r2.end());
  }
  ASSERT_TRUE(shift_context(**m, backend, *kv, keep, d).ok());
  for (int64_t q = keep; q < 48 - d; ++q) {
    const auto i = static_cast<size_t>(q - keep);
    EXPECT_TRUE(std::ranges::equal(std::as_const(*kv).k_row(3, q), k3[i])) << "position " << q;
    EXPECT_FALSE(std::ranges::equal(std::as_const(*kv).k_row(2, q), k2[i])) << "position " << q;
  }
}

TEST(ContextShift, KeepFollowsLlamaCpp) {
  EXPECT_EQ(resolve_keep(-1, 12, true), 12);  // the whole prompt
  EXPECT_EQ(resolve_keep(40, 12, true), 12);  // more than the prompt: the prompt
  EXPECT_EQ(resolve_keep(0, 12, true), 1);    // BOS is always kept
  EXPECT_EQ(resolve_keep(0, 12, false), 0);
  EXPECT_EQ(resolve_keep(5, 12, true), 6);
  EXPECT_EQ(resolve_keep(12, 12, true), 12);
}

TEST(ContextShift, ChecksBeforeGeneration) {
  const gguf::File gemma = synth({"gemma3", 16});
  Result<std::unique_ptr<Model>> m = models::load_model(gemma, ModelOptions{4});
  ASSERT_TRUE(m.ok());
  // Rings of 19 rows for a window of 16; a context of 32 keeping 4 loses kept positions.
  Result<KvCache> small = make_kv_cache(**m, 32, DType::kF16);
  ASSERT_TRUE(small.ok());
  Result<void> r = check_context_shift(**m, *small, 4);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);
  EXPECT_NE(r.error().message.find("Use -c 33 or more"), std::string::npos) << r.error().message;
  // The context it names works: after dropping 14 of 33, the window of the token at 19
  // starts at 4, the first moved position.
  Result<KvCache> enough = make_kv_cache(**m, 33, DType::kF16);
  ASSERT_TRUE(enough.ok());
  EXPECT_TRUE(check_context_shift(**m, *enough, 4).ok());
  // Keeping all but one position leaves nothing to drop.
  r = check_context_shift(**m, *enough, 32);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("leaves nothing to drop"), std::string::npos);
}

// ---- generate() with a context shift ---------------------------------------------------

TEST(ContextShiftGenerate, GoesPastTheContextOrStopsWhenNothingCanBeDropped) {
  Result<gguf::File> file = gguf::File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(file.ok());
  Result<std::unique_ptr<Model>> m = models::load_model(*file, ModelOptions{16});
  ASSERT_TRUE(m.ok());
  kernels::CpuBackend backend(2);
  const std::vector<int32_t> prompt = {1, 400, 401, 402, 403};
  const auto run = [&](int64_t n_ctx, int64_t n_predict, ContextShiftParams shift) {
    Result<KvCache> kv = make_kv_cache(**m, n_ctx, DType::kF32);
    EXPECT_TRUE(kv.ok());
    Sampler greedy = make_sampler(SamplingParams{0.0f, 0});
    GenerateParams p;
    p.n_predict = n_predict;
    p.context_shift = std::move(shift);
    return generate(**m, backend, *kv, prompt, p, greedy, nullptr, nullptr);
  };
  std::vector<ContextShift> seen;
  ContextShiftParams on{true, 2, [&](const ContextShift& c) { seen.push_back(c); }};
  Result<GenerateResult> r = run(32, 100, on);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->tokens.size(), 100u);
  EXPECT_EQ(r->stop_reason, StopReason::kLength);
  // 5 + 99 tokens fed into 32 positions, 15 dropped each time: a shift before the 28th, 43rd,
  // 58th, 73rd and 88th generated token is fed.
  ASSERT_EQ(r->n_context_shifts, 5);
  ASSERT_EQ(seen.size(), 5u);
  for (const ContextShift& c : seen) {
    EXPECT_EQ(c.n_past, 32);
    EXPECT_EQ(c.n_keep, 2);
    EXPECT_EQ(c.n_discard, 15);
  }
  // Keeping 31 of 32 drops nothing: generation stops at the context end, as without a shift.
  r = run(32, 100, ContextShiftParams{true, 31, nullptr});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, StopReason::kContext);
  EXPECT_EQ(r->tokens.size(), 28u);
  EXPECT_EQ(r->n_context_shifts, 0);
  // Keeping more than the context is a usage error.
  r = run(32, 100, ContextShiftParams{true, 33, nullptr});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUsage);
}

}  // namespace
}  // namespace qrun
