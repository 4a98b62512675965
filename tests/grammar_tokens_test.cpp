// llama.cpp's whole-token grammar elements: <[id]>, <text> (the one token a text encodes
// to) and their negations !<...>. Parsed into kToken / kTokenNot, bound to a vocabulary
// (errors name the element), followed by the matcher and the constraint stage (every
// answer of allows() equal to apply()'s mask at every step, tokens with empty pieces
// reachable only through token elements), and end to end through `qrun run --grammar`.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "core/grammar/grammar.h"
#include "core/grammar/grammar_stage.h"
#include "core/sampling/sampling.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

std::shared_ptr<const Grammar> parse_ok(const std::string& text) {
  Result<Grammar> g = parse_grammar(text);
  EXPECT_TRUE(g.ok()) << text << "\n" << (g.ok() ? "" : g.error().message);
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

std::string parse_error(const std::string& text) {
  Result<Grammar> g = parse_grammar(text);
  EXPECT_FALSE(g.ok()) << "accepted: " << text;
  return g.ok() ? "" : g.error().message;
}

TEST(GrammarTokens, ParseIntoTokenElements) {
  const auto g = parse_ok("root ::= <[10]> !<[11]> <think> !<think> <[10]>*");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(g->has_tokens);
  ASSERT_EQ(g->token_texts, std::vector<std::string>{"<think>"});  // once, brackets kept
  const std::vector<GrammarElement>& root = g->rules[g->root];
  EXPECT_EQ(root[0].op, GrammarOp::kToken);
  EXPECT_EQ(root[0].value, 10u);
  EXPECT_EQ(root[1].op, GrammarOp::kTokenNot);
  EXPECT_EQ(root[1].value, 11u);
  EXPECT_EQ(root[2].op, GrammarOp::kToken);
  EXPECT_EQ(root[2].value, Grammar::kTokenText | 0u);
  EXPECT_EQ(root[3].op, GrammarOp::kTokenNot);
  EXPECT_EQ(root[3].value, Grammar::kTokenText | 0u);
  EXPECT_FALSE(parse_ok("root ::= \"a\"")->has_tokens);
  // A token consumes: recursion behind one is not left recursion.
  EXPECT_NE(parse_ok("root ::= <[1]> root | \"x\""), nullptr);
  EXPECT_NE(parse_error("root ::= root <[1]> | \"x\"").find("left-recursive"), std::string::npos);
}

TEST(GrammarTokens, MalformedElementsAreRefusedWhereTheyStand) {
  EXPECT_EQ(parse_error("root ::= <[x]>"), "line 1, column 12: expected a token id after '<['");
  EXPECT_EQ(parse_error("root ::= <[12>"), "line 1, column 14: expected ']' after the token id");
  EXPECT_EQ(parse_error("root ::= <[12]"),
            "line 1, column 15: expected '>' closing the token "
            "element");
  EXPECT_EQ(parse_error("root ::= <think\nx ::= \"a\""),
            "line 1, column 16: expected '>' closing the token element");
  EXPECT_EQ(parse_error("root ::= <>"),
            "line 1, column 11: expected a token's text or [id] inside '<>'");
  EXPECT_EQ(parse_error("root ::= <[99999999999]>"),
            "line 1, column 12: expected a token id below 2^31");
}

// Token 0 is EOS; 9 is a control token (no text); 7 and 8 are the think markers.
struct Vocab {
  std::vector<std::string> pieces{"",  "yes",     "no",       "y", "es", "n",
                                  "o", "<think>", "</think>", "",  "x"};
  std::vector<uint8_t> eog{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
};

std::unique_ptr<ConstraintStage> stage_for(const std::string& grammar, const Vocab& v) {
  Result<std::unique_ptr<ConstraintStage>> s =
      make_grammar_stage(parse_ok(grammar), v.pieces, v.eog);
  EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
  return s.ok() ? std::move(*s) : nullptr;
}

// The tokens allowed now, by allows(); apply() and allows_each() must agree with it.
std::vector<int32_t> allowed_tokens(ConstraintStage& s, size_t n) {
  std::vector<int32_t> out;
  CandidateList c;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) {
    c.items.push_back({static_cast<int32_t>(i), 1.0f});
    ids.push_back(static_cast<int32_t>(i));
  }
  std::mt19937 rng(0);
  s.apply(c, rng);
  std::vector<uint8_t> each(n);
  s.allows_each(ids, each);
  for (size_t i = 0; i < n; ++i) {
    const bool yes = s.allows(static_cast<int32_t>(i));
    EXPECT_EQ(yes, c.items[i].logit != -std::numeric_limits<float>::infinity()) << "token " << i;
    EXPECT_EQ(yes, each[i] != 0) << "token " << i;
    if (yes) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

using Ids = std::vector<int32_t>;

TEST(GrammarTokens, ThinkingBetweenMarkerTokens) {
  const Vocab v;
  // llama.cpp's example: a thought of any tokens but the closing marker, then an answer.
  const auto s = stage_for("root ::= <think> (!</think>)* </think> (\"yes\" | \"no\")", v);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{7}));  // only the marker token, not its letters
  s->accept(7);
  // Any token but EOS, the control token 9 included (it has no text to spell).
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  s->accept(9);
  s->accept(10);
  s->accept(7);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  s->accept(8);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{1, 2, 3, 5}));  // text again
  s->accept(5);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{6}));
  s->accept(6);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{0}));
  EXPECT_TRUE(s->complete());
  s->reset();
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{7}));
}

