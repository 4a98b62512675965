// llama.cpp's logits for a synthetic model, as scripts/llamacpp_logits prints them
// (tests/data/*_llamacpp.txt, see tests/data/README.md): one line per position,
// `row <position> <argmax> <logits of ids 0, 128, 256, ...>`. Shared by the forward tests
// that compare qrun with those rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qrun::test {

inline constexpr int kLlamaCppRowStride = 128;  // the rows keep logits of every 128th id

struct LlamaCppRow {
  int pos = 0;
  int argmax = 0;              // llama.cpp's argmax over the whole vocabulary
  std::vector<double> logits;  // ids 0, 128, 256, ...
};

// The rows of tests/data/<name> (empty if the file cannot be read).
std::vector<LlamaCppRow> read_llamacpp_rows(const std::string& name);

// sum (a - ref)^2 / sum ref^2 over the reference's ids; `logits` is a full row.
double nmse_strided(const float* logits, const LlamaCppRow& ref);

// Writes the model `qrun synth <synth_args> --vocab <llama-spm vocab>` makes (which must
// hash to `fnv`: the model the reference was computed on) and compares its logits with the
// rows of tests/data/<ref_name> (16 rows: the prompt `1 450 4996 338 263 1243 29889 13` in
// one pass, then 8 greedy steps one token at a time, feeding back llama.cpp's argmax as
// llama.cpp did), on the CPU backend with an F16 KV cache (llama.cpp ran with flash
// attention, which rounds K and V to F16). Each row's NMSE must be below max_nmse and its
// argmax llama.cpp's (gtest failures), except that up to `tie_rows` rows may reach
// kActivationTieNmse: with quantized activations, an element that lies at a rounding tie of
// its level (to within the ulps by which two implementations' floats differ) can take the
// next level in one and not the other, which moves that one row alone. Returns the largest
// NMSE seen.
double expect_synth_matches_llamacpp(const std::string& synth_args, uint64_t fnv,
                                     const std::string& ref_name, double max_nmse,
                                     int tie_rows = 0);

// The NMSE one activation level flipped at a tie can put on a row: measured 1.2e-4 to
// 1.7e-4 on 256-wide Q8_K models (IQ4_XS, seeds 7, 8, 10), with 6x to spare. A wrong kernel
// moves every row, far above the bounds the tests use.
inline constexpr double kActivationTieNmse = 1e-3;

// FNV-1a 64 of a byte string: a test checks that `qrun synth` still writes the model the
// reference was computed on.
uint64_t fnv1a(const std::vector<uint8_t>& bytes);

}  // namespace qrun::test
