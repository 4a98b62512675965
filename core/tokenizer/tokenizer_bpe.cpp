// Byte-level BPE ("gpt2" vocabularies), as llama.cpp's BPE tokenizer: the text is split by
// the model's pre-tokenizer regexes, each piece is spelled in the GPT-2 byte alphabet, and
// within a piece the adjacent pair with the lowest merge rank is merged until none is left
// (ties: leftmost pair first). The pre-tokenizer table maps tokenizer.ggml.pre names to the
// regexes the models' tokenizer.json files define.
#include <algorithm>
#include <queue>

#include "core/tokenizer/tokenizer_vocab.h"
#include "core/unicode/unicode.h"

namespace qrun::tokenizer {
namespace {

constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Mistral's tekken (Mistral Nemo, Mistral Small 3, Ministral 3), as llama.cpp runs it:
// its "upper" and "lower" runs are letters outside a-z and outside A-Z (so any letter beyond
// ASCII is both), which llama.cpp writes (?=[\p{L}])([^a-z]).
constexpr const char* kTekken =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}&&[^a-z]]*[\\p{L}&&[^A-Z]]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{L}&&[^a-z]]+[\\p{L}&&[^A-Z]]*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
constexpr const char* kDeepseekLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
    "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
    "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
    "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
    "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC"
    "\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE"
    "\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
    "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A"
    "\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2"
    "\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+";
constexpr const char* kBloom = " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+";

struct NamedPreTokenizer {
  std::vector<std::string_view> names;
  PreTokenizer pre;
};

const std::vector<NamedPreTokenizer>& pre_tokenizers() {
  static const std::vector<NamedPreTokenizer> table = {
      {{"default"}, {{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}}},
      {{"llama3", "llama-v3", "llama-bpe", "falcon3"},
       {.patterns = {kLlama3}, .ignore_merges = true, .add_bos = true}},
      {{"dbrx", "smaug-bpe"}, {{kLlama3}}},
      {{"chatglm-bpe"}, {.patterns = {kLlama3}, .no_bos = true}},
      {{"deepseek-llm"},
       {.patterns = {"[\r\n]", kDeepseekLetters,
                     "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+", "\\s+$",
                     kCjk, "\\p{N}+"},
        .clean_spaces = false}},
      {{"deepseek-coder"},
       {.patterns = {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", kCjk, "\\p{N}"},
        .clean_spaces = false}},
      {{"deepseek-v3"},
       {.patterns = {"\\p{N}{1,3}", "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
                     "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
                     "[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|"
                     "\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
        .clean_spaces = false}},
      {{"falcon"}, {{"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}}},
      {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b"}, {{"\\p{N}", kGpt2}}},
      {{"command-r", "smollm"}, {.patterns = {"\\p{N}", kGpt2}, .clean_spaces = false}},
      {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
        "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais"},
       {{kGpt2}}},
      {{"qwen2", "deepseek-r1-qwen"}, {.patterns = {kQwen2}, .clean_spaces = false}},
      {{"stablelm2", "megrez"}, {{kQwen2}}},
      {{"poro-chat"}, {.patterns = {kBloom}, .clean_spaces = false}},
      {{"bloom", "gpt3-finnish"}, {{kBloom}}},
      {{"viking"}, {.patterns = {kBloom, "\\p{N}"}, .clean_spaces = false}},
      {{"tekken"},
       {.patterns = {kTekken}, .clean_spaces = false, .ignore_merges = true, .add_bos = true}},
  };
  return table;
}

struct Bigram {
  int left;
  int right;
  int32_t rank;
  size_t left_n;  // the sides' lengths when queued: a later merge of either makes it stale
  size_t right_n;
};

// Orders the max-heap: lower rank first, then the leftmost pair.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class BpeWord {
 public:
  BpeWord(const Vocab& vocab, std::string_view word) : vocab_(vocab), word_(word) {}

  void run(std::vector<int32_t>& out) {
    if (vocab_.ignore_merges) {
      const int32_t id = vocab_.find(word_);
      if (id != kNoToken) {
        out.push_back(id);
        return;
      }
    }
    split_into_symbols(word_, symbols_);
    for (int i = 1; i < static_cast<int>(symbols_.size()); ++i) add_bigram(i - 1, i);

    while (!queue_.empty()) {
      const Bigram bigram = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[bigram.left];
      Symbol& right = symbols_[bigram.right];
      if (left.n != bigram.left_n || right.n != bigram.right_n) continue;  // stale
      left.n += right.n;
      right.n = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[right.next].prev = bigram.left;
      add_bigram(left.prev, bigram.left);
      add_bigram(bigram.left, left.next);
    }

    for (const Symbol& symbol : symbols_) {
      if (symbol.n == 0) continue;
      const std::string_view piece = word_.substr(symbol.offset, symbol.n);
      const int32_t id = vocab_.find(piece);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
      // Not a token: llama.cpp looks up each byte of the spelling on its own and keeps the
      // ones that are tokens.
      for (size_t i = 0; i < piece.size(); ++i) {
        const int32_t byte_id = vocab_.find(piece.substr(i, 1));
        if (byte_id != kNoToken) out.push_back(byte_id);
      }
    }
  }

 private:
  void add_bigram(int left, int right) {
    if (left == -1 || right == -1) return;
    const Symbol& l = symbols_[left];
    const Symbol& r = symbols_[right];
    const int32_t rank = vocab_.bpe_rank(word_.substr(l.offset, l.n), word_.substr(r.offset, r.n));
    if (rank < 0) return;
    queue_.push({left, right, rank, l.n, r.n});
  }

  const Vocab& vocab_;
  std::string_view word_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

const PreTokenizer* find_pre_tokenizer(std::string_view name) {
  for (const NamedPreTokenizer& entry : pre_tokenizers()) {
    for (const std::string_view n : entry.names) {
      if (n == name) return &entry.pre;
    }
  }
  return nullptr;
}

std::string merge_key(std::string_view left, std::string_view right) {
  std::string key = std::to_string(left.size());
  key.push_back(':');
  key.append(left);
  key.append(right);
  return key;
}

int32_t Vocab::bpe_rank(std::string_view left, std::string_view right) const {
  const auto it = bpe_ranks.find(merge_key(left, right));
  return it == bpe_ranks.end() ? -1 : it->second;
}

void bpe_tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  for (const std::string& word : pre_tokenize(text, vocab.pre_patterns)) {
    BpeWord(vocab, word).run(out);
  }
}

}  // namespace qrun::tokenizer
