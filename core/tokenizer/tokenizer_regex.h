// The regular expressions of byte-level BPE pre-tokenizers, and the splitting they drive.
// A small backtracking matcher with ECMAScript semantics (leftmost match, alternatives in
// order, greedy quantifiers) over code points, for the subset these patterns use: | (?:)
// (?!) [...] [^...] [A&&[B]] (intersection) ranges \s \S \p{L} \p{N} \p{P} \p{S} \p{M} $ ? * +
// {m,n}; quantifiers
// apply to single characters or classes only. Matching mirrors llama.cpp's: \s is ASCII
// white space, and every other Unicode White_Space code point is treated as U+000B.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace qrun::tokenizer {

// Text prepared for matching: per code point, the value patterns compare (non-ASCII white
// space replaced by U+000B) and a bit for its category (1 << Category).
struct CodeUnits {
  std::vector<uint32_t> cpts;    // the decoded text
  std::vector<uint32_t> values;  // what literals, ranges and \s see
  std::vector<uint8_t> category_bits;

  explicit CodeUnits(std::string_view text);
};

class SplitPattern {
 public:
  // Compiles a built-in pattern; unsupported syntax is a programming error (QRUN_CHECK).
  static SplitPattern compile(std::string_view pattern);

  // Splits the code points [begin, end) into the matches of this pattern and the runs of
  // unmatched code points between them, appending the piece lengths to `pieces`. The
  // pattern sees only this range: $ and lookaheads stop at `end`.
  void split(const CodeUnits& text, size_t begin, size_t end, std::vector<size_t>& pieces) const;

  struct Program;  // the compiled pattern (defined in tokenizer_regex.cpp)

 private:
  explicit SplitPattern(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// Splits `text` with each pattern in turn (each one refines the pieces of the previous one)
// and returns the pieces spelled in the GPT-2 byte-level alphabet, ready for BPE merges.
// Invalid UTF-8 is decoded leniently (each bad byte becomes U+FFFD).
std::vector<std::string> pre_tokenize(std::string_view text,
                                      const std::vector<SplitPattern>& patterns);

}  // namespace qrun::tokenizer
