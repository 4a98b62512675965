// `qrun run` with -md/--model-draft and --lookup-ngram through the built binary: the same
// greedy text as without (and, in match mode, with a grammar or penalties, the same sampled
// text for a seed; in a chat, the same replies), the drafted/accepted figures in --json and
// on stderr, a draft whose vocabulary differs (in size, or in a token's text) refused with
// exit code 5 naming both files, and both drafters at once refused as bad usage.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string model_path(const std::string& model) {
  return data_path("models/" + model + ".gguf").string();
}

const char* kPark = "Lily and Tom went to the park. They";

std::string run_line(const std::string& extra) {
  return qrun_binary().string() + " run --no-stdin --temp 0 -n 64 -m '" +
         model_path("stories260K") + "' -p '" + kPark + "' " + extra;
}

TEST(CliSpeculative, DraftedRunsPrintThePlainTextAndTheirFigures) {
  const CommandResult plain = run_command(run_line("-q"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const std::string& drafter :
       {"-md '" + model_path("stories260K-Q4_0") + "'", std::string("--lookup-ngram 2"),
        "--model-draft '" + model_path("stories260K") + "' --draft-max 4 --draft-p-min 0"}) {
    SCOPED_TRACE(drafter);
    const CommandResult r = run_command(run_line(drafter));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, plain.out);
    EXPECT_NE(r.err.find("qrun: speculative: drafted "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tokens per target pass"), std::string::npos) << r.err;

    const CommandResult j = run_command(run_line("-q --json " + drafter));
    ASSERT_EQ(j.exit_code, 0) << j.err;
    const nlohmann::json t = nlohmann::json::parse(j.out)["timings"];
    EXPECT_EQ(nlohmann::json::parse(j.out)["text"], plain.out);
    const int64_t drafted = t.at("drafted").get<int64_t>();
    const int64_t accepted = t.at("accepted").get<int64_t>();
    EXPECT_GT(drafted, 0);
    EXPECT_LE(accepted, drafted);
    EXPECT_DOUBLE_EQ(t.at("acceptance_rate").get<double>(),
                     static_cast<double>(accepted) / static_cast<double>(drafted));
    EXPECT_DOUBLE_EQ(t.at("tokens_per_pass").get<double>(),
                     64.0 / t.at("target_passes").get<double>());
  }
  // A plain run has none of these keys.
  const CommandResult j = run_command(run_line("-q --json"));
  EXPECT_FALSE(nlohmann::json::parse(j.out)["timings"].contains("drafted"));
}

TEST(CliSpeculative, DraftWithAnotherVocabularyIsRefused) {
  const std::string draft = model_path("TinyLLama-v0-5M-Q4_0");
  const CommandResult r = run_command(run_line("-md '" + draft + "'"));
  EXPECT_EQ(r.exit_code, 5) << r.err;
  const std::string last = r.err.substr(r.err.rfind("qrun: "));
  EXPECT_NE(last.find(draft), std::string::npos) << last;
  EXPECT_NE(last.find(model_path("stories260K")), std::string::npos) << last;
  EXPECT_NE(last.find("vocabulary"), std::string::npos) << last;
  EXPECT_EQ(std::count(last.begin(), last.end(), '\n'), 1) << last;
  EXPECT_TRUE(r.out.empty());
}

// A grammar and penalties put the chain in match mode, which samples every position as
// plain decoding does: the same text for the same seed, greedy or not.
TEST(CliSpeculative, GrammarAndPenaltiesGiveThePlainTextSeedForSeed) {
  for (const std::string& sampling :
       {std::string("--grammar 'root ::= [a-zA-Z .,]+' --temp 0"),
        std::string("--grammar 'root ::= [a-zA-Z .,]+' --temp 0.9 -s 7 --repeat-penalty 1.2"),
        std::string("--temp 1.2 -s 11 --repeat-penalty 1.3")}) {
    SCOPED_TRACE(sampling);
    const CommandResult plain = run_command(run_line("-q " + sampling));
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    for (const std::string& drafter :
         {"-md '" + model_path("stories260K-Q4_0") + "' --draft-p-min 0.2",
          std::string("--lookup-ngram 1")}) {
      SCOPED_TRACE(drafter);
      const CommandResult r = run_command(run_line("-q --json " + sampling + " " + drafter));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      const nlohmann::json j = nlohmann::json::parse(r.out);
      EXPECT_EQ(j["text"], plain.out);
      // Penalties work against the repeats lookup proposes: it may keep none of them then.
      EXPECT_GT(j["timings"][drafter[1] == 'm' ? "accepted" : "drafted"].get<int64_t>(), 0);
    }
  }
}

// A piped chat of three turns with a /regen and an /undo (the caches rewind and the drafter
// re-syncs with the conversation): the same greedy replies with either drafter as without.
TEST(CliSpeculative, ChatRepliesAreThePlainOnes) {
  const std::string base = qrun_binary().string() + " chat -q --no-history --temp 0 -n 32 -m '" +
                           model_path("TinyLLama-v0-5M-Q8_0") + "' --chat-template-file '" +
                           data_path("templates/microsoft-Phi-3.5-mini-instruct.jinja").string() +
                           "'";
  const std::string input =
      "Tell me a story about a cat.\nAnd then?\n/regen\nWhat did the dog do?\n/undo\nThe end?\n";
  const CommandResult plain = run_command(base, input);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_GT(plain.out.size(), 100u) << plain.out;  // four replies
  for (const std::string& drafter :
       {"-md '" + model_path("TinyLLama-v0-5M-Q4_K_M") + "' --draft-p-min 0.3",
        std::string("--lookup-ngram 2")}) {
    SCOPED_TRACE(drafter);
    const CommandResult r = run_command(base + " " + drafter, input);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, plain.out);
    // The last reply drafted and kept some tokens (/stats goes to stderr).
    const CommandResult stats = run_command(base + " " + drafter, input + "/stats\n");
    const size_t at = stats.err.find("speculative: drafted ");
    ASSERT_NE(at, std::string::npos) << stats.err;
    EXPECT_EQ(stats.err.find("drafted 0,", at), std::string::npos) << stats.err;
    EXPECT_EQ(stats.err.find("accepted 0 ", at), std::string::npos) << stats.err;
  }
}

// llama.cpp's llama-spm vocabulary and TinyLLama-v0's both have 32000 tokens, but differ
// from token 259 on: the size matches, the texts do not.
TEST(CliSpeculative, DraftWithTheSameSizeButOtherTokensIsRefused) {
  const std::string draft = (temp_dir() / "spm-draft.gguf").string();
  const CommandResult synth =
      run_command(qrun_binary().string() + " synth -o '" + draft + "' --like tiny --type f32 " +
                  "--vocab '" + data_path("vocab/ggml-vocab-llama-spm.gguf").string() + "'");
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const std::string target = model_path("TinyLLama-v0-5M-Q4_0");
  const CommandResult r = run_command(qrun_binary().string() + " run -q --no-stdin -n 4 -m '" +
                                      target + "' -md '" + draft + "' -p hi");
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(r.err, "qrun: -md " + draft + ": the draft model's vocabulary differs from the " +
                       "target's (" + target + "): token 259 is '\xe2\x96\x81\xe2\x96\x81' " +
                       "against '\xe2\x96\x81t'\n");
}

TEST(CliSpeculative, BadDraftFlagsAreUsageErrors) {
  for (const std::string& flags :
       {"-md '" + model_path("stories260K") + "' --lookup-ngram 2", std::string("--draft-max 0"),
        std::string("--draft-p-min 1.5"), std::string("--lookup-ngram -1")}) {
    SCOPED_TRACE(flags);
    const CommandResult r = run_command(run_line("-q " + flags));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace qrun::test
