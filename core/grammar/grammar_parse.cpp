// The GBNF parser: recursive descent over the text as llama.cpp's grammar-parser does,
// with errors that name the line, the column and what was expected, then the checks that
// make a grammar safe to run: every referenced rule defined, `root` present, no left
// recursion (a rule reaching itself before consuming a character).
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "core/grammar/grammar.h"

namespace qrun {
namespace {

struct ParseError {
  size_t offset;
  std::string what;
};

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : src_(text) {}

  Result<Grammar> run() {
    skip_space(true);
    while (pos_ < src_.size()) {
      if (!parse_rule()) return fail();
      skip_space(true);
    }
    return finish();
  }

 private:
  // --- errors -------------------------------------------------------------------------
  bool error(size_t offset, std::string what) { return refuse(offset, "expected " + what); }
  bool refuse(size_t offset, std::string why) {
    if (!err_) err_ = ParseError{offset, std::move(why)};
    return false;
  }
  Error fail() const { return located(err_->offset, err_->what); }
  Error located(size_t offset, const std::string& what) const {
    size_t line = 1;
    size_t col = 1;
    for (size_t i = 0; i < offset && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    return make_error(ErrorCode::kUsage,
                      format("line %zu, column %zu: %s", line, col, what.c_str()));
  }

  // --- lexing -------------------------------------------------------------------------
  bool at_end() const { return pos_ >= src_.size(); }
  char peek(size_t ahead = 0) const {
    return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0';
  }
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && src_[pos_] != '\n') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }
  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_word_char(src_[pos_])) ++pos_;
    return std::string(src_.substr(start, pos_ - start));
  }
  // One UTF-8 character of the source as a code point.
  bool decode_source_char(uint32_t& cp) {
    const auto b0 = static_cast<unsigned char>(src_[pos_]);
    const int n = b0 < 0x80         ? 1
                  : (b0 >> 5) == 6  ? 2
                  : (b0 >> 4) == 14 ? 3
                  : (b0 >> 3) == 30 ? 4
                                    : 0;
    if (n == 0 || pos_ + static_cast<size_t>(n) > src_.size()) {
      return error(pos_, "valid UTF-8 text");
    }
    cp = n == 1 ? b0 : (b0 & (0x7F >> n));
    for (int i = 1; i < n; ++i) {
      const auto b = static_cast<unsigned char>(src_[pos_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return error(pos_, "valid UTF-8 text");
      cp = (cp << 6) | (b & 0x3F);
    }
    pos_ += static_cast<size_t>(n);
    return true;
  }
  bool parse_hex(int n_digits, uint32_t& cp) {
    cp = 0;
    for (int i = 0; i < n_digits; ++i) {
      const char c = peek();
      uint32_t d = 0;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return error(pos_, format("%d hexadecimal digits", n_digits));
      }
      cp = cp * 16 + d;
      ++pos_;
    }
    if (cp > 0x10FFFF) return error(pos_, "a code point at most U+10FFFF");
    return true;
  }
  // A character of a literal or a class, with escapes.
  bool parse_char(uint32_t& cp) {
    if (at_end()) return error(pos_, "a character, not the end of the grammar");
    if (peek() != '\\') return decode_source_char(cp);
    const size_t start = pos_;
    ++pos_;
    const char e = peek();
    ++pos_;
    switch (e) {
      case 'x':
        return parse_hex(2, cp);
      case 'u':
        return parse_hex(4, cp);
      case 'U':
        return parse_hex(8, cp);
      case 'n':
        cp = '\n';
        return true;
      case 't':
        cp = '\t';
        return true;
      case 'r':
        cp = '\r';
        return true;
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
        cp = static_cast<uint32_t>(e);
        return true;
      default:
        return error(start,
                     "a known escape (\\n \\t \\r \\\\ \\\" \\[ \\] \\- \\^ \\xHH "
                     "\\uHHHH \\UHHHHHHHH)");
    }
  }
  bool parse_int(int64_t& v) {
    const size_t start = pos_;
    v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kGrammarMaxRepetition) {
        return error(start, format("a repetition count of at most %lld",
                                   static_cast<long long>(kGrammarMaxRepetition)));
      }
      ++pos_;
    }
    if (pos_ == start) return error(pos_, "a number");
    return true;
  }

  // llama.cpp's whole-token elements: <[id]> (a token id), <text> (the one token the text
  // `<text>`, brackets included, tokenizes to: resolve_grammar_tokens binds it), each
  // negated by a leading '!' (any one token but that).
  bool parse_token_element(std::vector<GrammarElement>& out) {
    const bool negated = peek() == '!';
    if (negated) ++pos_;
    const size_t start = pos_;  // at '<'
    ++pos_;
    const GrammarOp op = negated ? GrammarOp::kTokenNot : GrammarOp::kToken;
    if (peek() == '[') {
      ++pos_;
      const size_t id_at = pos_;
      uint64_t id = 0;
      while (peek() >= '0' && peek() <= '9') {
        id = id * 10 + static_cast<uint64_t>(peek() - '0');
        if (id > 0x7FFFFFFF) return error(id_at, "a token id below 2^31");
        ++pos_;
      }
      if (pos_ == id_at) return error(pos_, "a token id after '<['");
      if (peek() != ']') return error(pos_, "']' after the token id");
      ++pos_;
      if (peek() != '>') return error(pos_, "'>' closing the token element");
      ++pos_;
      out.push_back({op, static_cast<uint32_t>(id)});
    } else {
      while (!at_end() && peek() != '>' && peek() != '\n') ++pos_;
      if (peek() != '>') return error(pos_, "'>' closing the token element");
      ++pos_;
      const std::string text(src_.substr(start, pos_ - start));
      if (text == "<>") return error(start + 1, "a token's text or [id] inside '<>'");
      auto at = std::find(token_texts_.begin(), token_texts_.end(), text);
      if (at == token_texts_.end()) at = token_texts_.insert(token_texts_.end(), text);
      const auto index = static_cast<uint32_t>(at - token_texts_.begin());
      out.push_back({op, Grammar::kTokenText | index});
    }
    has_tokens_ = true;
    return true;
  }

  // --- rules ---------------------------------------------------------------------------
  uint32_t symbol_id(const std::string& name) {
    auto [it, inserted] = ids_.try_emplace(name, static_cast<uint32_t>(names_.size()));
    if (inserted) {
      names_.push_back(name);
      rules_.emplace_back();
      defined_.push_back(false);
    }
    return it->second;
  }
  uint32_t generated_id(const std::string& base) {
    generated_.insert(static_cast<uint32_t>(names_.size()));
    const uint32_t id = static_cast<uint32_t>(names_.size());
    names_.push_back(base + "_" + std::to_string(id));
    rules_.emplace_back();
    defined_.push_back(true);
    return id;
  }
  bool set_rule(uint32_t id, std::vector<GrammarElement> elems) {
    n_elements_ += static_cast<int64_t>(elems.size());
    if (n_elements_ > kGrammarMaxElements) {
      return error(pos_, format("a grammar of at most %lld elements once repetitions are "
                                "expanded",
                                static_cast<long long>(kGrammarMaxElements)));
    }
    rules_[id] = std::move(elems);
    return true;
  }

  bool parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    if (name.empty()) return error(pos_, "a rule name");
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") return error(pos_, "'::=' after the rule name");
    pos_ += 3;
    skip_space(true);
    const uint32_t id = symbol_id(name);
    if (defined_[id])
      return error(start, "one definition per rule ('" + name + "' is defined twice)");
    defined_[id] = true;
    std::vector<GrammarElement> out;
    if (!parse_alternates(name, out, false)) return false;
    if (!set_rule(id, std::move(out))) return false;
    if (!at_end() && peek() != '\n' && peek() != '\r') return error(pos_, "a newline or the end");
    return true;
  }

  bool parse_alternates(const std::string& name, std::vector<GrammarElement>& out, bool nested) {
    if (!parse_sequence(name, out, nested)) return false;
    while (peek() == '|') {
      out.push_back({GrammarOp::kAlt, 0});
      ++pos_;
      skip_space(true);
      if (!parse_sequence(name, out, nested)) return false;
    }
    out.push_back({GrammarOp::kEnd, 0});
    return true;
  }

  bool parse_sequence(const std::string& name, std::vector<GrammarElement>& out, bool nested) {
    size_t last_sym = out.size();
    bool have_sym = false;
    while (!at_end()) {
      const char c = peek();
      const size_t sym_start = out.size();
      if (c == '"') {
        ++pos_;
        while (peek() != '"') {
          if (at_end() || peek() == '\n') return error(pos_, "a closing '\"'");
          uint32_t cp = 0;
          if (!parse_char(cp)) return false;
          out.push_back({GrammarOp::kChar, cp});
        }
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        GrammarOp first = GrammarOp::kChar;
        if (peek() == '^') {
          ++pos_;
          first = GrammarOp::kCharNot;
        }
        bool any = false;
        while (peek() != ']') {
          if (at_end() || peek() == '\n') return error(pos_, "a closing ']'");
          uint32_t lo = 0;
          if (!parse_char(lo)) return false;
          out.push_back({any ? GrammarOp::kCharAlt : first, lo});
          any = true;
          if (peek() == '-' && peek(1) != ']') {
            ++pos_;
            uint32_t hi = 0;
            const size_t hi_at = pos_;
            if (!parse_char(hi)) return false;
            if (hi < lo) return error(hi_at, "a range whose end is not below its start");
            out.push_back({GrammarOp::kCharRngUpper, hi});
          }
        }
        if (!any) return error(pos_, "at least one character in the class");
        ++pos_;
      } else if (c == '.') {
        ++pos_;
        out.push_back({GrammarOp::kCharAny, 0});
      } else if (is_word_char(c)) {
        const size_t ref_at = pos_;
        const std::string ref = parse_name();
        const uint32_t id = symbol_id(ref);
        if (!first_ref_.count(id)) first_ref_[id] = ref_at;
        out.push_back({GrammarOp::kRuleRef, id});
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        const uint32_t sub = generated_id(name);
        std::vector<GrammarElement> body;
        if (!parse_alternates(name, body, true)) return false;
        if (!set_rule(sub, std::move(body))) return false;
        if (peek() != ')') return error(pos_, "')' or '|'");
        ++pos_;
        out.push_back({GrammarOp::kRuleRef, sub});
      } else if (c == '<' || (c == '!' && peek(1) == '<')) {
        if (!parse_token_element(out)) return false;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_sym) return error(pos_, "something to repeat before '" + std::string(1, c) + "'");
        int64_t lo = 0;
        int64_t hi = -1;
        ++pos_;
        if (c == '+') lo = 1;
        if (c == '?') hi = 1;
        if (c == '{') {
          skip_space(false);
          if (!parse_int(lo)) return false;
          skip_space(false);
          hi = lo;
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            hi = -1;
            if (peek() >= '0' && peek() <= '9') {
              if (!parse_int(hi)) return false;
              if (hi < lo) return error(pos_, "an upper bound not below the lower bound");
              skip_space(false);
            }
          }
          if (peek() != '}') return error(pos_, "'}' or ',' in the repetition");
          ++pos_;
        }
        if (!repeat(name, out, last_sym, lo, hi)) return false;
        skip_space(nested);
        continue;  // the repeated group stays the last symbol for a following '?'
      } else {
        break;
      }
      last_sym = sym_start;
      have_sym = true;
      skip_space(nested);
    }
    return true;
  }

  // Replaces out[last_sym, end) (one symbol, X) by X{lo,hi} (hi < 0: unbounded), as
  // llama.cpp: X repeated lo times, then a chain of generated optional rules.
  bool repeat(const std::string& name, std::vector<GrammarElement>& out, size_t last_sym,
              int64_t lo, int64_t hi) {
    const std::vector<GrammarElement> sym(out.begin() + static_cast<std::ptrdiff_t>(last_sym),
                                          out.end());
    if (static_cast<int64_t>(sym.size()) * std::max<int64_t>(lo, hi) > kGrammarMaxElements) {
      return error(pos_, "a smaller repetition (the expansion exceeds the element limit)");
    }
    out.resize(last_sym);
    for (int64_t i = 0; i < lo; ++i) out.insert(out.end(), sym.begin(), sym.end());
    const int64_t n_opt = hi < 0 ? 1 : hi - lo;
    uint32_t last_rec = 0;
    for (int64_t i = 0; i < n_opt; ++i) {
      const uint32_t rec = generated_id(name);
      std::vector<GrammarElement> body = sym;
      if (hi < 0) {
        body.push_back({GrammarOp::kRuleRef, rec});
      } else if (i > 0) {
        body.push_back({GrammarOp::kRuleRef, last_rec});
      }
      body.push_back({GrammarOp::kAlt, 0});
      body.push_back({GrammarOp::kEnd, 0});
      if (!set_rule(rec, std::move(body))) return false;
      last_rec = rec;
    }
    if (n_opt > 0) out.push_back({GrammarOp::kRuleRef, last_rec});
    if (n_elements_ + static_cast<int64_t>(out.size()) > kGrammarMaxElements) {
      return error(pos_, "a smaller repetition (the expansion exceeds the element limit)");
    }
    return true;
  }

  // --- checks --------------------------------------------------------------------------
  Result<Grammar> finish() {
    for (uint32_t id = 0; id < names_.size(); ++id) {
      if (!defined_[id]) {
        return located(first_ref_[id],
                       "expected a defined rule ('" + names_[id] + "' is not defined)");
      }
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) return make_error(ErrorCode::kUsage, "the grammar has no 'root' rule");
    const std::vector<bool> nullable = fixed_point(false);
    // Left recursion. An edge r -> v: rule r has an alternative that can start with rule v
    // (every element before that reference can match nothing). Expanding the reference keeps
    // the rest of the alternative on the stack, so a cycle of such edges grows the stack
    // without end unless every edge of it is a tail reference (the last element of its
    // alternative, as in the rule a repetition of something nullable generates,
    // `r ::= x r |`): such cycles come back to a stack already seen, which the matcher skips
    // (Grammar::empty_loops). Any other cycle is refused.
    // A loop that can never leave (`a ::= a`) matches nothing and is refused too.
    const std::vector<FrontEdge> edges = front_edges(nullable);
    const std::vector<uint32_t> component = strongly_connected(edges);
    const std::vector<bool> ends = fixed_point(true);
    bool empty_loops = false;
    for (const FrontEdge& e : edges) {
      if (component[e.from] != component[e.to]) continue;
      if (e.tail && ends[e.from]) {
        empty_loops = true;
        continue;
      }
      const std::string& name = names_[e.from];
      const size_t cut = name.rfind('_');
      const bool generated = generated_.count(e.from) != 0 && cut != std::string::npos;
      const std::string shown = generated ? name.substr(0, cut) : name;
      return make_error(ErrorCode::kUsage,
                        format("the grammar is left-recursive: rule '%s'%s can reach itself "
                               "without consuming a character",
                               shown.c_str(), generated ? " (in a group or repetition)" : ""));
    }
    Grammar g;
    g.rules = std::move(rules_);
    g.names = std::move(names_);
    g.root = root->second;
    g.empty_loops = empty_loops;
    g.has_tokens = has_tokens_;
    g.token_texts = std::move(token_texts_);
    return g;
  }

  struct FrontEdge {
    uint32_t from, to;
    bool tail;  // the reference ends its alternative
  };

  // The references each rule's alternatives can start with, in rule order.
  std::vector<FrontEdge> front_edges(const std::vector<bool>& nullable) const {
    std::vector<FrontEdge> edges;
    for (uint32_t r = 0; r < rules_.size(); ++r) {
      const std::vector<GrammarElement>& rule = rules_[r];
      bool at_front = true;
      for (size_t i = 0; i < rule.size(); ++i) {
        const GrammarElement& e = rule[i];
        if (e.op == GrammarOp::kAlt || e.op == GrammarOp::kEnd) {
          at_front = true;
        } else if (e.op == GrammarOp::kRuleRef) {
          const GrammarOp next = rule[i + 1].op;  // every rule ends with kEnd
          if (at_front)
            edges.push_back({r, e.value, next == GrammarOp::kAlt || next == GrammarOp::kEnd});
          at_front = at_front && nullable[e.value];
        } else if (is_terminal(e.op)) {
          at_front = false;
        }
      }
    }
    return edges;
  }

  // The rules with an alternative of such rules alone (chars = false: the rules that can
  // match nothing) or of such rules and characters (chars = true: the rules that match some
  // text), to a fixed point.
  std::vector<bool> fixed_point(bool chars) const {
    std::vector<bool> in(rules_.size(), false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < rules_.size(); ++r) {
        if (in[r]) continue;
        bool alt_in = true;
        for (const GrammarElement& e : rules_[r]) {
          if (e.op == GrammarOp::kAlt || e.op == GrammarOp::kEnd) {
            if (alt_in) {
              in[r] = true;
              changed = true;
              break;
            }
            alt_in = true;
          } else if (e.op == GrammarOp::kRuleRef) {
            alt_in = alt_in && in[e.value];
          } else if (is_terminal(e.op)) {
            alt_in = alt_in && chars;
          }
        }
      }
    }
    return in;
  }

  // Tarjan's strongly connected components of the rules under `edges` (without recursion:
  // generated rules can chain thousands deep): component ids by rule.
  std::vector<uint32_t> strongly_connected(const std::vector<FrontEdge>& edges) const {
    const size_t n = rules_.size();
    std::vector<size_t> first(n + 1, 0);  // edges of rule r: [first[r], first[r + 1])
    for (const FrontEdge& e : edges) ++first[e.from + 1];
    for (size_t r = 0; r < n; ++r) first[r + 1] += first[r];
    constexpr uint32_t kUnseen = UINT32_MAX;
    std::vector<uint32_t> index(n, kUnseen), low(n, 0), component(n, kUnseen);
    std::vector<uint32_t> stack;
    std::vector<std::pair<uint32_t, size_t>> walk;  // (rule, next edge to follow)
    uint32_t next_index = 0, n_components = 0;
    for (uint32_t start = 0; start < n; ++start) {
      if (index[start] != kUnseen) continue;
      walk.push_back({start, first[start]});
      index[start] = low[start] = next_index++;
      stack.push_back(start);
      while (!walk.empty()) {
        auto& [r, at] = walk.back();
        if (at < first[r + 1]) {
          const uint32_t v = edges[at++].to;
          if (index[v] == kUnseen) {
            index[v] = low[v] = next_index++;
            stack.push_back(v);
            walk.push_back({v, first[v]});
          } else if (component[v] == kUnseen) {
            low[r] = std::min(low[r], index[v]);
          }
          continue;
        }
        const uint32_t done = r;
        walk.pop_back();
        if (!walk.empty()) low[walk.back().first] = std::min(low[walk.back().first], low[done]);
        if (low[done] != index[done]) continue;
        uint32_t v = 0;
        do {
          v = stack.back();
          stack.pop_back();
          component[v] = n_components;
        } while (v != done);
        ++n_components;
      }
    }
    return component;
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::optional<ParseError> err_;
  bool has_tokens_ = false;
  std::vector<std::string> token_texts_;  // the texts of <text> elements
  std::map<std::string, uint32_t> ids_;
  std::map<uint32_t, size_t> first_ref_;
  std::set<uint32_t> generated_;
  std::vector<std::string> names_;
  std::vector<std::vector<GrammarElement>> rules_;
  std::vector<bool> defined_;
  int64_t n_elements_ = 0;
};

}  // namespace

