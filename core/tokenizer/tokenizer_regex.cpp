// Pre-tokenizer patterns: a recursive-descent parser for the supported regex subset and a
// backtracking matcher. Quantified single-character atoms are matched by counting the longest
// run and then trying the rest of the pattern after each shorter run in turn, so recursion
// depth grows with the pattern, never with the text.
#include "core/tokenizer/tokenizer_regex.h"

#include <limits>

#include "core/unicode/unicode.h"
#include "ggml-like/result.h"

namespace qrun::tokenizer {
namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
constexpr size_t kNoMatch = std::numeric_limits<size_t>::max();

uint8_t category_bit(unicode::Category c) {
  return static_cast<uint8_t>(1u << static_cast<int>(c));
}

// \s as C++ regexes see it: ASCII white space only (non-ASCII white space arrives as U+000B).
bool is_space_value(uint32_t v) {
  return v == ' ' || (v >= 0x09 && v <= 0x0D);
}

struct CharClass {
  bool negated = false;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  uint8_t categories = 0;  // \p{X} bits
  bool space = false;      // \s
  bool non_space = false;  // \S
  // [A&&[B]]: classes a character must also match (Java's intersection), so that Mistral's
  // tekken pattern can say "a letter, not a-z" as [\p{L}&&[^a-z]] where llama.cpp's says
  // (?=[\p{L}])([^a-z]).
  std::vector<CharClass> also;

  bool matches(uint32_t value, uint8_t category) const {
    bool in = (categories & category) != 0 || (space && is_space_value(value)) ||
              (non_space && !is_space_value(value));
    for (size_t i = 0; !in && i < ranges.size(); ++i) {
      in = ranges[i].first <= value && value <= ranges[i].second;
    }
    if (in == negated) return false;
    for (const CharClass& c : also) {
      if (!c.matches(value, category)) return false;
    }
    return true;
  }
};

}  // namespace

struct SplitPattern::Program {
  struct Node;
  using Sequence = std::vector<Node>;
  struct Node {
    enum class Kind { kClass, kGroup, kNotAhead, kEnd };
    Kind kind = Kind::kClass;
    CharClass cls;
    uint32_t min = 1;
    uint32_t max = 1;
    std::vector<Sequence> alternatives;  // kGroup, kNotAhead
  };
  std::vector<Sequence> alternatives;
};

namespace {

using Program = SplitPattern::Program;
using Node = Program::Node;
using Sequence = Program::Sequence;

class Parser {
 public:
  explicit Parser(std::string_view pattern)
      : pattern_(pattern), cpts_(unicode::decode_utf8(pattern)) {}

  std::vector<Sequence> parse() {
    std::vector<Sequence> alternatives = parse_alternatives();
    QRUN_CHECK(pos_ == cpts_.size(), "pattern '%.*s': unbalanced ')' at %zu",
               static_cast<int>(pattern_.size()), pattern_.data(), pos_);
    return alternatives;
  }

 private:
  bool at_end() const { return pos_ >= cpts_.size(); }
  uint32_t peek(size_t ahead = 0) const {
    return pos_ + ahead < cpts_.size() ? cpts_[pos_ + ahead] : 0;
  }
  uint32_t next() {
    check(!at_end(), "unexpected end");
    return cpts_[pos_++];
  }
  void check(bool ok, const char* what) const {
    QRUN_CHECK(ok, "pattern '%.*s': %s at %zu", static_cast<int>(pattern_.size()), pattern_.data(),
               what, pos_);
  }

  std::vector<Sequence> parse_alternatives() {
    std::vector<Sequence> alternatives(1);
    while (!at_end() && peek() != ')') {
      if (peek() == '|') {
        ++pos_;
        alternatives.emplace_back();
        continue;
      }
      alternatives.back().push_back(parse_quantified());
    }
    return alternatives;
  }

  Node parse_quantified() {
    Node node = parse_atom();
    uint32_t min = 1;
    uint32_t max = 1;
    const uint32_t c = peek();
    if (c == '?' || c == '*' || c == '+') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : kUnbounded;
    } else if (c == '{') {
      ++pos_;
      min = parse_number();
      max = min;
      if (peek() == ',') {
        ++pos_;
        max = peek() == '}' ? kUnbounded : parse_number();
      }
      check(next() == '}', "expected '}'");
    } else {
      return node;
    }
    check(peek() != '?', "lazy quantifiers are not supported");
    check(node.kind == Node::Kind::kClass, "quantified groups are not supported");
    check(min <= max, "bad repetition bounds");
    node.min = min;
    node.max = max;
    return node;
  }

