// Property tests of the grammar matcher against two recognizers written here,
// independently of its stack engine: a memoized backtracking recognizer over the parsed
// rule table, and std::regex for grammars that are regular. Random walks through each
// grammar generate sentences that must be accepted (fed in random byte chunks, so UTF-8
// characters split across feeds); near-miss mutations of them (a character deleted,
// inserted, replaced, doubled, the text cut short) must get the recognizer's verdict.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <regex>
#include <set>

#include "core/grammar/grammar.h"

namespace qrun {
namespace {

using Cps = std::vector<uint32_t>;

std::string to_utf8(const Cps& cps) {
  std::string out;
  for (const uint32_t c : cps) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

bool end_of_alt(const GrammarElement* e) {
  return e->op == GrammarOp::kEnd || e->op == GrammarOp::kAlt;
}

// A character set read independently: its (lo, hi) ranges, negation, and its length.
struct CharSet {
  bool negated = false;
  bool any = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  size_t n_elements = 0;
  bool holds(uint32_t c) const {
    bool in = any;
    for (const auto& [lo, hi] : ranges) in = in || (lo <= c && c <= hi);
    return in != negated;
  }
};

CharSet read_set(const GrammarElement* e) {
  CharSet s;
  s.negated = e->op == GrammarOp::kCharNot;
  size_t i = 0;
  for (;;) {
    if (e[i].op == GrammarOp::kCharAny) {
      s.any = true;
      i += 1;
    } else if (e[i + 1].op == GrammarOp::kCharRngUpper) {
      s.ranges.emplace_back(e[i].value, e[i + 1].value);
      i += 2;
    } else {
      s.ranges.emplace_back(e[i].value, e[i].value);
      i += 1;
    }
    if (e[i].op != GrammarOp::kCharAlt) break;
  }
  s.n_elements = i;
  return s;
}

// Backtracking with memoization: the set of positions where the rest of an alternative,
// started at `e` and text position `pos`, can end.
class Recognizer {
 public:
  Recognizer(const Grammar& g, const Cps& text) : g_(g), text_(text) {}
  bool whole() {
    const std::set<size_t> ends = rule_ends(g_.root, 0);
    return ends.count(text_.size()) != 0;
  }

 private:
  std::set<size_t> rule_ends(uint32_t rule, size_t pos) {
    std::set<size_t> out;
    const GrammarElement* e = g_.rules[rule].data();
    for (;;) {
      const std::set<size_t> r = seq_ends(e, pos);
      out.insert(r.begin(), r.end());
      while (!end_of_alt(e)) ++e;
      if (e->op != GrammarOp::kAlt) break;
      ++e;
    }
    return out;
  }
  std::set<size_t> seq_ends(const GrammarElement* e, size_t pos) {
    if (end_of_alt(e)) return {pos};
    const auto key = std::make_pair(e, pos);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    std::set<size_t> out;
    if (e->op == GrammarOp::kRuleRef) {
      for (const size_t p : rule_ends(e->value, pos)) {
        const std::set<size_t> r = seq_ends(e + 1, p);
        out.insert(r.begin(), r.end());
      }
    } else {
      const CharSet s = read_set(e);
      if (pos < text_.size() && s.holds(text_[pos])) out = seq_ends(e + s.n_elements, pos + 1);
    }
    memo_[key] = out;
    return out;
  }
  const Grammar& g_;
  const Cps& text_;
  std::map<std::pair<const GrammarElement*, size_t>, std::set<size_t>> memo_;
};

// Random sentences: a random alternative per rule, the one with the fewest rule
// references once the walk is deep, a random member of each character set.
class Walker {
 public:
  Walker(const Grammar& g, std::mt19937& rng) : g_(g), rng_(rng) {}
  Cps sentence() {
    Cps out;
    walk(g_.root, 0, out);
    return out;
  }

 private:
  void walk(uint32_t rule, int depth, Cps& out) {
    std::vector<const GrammarElement*> alts;
    const GrammarElement* e = g_.rules[rule].data();
    for (;;) {
      alts.push_back(e);
      while (!end_of_alt(e)) ++e;
      if (e->op != GrammarOp::kAlt) break;
      ++e;
    }
    const GrammarElement* pick = alts[rng_() % alts.size()];
    if (depth > 12) {
      auto refs = [](const GrammarElement* a) {
        int n = 0;
        for (; !end_of_alt(a); ++a) n += a->op == GrammarOp::kRuleRef;
        return n;
      };
      pick = *std::min_element(alts.begin(), alts.end(),
                               [&](auto a, auto b) { return refs(a) < refs(b); });
    }
    for (const GrammarElement* a = pick; !end_of_alt(a);) {
      if (a->op == GrammarOp::kRuleRef) {
        walk(a->value, depth + 1, out);
        ++a;
        continue;
      }
      const CharSet s = read_set(a);
      out.push_back(member(s));
      a += s.n_elements;
    }
  }
  uint32_t member(const CharSet& s) {
    if (!s.negated && !s.any) {
      const auto& [lo, hi] = s.ranges[rng_() % s.ranges.size()];
      return lo + static_cast<uint32_t>(rng_() % (hi - lo + 1));
    }
    static const uint32_t kPool[] = {'a', 'Z', '0', ' ', '"', '{', 0xE9, 0x3B1, 0x20AC, 0x1F600};
    for (;;) {
      const uint32_t c = kPool[rng_() % std::size(kPool)];
      if (s.holds(c)) return c;
    }
  }
  const Grammar& g_;
  std::mt19937& rng_;
};

// Feeds `text` in random chunks; true when every chunk is accepted and the end is allowed.
bool matcher_accepts(const std::shared_ptr<const Grammar>& g, const std::string& text,
                     std::mt19937& rng) {
  Result<GrammarMatcher> m = GrammarMatcher::create(g);
  EXPECT_TRUE(m.ok());
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 4, text.size() - i);
    Result<bool> ok = m->accept(std::string_view(text).substr(i, n));
    EXPECT_TRUE(ok.ok()) << ok.error().message;
    if (!ok.ok() || !*ok) return false;
    i += n;
  }
  return m->can_end();
}

Cps mutate(Cps s, const Cps& alphabet, std::mt19937& rng) {
  const uint32_t c = alphabet[rng() % alphabet.size()];
  const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
  switch (rng() % 5) {
    case 0:
      if (!s.empty()) s.erase(s.begin() + static_cast<std::ptrdiff_t>(std::min(at, s.size() - 1)));
      break;
    case 1:
      s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), c);
      break;
    case 2:
      if (!s.empty()) s[std::min(at, s.size() - 1)] = c;
      break;
    case 3:
      if (!s.empty()) {
        const size_t k = std::min(at, s.size() - 1);
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(k), s[k]);
      }
      break;
    default:
      s.resize(at);
  }
  return s;
}

