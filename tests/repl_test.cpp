// The chat REPL's input and command parsing in process: read_message over the stream
// source (a pipe) joins backslash-continued lines and """ blocks; slash commands and /set
// assignments parse as documented; the sampling settings round-trip through JSON; the
// history path follows XDG_STATE_HOME and HOME.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "cli/repl_commands.h"
#include "cli/repl_input.h"

namespace qrun::cli {
namespace {

// The messages read_message() returns for `input` written to a pipe, then "<eof>".
std::vector<std::string> messages_of(const std::string& input) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  std::thread writer([&] {
    size_t done = 0;
    while (done < input.size()) {
      const ssize_t n = write(fds[1], input.data() + done, input.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    close(fds[1]);
  });
  std::unique_ptr<LineSource> source = make_stream_source(fds[0]);
  EXPECT_FALSE(source->interactive());
  std::vector<std::string> out;
  for (;;) {
    MessageRead m = read_message(*source, Prompts{"> ", "... "});
    if (m.status == MessageStatus::kEof) break;
    EXPECT_EQ(m.status, MessageStatus::kMessage);
    out.push_back(m.unterminated_block ? m.text + "<open>" : m.text);
  }
  out.push_back("<eof>");
  writer.join();
  close(fds[0]);
  return out;
}

using Strings = std::vector<std::string>;

TEST(ReplInput, OneLineOneMessage) {
  EXPECT_EQ(messages_of("hello\nworld\n"), (Strings{"hello", "world", "<eof>"}));
  EXPECT_EQ(messages_of("crlf\r\nlast without newline"),
            (Strings{"crlf", "last without newline", "<eof>"}));
  EXPECT_EQ(messages_of("a\n\nb\n"), (Strings{"a", "", "b", "<eof>"}));
  EXPECT_EQ(messages_of(""), (Strings{"<eof>"}));
}

TEST(ReplInput, BackslashContinues) {
  EXPECT_EQ(messages_of("first \\\nsecond\\\nthird\nnext\n"),
            (Strings{"first \nsecond\nthird", "next", "<eof>"}));
  // End of input after a continuation sends what was read.
  EXPECT_EQ(messages_of("dangling\\\n"), (Strings{"dangling", "<eof>"}));
}

TEST(ReplInput, TripleQuoteBlocks) {
  EXPECT_EQ(messages_of("\"\"\"\nline one\n\nline \\ three\\\n  \"\"\"  \nafter\n"),
            (Strings{"line one\n\nline \\ three\\", "after", "<eof>"}));
  EXPECT_EQ(messages_of("\"\"\"\n\"\"\"\n"), (Strings{"", "<eof>"}));
  EXPECT_EQ(messages_of("\"\"\"\nnever closed\nstill\n"),
            (Strings{"never closed\nstill<open>", "<eof>"}));
  // Quotes inside a line are text; a continued line cannot open a block.
  EXPECT_EQ(messages_of("say \"\"\" here\n"), (Strings{"say \"\"\" here", "<eof>"}));
  EXPECT_EQ(messages_of("x\\\n\"\"\"\n"), (Strings{"x\n\"\"\"", "<eof>"}));
}

TEST(ReplCommands, ParseCommand) {
  std::optional<CommandLine> c = parse_command("/set  temp=0.2 top-k=5 ");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->name, "set");
  EXPECT_EQ(c->args, "temp=0.2 top-k=5");
  EXPECT_EQ(c->command, Command::kSet);
  c = parse_command("/quit");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->command, Command::kExit);
  c = parse_command("/system You are\na poet");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->command, Command::kSystem);
  EXPECT_EQ(c->args, "You are\na poet");
  c = parse_command("/nope x");
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(c->command.has_value());
  EXPECT_EQ(c->name, "nope");
  EXPECT_FALSE(parse_command("hello /set").has_value());
  EXPECT_FALSE(parse_command("/").has_value());
  EXPECT_FALSE(parse_command("//set x").has_value());
  EXPECT_EQ(unescape_message("//set x"), "/set x");
  EXPECT_EQ(unescape_message("/"), "/");
  EXPECT_EQ(unescape_message("plain"), "plain");
  for (const char* name : {"help", "exit", "clear", "system", "set", "show", "save", "load",
                           "regen", "undo", "stats", "context"}) {
    std::optional<CommandLine> k = parse_command(std::string("/") + name);
    ASSERT_TRUE(k.has_value() && k->command.has_value()) << name;
    EXPECT_NE(command_help().find(std::string("/") + name), std::string::npos) << name;
  }
}

