// `qrun chat` on the real Gemma 3 270M (scripts/fetch-models.sh) with the Gemma chat
// template from a file (the base model carries none), on a pseudo-terminal: the template's
// <start_of_turn>/<end_of_turn> are parsed as Gemma's special tokens, the reply is the one
// llama.cpp gives for the same rendered conversation, <end_of_turn> ends a reply and is never
// printed, and the next turn works.
//
// The expected reply was made with llama.cpp (commit d8a24cce, flash attention on, 2
// threads): llama-completion -m gemma-3-270m-q4_k_m.gguf --temp 0 -n 6 -no-cnv
//   --no-display-prompt -p $'<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n'
// which prints "Hello mendatanguser\nHello mendatang" (the base model is not instruction-tuned; it
// echoes the message and opens a new turn, whose <start_of_turn> is not printed). qrun's
// greedy picks there are not near-ties: the same 24 tokens as llama.cpp's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/pty.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::vector<std::string> chat_args(const std::string& model, std::vector<std::string> extra) {
  std::vector<std::string> a = {"chat",
                                "-m",
                                model,
                                "--chat-template-file",
                                data_path("templates/google-gemma-2-2b-it.jinja").string(),
                                "--temp",
                                "0",
                                "-q",
                                "--no-history"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

std::vector<std::string> chat_env() {
  const std::string dir = temp_dir().string();
  return {"XDG_STATE_HOME=" + dir, "HOME=" + dir};
}

TEST(CliChatReal, GemmaRepliesAsLlamaCppAndStopsAtEndOfTurn) {
  QRUN_REAL_MODEL_OR_SKIP(model, "gemma-3-270m-q4_k_m.gguf");
  PtyProcess p(qrun_binary().string(), chat_args(model.string(), {"-n", "6"}), chat_env());
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.expect("> ", std::chrono::seconds(60))) << p.output();
  p.write("Hello\r");
  ASSERT_TRUE(p.expect("Hello\r\n")) << p.output();
  ASSERT_TRUE(p.expect("Hello mendatanguser\r\nHello mendatang\r\n> ", std::chrono::seconds(60)))
      << p.output();
  p.write("/stats\r");
  ASSERT_TRUE(p.expect("generated 6 tokens")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("Bye\r");
  ASSERT_TRUE(p.expect("Bye\r\n")) << p.output();
  ASSERT_TRUE(p.expect("\n> ", std::chrono::seconds(60))) << p.output();
  p.ctrl_d();
  EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.output();
  EXPECT_EQ(p.output().find("<start_of_turn>"), std::string::npos) << p.output();
}

// <end_of_turn> (id 106) forced as the first token of every reply: each reply is empty,
// ends the turn there (stop: eos, not at -n), and the token's text never reaches the
// terminal.
TEST(CliChatReal, EndOfTurnEndsTheReplyAndIsNotPrinted) {
  QRUN_REAL_MODEL_OR_SKIP(model, "gemma-3-270m-q4_k_m.gguf");
  PtyProcess p(qrun_binary().string(),
               chat_args(model.string(), {"-n", "20", "--logit-bias", "106+1000"}), chat_env());
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.expect("> ", std::chrono::seconds(60))) << p.output();
  for (const char* message : {"Hello", "Again"}) {
    p.write(std::string(message) + "\r");
    ASSERT_TRUE(p.expect(std::string(message) + "\r\n")) << p.output();
    ASSERT_TRUE(p.expect("\n> ", std::chrono::seconds(60))) << p.output();
  }
  p.write("/stats\r");
  ASSERT_TRUE(p.expect("stop: eos")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.ctrl_d();
  EXPECT_EQ(p.wait(std::chrono::seconds(60)), 0) << p.output();
  EXPECT_EQ(p.output().find("end_of_turn"), std::string::npos) << p.output();
}

}  // namespace
}  // namespace qrun::test