TEST(GrammarTokens, TextAndTokenPathsTogether) {
  const Vocab v;
  // "<think>" as a string is the text of token 7 (and of nothing shorter in this vocabulary);
  // <[9]> is the one way to the control token.
  const auto s = stage_for("root ::= (\"<think>\" | <[9]>) \"x\" | <[9]> \"y\" \"es\"", v);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{7, 9}));
  s->accept(9);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{1, 3, 10}));  // both alternatives after <[9]>
  s->accept(1);
  EXPECT_EQ(allowed_tokens(*s, 11), (Ids{0}));

  // Two different negations together allow every token; one keeps its own out.
  const auto both = stage_for("root ::= !<[1]> | !<[2]>", v);
  EXPECT_EQ(allowed_tokens(*both, 11), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  const auto one = stage_for("root ::= !<[1]> | \"yes\"", v);
  EXPECT_EQ(allowed_tokens(*one, 11), (Ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));  // 1 by its text
  const auto only = stage_for("root ::= !<[1]> | \"no\"", v);
  EXPECT_EQ(allowed_tokens(*only, 11), (Ids{2, 3, 4, 5, 6, 7, 8, 9, 10}));
  only->accept(5);  // "n": by !<[1]> (complete) and by "no" (needs "o")
  EXPECT_EQ(allowed_tokens(*only, 11), (Ids{0, 6}));
}

TEST(GrammarTokens, BindingToAVocabulary) {
  const Vocab v;
  auto refused = [&](const std::string& grammar) {
    Result<std::unique_ptr<ConstraintStage>> s =
        make_grammar_stage(parse_ok(grammar), v.pieces, v.eog);
    EXPECT_FALSE(s.ok()) << grammar;
    return s.ok() ? "" : s.error().message;
  };
  EXPECT_EQ(refused("root ::= <[11]>"),
            "the grammar's token element <[11]> is outside the vocabulary of 11 tokens");
  EXPECT_EQ(refused("root ::= \"x\" !<maybe>"),
            "the grammar's token element <maybe> is 0 tokens in this vocabulary, not one "
            "(write <[id]> or the text as a string)");
  // With a tokenizer, the text is what it encodes to, and must be one token.
  auto vocab = make_grammar_vocab(v.pieces, [](std::string_view text) {
    return text == "<think>" ? std::vector<int32_t>{7} : std::vector<int32_t>{3, 4};
  });
  EXPECT_TRUE(make_grammar_stage(parse_ok("root ::= <think>"), vocab, v.eog).ok());
  Result<std::unique_ptr<ConstraintStage>> two =
      make_grammar_stage(parse_ok("root ::= <yes>"), vocab, v.eog);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("<yes> is 2 tokens"), std::string::npos);
}

// `qrun run --grammar` on a real vocabulary: the ids and the text form, greedy.
TEST(GrammarTokens, RunFollowsTokenElements) {
  const std::string model = test::data_path("models/TinyLLama-v0-5M-Q4_0.gguf").string();
  const std::string base =
      test::qrun_binary().string() + " run -q --json --temp 0 -t 1 -m " + model + " -p 'Once' ";
  // 1576 and 13 are ordinary tokens; three tokens that are not 13 follow 1576, then the end.
  test::CommandResult r = test::run_command(base + "--grammar 'root ::= <[1576]> (!<[13]>){3}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tokens"].size(), 4u) << r.out;
  EXPECT_EQ(j["tokens"][0], 1576);
  for (size_t i = 1; i < 4; ++i) EXPECT_NE(j["tokens"][i], 13) << r.out;
  EXPECT_EQ(j["stop_reason"], "eos");
  // <s> is the BOS control token: reachable through the element, never as text.
  r = test::run_command(base + "--grammar 'root ::= \"Hi\" <s>'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json k = nlohmann::json::parse(r.out);
  ASSERT_GE(k["tokens"].size(), 2u) << r.out;
  EXPECT_EQ(k["tokens"].back(), 1) << r.out;
  r = test::run_command(base + "--grammar 'root ::= <not one token>'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("token element <not one token> is "), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qrun
