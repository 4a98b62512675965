// Acceptance tests of the tokenizers against llama.cpp's reference data: every
// vocab/*.gguf.inp input must give exactly the ids of the matching .out line (no BOS, special
// tokens not parsed), as llama.cpp's test-tokenizer-0 checks; and the golden prompts of the
// real models must give their recorded prompt_tokens (BOS added, special not parsed).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/tokenizer/tokenizer.h"
#include "core/unicode/unicode.h"
#include "tests/support/gguf_edit.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

struct VocabCase {
  std::string input;
  std::vector<int32_t> expected;
};

// The .inp file holds inputs separated by "\n__ggml_vocab_test__\n" (the file ends with one);
// the .out file one line of space-separated ids per input, in the same order.
std::vector<VocabCase> read_cases(const std::filesystem::path& vocab) {
  const std::string raw = read_text(vocab.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(raw.substr(pos));
      break;
    }
    inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_text(vocab.string() + ".out"));
  std::vector<VocabCase> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    VocabCase c;
    if (i < inputs.size()) c.input = inputs[i];
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.expected.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(inputs.size(), cases.size()) << vocab;
  return cases;
}

std::unique_ptr<Tokenizer> load(const std::filesystem::path& path) {
  Result<gguf::File> file = gguf::File::open(path.string());
  EXPECT_TRUE(file.ok()) << (file.ok() ? "" : file.error().message);
  if (!file.ok()) return nullptr;
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tok.ok()) << (tok.ok() ? "" : tok.error().message);
  return tok.ok() ? std::move(*tok) : nullptr;
}

std::string ids_string(const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

class VocabFile : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path path() const {
    return data_path("vocab/ggml-vocab-" + GetParam() + ".gguf");
  }
};

TEST_P(VocabFile, MatchesLlamaCppReferenceIds) {
  std::unique_ptr<Tokenizer> tok = load(path());
  ASSERT_TRUE(tok);
  EXPECT_TRUE(tok->warnings().empty()) << tok->warnings().front();
  const std::vector<VocabCase> cases = read_cases(path());
  ASSERT_GE(cases.size(), 40u);
  size_t passed = 0;
  for (const VocabCase& c : cases) {
    const std::vector<int32_t> ids = tok->encode(c.input, false, false);
    EXPECT_EQ(ids, c.expected) << "input '" << c.input << "'\n  got      " << ids_string(ids)
                               << "\n  expected " << ids_string(c.expected);
    passed += ids == c.expected;
  }
  std::printf("[ vocab    ] %-14s %zu/%zu inputs match\n", GetParam().c_str(), passed,
              cases.size());
}

// Pieces put back together give the input again: byte-level BPE is lossless, SentencePiece
// adds its prefix space, WordPiece lowercases and loses white space (checked on ASCII inputs).
TEST_P(VocabFile, PiecesRoundTrip) {
  std::unique_ptr<Tokenizer> tok = load(path());
  ASSERT_TRUE(tok);
  const auto squeeze_lower = [](const std::string& s) {
    std::string out;
    for (const char c : s) {
      if (!std::isspace(static_cast<unsigned char>(c))) {
        out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
      }
    }
    return out;
  };
  size_t checked = 0;
  for (const VocabCase& c : read_cases(path())) {
    std::string text;
    for (const int32_t id : tok->encode(c.input, false, false))
      text += tok->token_to_piece(id, false);
    if (tok->type() == TokenizerType::kWpm) {
      const bool ascii = std::all_of(c.input.begin(), c.input.end(),
                                     [](char ch) { return static_cast<unsigned char>(ch) < 0x80; });
      if (!ascii) continue;
      EXPECT_EQ(squeeze_lower(text), squeeze_lower(c.input));
    } else {
      EXPECT_EQ(text,
                tok->type() == TokenizerType::kSpm && !c.input.empty() ? " " + c.input : c.input);
    }
    ++checked;
  }
  EXPECT_GE(checked, 30u);
}

