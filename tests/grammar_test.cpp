// The GBNF parser and matcher: every construct of the language accepted and rejected on
// strings, malformed grammars refused with line and column, left recursion and undefined
// rules refused, repetition bounds, partial UTF-8 across feeds, end only at an accepting
// point, the stack bound, and the grammar as a sampler constraint with its fast path.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "core/grammar/grammar.h"
#include "core/grammar/grammar_stage.h"
#include "core/sampling/sampling.h"

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
  if (g.ok()) return "";
  EXPECT_EQ(g.error().code, ErrorCode::kUsage);
  return g.error().message;
}

// The value of a matcher answer that must not be an error.
bool ok(const Result<bool>& r) {
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() && r.value();
}

// Whether the whole string is a sentence of the grammar.
bool matches(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Result<GrammarMatcher> m = GrammarMatcher::create(g);
  EXPECT_TRUE(m.ok());
  Result<bool> ok = m->accept(s);
  EXPECT_TRUE(ok.ok());
  return *ok && m->can_end();
}

void expect_language(const std::string& grammar, const std::vector<std::string>& yes,
                     const std::vector<std::string>& no) {
  const auto g = parse_ok(grammar);
  ASSERT_NE(g, nullptr);
  for (const std::string& s : yes)
    EXPECT_TRUE(matches(g, s)) << grammar << " should accept '" << s << "'";
  for (const std::string& s : no)
    EXPECT_FALSE(matches(g, s)) << grammar << " should reject '" << s << "'";
}

TEST(GrammarParse, LiteralsAlternationAndGrouping) {
  expect_language(R"(root ::= "yes" | "no")", {"yes", "no"}, {"", "y", "yesno", "maybe", "No"});
  expect_language(R"(root ::= "a" ("b" | "c") "d")", {"abd", "acd"}, {"ad", "abcd", "abd "});
  expect_language("root ::= greeting \" \" name\ngreeting ::= \"hi\" | \"hello\"\nname ::= [a-z]+",
                  {"hi bob", "hello x"}, {"hi", "hi Bob", "hey bob"});
  // Alternatives and sequences may continue on the next line inside parentheses and after |.
  expect_language("root ::= (\n  \"a\"\n  | \"b\"\n)\n", {"a", "b"}, {"ab"});
  expect_language("root ::= \"a\" |\n  \"b\"", {"a", "b"}, {""});
}

TEST(GrammarParse, RepetitionOperators) {
  expect_language(R"(root ::= "a"*)", {"", "a", "aaaa"}, {"b", "aab"});
  expect_language(R"(root ::= "a"+)", {"a", "aaa"}, {""});
  expect_language(R"(root ::= "a"?"b")", {"b", "ab"}, {"aab", "a"});
  expect_language(R"(root ::= "ab"{2})", {"abab"}, {"ab", "ababab", "aab"});
  expect_language(R"(root ::= "a"{2,})", {"aa", "aaaaa"}, {"", "a"});
  expect_language(R"(root ::= "a"{1,3})", {"a", "aa", "aaa"}, {"", "aaaa"});
  expect_language(R"(root ::= "a"{0,2} "b")", {"b", "ab", "aab"}, {"aaab"});
  expect_language(R"(root ::= ("x" | "y"){ 2 , 3 })", {"xy", "yyx"}, {"x", "xyxy"});
  expect_language(R"(root ::= [0-9]{3} "-" [0-9]{4})", {"555-1234"}, {"55-1234", "5555-123"});
}

TEST(GrammarParse, CharacterClasses) {
  expect_language(R"(root ::= [a-cx]+)", {"abcx", "x"}, {"d", "abd", ""});
  expect_language(R"(root ::= [^"\\]*)", {"abc", "", "é"}, {"a\"", "\\"});
  expect_language(R"(root ::= [^a-z])", {"A", "0", "€"}, {"a", "q"});
  expect_language(R"(root ::= [\[\]\-]+)", {"[]-"}, {"a"});
  expect_language(R"(root ::= [a-])", {"a", "-"}, {"b"});  // a trailing '-' is literal
  expect_language(R"(root ::= [\x41-\x43\u00e9])", {"A", "C", "é"}, {"D", "e"});
  expect_language(R"(root ::= [α-ω]+)", {"αβγ", "ω"}, {"a", "Ω"});
  expect_language(R"(root ::= . "!")", {"a!", "€!", "😀!"}, {"!", "ab!"});
}