Result<Grammar> parse_grammar(std::string_view text) {
  return Parser(text).run();
}

Result<std::shared_ptr<const Grammar>> resolve_grammar_tokens(
    std::shared_ptr<const Grammar> grammar, int32_t n_vocab,
    const std::function<std::vector<int32_t>(std::string_view)>& lookup) {
  if (!grammar->has_tokens) return grammar;
  std::vector<int32_t> ids;  // by token_texts index
  for (const std::string& text : grammar->token_texts) {
    std::vector<int32_t> tokens = lookup(text);
    if (tokens.size() != 1) {
      return make_error(ErrorCode::kUsage,
                        format("the grammar's token element %s is %zu tokens in this "
                               "vocabulary, not one (write <[id]> or the text as a string)",
                               text.c_str(), tokens.size()));
    }
    ids.push_back(tokens[0]);
  }
  auto bound = std::make_shared<Grammar>(*grammar);
  for (std::vector<GrammarElement>& rule : bound->rules) {
    for (GrammarElement& e : rule) {
      if (!is_token_element(e.op)) continue;
      if (e.value & Grammar::kTokenText) {
        e.value = static_cast<uint32_t>(ids[e.value & ~Grammar::kTokenText]);
      } else if (e.value >= static_cast<uint32_t>(n_vocab)) {
        return make_error(ErrorCode::kUsage,
                          format("the grammar's token element <[%u]> is outside the "
                                 "vocabulary of %d tokens",
                                 e.value, n_vocab));
      }
    }
  }
  return std::shared_ptr<const Grammar>(std::move(bound));
}

}  // namespace qrun