const char* const kGrammars[] = {
    // JSON-ish
    R"g(root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}" ws
member ::= string ":" ws value
array ::= "[" ws ( value ( "," ws value )* )? "]" ws
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\"" ws
number ::= "-"? ([0-9] | [1-9] [0-9]{1,3}) ("." [0-9]+)? ws
ws ::= [ \t\n]{0,2})g",
    // arithmetic
    R"g(root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor)g",
    // lists and enumerations
    R"g(root ::= item{1,4}
item ::= "- " ("apple" | "banana" | "cherry" | [a-z]{2,5}) "\n")g",
    // chess moves (SAN, simplified)
    R"g(root ::= move (" " move){0,5}
move ::= "O-O" "-O"? | piece? file? rank? "x"? file rank promo? check?
piece ::= [KQRBN]
file ::= [a-h]
rank ::= [1-8]
promo ::= "=" [QRBN]
check ::= [+#])g",
    // Unicode, negation and any character
    R"g(root ::= "«" [^»\n]* "»" (. | [α-ω€😀-😏]){0,3} "\u00e9"?)g",
    // nested optional groups and bounded repetition of groups
    R"g(root ::= (("ab" | "a") ("b" | "")){2,3} c?
c ::= "c" c?)g",
};

Cps alphabet_of(const std::string& text) {
  Cps out;
  for (const unsigned char ch : text) {
    if (ch >= 0x20 && ch < 0x7F) out.push_back(ch);
  }
  for (const uint32_t c : {0xE9u, 0x3B1u, 0xBBu, 0x20ACu, 0x1F600u, uint32_t{'\n'}})
    out.push_back(c);
  return out;
}