TEST(ReplCommands, Assignments) {
  auto kv = parse_assignments("temp=0.5  stop=\"a b\" stop=\"\\n\" logit-bias=5-inf empty=");
  ASSERT_TRUE(kv.ok()) << kv.error().message;
  ASSERT_EQ(kv->size(), 5u);
  EXPECT_EQ((*kv)[0], (std::pair<std::string, std::string>{"temp", "0.5"}));
  EXPECT_EQ((*kv)[1].second, "a b");
  EXPECT_EQ((*kv)[2].second, "\\n");  // the escape is left for the flag to read
  EXPECT_EQ((*kv)[3].second, "5-inf");
  EXPECT_EQ((*kv)[4].second, "");
  EXPECT_TRUE(parse_assignments("").ok());
  for (const char* bad : {"temp", "=5", "stop=\"open"}) {
    auto r = parse_assignments(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::kUsage);
  }
}

TEST(ReplCommands, SamplingJsonRoundTrip) {
  SamplingFlags f;
  ASSERT_TRUE(set_sampling_flag(f, "temp", "0.3").ok());
  ASSERT_TRUE(set_sampling_flag(f, "seed", "42").ok());
  ASSERT_TRUE(set_sampling_flag(f, "stop", "\\n\\n").ok());
  ASSERT_TRUE(set_sampling_flag(f, "stop", "a b").ok());
  ASSERT_TRUE(set_sampling_flag(f, "logit-bias", "3+1.5").ok());
  const nlohmann::ordered_json j = sampling_to_json(f);
  EXPECT_EQ(j["temp"], "0.3");
  EXPECT_EQ(j["stop"].size(), 2u);
  SamplingFlags g;
  ASSERT_TRUE(set_sampling_flag(g, "stop", "old").ok());
  ASSERT_TRUE(sampling_from_json(nlohmann::ordered_json::parse(j.dump()), "s.json", g).ok());
  EXPECT_EQ(describe_sampling_flags(g), describe_sampling_flags(f));
  EXPECT_EQ(g.stops, (std::vector<std::string>{"\n\n", "a b"}));

  SamplingFlags h;
  Result<void> bad =
      sampling_from_json(nlohmann::ordered_json::parse(R"({"top-p": "7"})"), "s.json", h);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::kFormat);
  EXPECT_NE(bad.error().message.find("s.json"), std::string::npos);
  EXPECT_NE(bad.error().message.find("top-p"), std::string::npos);
  EXPECT_FALSE(sampling_from_json(nlohmann::ordered_json::parse(R"({"temp": 1})"), "s", h).ok());
}

TEST(ReplInput, HistoryPath) {
  const char* old_state = std::getenv("XDG_STATE_HOME");
  const char* old_home = std::getenv("HOME");
  const std::string saved_state = old_state ? old_state : "";
  const std::string saved_home = old_home ? old_home : "";
  setenv("XDG_STATE_HOME", "/x/state", 1);
  setenv("HOME", "/h", 1);
  EXPECT_EQ(default_history_path().value(), "/x/state/qrun/history");
  unsetenv("XDG_STATE_HOME");
  EXPECT_EQ(default_history_path().value(), "/h/.local/state/qrun/history");
  unsetenv("HOME");
  Result<std::string> none = default_history_path();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().code, ErrorCode::kIo);
  if (old_state) setenv("XDG_STATE_HOME", saved_state.c_str(), 1);
  if (old_home) setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace qrun::cli
