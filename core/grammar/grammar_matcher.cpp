// The grammar matcher, as llama.cpp's grammar engine: the state is the set of stacks of
// element pointers the text so far can be at, each stack's top a character set to match
// next (rule references are expanded eagerly). A code point moves every stack whose top
// matches past that set; a byte sequence is decoded as UTF-8 with a trailing incomplete
// character kept aside and checked against the code points it could still become.
#include <algorithm>

#include "core/grammar/grammar.h"

namespace qrun {
namespace {

using Stack = GrammarMatcher::Stack;

// Work bound for one expansion: a grammar whose positions explode stops here.
constexpr size_t kMaxExpansionSteps = 1'000'000;

bool is_end_of_sequence(const GrammarElement* e) {
  return e->op == GrammarOp::kEnd || e->op == GrammarOp::kAlt;
}

Error too_many_stacks() {
  return make_error(
      ErrorCode::kRuntime,
      format("the grammar is too ambiguous: more than %zu positions at once", kGrammarMaxStacks));
}

// Expands rule references at the top of `stack` until every resulting stack is empty or
// has a character set on top, adding each new one to `out` once.
Result<void> advance_stack(const Grammar& g, Stack stack, std::vector<Stack>& out) {
  std::vector<Stack> todo;
  todo.push_back(std::move(stack));
  size_t steps = 0;
  while (!todo.empty()) {
    if (++steps > kMaxExpansionSteps) return too_many_stacks();
    Stack s = std::move(todo.back());
    todo.pop_back();
    if (!s.empty() && s.back()->op == GrammarOp::kRuleRef) {
      const GrammarElement* pos = s.back();
      const GrammarElement* alt = g.rules[pos->value].data();
      for (;;) {
        Stack next(s.begin(), s.end() - 1);
        if (!is_end_of_sequence(pos + 1)) next.push_back(pos + 1);
        if (!is_end_of_sequence(alt)) next.push_back(alt);
        todo.push_back(std::move(next));
        while (!is_end_of_sequence(alt)) ++alt;
        if (alt->op != GrammarOp::kAlt) break;
        ++alt;
      }
      continue;
    }
    if (std::find(out.begin(), out.end(), s) == out.end()) {
      if (out.size() >= kGrammarMaxStacks) return too_many_stacks();
      out.push_back(std::move(s));
    }
  }
  return {};
}

// Whether the set starting at `pos` holds `cp`; `end` gets the element after the set.
bool match_char(const GrammarElement* pos, uint32_t cp, const GrammarElement** end) {
  const bool positive = pos->op != GrammarOp::kCharNot;
  bool found = false;
  do {
    if (pos->op == GrammarOp::kCharAny) {
      found = true;
      ++pos;
    } else if (pos[1].op == GrammarOp::kCharRngUpper) {
      found = found || (pos->value <= cp && cp <= pos[1].value);
      pos += 2;
    } else {
      found = found || pos->value == cp;
      ++pos;
    }
  } while (pos->op == GrammarOp::kCharAlt);
  if (end != nullptr) *end = pos;
  return found == positive;
}

// Whether the set at `pos` holds some code point in [lo, hi] (a partial character).
bool match_range(const GrammarElement* pos, uint32_t lo, uint32_t hi) {
  const bool positive = pos->op != GrammarOp::kCharNot;
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool any = false;
  do {
    if (pos->op == GrammarOp::kCharAny) {
      any = true;
      ++pos;
    } else if (pos[1].op == GrammarOp::kCharRngUpper) {
      ranges.emplace_back(pos->value, pos[1].value);
      pos += 2;
    } else {
      ranges.emplace_back(pos->value, pos->value);
      ++pos;
    }
  } while (pos->op == GrammarOp::kCharAlt);
  if (positive) {
    if (any) return true;
    return std::any_of(ranges.begin(), ranges.end(),
                       [&](const auto& r) { return r.first <= hi && lo <= r.second; });
  }
  // Negated: is [lo, hi] not entirely covered by the excluded ranges?
  std::sort(ranges.begin(), ranges.end());
  uint64_t next = lo;  // the lowest code point not yet known to be excluded
  for (const auto& [a, b] : ranges) {
    if (a > next) break;
    next = std::max<uint64_t>(next, uint64_t{b} + 1);
    if (next > hi) return false;
  }
  return true;
}

// The length of the UTF-8 sequence a lead byte starts; 0 for a byte that cannot lead.
int utf8_length(unsigned char b) {
  if (b < 0x80) return 1;
  if ((b >> 5) == 6) return 2;
  if ((b >> 4) == 14) return 3;
  if ((b >> 3) == 30) return 4;
  return 0;
}

// The smallest code point a sequence of n bytes may encode (shorter forms are overlong).
uint32_t utf8_min(int n) {
  return n == 1 ? 0 : n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
}

bool is_surrogate(uint32_t cp) {
  return cp >= 0xD800 && cp <= 0xDFFF;
}

Result<bool> accept_code_point(const Grammar& g, std::vector<Stack>& stacks, uint32_t cp) {
  std::vector<Stack> next;
  for (const Stack& s : stacks) {
    if (s.empty()) continue;
    const GrammarElement* after = nullptr;
    if (!match_char(s.back(), cp, &after)) continue;
    Stack moved(s.begin(), s.end() - 1);
    if (!is_end_of_sequence(after)) moved.push_back(after);
    QRUN_TRY(advance_stack(g, std::move(moved), next));
  }
  if (next.empty()) return false;
  stacks = std::move(next);
  return true;
}

}  // namespace

Result<GrammarMatcher> GrammarMatcher::create(std::shared_ptr<const Grammar> grammar) {
  QRUN_CHECK(grammar != nullptr && grammar->root < grammar->rules.size(), "bad grammar");
  GrammarMatcher m(std::move(grammar));
  const Grammar& g = *m.grammar_;
  const GrammarElement* alt = g.rules[g.root].data();
  for (;;) {
    Stack s;
    if (!is_end_of_sequence(alt)) s.push_back(alt);
    QRUN_TRY(advance_stack(g, std::move(s), m.stacks_));
    while (!is_end_of_sequence(alt)) ++alt;
    if (alt->op != GrammarOp::kAlt) break;
    ++alt;
  }
  return m;
}

Result<bool> GrammarMatcher::advance(std::vector<Stack>& stacks, std::string& partial,
                                     std::string_view bytes) const {
  const std::string buf = partial + std::string(bytes);
  size_t i = 0;
  while (i < buf.size()) {
    const auto lead = static_cast<unsigned char>(buf[i]);
    const int n = utf8_length(lead);
    if (n == 0) return false;
    const size_t have = std::min(buf.size() - i, static_cast<size_t>(n));
    uint32_t cp = n == 1 ? lead : (lead & (0x7Fu >> n));
    for (size_t k = 1; k < have; ++k) {
      const auto b = static_cast<unsigned char>(buf[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    if (have < static_cast<size_t>(n)) {
      // An incomplete character: keep it if some position can take a completion of it.
      // Overlong forms, surrogates and values past U+10FFFF are not completions.
      const int missing = n - static_cast<int>(have);
      const uint32_t lo = std::max(cp << (6 * missing), utf8_min(n));
      const uint32_t hi =
          std::min<uint32_t>((cp << (6 * missing)) | ((1u << (6 * missing)) - 1), 0x10FFFF);
      if (lo > hi || (is_surrogate(lo) && is_surrogate(hi))) return false;
      const bool viable = std::any_of(stacks.begin(), stacks.end(), [&](const Stack& s) {
        return !s.empty() && lo <= hi && match_range(s.back(), lo, hi);
      });
      if (!viable) return false;
      partial = buf.substr(i);
      return true;
    }
    if (cp < utf8_min(n) || cp > 0x10FFFF || is_surrogate(cp)) return false;  // not UTF-8
    Result<bool> ok = accept_code_point(*grammar_, stacks, cp);
    if (!ok.ok() || !*ok) return ok;
    i += static_cast<size_t>(n);
  }
  partial.clear();
  return true;
}

Result<bool> GrammarMatcher::accept(std::string_view bytes) {
  std::vector<Stack> stacks = stacks_;
  std::string partial = partial_;
  Result<bool> ok = advance(stacks, partial, bytes);
  if (ok.ok() && *ok) {
    stacks_ = std::move(stacks);
    partial_ = std::move(partial);
  }
  return ok;
}

Result<bool> GrammarMatcher::can_accept(std::string_view bytes) const {
  // Fast reject, without copying the stacks: a whole first character that no position's
  // next set holds (most of a vocabulary, at most positions).
  if (partial_.empty() && !bytes.empty()) {
    const auto lead = static_cast<unsigned char>(bytes[0]);
    const int n = utf8_length(lead);
    if (n > 0 && bytes.size() >= static_cast<size_t>(n)) {
      uint32_t cp = n == 1 ? lead : (lead & (0x7Fu >> n));
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(bytes[k]) & 0x3Fu);
      const bool any = std::any_of(stacks_.begin(), stacks_.end(), [&](const Stack& s) {
        return !s.empty() && match_char(s.back(), cp, nullptr);
      });
      if (!any) return false;
    }
  }
  std::vector<Stack> stacks = stacks_;
  std::string partial = partial_;
  return advance(stacks, partial, bytes);
}

bool GrammarMatcher::can_end() const {
  return partial_.empty() &&
         std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::must_end() const {
  return partial_.empty() &&
         std::all_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

void GrammarMatcher::reset() {
  Result<GrammarMatcher> fresh = create(grammar_);
  QRUN_CHECK(fresh.ok(), "a grammar that started once failed to start again");
  *this = std::move(*fresh);
}

}  // namespace qrun
