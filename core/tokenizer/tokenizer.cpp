// Tokenizer: encoding (special-token partition, then the model's algorithm on each stretch of
// raw text), pieces and decoding, and the streaming decoder. The partition follows llama.cpp's
// tokenizer_st_partition: special tokens are tried longest first; each one splits every raw
// fragment at all of its non-overlapping occurrences, left to right, and may swallow white
// space next to it (lstrip / rstrip). Control and unknown tokens take part only when the
// caller asks to parse special tokens; user-defined tokens always do.
#include "core/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>

#include "core/tokenizer/tokenizer_vocab.h"
#include "core/unicode/unicode.h"

namespace qrun {
namespace tokenizer {
namespace {

struct Fragment {
  int32_t token;  // kNoToken: raw text [offset, offset + length)
  size_t offset;
  size_t length;
};

bool is_c_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}

// Splits the raw fragment `f` of `text` at every occurrence of special token `id`.
void split_fragment(const Vocab& v, std::string_view text, const Fragment& f, int32_t id,
                    std::vector<Fragment>& out) {
  const std::string& special = v.tokens[id].text;
  const uint32_t attr = v.tokens[id].attr;
  size_t pos = f.offset;
  const size_t end = f.offset + f.length;
  while (pos < end) {
    const size_t match = text.substr(0, end).find(special, pos);
    if (match == std::string_view::npos) break;
    size_t left_end = match;
    if (attr & kAttrLstrip) {
      while (left_end > pos && is_c_space(text[left_end - 1])) --left_end;
    }
    if (left_end > pos) out.push_back({kNoToken, pos, left_end - pos});
    out.push_back({id, 0, 0});
    pos = match + special.size();
    if (attr & kAttrRstrip) {
      while (pos < end && is_c_space(text[pos])) ++pos;
    }
  }
  if (pos < end) out.push_back({kNoToken, pos, end - pos});
}

std::vector<Fragment> partition(const Vocab& v, std::string_view text, bool parse_special) {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({kNoToken, 0, text.size()});
  std::vector<Fragment> next;
  for (const int32_t id : v.special_tokens) {
    if (!parse_special && (v.tokens[id].attr & (kAttrControl | kAttrUnknown))) continue;
    if (text.find(v.tokens[id].text) == std::string_view::npos) continue;
    next.clear();
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
      } else {
        split_fragment(v, text, f, id, next);
      }
    }
    fragments.swap(next);
  }
  return fragments;
}

// Replaces each space with U+2581, SentencePiece's visible space.
std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (const char c : text) {
    if (c == ' ') {
      out += "\xE2\x96\x81";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Byte-level BPE spelling back to bytes; characters outside the byte alphabet are reported
// inline as llama.cpp does.
std::string decode_byte_level(std::string_view spelled) {
  std::string out;
  size_t offset = 0;
  while (offset < spelled.size()) {
    const uint32_t cpt = unicode::decode_utf8(spelled, offset);
    const int byte = unicode::bpe_char_to_byte(cpt);
    if (byte >= 0) {
      out.push_back(static_cast<char>(byte));
      continue;
    }
    out += "[UNK_BYTE_0x";
    for (const char c : unicode::to_utf8(cpt)) out += format("%02x", static_cast<uint8_t>(c));
    out.append(spelled);
    out += "]";
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// llama.cpp's clean-up of decoded text for models trained with clean_up_tokenization_spaces:
// " ?", " !", " .", " ," lose the space; " ' " becomes "'"; " 's", " 'm", " 're", " 've" lose
// the space.
std::string clean_spaces(std::string s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i > 0 && s[i - 1] == ' ' && (c == '?' || c == '!' || c == '.' || c == ',')) {
      out.pop_back();
    }
    out.push_back(c);
  }
  s.swap(out);
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i > 0 && c == '\'' && i + 1 < s.size() && s[i - 1] == ' ' && s[i + 1] == ' ') {
      out.pop_back();
      s[++i] = '\0';  // the space after is dropped, and no longer counts as a space
    }
    out.push_back(c);
  }
  s.swap(out);
  out.clear();
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i > 0 && s[i - 1] == ' ' && c == '\'' && i + 1 < s.size()) {
      const char c1 = s[i + 1];
      const char c2 = i + 2 < s.size() ? s[i + 2] : '\0';
      if (c1 == 's' || c1 == 'm' || (c2 != '\0' && c2 == 'e' && (c1 == 'r' || c1 == 'v'))) {
        out.pop_back();
      }
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

int32_t Vocab::byte_to_token(uint8_t byte) const {
  if (type == TokenizerType::kSpm) {
    const int32_t id = find(format("<0x%02X>", byte));
    return id != kNoToken ? id : find(std::string(1, static_cast<char>(byte)));
  }
  return find(unicode::to_utf8(unicode::byte_to_bpe_char(byte)));
}

std::string render_piece(const Vocab& v, int32_t id) {
  const TokenData& t = v.tokens[id];
  if (t.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t.text;
  if (v.type == TokenizerType::kBpe) {
    return (t.attr & kAttrNormal) ? decode_byte_level(t.text) : std::string();
  }
  if (t.attr & kAttrNormal) {
    std::string out;
    for (size_t i = 0; i < t.text.size(); ++i) {
      if (t.text.compare(i, 3, "\xE2\x96\x81") == 0) {
        out.push_back(' ');
        i += 2;
      } else {
        out.push_back(t.text[i]);
      }
    }
    return out;
  }
  if (t.attr & kAttrByte) {  // "<0xXX>"; a malformed name reads as 0, as strtol would
    const int hi = t.text.size() >= 5 ? hex_value(t.text[3]) : -1;
    const int lo = t.text.size() >= 5 ? hex_value(t.text[4]) : -1;
    const int byte = hi < 0 ? 0 : (lo < 0 ? hi : hi * 16 + lo);
    return std::string(1, static_cast<char>(byte));
  }
  return {};
}

}  // namespace tokenizer

using tokenizer::Fragment;
using tokenizer::Vocab;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& file) {
  auto vocab = std::make_unique<Vocab>();
  QRUN_TRY(tokenizer::load_vocab(file, *vocab));
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(vocab)));
}