  uint32_t parse_number() {
    uint32_t n = 0;
    check(peek() >= '0' && peek() <= '9', "expected a number");
    while (peek() >= '0' && peek() <= '9') n = n * 10 + (next() - '0');
    return n;
  }

  Node parse_atom() {
    Node node;
    const uint32_t c = next();
    switch (c) {
      case '(': {
        node.kind = Node::Kind::kGroup;
        if (peek() == '?') {
          ++pos_;
          const uint32_t k = next();
          check(k == ':' || k == '!', "only (?:...) and (?!...) groups are supported");
          if (k == '!') node.kind = Node::Kind::kNotAhead;
        }
        node.alternatives = parse_alternatives();
        check(next() == ')', "expected ')'");
        return node;
      }
      case '[':
        node.cls = parse_class();
        return node;
      case '$':
        node.kind = Node::Kind::kEnd;
        return node;
      case '\\':
        parse_escape(node.cls);
        return node;
      default:
        check(c != '.' && c != '^' && c != ')' && c != '*' && c != '+' && c != '?',
              "unsupported metacharacter");
        node.cls.ranges.push_back({c, c});
        return node;
    }
  }

  // After '['; consumes the closing ']'.
  CharClass parse_class() {
    CharClass cls;
    if (peek() == '^') {
      ++pos_;
      cls.negated = true;
    }
    while (peek() != ']') {
      check(!at_end(), "unterminated class");
      if (peek() == '&' && peek(1) == '&' && peek(2) == '[') {
        pos_ += 3;
        cls.also.push_back(parse_class());
        continue;
      }
      uint32_t lo = next();
      if (lo == '\\') {
        if (!parse_escape(cls)) continue;  // a class escape such as \s or \p{L}
        lo = cls.ranges.back().first;
        cls.ranges.pop_back();
      }
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']') {
        ++pos_;
        hi = next();
        if (hi == '\\') {
          CharClass tmp;
          check(parse_escape(tmp), "class escape as a range end");
          hi = tmp.ranges.back().first;
        }
        check(lo <= hi, "reversed range");
      }
      cls.ranges.push_back({lo, hi});
    }
    ++pos_;
    return cls;
  }

  // After '\\'. Adds the escape to `cls`; returns true if it was a single character (then
  // appended as the last range), false for a class escape.
  bool parse_escape(CharClass& cls) {
    const uint32_t c = next();
    uint32_t literal = c;
    switch (c) {
      case 's':
        cls.space = true;
        return false;
      case 'S':
        cls.non_space = true;
        return false;
      case 'd':
        cls.ranges.push_back({'0', '9'});
        return false;
      case 'p': {
        check(next() == '{', "expected '{' after \\p");
        const uint32_t name = next();
        check(next() == '}', "expected one-letter category in \\p{.}");
        unicode::Category cat = unicode::Category::kUndefined;
        switch (name) {
          case 'L':
            cat = unicode::Category::kLetter;
            break;
          case 'N':
            cat = unicode::Category::kNumber;
            break;
          case 'P':
            cat = unicode::Category::kPunctuation;
            break;
          case 'S':
            cat = unicode::Category::kSymbol;
            break;
          case 'M':
            cat = unicode::Category::kMark;
            break;
          default:
            check(false, "unsupported category");
        }
        cls.categories |= category_bit(cat);
        return false;
      }
      case 'r':
        literal = '\r';
        break;
      case 'n':
        literal = '\n';
        break;
      case 't':
        literal = '\t';
        break;
      case 'f':
        literal = '\f';
        break;
      case 'v':
        literal = '\v';
        break;
      default:
        check(!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')),
              "unsupported escape");
    }
    cls.ranges.push_back({literal, literal});
    return true;
  }

  std::string_view pattern_;
  std::vector<uint32_t> cpts_;
  size_t pos_ = 0;
};

// What remains to match after a group: the rest of an enclosing sequence, and so on outwards.
struct Continuation {
  const Sequence* sequence;
  size_t index;
  const Continuation* next;
};

class Matcher {
 public:
  Matcher(const CodeUnits& text, size_t end) : text_(text), end_(end) {}

