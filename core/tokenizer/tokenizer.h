// Tokenizers read from GGUF metadata, reproducing llama.cpp's llama_tokenize and
// llama_token_to_piece token for token: SentencePiece-style BPE ("llama"), byte-level BPE with
// the pre-tokenizer named by tokenizer.ggml.pre ("gpt2") and WordPiece ("bert").
// A Tokenizer is immutable after loading and safe to use from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf/gguf.h"
#include "ggml-like/result.h"

namespace qrun {

namespace tokenizer {
struct Vocab;  // the loaded vocabulary and tokenizer state (core/tokenizer_vocab.h)
}

enum class TokenizerType {
  kSpm,  // tokenizer.ggml.model "llama": score-driven merges, byte fallback
  kBpe,  // "gpt2": byte-level BPE with ranked merges and a regex pre-tokenizer
  kWpm,  // "bert": WordPiece, greedy longest match
};

inline constexpr int32_t kNoToken = -1;

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from a GGUF file. A missing tokenizer.ggml.model, "no_vocab" or
  // an unsupported model is an Error. An unknown tokenizer.ggml.pre falls back to the
  // "default" pre-tokenizer and adds a line to warnings() (llama.cpp refuses such files).
  static Result<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& file);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text to token ids, as llama_tokenize. `add_special` adds BOS/EOS (or CLS/SEP) where the
  // model asks for them; `parse_special` recognises control tokens written in the text
  // (user-defined tokens are always recognised). Never fails: invalid UTF-8 is tokenized
  // byte by byte (SentencePiece) or as U+FFFD (BPE, WordPiece).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes of one token, as llama_token_to_piece with lstrip 0: control and unknown
  // tokens render as their text only when `render_special`, otherwise as "". The bytes may
  // be part of a UTF-8 character (byte tokens); see TokenStreamDecoder. `id` must be valid.
  std::string token_to_piece(int32_t id, bool render_special) const;
  // Token ids to text, as llama_detokenize(remove_special = false, unparse_special =
  // render_special): concatenated pieces, the leading space of a SentencePiece prompt dropped,
  // and the models' clean-up of spaces before punctuation applied where they ask for it.
  std::string decode(std::span<const int32_t> ids, bool render_special) const;

  TokenizerType type() const;
  const std::string& model() const;  // tokenizer.ggml.model
  const std::string& pre() const;    // the pre-tokenizer in use ("default" if none)
  int32_t n_vocab() const;
  bool is_valid(int32_t id) const { return id >= 0 && id < n_vocab(); }
  const std::string& token_text(int32_t id) const;  // the vocabulary entry as stored
  float token_score(int32_t id) const;

  // Special tokens; kNoToken when the model has none.
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;
  int32_t eom() const;
  int32_t unk() const;
  int32_t pad() const;
  int32_t sep() const;
  bool add_bos() const;
  bool add_eos() const;

  // End of generation: EOS, EOT, EOM and the tokens llama.cpp stops at by their text
  // (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, <|eom_id|>, <EOT>, FIM
  // pad/repo/separator tokens).
  bool is_eog(int32_t id) const;
  bool is_control(int32_t id) const;
  bool is_user_defined(int32_t id) const;
  bool is_byte(int32_t id) const;

  // Notes from loading (an unknown pre-tokenizer, bad special token ids, ...).
  const std::vector<std::string>& warnings() const;

 private:
  explicit Tokenizer(std::unique_ptr<tokenizer::Vocab> vocab);
  std::unique_ptr<const tokenizer::Vocab> vocab_;
};

// Turns a stream of generated tokens into printable text: bytes are held back until they form
// complete UTF-8 characters, so a character split across tokens is never printed in halves.
// Invalid byte sequences are released as U+FFFD, so the output is always valid UTF-8.
class TokenStreamDecoder {
 public:
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(tokenizer), render_special_(render_special) {}

  // The text completed by this token (possibly empty).
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete character becomes U+FFFD); resets the state.
  std::string flush();
  // Bytes held back, waiting for the rest of a character.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace qrun