Tokenizer::Tokenizer(std::unique_ptr<Vocab> vocab) : vocab_(std::move(vocab)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
  const Vocab& v = *vocab_;
  std::vector<int32_t> out;
  const std::vector<Fragment> fragments = tokenizer::partition(v, text, parse_special);
  const bool bos = add_special && (v.type == TokenizerType::kWpm || v.add_bos) && v.bos != kNoToken;
  if (bos) out.push_back(v.bos);
  bool after_special = true;  // SentencePiece prefixes a space at the start and after specials
  for (const Fragment& f : fragments) {
    if (f.token != kNoToken) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.offset, f.length);
    switch (v.type) {
      case TokenizerType::kSpm: {
        std::string prefixed;
        if (v.add_space_prefix && after_special) prefixed.push_back(' ');
        prefixed.append(raw);
        tokenizer::spm_tokenize(v, tokenizer::escape_spaces(prefixed), out);
        break;
      }
      case TokenizerType::kBpe:
        tokenizer::bpe_tokenize(v, raw, out);
        break;
      case TokenizerType::kWpm:
        tokenizer::wpm_tokenize(v, raw, out);
        break;
    }
    after_special = false;
  }
  if (add_special) {
    if (v.type == TokenizerType::kWpm) {
      if (v.sep != kNoToken) out.push_back(v.sep);
    } else if (v.add_eos && v.eos != kNoToken) {
      out.push_back(v.eos);
    }
  }
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  QRUN_CHECK(is_valid(id), "token id %d out of range [0, %d)", id, n_vocab());
  if (!render_special &&
      (vocab_->tokens[id].attr & (tokenizer::kAttrControl | tokenizer::kAttrUnknown))) {
    return {};
  }
  return vocab_->pieces[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string text;
  bool strip_space = vocab_->add_space_prefix;  // only the very first token's piece
  for (const int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (strip_space && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    strip_space = false;
    text += piece;
  }
  return vocab_->clean_spaces ? tokenizer::clean_spaces(std::move(text)) : text;
}

TokenizerType Tokenizer::type() const {
  return vocab_->type;
}
const std::string& Tokenizer::model() const {
  return vocab_->model;
}
const std::string& Tokenizer::pre() const {
  return vocab_->pre;
}
int32_t Tokenizer::n_vocab() const {
  return static_cast<int32_t>(vocab_->tokens.size());
}

const std::string& Tokenizer::token_text(int32_t id) const {
  QRUN_CHECK(is_valid(id), "token id %d out of range [0, %d)", id, n_vocab());
  return vocab_->tokens[id].text;
}

float Tokenizer::token_score(int32_t id) const {
  QRUN_CHECK(is_valid(id), "token id %d out of range [0, %d)", id, n_vocab());
  return vocab_->tokens[id].score;
}

int32_t Tokenizer::bos() const {
  return vocab_->bos;
}
int32_t Tokenizer::eos() const {
  return vocab_->eos;
}
int32_t Tokenizer::eot() const {
  return vocab_->eot;
}
int32_t Tokenizer::eom() const {
  return vocab_->eom;
}
int32_t Tokenizer::unk() const {
  return vocab_->unk;
}
int32_t Tokenizer::pad() const {
  return vocab_->pad;
}
int32_t Tokenizer::sep() const {
  return vocab_->sep;
}
bool Tokenizer::add_bos() const {
  return vocab_->add_bos;
}
bool Tokenizer::add_eos() const {
  return vocab_->add_eos;
}

bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(vocab_->eog_ids.begin(), vocab_->eog_ids.end(), id);
}
bool Tokenizer::is_control(int32_t id) const {
  return is_valid(id) && (vocab_->tokens[id].attr & tokenizer::kAttrControl);
}
bool Tokenizer::is_user_defined(int32_t id) const {
  return is_valid(id) && (vocab_->tokens[id].attr & tokenizer::kAttrUserDefined);
}
bool Tokenizer::is_byte(int32_t id) const {
  return is_valid(id) && (vocab_->tokens[id].attr & tokenizer::kAttrByte);
}

const std::vector<std::string>& Tokenizer::warnings() const {
  return vocab_->warnings;
}

std::string TokenStreamDecoder::push(int32_t id) {
  pending_ += tokenizer_.token_to_piece(id, render_special_);
  // Release everything up to the last complete character; keep a valid but truncated tail.
  std::string out;
  size_t offset = 0;
  while (offset < pending_.size()) {
    const unicode::Utf8Char c = unicode::check_utf8_char(pending_, offset);
    if (c.status == unicode::Utf8Char::Status::kIncomplete) break;
    if (c.status == unicode::Utf8Char::Status::kValid) {
      out.append(pending_, offset, c.length);
    } else {
      unicode::append_utf8(out, unicode::kReplacementChar);
    }
    offset += c.length;
  }
  pending_.erase(0, offset);
  return out;
}

std::string TokenStreamDecoder::flush() {
  std::string out = unicode::sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace qrun

namespace qrun::tokenizer {

void split_into_symbols(std::string_view text, std::vector<Symbol>& symbols) {
  for (size_t offset = 0; offset < text.size();) {
    const size_t len = std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(text[offset])),
                                text.size() - offset);
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({index - 1, offset + len == text.size() ? -1 : index + 1, offset, len});
    offset += len;
  }
}

}  // namespace qrun::tokenizer