TEST(GrammarParse, LiteralEscapesAndComments) {
  expect_language(R"(root ::= "a\nb\t\"\\")", {"a\nb\t\"\\"}, {"anbt"});
  expect_language(R"(root ::= "\x41\u00e9\U0001F600")", {"Aé😀"}, {"A"});
  expect_language("# a comment line\nroot ::= x # trailing comment\n\n# more\nx ::= \"ok\" # end",
                  {"ok"}, {"x"});
  expect_language("root ::= \"caf\xC3\xA9\"", {"café"}, {"cafe"});
}

TEST(GrammarParse, MalformedGrammarsNameLineAndColumn) {
  EXPECT_EQ(parse_error("root ::= \"abc"), "line 1, column 14: expected a closing '\"'");
  EXPECT_EQ(parse_error("root ::= \"a\"\nitem ::= [abc"),
            "line 2, column 14: expected a closing ']'");
  EXPECT_EQ(parse_error("root ::= (\"a\" | \"b\""), "line 1, column 20: expected ')' or '|'");
  EXPECT_EQ(parse_error("root = \"a\""), "line 1, column 6: expected '::=' after the rule name");
  EXPECT_EQ(parse_error("root ::= \"a\"\n  ::= \"b\""), "line 2, column 3: expected a rule name");
  EXPECT_EQ(parse_error("root ::= \"\\q\""),
            "line 1, column 11: expected a known escape (\\n \\t \\r \\\\ \\\" \\[ \\] \\- \\^ "
            "\\xHH \\uHHHH \\UHHHHHHHH)");
  EXPECT_EQ(parse_error("root ::= \"\\x4\""), "line 1, column 14: expected 2 hexadecimal digits");
  EXPECT_EQ(parse_error("root ::= * \"a\""),
            "line 1, column 10: expected something to repeat before '*'");
  EXPECT_EQ(parse_error("root ::= \"a\"{2"),
            "line 1, column 15: expected '}' or ',' in the repetition");
  EXPECT_EQ(parse_error("root ::= \"a\"{3,1}"),
            "line 1, column 17: expected an upper bound not below the lower bound");
  EXPECT_EQ(parse_error("root ::= [z-a]"),
            "line 1, column 13: expected a range whose end is not below its start");
  EXPECT_EQ(parse_error("root ::= []"),
            "line 1, column 11: expected at least one character in the class");
  EXPECT_EQ(parse_error("root ::= \"a\" )"), "line 1, column 14: expected a newline or the end");
  EXPECT_EQ(parse_error("root ::= \"a\"\nroot ::= \"b\""),
            "line 2, column 1: expected one definition per rule ('root' is defined twice)");
  EXPECT_EQ(parse_error(""), "the grammar has no 'root' rule");
  EXPECT_EQ(parse_error("item ::= \"a\""), "the grammar has no 'root' rule");
}

TEST(GrammarParse, UndefinedRulesAreRefusedWhereTheyAreUsed) {
  EXPECT_EQ(parse_error("root ::= \"a\" item\n# comment\nother ::= \"x\" | value"),
            "line 1, column 14: expected a defined rule ('item' is not defined)");
}