// Arbitrary bytes (often invalid UTF-8) never crash and give valid ids; where the text is
// valid UTF-8, SentencePiece pieces spell it exactly. (With invalid bytes next to a space the
// character split swallows part of the U+2581 that stands for the space, as in llama.cpp.)
TEST_P(VocabFile, InvalidUtf8IsHandled) {
  std::unique_ptr<Tokenizer> tok = load(path());
  ASSERT_TRUE(tok);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  const auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  const std::string alphabet = std::string("ab \n'1<|>") + "\xC3\xA4\xE2\x96\x81\xF0\x9F\x98\x81";
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const size_t n = next() % 24;
    for (size_t i = 0; i < n; ++i) {
      text.push_back(next() % 3 == 0 ? static_cast<char>(next() & 0xFF)
                                     : alphabet[next() % alphabet.size()]);
    }
    for (const bool special : {false, true}) {
      const std::vector<int32_t> ids = tok->encode(text, true, special);
      std::string pieces;
      for (const int32_t id : ids) {
        ASSERT_TRUE(tok->is_valid(id)) << id;
        pieces += tok->token_to_piece(id, true);
      }
      const bool valid = unicode::sanitize_utf8(text) == text;
      if (tok->type() == TokenizerType::kSpm && !special && !text.empty() && valid) {
        EXPECT_EQ(pieces, "<s> " + text) << GetParam();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Llama, VocabFile,
                         ::testing::Values("gpt-2", "llama-spm", "phi-3", "starcoder", "falcon",
                                           "deepseek-llm", "bert-bge"),
                         [](const ::testing::TestParamInfo<std::string>& param_info) {
                           std::string name = param_info.param;
                           for (char& c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// Mistral's tekken pre-tokenizer (Mistral Nemo, Mistral Small 3, Ministral 3). No tekken
// vocabulary is in shared/, so GPT-2's with tokenizer.ggml.pre set to "tekken", against the
// ids llama.cpp's llama-tokenize gives for that file (tests/data/tekken_llamacpp.json, see
// its README): CamelCase split at each capital, letters beyond ASCII in both cases, digits
// one by one, punctuation runs with their newlines or slashes.
TEST(VocabTekken, MatchesLlamaCppOnGpt2sVocabulary) {
  Result<gguf::File> gpt2 = gguf::File::open(data_path("vocab/ggml-vocab-gpt-2.gguf").string());
  ASSERT_TRUE(gpt2.ok());
  Result<gguf::File> file =
      with_key(*gpt2, "tokenizer.ggml.pre", gguf::Value{std::string("tekken")});
  ASSERT_TRUE(file.ok());
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  EXPECT_TRUE((*tok)->warnings().empty()) << (*tok)->warnings().front();
  EXPECT_TRUE((*tok)->add_bos());  // tekken's default, as llama.cpp's
  const nlohmann::json cases = nlohmann::json::parse(
      read_text(std::string(QRUN_SOURCE_DIR) + "/tests/data/tekken_llamacpp.json"));
  ASSERT_GE(cases.size(), 19u);
  // (GPT-2's own pre-tokenizer, on the same vocabulary, gives other ids for some of them.)
  std::unique_ptr<Tokenizer> plain = load(data_path("vocab/ggml-vocab-gpt-2.gguf"));
  ASSERT_TRUE(plain);
  int differ = 0;
  for (const nlohmann::json& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> ids = (*tok)->encode(text, false, false);
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>())
        << "input '" << text << "'\n  got      " << ids_string(ids);
    differ += plain->encode(text, false, false) != ids;
  }
  std::printf("[ vocab    ] tekken: %zu inputs, %d tokenized otherwise by gpt-2's pre-tokenizer\n",
              cases.size(), differ);
  EXPECT_GT(differ, 0);  // 5 of the 19
}

TEST(VocabFiles, EveryVocabularyLoads) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data_path("vocab"))) {
    if (entry.path().extension() != ".gguf") continue;
    std::unique_ptr<Tokenizer> tok = load(entry.path());
    ASSERT_TRUE(tok) << entry.path();
    EXPECT_GT(tok->n_vocab(), 1000) << entry.path();
    EXPECT_FALSE(tok->encode("Hello world", true, true).empty()) << entry.path();
    ++n;
  }
  EXPECT_GE(n, 9u);
}

TEST(GoldenPrompts, ReproducePromptTokens) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(data_path("golden"))) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json j = nlohmann::json::parse(read_text(entry.path()));
    std::unique_ptr<Tokenizer> tok = load(data_path("models/" + j["model"].get<std::string>()));
    ASSERT_TRUE(tok);
    const std::vector<int32_t> expected = j["prompt_tokens"].get<std::vector<int32_t>>();
    const std::string prompt = j["prompt"].get<std::string>();
    EXPECT_EQ(tok->encode(prompt, true, false), expected) << entry.path();
    // The prompt decodes back to its text (the first piece's prefix space is dropped).
    EXPECT_EQ(tok->decode(std::vector<int32_t>(expected.begin() + 1, expected.end()), false),
              prompt);
    ++n;
  }
  EXPECT_GE(n, 21u);
}

}  // namespace
}  // namespace qrun::test
