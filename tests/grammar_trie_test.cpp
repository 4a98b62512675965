// The grammar stage's trie filter (apply) against the plain per-token check (allows) on real
// vocabularies: random walks through several grammars, and at every state both must allow
// exactly the same tokens and meet the same errors, so the optimization cannot change what
// a grammar lets through. Also the trie's own layout on a small vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <random>

#include "core/grammar/grammar_stage.h"
#include "core/grammar/json_schema.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

TEST(VocabTrie, PreorderWithSharedPrefixesAndDuplicatePieces) {
  const std::vector<std::string> pieces{"ab", "", "a", "b", "abc", "ab", "ba"};
  const VocabTrie trie(pieces, std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 0});  // not "ba"
  // a, ab, abc, b: 4 nodes.
  ASSERT_EQ(trie.n_nodes(), 4u);
  const std::string bytes = "abcb";
  const std::vector<uint32_t> depth{1, 2, 3, 1};
  const std::vector<uint32_t> end{3, 3, 3, 4};
  const std::vector<std::vector<int32_t>> at{{2}, {0, 5}, {4}, {3}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(trie.node(i).byte, static_cast<uint8_t>(bytes[i])) << i;
    EXPECT_EQ(trie.node(i).depth, depth[i]) << i;
    EXPECT_EQ(trie.node(i).subtree_end, end[i]) << i;
    const std::span<const int32_t> t = trie.tokens_at(i);
    EXPECT_EQ(std::vector<int32_t>(t.begin(), t.end()), at[i]) << i;
  }
  EXPECT_EQ(trie.tokens_under(0).size(), 4u);
  EXPECT_EQ(trie.max_depth(), 3u);
}

struct Vocab {
  std::string name;
  std::shared_ptr<const GrammarVocab> vocab;
  std::vector<uint8_t> is_eog;
  std::vector<int32_t> short_tokens;  // pieces of one byte (incomplete characters among them)
};

Vocab load_vocab(const std::filesystem::path& path) {
  Vocab v;
  v.name = path.filename().string();
  Result<gguf::File> file = gguf::File::open(path.string());
  EXPECT_TRUE(file.ok()) << path;
  if (!file.ok()) return v;
  Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
  EXPECT_TRUE(tok.ok()) << path << ": " << (tok.ok() ? "" : tok.error().message);
  if (!tok.ok()) return v;
  std::vector<std::string> pieces;
  for (int32_t id = 0; id < (*tok)->n_vocab(); ++id) {
    pieces.push_back((*tok)->token_to_piece(id, /*render_special=*/false));
    v.is_eog.push_back((*tok)->is_eog(id) ? 1 : 0);
    if (pieces.back().size() == 1) v.short_tokens.push_back(id);
  }
  v.vocab = make_grammar_vocab(std::move(pieces));
  return v;
}

std::shared_ptr<const Grammar> grammar_of(const std::string& gbnf) {
  Result<Grammar> g = parse_grammar(gbnf);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.error().message);
  return std::make_shared<const Grammar>(g.ok() ? std::move(*g) : Grammar{});
}

std::vector<std::shared_ptr<const Grammar>> test_grammars() {
  const std::string schema =
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 40}, "born":
      {"type": "integer", "minimum": 0, "maximum": 2100}, "tags": {"type": "array", "items":
      {"type": "string"}, "maxItems": 5}, "when": {"format": "date"}}, "required": ["name",
      "born"]})";
  Result<std::string> gbnf = json_schema_to_grammar(schema);
  EXPECT_TRUE(gbnf.ok());
  return {
      grammar_of(gbnf.ok() ? *gbnf : "root ::= \"x\""),
      grammar_of("root ::= \"{\" ws pair (\",\" ws pair){0,3} \"}\"\n"
                 "pair ::= \"\\\"\" [^\"\\\\]{1,8} \"\\\"\" ws \":\" ws (\"true\" | [0-9]+ | .)\n"
                 "ws ::= [ \\t\\n]?"),
      grammar_of("root ::= move (\" \" move)*\n"
                 "move ::= [KQRBN]? [a-h]? [1-8]? \"x\"? [a-h] [1-8] (\"=\" [QRBN])? [+#]? | "
                 "\"O-O\" \"-O\"?"),
      grammar_of("root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= [0-9]+ | \"(\" expr \")\""),
      // Several-byte characters: ranges, a negated set, literals and emoji.
      grammar_of("root ::= ([α-ω] | [^a-zA-Z0-9 \"\\\\] | \"日本\" | [😀-🙏] | \"é\")+ \" end\""),
      // Positions double with every "a": the too-ambiguous error must show the same way.
      grammar_of("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\""),
  };
}