TEST(GrammarParse, LeftRecursionIsRefusedAtParseTime) {
  EXPECT_EQ(parse_error("root ::= root \"a\" | \"b\""),
            "the grammar is left-recursive: rule 'root' can reach itself without consuming a "
            "character");
  // Indirect, and through a nullable prefix.
  EXPECT_NE(parse_error("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"").find("left-recursive"),
            std::string::npos);
  EXPECT_NE(parse_error("root ::= opt root \"x\" | \"y\"\nopt ::= \"z\"?").find("left-recursive"),
            std::string::npos);
  // Through a nullable prefix, the rest of the alternative after the reference grows the
  // stack at every turn.
  EXPECT_EQ(parse_error("root ::= (\"a\"? root \"b\")* \"c\""),
            "the grammar is left-recursive: rule 'root' can reach itself without consuming a "
            "character");
  // Right recursion is fine.
  expect_language("root ::= \"a\" root | \"b\"", {"b", "aab"}, {"a"});
}

// A repetition of something that can match nothing reaches itself without consuming a
// character, but only through tail references, which come back to a stack the matcher has
// already expanded: llama.cpp takes these (test-grammar-integration's "segfault" case).
TEST(GrammarParse, RepetitionsOfNullableSymbolsAreTaken) {
  expect_language("root ::= ( [x]* )*", {"", "x", "xx"}, {"y", "yy"});
  expect_language("root ::= (\"a\"?)* \"c\"", {"c", "ac", "aaac"}, {"", "a", "cc", "ca"});
  expect_language("root ::= (\"a\"? \"b\"?)+", {"", "ab", "ba", "bbaab"}, {"c", "abc"});
  expect_language("root ::= ((\"a\"*){2,3})*", {"", "a", "aaaa"}, {"b"});
  // Through a named rule, and two rules: b* then x.
  expect_language("root ::= a\na ::= b? a | \"x\"\nb ::= \"b\"", {"x", "bx", "bbbx"},
                  {"", "b", "xb"});
  expect_language("root ::= a \"!\"\na ::= c a | \"x\" | \"\"\nc ::= \"c\"?",
                  {"!", "x!", "ccx!", "cc!"}, {"", "xx!"});
}

TEST(GrammarParse, AbsurdRepetitionBoundsAreRefused) {
  EXPECT_EQ(parse_error("root ::= \"a\"{10001}"),
            "line 1, column 14: expected a repetition count of at most 10000");
  EXPECT_EQ(parse_error("root ::= \"a\"{1,99999999999999999999}"),
            "line 1, column 16: expected a repetition count of at most 10000");
  EXPECT_NE(
      parse_error("root ::= (\"abcdefghij\"{10000}){10000} x\nx ::= (\"abcdefghij\"{10000}"
                  "\"abcdefghij\"{10000}\"abcdefghij\"{10000}\"abcdefghij\"{10000}\"abcdefghij"
                  "\"{10000}\"abcdefghij\"{10000}\"abcdefghij\"{10000}\"abcdefghij\"{10000}"
                  "\"abcdefghij\"{10000}\"abcdefghij\"{10000}\"abcdefghij\"{10000})")
          .find("element limit"),
      std::string::npos);
  expect_language(R"(root ::= "a"{10000})", {std::string(10000, 'a')}, {std::string(9999, 'a')});
}

TEST(GrammarMatcher, PartialUtf8IsKeptAcrossFeeds) {
  const auto g = parse_ok(R"(root ::= "é" [€-€] "!")");
  Result<GrammarMatcher> m = GrammarMatcher::create(g);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(ok(m->accept("\xC3")));  // first byte of é
  EXPECT_FALSE(m->can_end());
  EXPECT_FALSE(ok(m->can_accept("\xA8")));  // would complete to è: rejected
  EXPECT_TRUE(ok(m->accept("\xA9\xE2")));   // é complete, then the first byte of €
  EXPECT_TRUE(ok(m->accept("\x82")));
  EXPECT_FALSE(ok(m->can_accept("\xAD!")));  // € is E2 82 AC; E2 82 AD is U+20AD
  EXPECT_TRUE(ok(m->accept("\xAC!")));
  EXPECT_TRUE(m->can_end());
  EXPECT_TRUE(m->must_end());
  // A lead byte that cannot start any allowed character is refused at once.
  Result<GrammarMatcher> m2 = GrammarMatcher::create(parse_ok("root ::= [a-z]+"));
  EXPECT_FALSE(ok(m2->accept("\xC3")));
  EXPECT_FALSE(ok(m2->accept("\x80")));  // a stray continuation byte
  // Only valid UTF-8: an overlong '{' (C1 BB), a surrogate (ED A0 80) and a code point past
  // U+10FFFF (F4 90 80 80) are refused, whole or partial.
  Result<GrammarMatcher> any = GrammarMatcher::create(parse_ok("root ::= .+"));
  EXPECT_FALSE(ok(any->can_accept("\xC1\xBB")));
  EXPECT_FALSE(ok(any->can_accept("\xC1")));
  EXPECT_FALSE(ok(any->can_accept("\xE0\x81")));
  EXPECT_FALSE(ok(any->can_accept("\xED\xA0\x80")));
  EXPECT_FALSE(ok(any->can_accept("\xED\xA0")));
  EXPECT_FALSE(ok(any->can_accept("\xF4\x90\x80\x80")));
  EXPECT_FALSE(ok(any->can_accept("\xF4\x90")));
  EXPECT_TRUE(ok(any->can_accept("\xF4\x8F\xBF\xBF")));
  EXPECT_TRUE(ok(any->can_accept("\xED\x9F")));
  // A negated class takes a partial character unless every completion is excluded.
  Result<GrammarMatcher> m3 = GrammarMatcher::create(parse_ok("root ::= [^\\x80-\\u07FF]"));
  EXPECT_FALSE(ok(m3->can_accept("\xC3")));
  EXPECT_TRUE(ok(m3->can_accept("\xE2")));
}

TEST(GrammarMatcher, TokensSpanSeveralElementsAndEndOnlyAtAcceptingPoints) {
  const auto g = parse_ok(R"(root ::= "{" ws "\"k\"" ws ":" ws [0-9]+ ws "}"
ws ::= [ ]*)");
  Result<GrammarMatcher> m = GrammarMatcher::create(g);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(m->can_end());
  EXPECT_TRUE(ok(m->accept("{ \"k")));
  EXPECT_FALSE(ok(m->accept("\" x")));  // rejected: state unchanged
  EXPECT_TRUE(ok(m->accept("\": 4")));
  EXPECT_FALSE(m->can_end());
  EXPECT_TRUE(ok(m->accept("2 }")));
  EXPECT_TRUE(m->can_end());
  EXPECT_TRUE(m->must_end());
  EXPECT_FALSE(ok(m->can_accept(" ")));
  m->reset();
  EXPECT_FALSE(m->can_end());
  EXPECT_TRUE(ok(m->accept("{\"k\":1}")));
  EXPECT_TRUE(m->can_end());
  // can end but may go on: a list
  Result<GrammarMatcher> l = GrammarMatcher::create(parse_ok(R"(root ::= "x" ("," "x")*)"));
  EXPECT_TRUE(ok(l->accept("x")));
  EXPECT_TRUE(l->can_end());
  EXPECT_FALSE(l->must_end());
  EXPECT_TRUE(ok(l->accept(",x,")));
  EXPECT_FALSE(l->can_end());
}

TEST(GrammarMatcher, TooManyPositionsIsAnErrorNotUnboundedMemory) {
  // After n "a"s the stacks remember n choices of closing "b" or "c": 2^n positions.
  const std::string text = "root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"";
  Result<Grammar> g = parse_grammar(text);
  ASSERT_TRUE(g.ok()) << g.error().message;
  Result<GrammarMatcher> m = GrammarMatcher::create(std::make_shared<const Grammar>(std::move(*g)));
  ASSERT_TRUE(m.ok());
  Result<bool> r = m->accept(std::string(13, 'a'));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kRuntime);
  EXPECT_NE(r.error().message.find("too ambiguous"), std::string::npos) << r.error().message;
  EXPECT_LE(m->n_stacks(), kGrammarMaxStacks);
}

// Mutated grammars (bytes deleted, inserted, swapped) either parse or give a located
// error, and any that parse can be followed through random text without failing a check.
TEST(GrammarParse, MutatedGrammarsNeverCrash) {
  const std::string seeds[] = {
      "root ::= obj\nobj ::= \"{\" ws (kv (\",\" ws kv)*)? \"}\"\nkv ::= [a-z]+ \":\" ws "
      "[0-9]{1,3}\nws ::= [ \\t]*",
      "root ::= (\"a\" | [^b-d\\x41] | .){2,5} \"\\u00e9\"? # c\n",
      "root ::= e\ne ::= t (\"+\" t)*\nt ::= [0-9]+ | \"(\" e \")\""};
  const std::string bytes = "()[]{}|*+?.\"\\#^-:=, \n\tabxyz019\xC3\xA9";
  std::mt19937 rng(7);
  int n_parsed = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = seeds[i % 3];
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 3) {
        case 0:
          if (at < text.size()) text.erase(at, 1);
          break;
        case 1:
          text.insert(at, 1, bytes[rng() % bytes.size()]);
          break;
        default:
          if (at + 1 < text.size()) std::swap(text[at], text[at + 1]);
      }
    }
    Result<Grammar> g = parse_grammar(text);
    if (!g.ok()) {
      const std::string& msg = g.error().message;
      EXPECT_TRUE(msg.rfind("line ", 0) == 0 || msg.find("root") != std::string::npos ||
                  msg.find("left-recursive") != std::string::npos)
          << msg;
      continue;
    }
    ++n_parsed;
    Result<GrammarMatcher> m =
        GrammarMatcher::create(std::make_shared<const Grammar>(std::move(*g)));
    ASSERT_TRUE(m.ok()) << text;
    for (int k = 0; k < 20; ++k) {
      const Result<bool> r = m->accept(std::string(1, bytes[rng() % bytes.size()]));
      ASSERT_TRUE(r.ok()) << text;
    }
  }
  EXPECT_GT(n_parsed, 100);
}

