// GBNF grammars as llama.cpp defines them, parsed into a compact rule table, and the
// matcher that follows a grammar one code point at a time. A rule is a flat list of
// elements: alternatives separated by kAlt and closed by kEnd; a character set is a kChar
// or kCharNot element followed by kCharAlt / kCharRngUpper elements. Groups and
// repetitions become generated rules, as in llama.cpp. A parsed Grammar has no undefined
// rule and no left recursion (through nullable prefixes too) but through tail references
// (a repetition of something that can match nothing, `("a"?)*`), whose expansion comes back
// to a stack it has already seen, so expanding it terminates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/grammar/vocab_trie.h"
#include "ggml-like/result.h"

namespace qrun {

enum class GrammarOp : uint8_t {
  kEnd,           // end of a rule
  kAlt,           // start of another alternative
  kRuleRef,       // value: the rule id
  kChar,          // value: a code point (starts a positive set)
  kCharNot,       // value: a code point (starts a negated set)
  kCharRngUpper,  // value: the upper end of a range whose lower end is the previous element
  kCharAlt,       // value: another code point of the same set
  kCharAny,       // `.`: any code point
  kToken,         // value: a token id (<[id]>, or <text> once resolved): that one token
  kTokenNot,      // value: a token id (!<[id]>, !<text>): any one token but that
};

// Whether an element starts a terminal: a character set or a token element.
inline bool is_terminal(GrammarOp op) {
  return op == GrammarOp::kChar || op == GrammarOp::kCharNot || op == GrammarOp::kCharAny ||
         op == GrammarOp::kToken || op == GrammarOp::kTokenNot;
}
inline bool is_token_element(GrammarOp op) {
  return op == GrammarOp::kToken || op == GrammarOp::kTokenNot;
}

struct GrammarElement {
  GrammarOp op;
  uint32_t value;
};

struct Grammar {
  std::vector<std::vector<GrammarElement>> rules;  // by rule id
  std::vector<std::string> names;                  // rule names; generated ones contain '_'+n
  uint32_t root = 0;
  // Some rule can reach itself without consuming a character, through tail references
  // only: the matcher must skip the stacks it has already expanded.
  bool empty_loops = false;
  // Token elements (llama.cpp's <[id]>, <text>, !<...>) match one whole token, by id. Those
  // written as text hold kTokenText | i, i indexing token_texts, until
  // resolve_grammar_tokens looks them up in a vocabulary.
  bool has_tokens = false;
  std::vector<std::string> token_texts;
  static constexpr uint32_t kTokenText = 0x80000000u;
};

// Limits that keep a hostile grammar from exhausting memory.
inline constexpr int64_t kGrammarMaxRepetition = 10000;    // m and n in {m,n}
inline constexpr int64_t kGrammarMaxElements = 1'000'000;  // all rules together
inline constexpr size_t kGrammarMaxStacks = 4096;          // matcher positions at once

// Parses GBNF text. Errors (kUsage) read "line L, column C: expected ...".
Result<Grammar> parse_grammar(std::string_view text);

// The grammar with its token elements written as text bound to token ids: `lookup` gives
// the ids a text tokenizes to (special tokens parsed), and it must be exactly one. A <[id]>
// at or past n_vocab, or a text that is not one token, is a kUsage error naming it.
Result<std::shared_ptr<const Grammar>> resolve_grammar_tokens(
    std::shared_ptr<const Grammar> grammar, int32_t n_vocab,
    const std::function<std::vector<int32_t>(std::string_view)>& lookup);

// Follows a grammar through the bytes of tokens. A position is a stack of element
// pointers into the grammar; the matcher holds the set of all positions the text so far
// can be at. An empty stack means the grammar is complete there.
class GrammarMatcher {
 public:
  using Stack = std::vector<const GrammarElement*>;

  // Starts at the root. kRuntime if the start already needs more than kGrammarMaxStacks.
  static Result<GrammarMatcher> create(std::shared_ptr<const Grammar> grammar);

  // Feeds bytes (any split of UTF-8 is fine: a trailing partial character is kept).
  // true: accepted and the state advanced; false: rejected, state unchanged. kRuntime
  // when the positions would exceed kGrammarMaxStacks.
  Result<bool> accept(std::string_view bytes);
  // Whether accept(bytes) would succeed, without changing the state.
  Result<bool> can_accept(std::string_view bytes) const;
  // can_accept for every token of `trie` at once: allowed[id] = can_accept(its piece), 1 or
  // 0 (allowed spans every id of the trie). Tokens sharing a prefix are checked once per
  // prefix and a rejected prefix skips its subtree. Returns the error can_accept would meet
  // on some token that wanted[id] marks (the others' errors are not reported).
  std::optional<Error> can_accept_all(const VocabTrie& trie, std::span<const uint8_t> wanted,
                                      std::span<uint8_t> allowed) const;
  // can_accept_all for the tokens `ids` alone: allowed[id] = can_accept(its piece) for each
  // (0 for a token not in the trie); other entries are left as they are. Only the subtrees
  // holding one of them are walked, so a few hundred ids cost a few hundred short paths.
  // Returns the error can_accept would meet on one of them.
  std::optional<Error> can_accept_some(const VocabTrie& trie, std::span<const int32_t> ids,
                                       std::span<uint8_t> allowed) const;
  // Token elements. accept_token advances by token `id` whole: the positions its text
  // `piece` takes (as accept) and those whose next element is a token element it matches
  // (only between characters). token_allows says whether a token element takes `id` now;
  // allow_token_elements sets allowed[id] = 1 for every id one takes (all ids for !<x>
  // but x). Without token elements in the grammar these are accept, false, nothing.
  Result<bool> accept_token(int32_t id, std::string_view piece);
  bool token_allows(int32_t id) const;
  void allow_token_elements(std::span<uint8_t> allowed) const;
  // Whether the text so far is a whole sentence of the grammar (EOS may come now).
  bool can_end() const;
  // Whether the text is complete and nothing more can follow.
  bool must_end() const;
  void reset();
  size_t n_stacks() const { return stacks_.size(); }

 private:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {}
  // Advances `stacks` by bytes; false when no position survives.
  Result<bool> advance(std::vector<Stack>& stacks, std::string& partial,
                       std::string_view bytes) const;
  // The walk behind can_accept_all and can_accept_some: Scope says which subtrees to enter
  // and whether an error below a node concerns a wanted token.
  template <class Scope>
  std::optional<Error> walk_trie(const VocabTrie& trie, Scope scope,
                                 std::span<uint8_t> allowed) const;

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Stack> stacks_;
  std::string partial_;  // the bytes of an incomplete UTF-8 character at the end
};

}  // namespace qrun
