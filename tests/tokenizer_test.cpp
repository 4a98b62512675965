// Unit tests of the tokenizer pieces: the pre-tokenizer regexes against splits produced by
// llama.cpp's unicode_regex_split, the regex engine and Unicode helpers, special-token
// parsing, decoding, the streaming decoder, and the load errors.
#include <gtest/gtest.h>

#include <optional>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_vocab.h"
#include "core/unicode/unicode.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

using tokenizer::SplitPattern;

// The pieces of `text` under the named pre-tokenizer, as raw bytes.
std::vector<std::string> pre_split(const std::string& name, const std::string& text) {
  const tokenizer::PreTokenizer* pre = tokenizer::find_pre_tokenizer(name);
  EXPECT_NE(pre, nullptr) << name;
  if (!pre) return {};
  std::vector<SplitPattern> patterns;
  for (const char* p : pre->patterns) patterns.push_back(SplitPattern::compile(p));
  std::vector<std::string> pieces;
  for (const std::string& word : tokenizer::pre_tokenize(text, patterns)) {
    std::string raw;
    for (const uint32_t c : unicode::decode_utf8(word)) {
      raw.push_back(static_cast<char>(unicode::bpe_char_to_byte(c)));
    }
    pieces.push_back(raw);
  }
  return pieces;
}

struct SplitCase {
  const char* pre;
  const char* text;
  std::vector<std::string> pieces;
};

