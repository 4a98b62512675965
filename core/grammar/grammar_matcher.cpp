// The grammar matcher, as llama.cpp's grammar engine: the state is the set of stacks of
// element pointers the text so far can be at, each stack's top a character set to match
// next (rule references are expanded eagerly). A code point moves every stack whose top
// matches past that set; a byte sequence is decoded as UTF-8 with a trailing incomplete
// character kept aside and checked against the code points it could still become.
#include <algorithm>
#include <functional>
#include <optional>
#include <set>

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

// Orders stacks by their pointers, for the set of stacks advance_stack has expanded.
struct StackLess {
  bool operator()(const Stack& a, const Stack& b) const {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        std::less<const GrammarElement*>());
  }
};

// Expands rule references at the top of `stack` until every resulting stack is empty or
// has a character set on top, adding each new one to `out` once. In a grammar with empty
// loops a stack can come back: each is expanded once.
Result<void> advance_stack(const Grammar& g, Stack stack, std::vector<Stack>& out) {
  std::vector<Stack> todo;
  todo.push_back(std::move(stack));
  std::set<Stack, StackLess> expanded;
  size_t steps = 0;
  while (!todo.empty()) {
    if (++steps > kMaxExpansionSteps) return too_many_stacks();
    Stack s = std::move(todo.back());
    todo.pop_back();
    if (!s.empty() && s.back()->op == GrammarOp::kRuleRef) {
      if (g.empty_loops && !expanded.insert(s).second) continue;
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
  if (is_token_element(pos->op)) return false;  // takes whole tokens, not characters
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
  if (is_token_element(pos->op)) return false;
  const bool positive = pos->op != GrammarOp::kCharNot;
  if (positive) {
    do {
      if (pos->op == GrammarOp::kCharAny) return true;
      const bool range = pos[1].op == GrammarOp::kCharRngUpper;
      const uint32_t upper = range ? pos[1].value : pos->value;
      if (pos->value <= hi && lo <= upper) return true;
      pos += range ? 2 : 1;
    } while (pos->op == GrammarOp::kCharAlt);
    return false;
  }
  // Negated: is [lo, hi] not entirely covered by the excluded ranges? Moves `next` past
  // every range that holds it until none does (not covered) or it passes hi (covered).
  const GrammarElement* const first = pos;
  uint64_t next = lo;  // the lowest code point not yet known to be excluded
  for (bool moved = true; moved;) {
    moved = false;
    pos = first;
    do {
      if (pos->op == GrammarOp::kCharAny) {
        ++pos;  // (a negated set never holds one)
        continue;
      }
      const uint32_t a = pos->value;
      uint32_t b = pos->value;
      if (pos[1].op == GrammarOp::kCharRngUpper) {
        b = pos[1].value;
        pos += 2;
      } else {
        ++pos;
      }
      if (a <= next && next <= b) {
        next = uint64_t{b} + 1;
        moved = true;
      }
    } while (pos->op == GrammarOp::kCharAlt);
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

// The positions after code point `cp` from `stacks`, into `next` (cleared first); false when
// none survives. The result depends on `cp` only through which stacks' tops hold it.
Result<bool> step_code_point(const Grammar& g, const std::vector<Stack>& stacks, uint32_t cp,
                             std::vector<Stack>& next) {
  next.clear();
  for (const Stack& s : stacks) {
    if (s.empty()) continue;
    const GrammarElement* after = nullptr;
    if (!match_char(s.back(), cp, &after)) continue;
    Stack moved(s.begin(), s.end() - 1);
    if (!is_end_of_sequence(after)) moved.push_back(after);
    QRUN_TRY(advance_stack(g, std::move(moved), next));
  }
  return !next.empty();
}

Result<bool> accept_code_point(const Grammar& g, std::vector<Stack>& stacks, uint32_t cp) {
  std::vector<Stack> next;
  Result<bool> ok = step_code_point(g, stacks, cp, next);
  if (ok.ok() && *ok) stacks = std::move(next);
  return ok;
}

// Whether some position can take a completion of an incomplete character: `have` of its
// `n` bytes are there, `prefix` holds their payload bits. Overlong forms, surrogates and
// values past U+10FFFF are not completions.
bool completion_viable(const std::vector<Stack>& stacks, uint32_t prefix, int n, int have) {
  const int missing = n - have;
  const uint32_t lo = std::max(prefix << (6 * missing), utf8_min(n));
  const uint32_t hi =
      std::min<uint32_t>((prefix << (6 * missing)) | ((1u << (6 * missing)) - 1), 0x10FFFF);
  if (lo > hi || (is_surrogate(lo) && is_surrogate(hi))) return false;
  return std::any_of(stacks.begin(), stacks.end(),
                     [&](const Stack& s) { return !s.empty() && match_range(s.back(), lo, hi); });
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
      if (!completion_viable(stacks, cp, n, static_cast<int>(have))) return false;
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

namespace {

// The walk's state after the bytes from the root to one trie node: the positions after the
// complete characters (`stacks`: this level's own set or an ancestor's) and the bytes of an
// incomplete character. `own` keeps the set this level computed last and the key it was
// computed from, (the version of the set stepped from, which of its stacks matched), so
// that siblings whose code point matches the same stacks reuse it: the positions after a
// code point depend on it only through that (llama.cpp's candidate recursion shares the
// same work).
struct WalkLevel {
  const std::vector<Stack>* stacks = nullptr;
  uint64_t version = 0;  // of *stacks
  uint32_t prefix = 0;   // payload bits of the incomplete character
  int n_pending = 0;     // its bytes so far (0: none)
  int n_char = 0;        // its length
  std::vector<Stack> own;
  uint64_t own_version = 0;  // 0: own holds nothing reusable
  uint64_t own_from = 0;
  std::vector<uint64_t> own_mask;
};

// What can_accept_all asks about: the whole trie, reporting errors under tokens `wanted`
// marks (by id).
struct WholeTrie {
  const VocabTrie& trie;
  std::span<const uint8_t> wanted;
  bool enter(size_t) { return true; }
  bool wanted_under(size_t node) const {
    const std::span<const int32_t> under = trie.tokens_under(node);
    return std::any_of(under.begin(), under.end(), [&](int32_t id) {
      return static_cast<size_t>(id) < wanted.size() && wanted[static_cast<size_t>(id)] != 0;
    });
  }
};

// What can_accept_some asks about: the subtrees that hold one of `positions` (trie
// positions, ascending). The walk visits nodes in preorder, so their token ranges ascend
// too and one cursor finds each node's first position in amortized O(1).
struct SomeTokens {
  const VocabTrie& trie;
  std::span<const int32_t> positions;
  size_t next = 0;
  bool enter(size_t node) {
    const auto begin = static_cast<int32_t>(trie.node(node).tok_begin);
    const auto end = static_cast<int32_t>(trie.node(trie.node(node).subtree_end).tok_begin);
    while (next < positions.size() && positions[next] < begin) ++next;
    return next < positions.size() && positions[next] < end;
  }
  bool wanted_under(size_t) const { return true; }  // entered: a wanted token is below
};

}  // namespace

template <class Scope>
std::optional<Error> GrammarMatcher::walk_trie(const VocabTrie& trie, Scope scope,
                                               std::span<uint8_t> allowed) const {
  const Grammar& g = *grammar_;
  std::vector<WalkLevel> levels(trie.max_depth() + 1);
  uint64_t next_version = 1;
  WalkLevel& root = levels[0];
  root.stacks = &stacks_;
  root.version = next_version++;
  if (!partial_.empty()) {
    // Only a valid lead and continuation bytes are ever kept.
    const auto lead = static_cast<unsigned char>(partial_[0]);
    root.n_char = utf8_length(lead);
    root.n_pending = static_cast<int>(partial_.size());
    root.prefix = lead & (0x7Fu >> root.n_char);
    for (size_t k = 1; k < partial_.size(); ++k) {
      root.prefix = (root.prefix << 6) | (static_cast<unsigned char>(partial_[k]) & 0x3Fu);
    }
  }
  std::optional<Error> error;
  std::vector<uint64_t> mask;
  size_t i = 0;
  while (i < trie.n_nodes()) {
    const VocabTrie::Node& node = trie.node(i);
    if (!scope.enter(i)) {
      i = node.subtree_end;
      continue;
    }
    const WalkLevel& parent = levels[node.depth - 1];
    WalkLevel& cur = levels[node.depth];
    const auto b = node.byte;
    bool alive = true;
    bool complete = false;
    uint32_t cp = 0;
    if (parent.n_pending == 0) {
      const int n = utf8_length(b);
      alive = n != 0;
      cur.n_char = n;
      cur.n_pending = 1;
      cur.prefix = n == 1 ? b : (b & (0x7Fu >> n));
      complete = n == 1;
    } else {
      alive = (b & 0xC0) == 0x80;
      cur.n_char = parent.n_char;
      cur.n_pending = parent.n_pending + 1;
      cur.prefix = (parent.prefix << 6) | (b & 0x3Fu);
      complete = cur.n_pending == cur.n_char;
    }
    if (alive && !complete) {
      // An incomplete character: the same test as a token ending here (which it also is).
      cur.stacks = parent.stacks;
      cur.version = parent.version;
      alive = completion_viable(*cur.stacks, cur.prefix, cur.n_char, cur.n_pending);
    } else if (alive) {
      cp = cur.prefix;
      alive = !(cp < utf8_min(cur.n_char) || cp > 0x10FFFF || is_surrogate(cp));
      cur.n_pending = 0;
    }
    if (alive && complete) {
      const std::vector<Stack>& from = *parent.stacks;
      mask.assign((from.size() + 63) / 64, 0);
      bool any = false;
      for (size_t k = 0; k < from.size(); ++k) {
        if (!from[k].empty() && match_char(from[k].back(), cp, nullptr)) {
          mask[k / 64] |= uint64_t{1} << (k % 64);
          any = true;
        }
      }
      alive = any;
      if (alive &&
          !(cur.own_version != 0 && cur.own_from == parent.version && cur.own_mask == mask)) {
        cur.own_version = 0;
        Result<bool> ok = step_code_point(g, from, cp, cur.own);
        if (!ok.ok()) {
          if (!error && scope.wanted_under(i)) error = ok.error();
          alive = false;
        } else if (!*ok) {
          alive = false;  // (not reached: a matched stack always leaves a position)
        } else {
          cur.own_version = next_version++;
          cur.own_from = parent.version;
          cur.own_mask = mask;
        }
      }
      if (alive) {
        cur.stacks = &cur.own;
        cur.version = cur.own_version;
      }
    }
    if (!alive) {  // its tokens stay 0
      i = node.subtree_end;
      continue;
    }
    for (int32_t id : trie.tokens_at(i)) allowed[static_cast<size_t>(id)] = 1;
    ++i;
  }
  return error;
}

std::optional<Error> GrammarMatcher::can_accept_all(const VocabTrie& trie,
                                                    std::span<const uint8_t> wanted,
                                                    std::span<uint8_t> allowed) const {
  std::fill(allowed.begin(), allowed.end(), uint8_t{0});
  return walk_trie(trie, WholeTrie{trie, wanted}, allowed);
}

std::optional<Error> GrammarMatcher::can_accept_some(const VocabTrie& trie,
                                                     std::span<const int32_t> ids,
                                                     std::span<uint8_t> allowed) const {
  std::vector<int32_t> positions;
  positions.reserve(ids.size());
  for (int32_t id : ids) {
    allowed[static_cast<size_t>(id)] = 0;
    if (const int32_t pos = trie.position(id); pos >= 0) positions.push_back(pos);
  }
  std::sort(positions.begin(), positions.end());
  return walk_trie(trie, SomeTokens{trie, positions}, allowed);
}

namespace {

// Whether the token element on top of a stack takes token `id`.
bool token_matches(const GrammarElement* top, int32_t id) {
  const auto v = static_cast<uint32_t>(id);
  return (top->op == GrammarOp::kToken && top->value == v) ||
         (top->op == GrammarOp::kTokenNot && top->value != v);
}

}  // namespace

Result<bool> GrammarMatcher::accept_token(int32_t id, std::string_view piece) {
  if (!grammar_->has_tokens) return piece.empty() ? Result<bool>(false) : accept(piece);
  // The positions the token's text reaches, then those a token element takes it at (only
  // between characters). When both kinds survive but the text ended inside a character,
  // the token elements' positions win: the matcher holds one partial character for all.
  std::vector<Stack> by_text = stacks_;
  std::string partial = partial_;
  bool text_ok = false;
  if (!piece.empty()) {
    Result<bool> ok = advance(by_text, partial, piece);
    if (!ok.ok()) return ok;
    text_ok = *ok;
  }
  std::vector<Stack> by_token;
  if (partial_.empty()) {
    for (const Stack& s : stacks_) {
      if (s.empty() || !token_matches(s.back(), id)) continue;
      Stack moved(s.begin(), s.end() - 1);
      if (!is_end_of_sequence(s.back() + 1)) moved.push_back(s.back() + 1);
      QRUN_TRY(advance_stack(*grammar_, std::move(moved), by_token));
    }
  }
  if (by_token.empty()) {
    if (!text_ok) return false;
    stacks_ = std::move(by_text);
    partial_ = std::move(partial);
    return true;
  }
  if (text_ok && partial.empty()) {
    for (Stack& s : by_text) {
      if (std::find(by_token.begin(), by_token.end(), s) != by_token.end()) continue;
      if (by_token.size() >= kGrammarMaxStacks) return too_many_stacks();
      by_token.push_back(std::move(s));
    }
  }
  stacks_ = std::move(by_token);
  partial_.clear();
  return true;
}

bool GrammarMatcher::token_allows(int32_t id) const {
  if (!grammar_->has_tokens || !partial_.empty()) return false;
  return std::any_of(stacks_.begin(), stacks_.end(),
                     [&](const Stack& s) { return !s.empty() && token_matches(s.back(), id); });
}

void GrammarMatcher::allow_token_elements(std::span<uint8_t> allowed) const {
  if (!grammar_->has_tokens || !partial_.empty()) return;
  std::optional<uint32_t> all_but;  // one !<x> seen: every id but x (two different: all)
  bool all = false;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const GrammarElement* top = s.back();
    if (top->op == GrammarOp::kToken && top->value < allowed.size()) {
      allowed[top->value] = 1;
    } else if (top->op == GrammarOp::kTokenNot) {
      all = all || (all_but && *all_but != top->value);
      all_but = top->value;
    }
  }
  if (!all_but) return;
  // The ids a positive element or the text allowed keep their 1; x keeps what it had.
  const uint8_t keep = *all_but < allowed.size() ? allowed[*all_but] : 0;
  std::fill(allowed.begin(), allowed.end(), uint8_t{1});
  if (!all && *all_but < allowed.size()) allowed[*all_but] = keep;
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
