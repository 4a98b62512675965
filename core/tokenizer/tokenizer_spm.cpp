// SentencePiece-style tokenization ("llama" vocabularies), as llama.cpp's SPM tokenizer:
// start from single UTF-8 characters and repeatedly merge the adjacent pair whose
// concatenation is the highest-scoring vocabulary entry (ties: leftmost pair first). A final
// piece that is not in the vocabulary falls back to byte tokens <0xXX>.
// The caller has already replaced spaces with U+2581 and added the prefix space.
#include <algorithm>
#include <queue>

#include "core/tokenizer/tokenizer_vocab.h"
#include "core/unicode/unicode.h"

namespace qrun::tokenizer {
namespace {

// A piece of the text; merged-away symbols keep n == 0. prev/next link the live ones.
struct Bigram {
  int left;
  int right;
  float score;
  size_t size;  // bytes of the merged text when the bigram was queued
};

// Orders the max-heap: higher score first, then the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void run(std::vector<int32_t>& out) {
    split_into_symbols(text_, symbols_);
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) try_add_bigram(i - 1, i);

    while (!queue_.empty()) {
      const Bigram bigram = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[bigram.left];
      Symbol& right = symbols_[bigram.right];
      // Skip bigrams made stale by an earlier merge of either side.
      if (left.n == 0 || right.n == 0 || left.n + right.n != bigram.size) continue;
      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[right.next].prev = bigram.left;
      try_add_bigram(left.prev, bigram.left);
      try_add_bigram(bigram.left, left.next);
    }

    if (symbols_.empty()) return;
    for (int i = 0; i != -1; i = symbols_[i].next) emit(symbols_[i], out);
  }

 private:
  void try_add_bigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string_view merged =
        text_.substr(symbols_[left].offset, symbols_[left].n + symbols_[right].n);
    const int32_t id = vocab_.find(merged);
    if (id == kNoToken) return;
    queue_.push({left, right, vocab_.tokens[id].score, merged.size()});
  }

  // Every merge produced a vocabulary entry, so only single characters can be missing from
  // the vocabulary; those are spelled with byte tokens.
  void emit(const Symbol& symbol, std::vector<int32_t>& out) const {
    const std::string_view piece = text_.substr(symbol.offset, symbol.n);
    const int32_t id = vocab_.find(piece);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
    for (const char byte : piece) {
      const int32_t byte_id = vocab_.byte_to_token(static_cast<uint8_t>(byte));
      // A vocabulary without byte tokens: llama.cpp aborts here; use <unk> instead.
      if (byte_id != kNoToken) {
        out.push_back(byte_id);
      } else if (vocab_.unk != kNoToken) {
        out.push_back(vocab_.unk);
      }
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

void spm_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  SpmSession(vocab, text).run(out);
}

}  // namespace qrun::tokenizer
