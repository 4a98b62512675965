// End-to-end tests of `qrun tokenize` through the built binary: llama-tokenize's output
// formats and flags, prompt sources, and one-line errors with the documented exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string tokenize_cmd(const std::string& args) {
  return qrun_binary().string() + " tokenize -m '" + data_path("models/stories260K.gguf").string() +
         "' " + args;
}

TEST(CliTokenize, IdsMatchGoldenPrompt) {
  CommandResult r = run_command(tokenize_cmd("-p 'Once upon a time' --ids"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[1, 403, 407, 261, 378]\n");
  EXPECT_TRUE(r.err.empty()) << r.err;

  r = run_command(tokenize_cmd("-p 'Once upon a time' --ids --no-bos"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "[403, 407, 261, 378]\n");
}

TEST(CliTokenize, PiecesOneLinePerToken) {
  CommandResult r = run_command(tokenize_cmd("-p 'Once upon'"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "     1 -> '<s>'\n   403 -> ' Once'\n   407 -> ' upon'\n");
}

TEST(CliTokenize, PromptSourcesEscapesAndSpecialTokens) {
  const std::string dir = temp_dir().string();
  std::ofstream(dir + "/prompt.txt") << "Once upon a time";
  CommandResult file = run_command(tokenize_cmd("-f '" + dir + "/prompt.txt' --ids"));
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(file.out, "[1, 403, 407, 261, 378]\n");

  CommandResult in = run_command(tokenize_cmd("--stdin --ids --show-count"), "Once upon a time");
  ASSERT_EQ(in.exit_code, 0) << in.err;
  EXPECT_EQ(in.out, "[1, 403, 407, 261, 378]\nTotal number of tokens: 5\n");

  // "\n" in the prompt is a newline unless --no-escape.
  CommandResult esc = run_command(tokenize_cmd("-p 'a\\nb' --ids"));
  CommandResult raw = run_command(tokenize_cmd("-p 'a\\nb' --ids --no-escape"));
  ASSERT_EQ(esc.exit_code, 0) << esc.err;
  ASSERT_EQ(raw.exit_code, 0) << raw.err;
  EXPECT_NE(esc.out, raw.out);
  EXPECT_NE(esc.out.find(", 13,"), std::string::npos) << esc.out;  // <0x0A>

  // Control tokens in the text are parsed unless --no-parse-special.
  CommandResult special = run_command(tokenize_cmd("-p '</s>' --ids --no-bos"));
  ASSERT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(special.out, "[2]\n");
  CommandResult plain = run_command(tokenize_cmd("-p '</s>' --ids --no-bos --no-parse-special"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out, "[2]\n");
}

TEST(CliTokenize, ErrorsAreOneLineWithDocumentedCodes) {
  const auto one_line = [](const CommandResult& r) {
    return std::count(r.err.begin(), r.err.end(), '\n') == 1;
  };
  CommandResult no_prompt = run_command(tokenize_cmd(""));
  EXPECT_EQ(no_prompt.exit_code, 2) << no_prompt.err;
  EXPECT_TRUE(one_line(no_prompt)) << no_prompt.err;

  CommandResult no_model = run_command(qrun_binary().string() + " tokenize -p hi");
  EXPECT_EQ(no_model.exit_code, 2) << no_model.err;
  EXPECT_TRUE(one_line(no_model)) << no_model.err;

  CommandResult two = run_command(tokenize_cmd("-p hi --stdin"));
  EXPECT_EQ(two.exit_code, 2) << two.err;

  CommandResult missing =
      run_command(qrun_binary().string() + " tokenize -m /nonexistent/model.gguf -p hi");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
  EXPECT_NE(missing.err.find("/nonexistent/model.gguf"), std::string::npos) << missing.err;
  EXPECT_TRUE(one_line(missing)) << missing.err;

  CommandResult missing_prompt = run_command(tokenize_cmd("-f /nonexistent/prompt.txt"));
  EXPECT_EQ(missing_prompt.exit_code, 3) << missing_prompt.err;
  EXPECT_NE(missing_prompt.err.find("/nonexistent/prompt.txt"), std::string::npos);
}

}  // namespace
}  // namespace qrun::test