// Random walks: at each state, apply() and allows_all() on every token (a few at -inf) and
// allows_each() on a few hundred, against allows() on each, on two stages that were fed the
// same tokens. Returns the states compared.
int walk_and_compare(const Vocab& v, std::shared_ptr<const Grammar> grammar, int steps,
                     uint32_t seed) {
  Result<std::unique_ptr<ConstraintStage>> a = make_grammar_stage(grammar, v.vocab, v.is_eog);
  Result<std::unique_ptr<ConstraintStage>> b = make_grammar_stage(grammar, v.vocab, v.is_eog);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return 0;
  ConstraintStage& trie = **a;
  ConstraintStage& plain = **b;
  std::mt19937 rng(seed);
  const auto n = static_cast<int32_t>(v.vocab->pieces.size());
  int compared = 0;
  for (int step = 0; step < steps; ++step) {
    CandidateList c;
    for (int32_t id = 0; id < n; ++id) c.items.push_back({id, rng() % 50 == 0 ? kNegInf : 1.0f});
    std::vector<float> before;
    for (const TokenCandidate& item : c.items) before.push_back(item.logit);
    trie.apply(c, rng);
    std::vector<int32_t> allowed;
    std::vector<uint8_t> expect(static_cast<size_t>(n), 0);
    for (int32_t id = 0; id < n; ++id) {
      if (before[static_cast<size_t>(id)] == kNegInf) continue;
      expect[static_cast<size_t>(id)] = plain.allows(id) ? 1 : 0;
      if (expect[static_cast<size_t>(id)] != 0) allowed.push_back(id);
    }
    if (allowed.empty()) expect = v.is_eog;  // nothing fits: the ends are let through
    int mismatches = 0;
    for (int32_t id = 0; id < n && mismatches < 5; ++id) {
      const bool got = c.items[static_cast<size_t>(id)].logit != kNegInf;
      if (got != (expect[static_cast<size_t>(id)] != 0)) {
        ++mismatches;
        ADD_FAILURE() << v.name << " step " << step << ": token " << id << " piece '"
                      << v.vocab->pieces[static_cast<size_t>(id)] << "' trie " << got
                      << ", per token " << !got;
      }
    }
    if (mismatches > 0) return compared;
    EXPECT_EQ(trie.error().has_value(), plain.error().has_value()) << v.name << " step " << step;
    ++compared;
    if (trie.error() || plain.error()) return compared;
    // allows_each (the sampler's probe of its best few hundred) on random ids, repeats and
    // the ends among them.
    std::vector<int32_t> some;
    for (int k = 0; k < 300; ++k) some.push_back(static_cast<int32_t>(rng() % n));
    for (int32_t id = 0; id < n; ++id) {
      if (v.is_eog[static_cast<size_t>(id)] != 0) some.push_back(id);
    }
    std::vector<uint8_t> each(some.size(), 7);
    trie.allows_each(some, each);
    for (size_t k = 0; k < some.size(); ++k) {
      if ((each[k] != 0) != plain.allows(some[k])) {
        ADD_FAILURE() << v.name << " step " << step << ": allows_each on token " << some[k]
                      << " piece '" << v.vocab->pieces[static_cast<size_t>(some[k])] << "' says "
                      << int{each[k]};
        return compared;
      }
    }
    // allows_all (the sampler's mask when its chain starts with top-k) on the same logits:
    // allows() on every token that is not -inf.
    std::vector<uint8_t> mask(static_cast<size_t>(n), 7);
    trie.allows_all(before, mask);
    for (int32_t id = 0; id < n; ++id) {
      const auto t = static_cast<size_t>(id);
      if (before[t] == kNegInf) continue;
      if ((mask[t] != 0) != plain.allows(id)) {
        ADD_FAILURE() << v.name << " step " << step << ": allows_all on token " << id << " piece '"
                      << v.vocab->pieces[t] << "' says " << int{mask[t]};
        return compared;
      }
    }
    // Next token: any allowed one, or a one-byte piece (a partial character, often) half the
    // time; restart when nothing but the end may come.
    std::vector<int32_t> next;
    for (int32_t id : allowed) {
      if (v.is_eog[static_cast<size_t>(id)] == 0) next.push_back(id);
    }
    std::vector<int32_t> short_next;
    for (int32_t id : v.short_tokens) {
      if (std::binary_search(next.begin(), next.end(), id)) short_next.push_back(id);
    }
    const std::vector<int32_t>& pool = !short_next.empty() && rng() % 2 == 0 ? short_next : next;
    if (pool.empty() || trie.complete()) {
      trie.reset();
      plain.reset();
      continue;
    }
    const int32_t token = pool[rng() % pool.size()];
    trie.accept(token);
    plain.accept(token);
  }
  return compared;
}

// States per grammar: fewer under sanitizers, where the per-token check over a whole
// vocabulary is some ten times slower.
int scaled(int steps) {
#ifdef QRUN_SANITIZED
  return std::max(2, steps / 8);
#else
  return steps;
#endif
}

void check_vocab(const std::filesystem::path& path, int full_steps) {
  const int steps = scaled(full_steps);
  const Vocab v = load_vocab(path);
  ASSERT_NE(v.vocab, nullptr);
  uint32_t seed = 1;
  int compared = 0;
  for (const std::shared_ptr<const Grammar>& g : test_grammars()) {
    compared += walk_and_compare(v, g, steps, seed++);
  }
  EXPECT_GE(compared, steps);
}

TEST(GrammarTrie, SameTokensAsThePerTokenCheckOnSharedVocabularies) {
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf",
                           "ggml-vocab-phi-3.gguf", "ggml-vocab-falcon.gguf"}) {
    SCOPED_TRACE(name);
    check_vocab(test::data_path(std::string("vocab/") + name), 40);
  }
}

TEST(GrammarTrie, SameTokensAsThePerTokenCheckOnSharedModels) {
  check_vocab(test::data_path("models/stories260K.gguf"), 60);
  check_vocab(test::data_path("models/TinyLLama-v0-5M-Q4_0.gguf"), 60);
}

TEST(GrammarTrie, SameTokensAsThePerTokenCheckOnGemma) {
  QRUN_REAL_MODEL_OR_SKIP(path, "gemma-3-270m-q4_k_m.gguf");
  check_vocab(path, 12);
}

}  // namespace
}  // namespace qrun
