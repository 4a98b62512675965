// Weight types beyond the ones the shared models carry, each against llama.cpp's logits and
// greedy tokens on a model `qrun synth` writes in that type (references in tests/data, see
// its README). Every matrix of the model is of the type (the output and embeddings too), so
// a wrong level, scale or activation sum in any kernel moves every row.
#include <gtest/gtest.h>

#include "tests/support/llamacpp_rows.h"

namespace qrun {
namespace {

// Q4_1 and Q5_1 (x = d * q + m) dot against Q8_1 activations, whose F16 d * sum(q) the
// block minimum multiplies (llama.cpp's CPU format). Measured: every row's normalized squared
// error from llama.cpp's at most 6e-15 for both, on generic, AVX2 and AVX-512 (float
// rounding); 1e-6 is the bound of the other synthetic references.
TEST(ForwardQuantTypes, Q4_1MatchesLlamaCpp) {
  test::expect_synth_matches_llamacpp("--arch llama --like tiny --type q4_1 --std 0.1 --seed 7",
                                      5136181202136917423ull, "llama_q4_1_tiny_llamacpp.txt", 1e-6);
}

TEST(ForwardQuantTypes, Q5_1MatchesLlamaCpp) {
  test::expect_synth_matches_llamacpp("--arch llama --like tiny --type q5_1 --std 0.1 --seed 7",
                                      8607825402455746579ull, "llama_q5_1_tiny_llamacpp.txt", 1e-6);
}

}  // namespace
}  // namespace qrun
