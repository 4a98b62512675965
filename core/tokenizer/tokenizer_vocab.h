// Internal to the tokenizers: the loaded vocabulary that every tokenizer algorithm reads, and
// the algorithms' entry points. Built once by Tokenizer::from_gguf (tokenizer_load.cpp), then
// immutable. Attribute bits and their meaning follow llama.cpp's llama_token_attr.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_regex.h"

namespace qrun::tokenizer {

// One symbol of a word being merged (SentencePiece and BPE): a byte range of the input,
// linked to its neighbours; n == 0 marks a symbol merged into its left neighbour.
struct Symbol {
  int prev;
  int next;
  size_t offset;
  size_t n;
};

// Splits `text` into one Symbol per UTF-8 character (by lead byte, without validation; a
// truncated sequence at the end becomes a shorter symbol), linked into a list.
void split_into_symbols(std::string_view text, std::vector<Symbol>& symbols);

enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,  // a special token that swallows white space on its left
  kAttrRstrip = 1u << 8,  // ... and on its right
};

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
};

// Hash and equality that accept std::string_view keys without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct Vocab {
  TokenizerType type = TokenizerType::kSpm;
  std::string model;
  std::string pre = "default";
  std::vector<TokenData> tokens;
  StringMap text_to_id;
  size_t max_token_len = 0;

  int32_t bos = kNoToken;
  int32_t eos = kNoToken;
  int32_t eot = kNoToken;
  int32_t eom = kNoToken;
  int32_t unk = kNoToken;
  int32_t sep = kNoToken;
  int32_t pad = kNoToken;
  int32_t mask = kNoToken;
  int32_t fim_pre = kNoToken;
  int32_t fim_suf = kNoToken;
  int32_t fim_mid = kNoToken;
  int32_t fim_pad = kNoToken;
  int32_t fim_rep = kNoToken;
  int32_t fim_sep = kNoToken;

  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SPM: a space before the text (and after special tokens)
  bool ignore_merges = false;     // BPE: a pre-token that is a whole token skips merging
  bool clean_spaces = false;      // decode: drop spaces before punctuation and contractions
  // WordPiece's BertNormalizer (tokenizer.ggml.normalizer.lowercase and .strip_accents; the
  // second defaults to the first): lowercase the text; drop accents (each code point to the
  // first of its NFD form, then combining marks left out).
  bool lowercase = true;
  bool strip_accents = true;

  StringMap bpe_ranks;  // merge_key(left, right) -> rank
  std::vector<SplitPattern> pre_patterns;

  std::vector<int32_t> special_tokens;  // control, user-defined, unknown: longest text first
  std::vector<int32_t> eog_ids;         // sorted
  std::vector<std::string> pieces;      // token_to_piece(id, render_special = true)
  std::vector<std::string> warnings;

  int32_t find(std::string_view text) const {
    const auto it = text_to_id.find(text);
    return it == text_to_id.end() ? kNoToken : it->second;
  }
  // The token of one raw byte: <0xXX>, else the byte itself as a token (SentencePiece), or
  // its byte-level alphabet character (BPE, WordPiece); kNoToken if the vocabulary has none.
  int32_t byte_to_token(uint8_t byte) const;
  // The rank of merging `left` and `right`, or -1.
  int32_t bpe_rank(std::string_view left, std::string_view right) const;
};

// An unambiguous key for a pair of strings.
std::string merge_key(std::string_view left, std::string_view right);

// A byte-level BPE pre-tokenizer: its regexes and the flags llama.cpp ties to it.
struct PreTokenizer {
  std::vector<const char*> patterns;
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;  // the model adds BOS unless tokenizer.ggml.add_bos_token says no
  bool no_bos = false;   // the model has no BOS token unless tokenizer.ggml.bos_token_id is set
};
// The pre-tokenizer called `name` in tokenizer.ggml.pre, or nullptr if unknown.
const PreTokenizer* find_pre_tokenizer(std::string_view name);

// Fills `vocab` from the file's tokenizer.ggml.* metadata.
Result<void> load_vocab(const gguf::File& file, Vocab& vocab);

// One fragment of raw text (no special tokens in it). The algorithms append to `out`.
void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);
void bpe_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);
void wpm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

// The llama_token_to_piece bytes of `id` with render_special, for the piece cache.
std::string render_piece(const Vocab& vocab, int32_t id);

}  // namespace qrun::tokenizer