  // The end of the first match of `alternatives` starting exactly at `pos`, or kNoMatch.
  size_t match_alternatives(const std::vector<Sequence>& alternatives, size_t pos,
                            const Continuation* cont) const {
    for (const Sequence& seq : alternatives) {
      const size_t r = match(seq, 0, pos, cont);
      if (r != kNoMatch) return r;
    }
    return kNoMatch;
  }

 private:
  bool class_at(const CharClass& cls, size_t pos) const {
    return pos < end_ && cls.matches(text_.values[pos], text_.category_bits[pos]);
  }

  size_t match(const Sequence& seq, size_t i, size_t pos, const Continuation* cont) const {
    if (i == seq.size()) {
      return cont ? match(*cont->sequence, cont->index, pos, cont->next) : pos;
    }
    const Node& node = seq[i];
    switch (node.kind) {
      case Node::Kind::kClass: {
        size_t n = 0;
        while (n < node.max && class_at(node.cls, pos + n)) ++n;
        if (n < node.min) return kNoMatch;
        for (size_t k = n + 1; k-- > node.min;) {  // greedy: longest run first
          const size_t r = match(seq, i + 1, pos + k, cont);
          if (r != kNoMatch) return r;
        }
        return kNoMatch;
      }
      case Node::Kind::kGroup: {
        const Continuation rest{&seq, i + 1, cont};
        return match_alternatives(node.alternatives, pos, &rest);
      }
      case Node::Kind::kNotAhead:
        if (match_alternatives(node.alternatives, pos, nullptr) != kNoMatch) return kNoMatch;
        return match(seq, i + 1, pos, cont);
      case Node::Kind::kEnd:
        return pos == end_ ? match(seq, i + 1, pos, cont) : kNoMatch;
    }
    return kNoMatch;
  }

  const CodeUnits& text_;
  size_t end_;
};

}  // namespace

CodeUnits::CodeUnits(std::string_view text) : cpts(unicode::decode_utf8(text)) {
  values.resize(cpts.size());
  category_bits.resize(cpts.size());
  for (size_t i = 0; i < cpts.size(); ++i) {
    const uint32_t c = cpts[i];
    values[i] = (c >= 0x80 && unicode::is_whitespace(c)) ? 0x0B : c;
    // llama.cpp's ASCII stand-in for \p{S} lacks '~' (U+007E); match that.
    category_bits[i] = c == '~' ? 0 : category_bit(unicode::category(c));
  }
}

SplitPattern SplitPattern::compile(std::string_view pattern) {
  auto program = std::make_shared<Program>();
  program->alternatives = Parser(pattern).parse();
  return SplitPattern(std::move(program));
}

void SplitPattern::split(const CodeUnits& text, size_t begin, size_t end,
                         std::vector<size_t>& pieces) const {
  const Matcher matcher(text, end);
  size_t pos = begin;
  size_t last = begin;  // end of the previous match
  while (pos < end) {
    const size_t r = matcher.match_alternatives(program_->alternatives, pos, nullptr);
    if (r == kNoMatch || r == pos) {  // no (non-empty) match here: try the next position
      ++pos;
      continue;
    }
    if (pos > last) pieces.push_back(pos - last);
    pieces.push_back(r - pos);
    pos = last = r;
  }
  if (end > last) pieces.push_back(end - last);
}

std::vector<std::string> pre_tokenize(std::string_view text,
                                      const std::vector<SplitPattern>& patterns) {
  const CodeUnits units(text);
  std::vector<size_t> pieces = {units.cpts.size()};
  for (const SplitPattern& pattern : patterns) {
    std::vector<size_t> refined;
    refined.reserve(pieces.size());
    size_t begin = 0;
    for (const size_t length : pieces) {
      pattern.split(units, begin, begin + length, refined);
      begin += length;
    }
    pieces = std::move(refined);
  }

  std::vector<std::string> words;
  words.reserve(pieces.size());
  size_t begin = 0;
  std::string utf8;
  for (const size_t length : pieces) {
    utf8.clear();
    for (size_t i = begin; i < begin + length; ++i) unicode::append_utf8(utf8, units.cpts[i]);
    std::string word;
    for (const char byte : utf8) {
      unicode::append_utf8(word, unicode::byte_to_bpe_char(static_cast<uint8_t>(byte)));
    }
    words.push_back(std::move(word));
    begin += length;
  }
  return words;
}

}  // namespace qrun::tokenizer