TEST(GrammarProperty, WalksAreAcceptedAndNearMissesMatchTheRecognizer) {
  std::mt19937 rng(1234);
  for (const char* text : kGrammars) {
    SCOPED_TRACE(text);
    Result<Grammar> parsed = parse_grammar(text);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    const auto g = std::make_shared<const Grammar>(std::move(*parsed));
    const Cps alphabet = alphabet_of(text);
    Walker walker(*g, rng);
    int n_rejected = 0;
    for (int i = 0; i < 150; ++i) {
      const Cps s = walker.sentence();
      const std::string bytes = to_utf8(s);
      ASSERT_TRUE(Recognizer(*g, s).whole()) << "the walk made a non-sentence: " << bytes;
      ASSERT_TRUE(matcher_accepts(g, bytes, rng)) << "rejected a sentence: " << bytes;
      for (int k = 0; k < 6; ++k) {
        const Cps m = mutate(s, alphabet, rng);
        const bool want = Recognizer(*g, m).whole();
        n_rejected += want ? 0 : 1;
        ASSERT_EQ(matcher_accepts(g, to_utf8(m), rng), want) << "near miss: " << to_utf8(m);
        // can_accept (with its fast reject) agrees with accept on the same text.
        Result<GrammarMatcher> probe = GrammarMatcher::create(g);
        const Result<bool> can = probe->can_accept(to_utf8(m));
        const Result<bool> did = probe->accept(to_utf8(m));
        ASSERT_TRUE(can.ok() && did.ok());
        ASSERT_EQ(can.value(), did.value()) << to_utf8(m);
      }
    }
    EXPECT_GT(n_rejected, 100);  // the mutations do produce non-sentences
  }
}

// Regular grammars against std::regex (which also checks the parser's reading of them).
TEST(GrammarProperty, RegularGrammarsAgreeWithStdRegex) {
  const std::pair<const char*, const char*> kCases[] = {
      {R"g(root ::= [a-c]{2,4} ("x" | "yz")* "!"?)g", "[a-c]{2,4}(x|yz)*!?"},
      {R"g(root ::= ("ab"+ | [^a-z\u0080-\U0010FFFF]) [0-9]{3} ("-" [0-9]{4})?)g",
       "((ab)+|[^a-z\\x80-\\xff])[0-9]{3}(-[0-9]{4})?"},
      {"root ::= w (\" \" w){0,2}\nw ::= [a-zA-Z]+ | \"\\\"\" [^\"]* \"\\\"\"",
       R"(([a-zA-Z]+|"[^"]*")( ([a-zA-Z]+|"[^"]*")){0,2})"},
  };
  std::mt19937 rng(99);
  const std::string alphabet = "abcxyz!0123456789-AB \"";
  for (const auto& [grammar, pattern] : kCases) {
    SCOPED_TRACE(grammar);
    Result<Grammar> parsed = parse_grammar(grammar);
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    const auto g = std::make_shared<const Grammar>(std::move(*parsed));
    const std::regex re(pattern);
    Walker walker(*g, rng);
    int n_yes = 0;
    for (int i = 0; i < 300; ++i) {
      const Cps cps = walker.sentence();
      const std::string s = to_utf8(cps);
      ASSERT_TRUE(std::regex_match(s, re)) << s;
      for (int k = 0; k < 4; ++k) {
        const std::string m = to_utf8(mutate(cps, Cps(alphabet.begin(), alphabet.end()), rng));
        const bool want = std::regex_match(m, re);
        n_yes += want ? 1 : 0;
        ASSERT_EQ(matcher_accepts(g, m, rng), want) << m;
      }
    }
    EXPECT_GT(n_yes, 0);
  }
}

}  // namespace
}  // namespace qrun