// Expected pieces recorded from llama.cpp (src/unicode.cpp) on the same inputs.
// clang-format off
const std::vector<SplitCase> kSplitCases = {
    {"gpt-2", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'s", " 2024", "!", " ", " New", "\n", "\n", "line", "\t", " tab", " 1234567"}},
    {"gpt-2", "I'VE been 'told he's here?!... ", {"I", "'", "VE", " been", " '", "told", " he", "'s", " here", "?!...", " "}},
    {"gpt-2", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"gpt-2", "数字123 中文字符 한국어 テスト", {"数字", "123", " 中文字符", " 한국어", " テスト"}},
    {"gpt-2", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ½", " Ⅻ", " ٣٤٥", " x", "\r\n\r\n ", " y"}},
    {"llama-bpe", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'s", " ", "202", "4", "!", " ", " New", "\n\n", "line", "\t", " tab", " ", "123", "456", "7"}},
    {"llama-bpe", "I'VE been 'told he's here?!... ", {"I", "'VE", " been", " '", "told", " he", "'s", " here", "?!...", " "}},
    {"llama-bpe", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"llama-bpe", "数字123 中文字符 한국어 テスト", {"数字", "123", " 中文字符", " 한국어", " テスト"}},
    {"llama-bpe", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ", "½", " ", "Ⅻ", " ", "٣٤٥", " x", "\r\n\r\n", " ", " y"}},
    {"qwen2", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'s", " ", "2", "0", "2", "4", "!", " ", " New", "\n\n", "line", "\t", " tab", " ", "1", "2", "3", "4", "5", "6", "7"}},
    {"qwen2", "I'VE been 'told he's here?!... ", {"I", "'VE", " been", " '", "told", " he", "'s", " here", "?!...", " "}},
    {"qwen2", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"qwen2", "数字123 中文字符 한국어 テスト", {"数字", "1", "2", "3", " 中文字符", " 한국어", " テスト"}},
    {"qwen2", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ", "½", " ", "Ⅻ", " ", "٣", "٤", "٥", " x", "\r\n\r\n", " ", " y"}},
    {"deepseek-llm", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'", "s", " ", "2024", "!", " ", " New", "\n", "\n", "line", "\t", " tab", " ", "1234567"}},
    {"deepseek-llm", "I'VE been 'told he's here?!... ", {"I", "'", "VE", " been", " '", "told", " he", "'", "s", " here", "?!...", " "}},
    {"deepseek-llm", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"deepseek-llm", "数字123 中文字符 한국어 テスト", {"数字", "123", " ", "中文字符", " ", "한국어", " ", "テスト"}},
    {"deepseek-llm", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ", "½", " ", "Ⅻ", " ", "٣٤٥", " x", "\r", "\n", "\r", "\n", " ", " y"}},
    {"deepseek-coder", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'", "s", " ", "2", "0", "2", "4", "!", " ", " New", "\n", "\n", "line", "\t", " tab", " ", "1", "2", "3", "4", "5", "6", "7"}},
    {"deepseek-coder", "I'VE been 'told he's here?!... ", {"I", "'", "VE", " been", " '", "told", " he", "'", "s", " here", "?!...", " "}},
    {"deepseek-coder", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"deepseek-coder", "数字123 中文字符 한국어 テスト", {"数字", "1", "2", "3", " ", "中文字符", " ", "한국어", " ", "テスト"}},
    {"deepseek-coder", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ", "½", " ", "Ⅻ", " ", "٣", "٤", "٥", " x", "\r", "\n", "\r", "\n", " ", " y"}},
    {"falcon", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'", "s", " ", "202", "4", "!", " ", " New", "\n", "\n", "line", "\t", " tab", " ", "123", "456", "7"}},
    {"falcon", "I'VE been 'told he's here?!... ", {"I", "'", "VE", " been", " ", "'", "told", " he", "'", "s", " here", "?!...", " "}},
    {"falcon", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"falcon", "数字123 中文字符 한국어 テスト", {"数字", "123", " 中文字符", " 한국어", " テスト"}},
    {"falcon", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ½", " Ⅻ", " ٣٤٥", " x", "\r\n\r\n ", " y"}},
    {"starcoder", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'s", " ", "2", "0", "2", "4", "!", " ", " New", "\n", "\n", "line", "\t", " tab", " ", "1", "2", "3", "4", "5", "6", "7"}},
    {"starcoder", "I'VE been 'told he's here?!... ", {"I", "'", "VE", " been", " '", "told", " he", "'s", " here", "?!...", " "}},
    {"starcoder", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"starcoder", "数字123 中文字符 한국어 テスト", {"数字", "1", "2", "3", " 中文字符", " 한국어", " テスト"}},
    {"starcoder", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ", "½", " ", "Ⅻ", " ", "٣", "٤", "٥", " x", "\r\n\r\n ", " y"}},
    {"default", "Hello world, it's 2024!  New\n\nline\t tab 1234567", {"Hello", " world", ",", " it", "'", "s", " ", "202", "4", "!", " ", " New", "\n", "\n", "line", "\t", " tab", " ", "123", "456", "7"}},
    {"default", "I'VE been 'told he's here?!... ", {"I", "'", "VE", " been", " ", "'", "told", " he", "'", "s", " here", "?!...", " "}},
    {"default", "  leading  spaces   and trailing   ", {" ", " leading", " ", " spaces", "  ", " and", " trailing", "   "}},
    {"default", "数字123 中文字符 한국어 テスト", {"数字", "123", " 中文字符", " 한국어", " テスト"}},
    {"default", "emoji 🦙🦙 and ½ Ⅻ ٣٤٥ x\r\n\r\n  y", {"emoji", " 🦙🦙", " and", " ", "½", " ", "Ⅻ", " ", "٣٤٥", " x", "\r\n\r\n ", " y"}},
};
// clang-format on

TEST(PreTokenizer, MatchesLlamaCppSplits) {
  for (const SplitCase& c : kSplitCases) {
    EXPECT_EQ(pre_split(c.pre, c.text), c.pieces) << c.pre << ": '" << c.text << "'";
  }
}

TEST(PreTokenizer, AliasesAndUnknownNames) {
  for (const char* name : {"llama3",
                           "llama-v3",
                           "falcon3",
                           "dbrx",
                           "smaug-bpe",
                           "mpt",
                           "olmo",
                           "refact",
                           "command-r",
                           "smollm",
                           "deepseek-r1-qwen",
                           "stablelm2",
                           "phi-2",
                           "roberta-bpe",
                           "chatglm-bpe",
                           "viking",
                           "bloom",
                           "poro-chat",
                           "deepseek-v3",
                           "exaone",
                           "minerva-7b",
                           "codeshell",
                           "gigachat",
                           "tekken"}) {
    EXPECT_NE(tokenizer::find_pre_tokenizer(name), nullptr) << name;
  }
  EXPECT_TRUE(tokenizer::find_pre_tokenizer("tekken")->ignore_merges);
  EXPECT_EQ(tokenizer::find_pre_tokenizer("no-such-thing"), nullptr);
  EXPECT_TRUE(tokenizer::find_pre_tokenizer("llama-bpe")->ignore_merges);
}

std::vector<size_t> split_lengths(const char* pattern, const std::string& text) {
  const tokenizer::CodeUnits units(text);
  std::vector<size_t> pieces;
  SplitPattern::compile(pattern).split(units, 0, units.cpts.size(), pieces);
  return pieces;
}

TEST(SplitPattern, BacktrackingLookaheadAndAnchors) {
  // \s+(?!\S) leaves the last space of a run for the word after it.
  EXPECT_EQ(split_lengths("\\s+(?!\\S)|[a-z]", "   a"), (std::vector<size_t>{2, 1, 1}));
  EXPECT_EQ(split_lengths("\\s+(?!\\S)", "a   "), (std::vector<size_t>{1, 3}));
  // \s*[\r\n]+ backtracks to the last line break of the run.
  EXPECT_EQ(split_lengths("\\s*[\\r\\n]+", " \n \n  x"), (std::vector<size_t>{4, 3}));
  // $ is the end of the piece being split.
  EXPECT_EQ(split_lengths("\\s+$", "a  b  "), (std::vector<size_t>{4, 2}));
  // {m,n} and alternation order: the first alternative that matches wins.
  EXPECT_EQ(split_lengths("\\p{N}{1,3}", "1234567"), (std::vector<size_t>{3, 3, 1}));
  EXPECT_EQ(split_lengths("ab|abc", "abc"), (std::vector<size_t>{2, 1}));
  EXPECT_EQ(split_lengths("(?:ab|abc)c", "abcc"), (std::vector<size_t>{3, 1}));
  // Non-ASCII white space only matches \s (as U+000B), never a literal range.
  EXPECT_EQ(split_lengths("[\u3000-\u3002]+", "\u3001\u3000\u3002"),
            (std::vector<size_t>{1, 1, 1}));
  EXPECT_EQ(split_lengths("\\s+", "a\u3000\u2003b"), (std::vector<size_t>{1, 2, 1}));
  // Categories: ½ is a number, é a letter, a combining accent a mark, € a symbol.
  EXPECT_EQ(split_lengths("\\p{N}+", "x\u00BD2y"), (std::vector<size_t>{1, 2, 1}));
  EXPECT_EQ(split_lengths("[\\p{L}\\p{M}]+", "e\u0301\u00E9!"), (std::vector<size_t>{3, 1}));
  EXPECT_EQ(split_lengths("\\p{S}", "\u20AC~"), (std::vector<size_t>{1, 1}));
  // [A&&[B]]: in both classes. A letter outside a-z: A-Z, and any letter beyond ASCII.
  EXPECT_EQ(split_lengths("[\\p{L}&&[^a-z]]+", "ABcD\u00E9f1\u00C9"),
            (std::vector<size_t>{2, 1, 2, 2, 1}));  // AB c Dé f1 É
  EXPECT_EQ(split_lengths("[\\p{L}&&[^a-z]&&[^\u00C9]]+", "A\u00C9B"),
            (std::vector<size_t>{1, 1, 1}));
}

TEST(SplitPattern, LongRunsDoNotRecurseDeeply) {
  const std::string spaces(200000, ' ');
  EXPECT_EQ(split_lengths("\\s+(?!\\S)|\\s+", spaces + "x"), (std::vector<size_t>{199999, 1, 1}));
}

TEST(Unicode, PropertiesAndUtf8) {
  using unicode::Category;
  EXPECT_EQ(unicode::category('A'), Category::kLetter);
  EXPECT_EQ(unicode::category(0x4E00), Category::kLetter);
  EXPECT_EQ(unicode::category(0x0663), Category::kNumber);
  EXPECT_EQ(unicode::category(0x0301), Category::kMark);
  EXPECT_EQ(unicode::category(0x3002), Category::kPunctuation);
  EXPECT_EQ(unicode::category(0x1F999), Category::kSymbol);
  EXPECT_EQ(unicode::category(0x0378), Category::kUndefined);
  EXPECT_EQ(unicode::category(0x110000), Category::kUndefined);
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));
  EXPECT_EQ(unicode::to_lower('Q'), static_cast<uint32_t>('q'));
  EXPECT_EQ(unicode::to_lower(0x0130), 0x0069u);
  EXPECT_EQ(unicode::to_lower(0x041A), 0x043Au);
  EXPECT_EQ(unicode::to_lower(0x0100), 0x0101u);
  EXPECT_EQ(unicode::to_lower(0x0101), 0x0101u);
  EXPECT_EQ(unicode::nfd_first(0x00C4), static_cast<uint32_t>('A'));
  EXPECT_EQ(unicode::nfd_first(0xAC01), 0x1100u);
  EXPECT_EQ(unicode::nfd_first('x'), static_cast<uint32_t>('x'));

  EXPECT_EQ(unicode::decode_utf8("a\xC3\xA4\xF0\x9F\xA6\x99"),
            (std::vector<uint32_t>{'a', 0xE4, 0x1F999}));
  // Bad bytes become U+FFFD one at a time; overlong forms are accepted as llama.cpp does.
  EXPECT_EQ(
      unicode::decode_utf8("\x80\xE2\x82x\xC0\x80\xF4\x90\x80\x80"),
      (std::vector<uint32_t>{0xFFFD, 0xFFFD, 0xFFFD, 'x', 0, 0xFFFD, 0xFFFD, 0xFFFD, 0xFFFD}));
  EXPECT_EQ(unicode::sanitize_utf8("ok\xE2\x82x\xFF\xF0\x9F"), "ok\uFFFDx\uFFFD\uFFFD");
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(unicode::bpe_char_to_byte(unicode::byte_to_bpe_char(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(unicode::byte_to_bpe_char(' '), 0x120u);  // "Ġ"
  EXPECT_EQ(unicode::bpe_char_to_byte(0x3000), -1);
}

std::unique_ptr<Tokenizer> load_vocab(const std::string& name) {
  Result<gguf::File> file =
      gguf::File::open(data_path("vocab/ggml-vocab-" + name + ".gguf").string());
  EXPECT_TRUE(file.ok());
  if (!file.ok()) return nullptr;
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? std::move(*tok) : nullptr;
}

TEST(Tokenizer, SpecialTokensAndFlags) {
  std::unique_ptr<Tokenizer> spm = load_vocab("llama-spm");
  ASSERT_TRUE(spm);
  EXPECT_EQ(spm->type(), TokenizerType::kSpm);
  EXPECT_EQ(spm->n_vocab(), 32000);
  EXPECT_EQ(spm->bos(), 1);
  EXPECT_EQ(spm->eos(), 2);
  EXPECT_EQ(spm->unk(), 0);
  EXPECT_TRUE(spm->add_bos());
  EXPECT_FALSE(spm->add_eos());
  EXPECT_TRUE(spm->is_eog(2));
  EXPECT_FALSE(spm->is_eog(1));
  EXPECT_TRUE(spm->is_control(1));
  EXPECT_TRUE(spm->is_byte(3 + 0x41));
  EXPECT_EQ(spm->token_text(3 + 0x41), "<0x41>");
  EXPECT_EQ(spm->token_to_piece(3 + 0x41, false), "A");
  EXPECT_EQ(spm->token_to_piece(1, false), "");
  EXPECT_EQ(spm->token_to_piece(1, true), "<s>");

  std::unique_ptr<Tokenizer> gpt2 = load_vocab("gpt-2");
  ASSERT_TRUE(gpt2);
  EXPECT_EQ(gpt2->type(), TokenizerType::kBpe);
  EXPECT_EQ(gpt2->pre(), "gpt-2");
  EXPECT_EQ(gpt2->eos(), 50256);
  EXPECT_TRUE(gpt2->is_eog(50256));
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->encode("Hello", true, false), (std::vector<int32_t>{15496}));

  std::unique_ptr<Tokenizer> phi3 = load_vocab("phi-3");
  ASSERT_TRUE(phi3);
  EXPECT_EQ(phi3->eos(), 32000);
  for (const int32_t id : {32000, 32007})
    EXPECT_TRUE(phi3->is_eog(id)) << id;  // <|endoftext|> <|end|>
  EXPECT_EQ(phi3->eot(), 32007);
  EXPECT_FALSE(phi3->is_eog(32010));
  EXPECT_TRUE(phi3->is_user_defined(2));  // </s> is user-defined in this vocabulary

  std::unique_ptr<Tokenizer> bert = load_vocab("bert-bge");
  ASSERT_TRUE(bert);
  EXPECT_EQ(bert->type(), TokenizerType::kWpm);
  const std::vector<int32_t> ids = bert->encode("Hello", true, false);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 101);  // [CLS]
  EXPECT_EQ(ids.back(), 102);   // [SEP]
}

// Reference ids from llama.cpp's llama_tokenize on the same vocabulary and flags.
TEST(Tokenizer, ParsesSpecialTokensAsLlamaCpp) {
  std::unique_ptr<Tokenizer> phi3 = load_vocab("phi-3");
  ASSERT_TRUE(phi3);
  // phi-3's special tokens swallow the white space after them (rstrip); text after a special
  // token gets SentencePiece's prefix space.
  EXPECT_EQ(phi3->encode("<|user|>\nHello<|end|>\n<|assistant|>", false, true),
            (std::vector<int32_t>{32010, 15043, 32007, 32001}));
  EXPECT_EQ(phi3->encode("<|end|>  \n x <|user|>", true, true),
            (std::vector<int32_t>{1, 32007, 921, 29871, 32010}));
  // Without parse_special, control tokens are plain text but user-defined ones (</s> here)
  // are still recognised.
  EXPECT_EQ(phi3->encode("<|user|>\nHello</s> x", true, false),
            (std::vector<int32_t>{1, 529, 29989, 1792, 29989, 29958, 13, 10994, 2, 921}));
  // <s> and <unk> do not strip white space.
  EXPECT_EQ(phi3->encode("  <s> hi </s>  there<unk>", true, true),
            (std::vector<int32_t>{1, 1678, 1, 29871, 7251, 29871, 2, 727, 0}));

  std::unique_ptr<Tokenizer> gpt2 = load_vocab("gpt-2");
  ASSERT_TRUE(gpt2);
  EXPECT_EQ(gpt2->encode("a<|endoftext|>b", false, true), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_EQ(gpt2->encode("a<|endoftext|>b", false, false),
            (std::vector<int32_t>{64, 27, 91, 437, 1659, 5239, 91, 29, 65}));
}

TEST(Tokenizer, DecodeAsLlamaDetokenize) {
  std::unique_ptr<Tokenizer> spm = load_vocab("llama-spm");
  ASSERT_TRUE(spm);
  const std::vector<int32_t> ids = spm->encode("Hello world", true, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(spm->decode(ids, false), " Hello world");  // BOS takes the prefix-space strip
  EXPECT_EQ(spm->decode(ids, true), "<s> Hello world");
  EXPECT_EQ(spm->decode(std::vector<int32_t>(ids.begin() + 1, ids.end()), false), "Hello world");

  // GPT-2 cleans up spaces before punctuation and contractions; DeepSeek does not.
  const std::string text = "Hello , world ! I 'm here ' ok ' they 're";
  std::unique_ptr<Tokenizer> gpt2 = load_vocab("gpt-2");
  ASSERT_TRUE(gpt2);
  EXPECT_EQ(gpt2->decode(gpt2->encode(text, false, false), false),
            "Hello, world! I'm here'ok'they're");
  std::unique_ptr<Tokenizer> deepseek = load_vocab("deepseek-llm");
  ASSERT_TRUE(deepseek);
  EXPECT_EQ(deepseek->decode(deepseek->encode(text, false, false), false), text);
}

TEST(TokenStreamDecoder, HoldsBackSplitCharacters) {
  std::unique_ptr<Tokenizer> spm = load_vocab("llama-spm");
  ASSERT_TRUE(spm);
  // The llama emoji is four byte tokens after the prefix space.
  const std::vector<int32_t> ids = spm->encode("\xF0\x9F\xA6\x99!", false, false);
  ASSERT_EQ(ids.size(), 6u);
  TokenStreamDecoder stream(*spm);
  EXPECT_EQ(stream.push(ids[0]), " ");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.pending_bytes(), 2u);
  EXPECT_EQ(stream.push(ids[3]), "");
  EXPECT_EQ(stream.push(ids[4]), "\xF0\x9F\xA6\x99");
  EXPECT_EQ(stream.push(ids[5]), "!");
  EXPECT_EQ(stream.flush(), "");

  // A character cut short is released as U+FFFD at flush; a byte that can never start a
  // character is replaced at once.
  const int32_t byte_f0 = 3 + 0xF0;
  const int32_t byte_ff = 3 + 0xFF;
  EXPECT_EQ(stream.push(byte_f0), "");
  EXPECT_EQ(stream.flush(), "\uFFFD");
  EXPECT_EQ(stream.push(byte_ff), "\uFFFD");
  EXPECT_EQ(stream.push(byte_f0), "");
  EXPECT_EQ(stream.push(spm->encode("a", false, false).back()), "\uFFFD a");
  // Special tokens render only when asked.
  EXPECT_EQ(stream.push(spm->bos()), "");
  TokenStreamDecoder special(*spm, true);
  EXPECT_EQ(special.push(spm->bos()), "<s>");
}

// A minimal vocabulary in memory, for load errors and edge cases.
struct MiniVocab {
  std::string model = "gpt2";
  std::string pre = "gpt-2";
  std::vector<std::string> tokens = {"a",
                                     "b",
                                     "ab",
                                     "\xC4\xA0",
                                     "\xC4\xA0"
                                     "ab",
                                     "<|endoftext|>"};
  std::vector<std::string> merges = {"a b", "\xC4\xA0 ab"};
  std::vector<int32_t> types = {1, 1, 1, 1, 1, 3};
  std::vector<float> scores;
  bool with_model = true;

  Result<std::unique_ptr<Tokenizer>> load() const {
    gguf::Writer w;
    w.set_string("general.architecture", "gpt2");
    if (with_model) w.set_string("tokenizer.ggml.model", model);
    if (!pre.empty()) w.set_string("tokenizer.ggml.pre", pre);
    if (!tokens.empty()) w.set_string_array("tokenizer.ggml.tokens", tokens);
    if (!merges.empty()) w.set_string_array("tokenizer.ggml.merges", merges);
    if (!types.empty()) w.set_i32_array("tokenizer.ggml.token_type", types);
    if (!scores.empty()) w.set_float_array("tokenizer.ggml.scores", scores);
    Result<gguf::File> file = gguf::File::from_bytes(w.to_bytes(), "mini.gguf");
    if (!file) return file.error();
    return Tokenizer::from_gguf(*file);
  }
};

TEST(Tokenizer, MiniVocabulary) {
  Result<std::unique_ptr<Tokenizer>> tok = MiniVocab{}.load();
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const Tokenizer& t = **tok;
  EXPECT_TRUE(t.warnings().empty());
  EXPECT_EQ(t.encode("ab ab", false, false), (std::vector<int32_t>{2, 4}));
  EXPECT_EQ(t.encode("ba", false, false), (std::vector<int32_t>{1, 0}));
  // Characters without a token are dropped, as llama.cpp does.
  EXPECT_EQ(t.encode("abc", false, false), (std::vector<int32_t>{2}));
  // The gpt2 defaults (11) do not exist here; <|endoftext|> is found by its text.
  EXPECT_EQ(t.eos(), kNoToken);
  EXPECT_EQ(t.bos(), kNoToken);
  EXPECT_EQ(t.eot(), 5);
  EXPECT_TRUE(t.is_eog(5));
  EXPECT_EQ(t.token_to_piece(4, false), " ab");
}

// WordPiece's BertNormalizer as the vocabulary sets it (llama.cpp's
// tokenizer.ggml.normalizer.lowercase and .strip_accents, the second defaulting to the
// first): "Café" with a precomposed é, and "Cafe" + U+0301, a combining acute accent that
// stripping drops.
TEST(Tokenizer, WordPieceNormalizerOptions) {
  auto load = [](std::optional<bool> lowercase, std::optional<bool> strip) {
    gguf::Writer w;
    w.set_string("general.architecture", "bert");
    w.set_string("tokenizer.ggml.model", "bert");
    w.set_string_array("tokenizer.ggml.tokens",
                       {"[UNK]", "\u2581cafe", "\u2581caf\u00e9", "\u2581Cafe", "\u2581Caf\u00e9",
                        "\u2581Cafe\u0301", "\u2581cafe\u0301"});
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    if (lowercase) w.set_bool("tokenizer.ggml.normalizer.lowercase", *lowercase);
    if (strip) w.set_bool("tokenizer.ggml.normalizer.strip_accents", *strip);
    Result<gguf::File> file = gguf::File::from_bytes(w.to_bytes(), "bert.gguf");
    EXPECT_TRUE(file.ok());
    Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
    EXPECT_TRUE(tok.ok()) << tok.error().message;
    return std::move(*tok);
  };
  struct Case {
    std::optional<bool> lowercase, strip;
    int32_t precomposed, combining;  // the ids "Café" and "Cafe\u0301" give
  };
  for (const Case& c : {Case{std::nullopt, std::nullopt, 1, 1}, Case{true, false, 2, 6},
                        Case{false, std::nullopt, 4, 5}, Case{false, true, 3, 3}}) {
    const auto tok = load(c.lowercase, c.strip);
    ASSERT_NE(tok, nullptr);
    EXPECT_EQ(tok->encode("Caf\u00e9", false, false), std::vector<int32_t>{c.precomposed});
    EXPECT_EQ(tok->encode("Cafe\u0301", false, false), std::vector<int32_t>{c.combining});
  }
}

TEST(Tokenizer, LoadErrorsAndWarnings) {
  MiniVocab no_model;
  no_model.with_model = false;
  Result<std::unique_ptr<Tokenizer>> r = no_model.load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(r.error().message.find("mini.gguf"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("tokenizer.ggml.model"), std::string::npos) << r.error().message;

  for (const char* model : {"no_vocab", "none", "t5", "rwkv", "whatever"}) {
    MiniVocab v;
    v.model = model;
    r = v.load();
    ASSERT_FALSE(r.ok()) << model;
    EXPECT_EQ(r.error().code, ErrorCode::kUnsupported) << model;
    EXPECT_NE(r.error().message.find(model), std::string::npos) << r.error().message;
  }

  MiniVocab no_merges;
  no_merges.merges.clear();
  r = no_merges.load();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("tokenizer.ggml.merges"), std::string::npos)
      << r.error().message;

  MiniVocab no_tokens;
  no_tokens.tokens.clear();
  no_tokens.types.clear();
  EXPECT_FALSE(no_tokens.load().ok());

  MiniVocab bad_types;
  bad_types.types.pop_back();
  r = bad_types.load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kFormat);
  EXPECT_NE(r.error().message.find("token_type"), std::string::npos) << r.error().message;

  MiniVocab bad_scores;
  bad_scores.scores = {0.0f};
  r = bad_scores.load();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kFormat);

  // An unknown or missing pre-tokenizer loads with the default one and a warning.
  for (const char* pre : {"no-such-pre", ""}) {
    MiniVocab v;
    v.pre = pre;
    r = v.load();
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ((*r)->pre(), "default");
    ASSERT_EQ((*r)->warnings().size(), 1u);
    EXPECT_EQ((*r)->encode("ab ab", false, false), (std::vector<int32_t>{2, 4}));
  }
}

}  // namespace
}  // namespace qrun::test
