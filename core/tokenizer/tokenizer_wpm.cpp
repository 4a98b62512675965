// WordPiece ("bert" vocabularies), as llama.cpp's WPM tokenizer: BertNormalizer's lowercase
// and accent stripping (the first code point of each NFD form, combining marks dropped), as
// the vocabulary asks; split at white space and around punctuation and CJK ideographs; then
// each word, prefixed with U+2581, is covered greedily by the longest vocabulary entries. A
// word that cannot be covered completely becomes one [UNK].
#include "core/tokenizer/tokenizer_vocab.h"
#include "core/unicode/unicode.h"

namespace qrun::tokenizer {
namespace {

bool is_cjk_ideograph(uint32_t cpt) {
  return (cpt >= 0x4E00 && cpt <= 0x9FFF) || (cpt >= 0x3400 && cpt <= 0x4DBF) ||
         (cpt >= 0x20000 && cpt <= 0x2A6DF) || (cpt >= 0x2A700 && cpt <= 0x2B73F) ||
         (cpt >= 0x2B740 && cpt <= 0x2B81F) ||
         (cpt >= 0x2B920 && cpt <= 0x2CEAF) ||  // from 0x2B920, as the HF tokenizer has it
         (cpt >= 0xF900 && cpt <= 0xFAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
}

std::vector<std::string> split_words(const Vocab& vocab, std::string_view text) {
  using unicode::Category;
  std::vector<std::string> words(1);
  for (uint32_t cpt : unicode::decode_utf8(text)) {
    if (vocab.strip_accents) cpt = unicode::nfd_first(cpt);
    if (unicode::is_whitespace(cpt)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const Category cat = unicode::category(cpt);
    if (cpt == 0 || cpt == unicode::kReplacementChar || cat == Category::kControl) continue;
    if (vocab.strip_accents && cat == Category::kMark) continue;
    const std::string normal = unicode::to_utf8(vocab.lowercase ? unicode::to_lower(cpt) : cpt);
    if (cat == Category::kPunctuation || (cpt < 0x7F && cat == Category::kSymbol) ||
        is_cjk_ideograph(cpt)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = normal;  // a word of its own
      words.emplace_back();
    } else {
      words.back() += normal;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  for (const std::string& word : split_words(vocab, text)) {
    const std::string spelled = "\xE2\x96\x81" + word;  // U+2581 marks the start of a word
    const size_t n = spelled.size();
    const size_t start = out.size();
    // Greedy longest match at each byte position; the match lengths are in bytes, as in
    // llama.cpp, so a candidate may end inside a character (it then never matches).
    for (size_t i = 0; i < n;) {
      size_t matched = 0;
      for (size_t j = std::min(n, i + vocab.max_token_len + 1); j > i; --j) {
        const int32_t id = vocab.find(std::string_view(spelled).substr(i, j - i));
        if (id != kNoToken) {
          out.push_back(id);
          matched = j - i;
          break;
        }
      }
      if (matched == 0) {
        out.resize(start);  // discard the partial cover
        break;
      }
      i += matched;
    }
    if (out.size() == start && vocab.unk != kNoToken) out.push_back(vocab.unk);
  }
}

}  // namespace qrun::tokenizer
