// `qrun run --context-shift` end to end on stories260K with a context of 64: generation goes
// past the context with one note on stderr per shift, until the token budget; --keep sets
// what is kept; the tokens before the first shift are those of a run without the flag, which
// stops at the context end as before; and the flag errors are one-line usage errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

constexpr const char* kPrompt = "Lily and Tom went to the park. They";

std::string run_cmd(const std::string& flags, int64_t n_ctx = 64) {
  return qrun_binary().string() + " run --temp 0 --ignore-eos --no-stdin -c " +
         std::to_string(n_ctx) + " -m '" + data_path("models/stories260K.gguf").string() +
         "' -p '" + kPrompt + "' " + flags;
}

int64_t count(const std::string& text, const std::string& needle) {
  int64_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Shifts a run of n_gen tokens after n_prompt makes in a context of n_ctx keeping n_keep:
// every emitted token but the last is fed, and a full cache is shifted first.
int64_t expected_shifts(int64_t n_prompt, int64_t n_gen, int64_t n_ctx, int64_t n_keep) {
  int64_t n = n_prompt;
  int64_t shifts = 0;
  for (int64_t fed = 0; fed < n_gen - 1; ++fed) {
    if (n == n_ctx) {
      n -= (n_ctx - n_keep) / 2;
      ++shifts;
    }
    ++n;
  }
  return shifts;
}

TEST(CliContextShift, RunsPastTheContextWithANotePerShift) {
  const CommandResult r = run_command(run_cmd("-n 200 --json --context-shift"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_tokens"], 200);
  EXPECT_EQ(j["tokens"].size(), 200u);
  EXPECT_EQ(j["stop_reason"], "length");
  const auto n_prompt = static_cast<int64_t>(j["prompt_tokens"].size());
  // --keep 0 (the default) keeps the BOS token alone: 63 left, 31 dropped per shift.
  const int64_t shifts = expected_shifts(n_prompt, 200, 64, 1);
  EXPECT_GE(shifts, 3);
  EXPECT_EQ(j["n_context_shifts"], shifts);
  EXPECT_EQ(count(r.err, "qrun: context full at 64: kept 1, dropped 31, continuing"), shifts)
      << r.err;

  // The same as text: 200 tokens' worth, the notes on stderr only.
  const CommandResult text = run_command(run_cmd("-n 200 --context-shift"));
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, j["text"].get<std::string>());
  EXPECT_EQ(count(text.out, "context full"), 0);
}

TEST(CliContextShift, KeepMinusOneKeepsThePrompt) {
  const CommandResult r = run_command(run_cmd("-n 120 --json --context-shift --keep -1"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const auto n_prompt = static_cast<int64_t>(j["prompt_tokens"].size());
  EXPECT_EQ(j["n_tokens"], 120);
  const std::string note = "context full at 64: kept " + std::to_string(n_prompt) + ", dropped " +
                           std::to_string((64 - n_prompt) / 2) + ", continuing";
  EXPECT_EQ(count(r.err, note), expected_shifts(n_prompt, 120, 64, n_prompt)) << r.err;
  // --keep 3: three prompt tokens and BOS.
  const CommandResult three = run_command(run_cmd("-n 80 --context-shift --keep 3"));
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_NE(three.err.find("kept 4, dropped 30, continuing"), std::string::npos) << three.err;
}

TEST(CliContextShift, WithoutTheFlagGenerationStopsAtTheContextAsBefore) {
  const CommandResult plain = run_command(run_cmd("-n 200 --json"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const nlohmann::json p = nlohmann::json::parse(plain.out);
  EXPECT_EQ(p["stop_reason"], "context");
  const auto n_prompt = static_cast<int64_t>(p["prompt_tokens"].size());
  EXPECT_EQ(p["n_tokens"], 64 - n_prompt + 1);  // the last one sampled, not fed
  EXPECT_FALSE(p.contains("n_context_shifts"));
  EXPECT_EQ(plain.err.find("context full"), std::string::npos) << plain.err;

  // With the flag, the tokens up to the first shift are the same.
  const CommandResult shifted = run_command(run_cmd("-n 200 --json --context-shift"));
  ASSERT_EQ(shifted.exit_code, 0) << shifted.err;
  const nlohmann::json s = nlohmann::json::parse(shifted.out);
  const std::vector<int32_t> before = p["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> after = s["tokens"].get<std::vector<int32_t>>();
  ASSERT_GT(after.size(), before.size());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
  // --no-context-shift turns it off again.
  const CommandResult off =
      run_command(run_cmd("-n 200 --json --context-shift --no-context-shift"));
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(nlohmann::json::parse(off.out)["stop_reason"], "context");
}

TEST(CliContextShift, FlagErrorsAreOneLineUsageErrors) {
  struct Case {
    const char* flags;
    const char* says;
    int64_t n_ctx = 64;
  };
  const Case cases[] = {
      {"--keep 3", "--keep needs --context-shift"},
      {"--context-shift --keep -2", "--keep"},
      {"--context-shift -ngl 99", "-ngl 99: "},  // the test machines have no GPU
      {"--context-shift --lookup-ngram 3", "speculative decoding"},
      {"--context-shift --keep -1", "leaves nothing to drop", 15},  // a prompt of 14
  };
  for (const Case& c : cases) {
    const CommandResult r = run_command(run_cmd(std::string("-n 10 -q ") + c.flags, c.n_ctx));
    EXPECT_EQ(r.exit_code, 2) << c.flags << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flags << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << c.flags << ": " << r.err;
    EXPECT_TRUE(r.out.empty()) << c.flags;
  }
}

}  // namespace
}  // namespace qrun::test
