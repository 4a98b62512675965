// `qrun chat` end to end. On a pseudo-terminal (tests/support/pty.h), for real: a message
// gets a reply, Ctrl-C stops a reply and keeps the session, Ctrl-C at an empty prompt says
// how to quit, Ctrl-D exits 0, multi-line input, the history file, /save then /load in a new
// process (the next turn reuses the prefilled cache), /context, /stats, colours. Through a
// pipe: unattended replies without escape codes, end-of-turn tokens never printed, context
// policies, template errors, a model file truncated under a running chat. Models: a tiny
// random-weight model synthesized with the phi-3 vocabulary (a real chat template, <|end|>) and
// stories260K with a template file.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/process.h"
#include "tests/support/pty.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

using std::chrono::milliseconds;

std::string qrun() {
  return qrun_binary().string();
}

class CliChat : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(temp_dir());
    const std::string vocab = data_path("vocab/ggml-vocab-phi-3.gguf").string();
    const CommandResult r =
        run_command(qrun() + " synth -o '" + model() +
                    "' --like tiny --ctx 65536 --seed 3 --vocab '" + vocab + "'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::string model() { return (*dir_ / "phi3-tiny.gguf").string(); }
  static std::filesystem::path dir() { return *dir_; }

  // `qrun chat` on the tiny model: greedy, single-threaded, no history file unless asked.
  static std::vector<std::string> args(std::vector<std::string> extra, bool history = false) {
    std::vector<std::string> a = {"chat", "-m", model(), "--temp", "0", "-t", "1", "-q"};
    if (!history) a.push_back("--no-history");
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }

  static std::vector<std::string> env() {
    return {"XDG_STATE_HOME=" + (dir() / "state").string(), "HOME=" + dir().string()};
  }

  static inline std::filesystem::path* dir_ = nullptr;
};

// Types a message and waits for the reply and the next prompt.
void say(PtyProcess& p, const std::string& message) {
  p.write(message + "\r");
  ASSERT_TRUE(p.expect(message + "\r\n")) << p.output();
  ASSERT_TRUE(p.expect("\n> ")) << p.output();
}