// A vocabulary of pieces for the constraint tests; token 0 is EOS.
struct ToyVocab {
  std::vector<std::string> pieces{"",  "yes",   "no",   "y",    "es", "n",
                                  "o", "maybe", "\xC3", "\xA9", ""};
  std::vector<uint8_t> eog{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
};

TEST(GrammarStage, MasksEverythingTheGrammarForbids) {
  ToyVocab v;
  Result<std::unique_ptr<ConstraintStage>> stage =
      make_grammar_stage(parse_ok(R"(root ::= "yes" | "no" | "é")"), v.pieces, v.eog);
  ASSERT_TRUE(stage.ok());
  ConstraintStage& s = **stage;
  std::mt19937 rng(0);
  CandidateList c;
  for (int32_t i = 0; i < 11; ++i) c.items.push_back({i, 1.0f});
  s.apply(c, rng);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> want{-inf, 1, 1, 1, -inf, 1, -inf, -inf, 1, -inf, -inf};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(c.items[i].logit, want[i]) << "token " << i;
  s.accept(3);  // "y"
  EXPECT_TRUE(s.allows(4));
  EXPECT_FALSE(s.allows(0));  // EOS only where the grammar can end
  s.accept(4);
  EXPECT_TRUE(s.allows(0));
  EXPECT_FALSE(s.allows(1));
  s.reset();
  s.accept(8);  // half of é
  EXPECT_FALSE(s.allows(0));
  EXPECT_TRUE(s.allows(9));
  EXPECT_FALSE(s.allows(1));
}

// A lazy grammar lets everything through until its trigger shows in the text (here split
// over two tokens, "y" then "es"), then holds the text from the trigger on; text there the
// grammar cannot take lifts it. reset() waits for the trigger again.
TEST(GrammarStage, LazyGrammarWaitsForItsTrigger) {
  ToyVocab v;
  auto vocab = make_grammar_vocab(v.pieces);
  Result<std::unique_ptr<ConstraintStage>> made =
      make_grammar_stage(parse_ok(R"(root ::= "yes" "no"? "o")"), vocab, v.eog, "yes");
  ASSERT_TRUE(made.ok());
  ConstraintStage& s = **made;
  for (int32_t t = 0; t < 11; ++t) EXPECT_TRUE(s.allows(t)) << t;  // EOS and "maybe" too
  s.accept(7);                                                     // "maybe"
  s.accept(3);                                                     // "y"
  EXPECT_TRUE(s.allows(7));
  s.accept(4);  // "es": "yes" is complete, and the grammar holds from its "y"
  EXPECT_FALSE(s.allows(7));
  EXPECT_FALSE(s.allows(0));
  EXPECT_TRUE(s.allows(2));  // "no"
  EXPECT_TRUE(s.allows(6));  // "o"
  std::mt19937 rng(0);
  CandidateList c;
  for (int32_t i = 0; i < 11; ++i) c.items.push_back({i, 1.0f});
  s.apply(c, rng);
  for (int32_t i = 0; i < 11; ++i)
    EXPECT_EQ(c.items[i].logit != -std::numeric_limits<float>::infinity(), s.allows(i)) << i;
  s.accept(6);
  EXPECT_TRUE(s.complete());
  EXPECT_TRUE(s.allows(0));

  s.reset();
  EXPECT_FALSE(s.complete());
  EXPECT_TRUE(s.allows(7));
  s.accept(1);  // "yes" at once
  EXPECT_FALSE(s.allows(1));
  // Text from the trigger on that the grammar cannot take lifts it.
  Result<std::unique_ptr<ConstraintStage>> strict =
      make_grammar_stage(parse_ok(R"(root ::= "n" "o")"), vocab, v.eog, "y");
  ASSERT_TRUE(strict.ok());
  (*strict)->accept(1);  // "yes": "y" triggers, "es" does not fit
  EXPECT_TRUE((*strict)->allows(7));
  EXPECT_FALSE((*strict)->complete());
  EXPECT_FALSE((*strict)->error().has_value());
}

// A trigger the vocabulary spells as one control token (token 10 here, no printed text, as
// Mistral's [TOOL_CALLS]) fires on that token, and the grammar holds what follows it. The
// same text spelled with printed tokens is not it.
TEST(GrammarStage, LazyGrammarCanWaitForAControlToken) {
  ToyVocab v;
  auto vocab = make_grammar_vocab(v.pieces, [](std::string_view text) {
    return text == "[CALLS]" ? std::vector<int32_t>{10} : std::vector<int32_t>{7, 7};
  });
  Result<std::unique_ptr<ConstraintStage>> made =
      make_grammar_stage(parse_ok(R"(root ::= "no")"), vocab, v.eog, "[CALLS]");
  ASSERT_TRUE(made.ok());
  ConstraintStage& s = **made;
  s.accept(7);  // "maybe"
  s.accept(1);  // "yes"
  EXPECT_TRUE(s.allows(1));
  s.accept(10);
  EXPECT_FALSE(s.allows(1));
  EXPECT_FALSE(s.allows(0));
  EXPECT_TRUE(s.allows(2));
  s.accept(2);
  EXPECT_TRUE(s.complete());
  s.reset();
  EXPECT_TRUE(s.allows(1));
  // Where the trigger is printed text, the control token does not fire it.
  Result<std::unique_ptr<ConstraintStage>> text =
      make_grammar_stage(parse_ok(R"(root ::= "maybe" "no")"), vocab, v.eog, "maybe");
  ASSERT_TRUE(text.ok());
  (*text)->accept(10);
  EXPECT_TRUE((*text)->allows(1));
  (*text)->accept(7);  // "maybe", which the grammar then holds from
  EXPECT_FALSE((*text)->allows(1));
  EXPECT_TRUE((*text)->allows(2));
}

TEST(GrammarStage, SamplerFastPathResamplesOnlyWhenThePickIsRejected) {
  ToyVocab v;
  Result<std::unique_ptr<ConstraintStage>> stage =
      make_grammar_stage(parse_ok(R"(root ::= "no")"), v.pieces, v.eog);
  ASSERT_TRUE(stage.ok());
  Sampler sampler(1);
  sampler.add(make_greedy_stage());
  sampler.set_constraint(std::move(*stage));
  EXPECT_EQ(sampler.describe(), "grammar -> greedy");
  // The best logit is "maybe"; the grammar allows "no" and "n" only.
  std::vector<float> logits{5, 4, 3, 2, 2, 1, 1, 9, 0, 0, 0};
  EXPECT_EQ(sampler.sample(logits), 2);
  sampler.accept_prompt(7);              // the prompt does not move the grammar
  sampler.accept(5);                     // "n"
  EXPECT_EQ(sampler.sample(logits), 6);  // "o"
  sampler.accept(6);
  EXPECT_EQ(sampler.sample(logits), 0);  // only EOS is left
  sampler.reset();
  logits[2] = 20;
  EXPECT_EQ(sampler.sample(logits), 2);  // fast path: the first pick is allowed
}

}  // namespace
}  // namespace qrun