TEST_F(CliChat, MessageGetsAReplyAndCtrlDExitsZero) {
  PtyProcess p(qrun(), args({"-n", "6", "--ignore-eos"}), env());
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("Hello there\r");
  ASSERT_TRUE(p.expect("Hello there\r\n")) << p.output();
  ASSERT_TRUE(p.expect("\n> ")) << p.output();
  p.write("/stats\r");
  ASSERT_TRUE(p.expect("generated 6 tokens")) << p.output();
  ASSERT_TRUE(p.expect("time to first token")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/context\r");
  ASSERT_TRUE(p.expect("tokens used")) << p.output();
  ASSERT_TRUE(p.expect("2 messages")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.ctrl_d();
  EXPECT_EQ(p.wait(), 0) << p.output();
}

TEST_F(CliChat, CtrlCStopsAReplyAndKeepsTheSession) {
  // No -n and no end of turn: the reply would run for 65536 tokens.
  PtyProcess p(qrun(), args({"-c", "65536", "--ignore-eos"}), env());
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("Go on forever\r");
  ASSERT_TRUE(p.expect("Go on forever\r\n")) << p.output();
  ASSERT_TRUE(p.expect_bytes(40)) << p.output();  // the reply is streaming
  p.ctrl_c();
  ASSERT_TRUE(p.expect("reply interrupted")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/context\r");
  ASSERT_TRUE(p.expect("2 messages")) << p.output();  // the partial reply is kept
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/set n-predict=3\r");
  ASSERT_TRUE(p.expect("> ")) << p.output();
  say(p, "Short now");
  p.write("/stats\r");
  ASSERT_TRUE(p.expect("generated 3 tokens")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/exit\r");
  EXPECT_EQ(p.wait(), 0) << p.output();
}

// A Ctrl-C that lands while the reply is blocked writing to a terminal nobody reads (a
// paused scroll, a slow ssh link) stops the reply as any other: the write resumes, nothing
// shown is lost and stdout keeps no error (without SA_RESTART the write failed with EINTR,
// and /exit then said "cannot write to standard output" with exit code 3).
TEST_F(CliChat, CtrlCWhileTheReplyIsBlockedOnTheTerminal) {
  PtyProcess p(qrun(), args({"-c", "65536", "--ignore-eos"}), env());
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("Go on forever\r");
  ASSERT_TRUE(p.expect("Go on forever\r\n")) << p.output();
  // Nothing reads the terminal from here until the reply blocks on it (some 60 KiB of reply,
  // a few seconds).
  ASSERT_TRUE(p.expect_child_asleep()) << p.output();
  p.ctrl_c();
  ASSERT_TRUE(p.expect("reply interrupted")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/exit\r");
  EXPECT_EQ(p.wait(), 0) << p.since_mark();
  EXPECT_EQ(p.since_mark().find("cannot write"), std::string::npos) << p.since_mark();
}

TEST_F(CliChat, CtrlCAtThePromptSaysHowToQuit) {
  PtyProcess p(qrun(), args({"-n", "2"}), env());
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.ctrl_c();
  ASSERT_TRUE(p.expect("press Ctrl-D")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  // With text on the line, Ctrl-C only clears it.
  p.write("half typed");
  ASSERT_TRUE(p.expect("half typed")) << p.output();
  p.ctrl_c();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  EXPECT_EQ(p.since_mark().find("Ctrl-D"), std::string::npos);
  // Errors are one line on a terminal, and the session goes on.
  p.write("/load /nonexistent/conv.json\r");
  ASSERT_TRUE(p.expect("qrun: /load: cannot open")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/context\r");
  ASSERT_TRUE(p.expect("0 messages")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.ctrl_d();
  EXPECT_EQ(p.wait(), 0) << p.output();
}

TEST_F(CliChat, MultiLineInputSaveAndLoadInANewProcess) {
  const std::string saved = (dir() / "conv.json").string();
  {
    PtyProcess p(qrun(), args({"-n", "3", "--ignore-eos", "-sys", "Be kind."}), env());
    ASSERT_TRUE(p.expect("> ")) << p.output();
    p.write("first line\\\r");
    ASSERT_TRUE(p.expect("... ")) << p.output();
    say(p, "second line");
    p.write("\"\"\"\r");
    ASSERT_TRUE(p.expect("... ")) << p.output();
    p.write("in a block\r");
    ASSERT_TRUE(p.expect("... ")) << p.output();
    p.write("\"\"\"\r");
    ASSERT_TRUE(p.expect("\n> ")) << p.output();
    p.write("/save " + saved + "\r");
    ASSERT_TRUE(p.expect("saved 4 messages")) << p.output();
    ASSERT_TRUE(p.expect("> ")) << p.output();
    p.ctrl_d();
    ASSERT_EQ(p.wait(), 0) << p.output();
  }
  const nlohmann::json j = nlohmann::json::parse(read_text(saved));
  EXPECT_EQ(j["system_prompt"], "Be kind.");
  ASSERT_EQ(j["messages"].size(), 4u);
  EXPECT_EQ(j["messages"][0]["content"], "first line\nsecond line");
  EXPECT_EQ(j["messages"][2]["content"], "in a block");
  EXPECT_EQ(j["sampling"]["temp"], "0");
  EXPECT_EQ(j["n_predict"], 3);

  PtyProcess p(qrun(), args({}), env());  // -n 3 and temp 0 come back from the file
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/load " + saved + "\r");
  ASSERT_TRUE(p.expect("loaded 4 messages")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.write("/system\r");
  ASSERT_TRUE(p.expect("Be kind.")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  say(p, "And then?");
  p.write("/stats\r");
  ASSERT_TRUE(p.expect("tokens (")) << p.output();
  const std::string stats = p.since_mark();
  const long reused = std::atol(stats.c_str());
  EXPECT_GT(reused, 10) << stats;  // the prefilled conversation was reused
  ASSERT_TRUE(p.expect("generated 3 tokens")) << p.output();
  ASSERT_TRUE(p.expect("> ")) << p.output();
  p.ctrl_d();
  EXPECT_EQ(p.wait(), 0) << p.output();
}

TEST_F(CliChat, HistoryFileIsWrittenUnlessNoHistory) {
  const std::filesystem::path history = dir() / "state" / "qrun" / "history";
  std::filesystem::remove(history);
  {
    PtyProcess p(qrun(), args({"-n", "1"}), env());
    ASSERT_TRUE(p.expect("> ")) << p.output();
    say(p, "no history here");
    p.ctrl_d();
    ASSERT_EQ(p.wait(), 0) << p.output();
    EXPECT_FALSE(std::filesystem::exists(history));
  }
  PtyProcess p(qrun(), args({"-n", "1"}, /*history=*/true), env());
  ASSERT_TRUE(p.expect("> ")) << p.output();
  say(p, "remember this line");
  p.ctrl_d();
  ASSERT_EQ(p.wait(), 0) << p.output();
  ASSERT_TRUE(std::filesystem::exists(history));
  EXPECT_NE(read_text(history).find("remember this line"), std::string::npos);
}

TEST_F(CliChat, ColorOnlyWhenAsked) {
  PtyProcess on(qrun(), args({"-n", "2", "--ignore-eos", "--color", "on"}), env());
  ASSERT_TRUE(on.expect("> ")) << on.output();
  on.write("hi\r");
  ASSERT_TRUE(on.expect("hi\r\n")) << on.output();
  ASSERT_TRUE(on.expect("\033[0m\r\n")) << on.output();  // the reply, coloured
  ASSERT_TRUE(on.expect("> ")) << on.output();
  on.ctrl_d();
  ASSERT_EQ(on.wait(), 0);
  EXPECT_NE(on.output().find("\033[36m"), std::string::npos) << on.output();

  PtyProcess off(qrun(), args({"-n", "2", "--ignore-eos", "--color", "off"}), env());
  ASSERT_TRUE(off.expect("> ")) << off.output();
  say(off, "hi");
  off.ctrl_d();
  ASSERT_EQ(off.wait(), 0);
  EXPECT_EQ(off.output().find("\033[3"), std::string::npos) << off.output();
}

// Piped stdin: one reply line per message on stdout, nothing else there, no escape codes.
TEST_F(CliChat, PipedStdinWorksUnattended) {
  const CommandResult r =
      run_command(qrun() + " chat -m '" + model() +
                      "' --temp 0 -t 1 -n 4 --ignore-eos --color on -sys 'Be brief.' 2>'" +
                      (dir() / "err").string() + "'",
                  "Hello\n/stats\nsecond \\\nmessage\n/context\n/undo\n/context\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.find('\033'), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  const std::string err = read_text(dir() / "err");
  EXPECT_NE(err.find("generated 4 tokens"), std::string::npos) << err;
  EXPECT_NE(err.find("4 messages"), std::string::npos) << err;
  EXPECT_NE(err.find("(2 messages dropped)"), std::string::npos) << err;
  EXPECT_NE(err.find("2 messages, "), std::string::npos) << err;
  EXPECT_EQ(err.find('\033'), std::string::npos) << err;

  // The same input gives the same replies (greedy).
  const CommandResult again = run_command(
      qrun() + " chat -m '" + model() + "' --temp 0 -t 1 -n 4 --ignore-eos -q -sys 'Be brief.'",
      "Hello\n/stats\nsecond \\\nmessage\n/context\n/undo\n/context\n");
  EXPECT_EQ(again.out, r.out);
}

// SIGINT while a chat on a pipe waits for its next line ends it with exit code 130 at once:
// the pipe is waited on in poll(), which the signal interrupts (a read() would be restarted).
TEST_F(CliChat, SigintWhileAPipedChatWaitsForInputExits130) {
  Process chat({qrun(), "chat", "-m", model(), "--temp", "0", "-t", "1", "-n", "2", "-q"},
               StdinKind::kOpenPipe);
  chat.write_stdin("Hello\n");
  ASSERT_TRUE(chat.wait_for_stdout("\n", milliseconds(30000)));  // waiting for the next line
  chat.signal(SIGINT);
  const ProcessResult r = chat.wait(milliseconds(30000));
  ASSERT_FALSE(r.timed_out) << r.err;
  EXPECT_EQ(r.exit_code, 130) << r.err;
}

TEST_F(CliChat, PipedRegenClearAndErrors) {
  const std::string cmd =
      qrun() + " chat -m '" + model() + "' --temp 0 -t 1 -n 5 --ignore-eos -q --no-history";
  // A greedy /regen gives the same reply again; /clear forgets the conversation.
  const CommandResult r = run_command(cmd, "Hello\n/regen\n/clear\n/context\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.find('\n');
  ASSERT_NE(nl, std::string::npos);
  EXPECT_EQ(r.out, r.out.substr(0, nl + 1) + r.out.substr(0, nl + 1));
  EXPECT_NE(r.err.find("0 messages"), std::string::npos) << r.err;
  // On a pipe an error ends the session with its exit code, after what came before it.
  const CommandResult bad = run_command(cmd, "Hello\n/set top-p=7\nNever read\n");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--top-p 7"), std::string::npos) << bad.err;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  const std::filesystem::path sys = dir() / "system.txt";
  std::ofstream(sys) << "From a file.\n";
  const CommandResult shown =
      run_command(cmd + " --system-prompt-file '" + sys.string() + "'", "/show\n");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.err.find("system prompt: From a file.\n"), std::string::npos) << shown.err;
  EXPECT_EQ(run_command(cmd + " -sys a --system-prompt-file '" + sys.string() + "'", "").exit_code,
            2);
  const CommandResult unknown = run_command(cmd, "/frobnicate\n");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("/frobnicate"), std::string::npos) << unknown.err;
}

TEST_F(CliChat, EndOfTurnTokensStopAndAreNeverPrinted) {
  // Force <|end|> (32007 in phi-3) as the first token: the reply is empty and ends the turn.
  const CommandResult r = run_command(
      qrun() + " chat -m '" + model() + "' --temp 0 -t 1 -n 20 -q --logit-bias 32007+1000",
      "Hello\nAgain\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "\n\n");
}

TEST_F(CliChat, ContextPolicies) {
  const std::string input =
      "The first message is quite long, to fill the context.\n"
      "The second message is also quite long, to fill it more.\n"
      "A third one, long too, so that something has to go.\n";
  const std::string base =
      qrun() + " chat -m '" + model() + "' --temp 0 -t 1 -n 8 " + "--ignore-eos -c 64 ";
  const CommandResult drop = run_command(base, input);
  ASSERT_EQ(drop.exit_code, 0) << drop.err;
  EXPECT_EQ(std::count(drop.out.begin(), drop.out.end(), '\n'), 3) << drop.out;
  EXPECT_NE(drop.err.find("oldest messages to make room"), std::string::npos) << drop.err;

  const CommandResult refuse = run_command(base + "--context-policy error", input);
  EXPECT_EQ(refuse.exit_code, 6) << refuse.err;
  EXPECT_NE(refuse.err.find("context full"), std::string::npos) << refuse.err;

  const CommandResult bad = run_command(base + "--context-policy sideways", input);
  EXPECT_EQ(bad.exit_code, 2);
}

TEST_F(CliChat, TemplateFromAFileTheFlagOrAClearError) {
  const std::string stories = data_path("models/stories260K.gguf").string();
  const CommandResult none =
      run_command(qrun() + " chat -m '" + stories + "' -q --temp 0", "Hello\n");
  EXPECT_EQ(none.exit_code, 5) << none.err;
  EXPECT_NE(none.err.find("stories260K.gguf"), std::string::npos) << none.err;
  EXPECT_NE(none.err.find("--chat-template-file"), std::string::npos) << none.err;
  EXPECT_EQ(std::count(none.err.begin(), none.err.end(), '\n'), 1) << none.err;

  const std::filesystem::path tmpl = dir() / "story.jinja";
  std::ofstream(tmpl) << "{% for m in messages %}{{ m.content }}\n{% endfor %}";
  const CommandResult ok =
      run_command(qrun() + " chat -m '" + stories + "' --chat-template-file '" + tmpl.string() +
                      "' -q --temp 0 -n 12",
                  "Once upon a time\n");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_GT(ok.out.size(), 5u) << ok.out;

  const CommandResult missing = run_command(
      qrun() + " chat -m '" + stories + "' --chat-template-file /nonexistent.jinja", "Hello\n");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;

  // Or the flag's text: llama.cpp's chatml, as for a model without a template of its own.
  const CommandResult chatml = run_command(
      qrun() + " chat -m '" + stories + "' --chat-template chatml -q --temp 0 -n 12", "Hello\n");
  ASSERT_EQ(chatml.exit_code, 0) << chatml.err;
  EXPECT_GT(chatml.out.size(), 5u) << chatml.out;
}

// A model file truncated while qrun has it mapped: the next turn touches pages that no
// longer exist (SIGBUS). qrun names the file on one line and exits 3, instead of dying of
// the signal with exit code 135 and no message. A SIGBUS that is no such fault still kills.
TEST_F(CliChat, ModelTruncatedWhileInUseIsOneLineAndExitCode3) {
  const std::filesystem::path copy = dir() / "truncated.gguf";
  std::filesystem::copy_file(data_path("models/stories260K.gguf"), copy,
                             std::filesystem::copy_options::overwrite_existing);
  const std::filesystem::path tmpl = dir() / "turns.jinja";
  std::ofstream(tmpl) << "{% for m in messages %}{{ m.content }}\n{% endfor %}";
  const std::vector<std::string> args = {
      qrun(), "chat", "-m", copy.string(), "--chat-template-file", tmpl.string(), "-q", "--temp",
      "0",    "-n",   "4"};
  {
    Process chat(args, StdinKind::kOpenPipe);
    chat.write_stdin("Once upon a time\n");
    ASSERT_TRUE(chat.wait_for_stdout("\n", milliseconds(30000)));  // the first reply: mapped
    std::filesystem::resize_file(copy, 0);
    chat.write_stdin("And then?\n");
    chat.close_stdin();
    const ProcessResult r = chat.wait(milliseconds(30000));
    ASSERT_FALSE(r.timed_out) << r.err;
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_EQ(r.err, "qrun: " + copy.string() + ": the file changed while in use (truncated?)\n");
  }
  {
    std::filesystem::copy_file(data_path("models/stories260K.gguf"), copy,
                               std::filesystem::copy_options::overwrite_existing);
    Process chat(args, StdinKind::kOpenPipe);
    chat.write_stdin("Once upon a time\n");
    ASSERT_TRUE(chat.wait_for_stdout("\n", milliseconds(30000)));
    chat.signal(SIGBUS);
    const ProcessResult r = chat.wait(milliseconds(30000));
    EXPECT_EQ(r.exit_code, 128 + SIGBUS) << r.err;
  }
}

}  // namespace
}  // namespace qrun::test
