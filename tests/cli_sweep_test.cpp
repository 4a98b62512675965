// A bad-input sweep of every command, as a table: each row is the arguments, what stdin is,
// the exit code expected and a piece of the one line expected on stderr. Paths are given as
// placeholders for a fixture folder: {dir} a directory, {fifo} a FIFO nobody writes,
// {empty} an empty file, {missing} a path that does not exist, {model} a copy of the demo
// model, {tmpl} a chat template, {msgs} a conversation, {text} a prompt, {out} a new file.
// Every row runs under a deadline, so a hang fails its row instead of stalling the suite.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

namespace fs = std::filesystem;
using K = StdinKind;

struct Row {
  std::vector<std::string> args;  // after the qrun binary
  StdinKind in;
  int code;
  std::string err_has;                      // "" for rows that only check the exit code
  std::string text = "Once upon a time\n";  // stdin for K::kText
};

// The rows. Exit codes are the documented ones: 2 usage, 3 I/O, 4 malformed file.
const std::vector<Row>& rows() {
  static const std::vector<Row> kRows = {
      // No command, unknown command or flag.
      {{}, K::kDevNull, 2, "subcommand"},
      {{"bogus"}, K::kDevNull, 2, "unknown command 'bogus'"},
      {{"run", "--bogus"}, K::kDevNull, 2, "--bogus"},

      // run: the prompt file.
      {{"run", "-q", "-f", "{dir}"}, K::kDevNull, 3, "-f: '{dir}' is a directory"},
      {{"run", "-q", "-f", "{fifo}"}, K::kDevNull, 3, "-f: '{fifo}' is a FIFO"},
      {{"run", "-q", "-f", "{empty}"}, K::kDevNull, 3, "-f: '{empty}' is empty"},
      {{"run", "-q", "-f", "{missing}"},
       K::kDevNull,
       3,
       "-f: cannot open '{missing}': No such file"},
      {{"run", "-q", "-f", ""}, K::kDevNull, 2, "--file: empty file name"},
      {{"run", "-q", "-f", "-"}, K::kDevZero, 3, "-f: standard input is larger than"},
      {{"run", "-q", "-f", "-"}, K::kDirectory, 3, "-f: cannot read standard input"},
      {{"run", "-q", "-f", "-"}, K::kClosed, 3, "-f: standard input is empty"},
      {{"run", "-q", "-p", "x", "-f", "{text}"}, K::kDevNull, 2, "either -p or -f"},
      // run: the model file.
      {{"run", "-q", "-p", "x", "-m", "{dir}"}, K::kDevNull, 3, "-m: {dir}: is a directory"},
      {{"run", "-q", "-p", "x", "-m", "{fifo}"}, K::kDevNull, 3, "-m: {fifo}: not a regular"},
      {{"run", "-q", "-p", "x", "-m", "{empty}"}, K::kDevNull, 3, "-m: {empty}: file is empty"},
      {{"run", "-q", "-p", "x", "-m", "{missing}"}, K::kDevNull, 3, "-m: {missing}: cannot open"},
      {{"run", "-q", "-p", "x", "-m", "{text}"}, K::kDevNull, 4, "{text}"},
      {{"run", "-q", "-p", "x", "-m", ""}, K::kDevNull, 2, "--model: empty file name"},
      // run: stdin as the prompt.
      {{"run", "-q", "-n", "2"}, K::kClosed, 2, "no prompt"},
      {{"run", "-q", "-n", "2"}, K::kDirectory, 2, "no prompt"},
      {{"run", "-q", "-n", "2"}, K::kDevZero, 2, "no prompt"},
      {{"run", "-q", "-n", "2"}, K::kDevNull, 2, "no prompt"},
      {{"run", "-q", "-n", "2"}, K::kText, 0, ""},
      {{"run", "-q", "-n", "2", "-p", "Once"}, K::kOpenPipe, 0, ""},  // an idle pipe: ignored
      {{"run", "-q", "-n", "2", "-p", ""}, K::kDevNull, 0, ""},       // empty: starts from BOS
      // run: numbers.
      {{"run", "-q", "-p", "x", "-n", "abc"}, K::kDevNull, 2, "--n-predict"},
      {{"run", "-q", "-p", "x", "-n", ""}, K::kDevNull, 2, "--n-predict"},
      {{"run", "-q", "-p", "x", "-n", "nan"}, K::kDevNull, 2, "--n-predict"},
      {{"run", "-q", "-p", "x", "-n", "-2"}, K::kDevNull, 2, "--n-predict"},
      {{"run", "-q", "-p", "x", "-n", "99999999999999999999"}, K::kDevNull, 2, "--n-predict"},
      {{"run", "-q", "-p", "x", "-c", "-1"}, K::kDevNull, 2, "--ctx-size"},
      {{"run", "-q", "-p", "x", "-c", "abc"}, K::kDevNull, 2, "--ctx-size"},
      {{"run", "-q", "-p", "x", "-c", "99999999999999999999"}, K::kDevNull, 2, "--ctx-size"},
      {{"run", "-q", "-p", "x", "-b", "0"}, K::kDevNull, 2, "--batch-size"},
      {{"run", "-q", "-p", "x", "-b", "-1"}, K::kDevNull, 2, "--batch-size"},
      {{"run", "-q", "-p", "x", "-b", "nan"}, K::kDevNull, 2, "--batch-size"},
      {{"run", "-q", "-p", "x", "-t", "-1"}, K::kDevNull, 2, "--threads"},
      {{"run", "-q", "-p", "x", "-t", "abc"}, K::kDevNull, 2, "--threads"},
      {{"run", "-q", "-p", "x", "-t", ""}, K::kDevNull, 2, "--threads"},
      {{"run", "-q", "-p", "x", "-t", "99999999999"}, K::kDevNull, 2, "--threads"},
      {{"run", "-p", "x", "-n", "1", "-t", "100000"}, K::kDevNull, 0, "-t 100000: this machine"},
      {{"run", "-q", "-p", "x", "--cache-type", "q4_1"},
       K::kDevNull,
       2,
       "'q4_1' is not a KV cache type (use f32, f16, bf16, q8_0 or q4_0)"},
      {{"run", "-q", "-p", "x", "-ctk", "q9"}, K::kDevNull, 2, "--cache-type-k"},
      {{"run", "-q", "-p", "x", "--prompt-cache", ""}, K::kDevNull, 2, "--prompt-cache: empty"},
      {{"run", "-q", "-p", "x", "--prompt-cache-ro"}, K::kDevNull, 2, "needs --prompt-cache"},
      // A directory is no cache to read (a cold start), and cannot be replaced by one.
      {{"run", "-q", "-n", "1", "-p", "x", "--prompt-cache", "{dir}"},
       K::kDevNull,
       3,
       "--prompt-cache {dir}: cannot rename {dir}.tmp into place"},
      {{"run", "-q", "-n", "1", "-p", "x", "--prompt-cache", "{missing}", "--prompt-cache-ro"},
       K::kDevNull,
       0,
       ""},
      {{"run", "-q", "-p", "x", "-ctv", ""}, K::kDevNull, 2, "--cache-type-v"},
      // The demo model's heads are 8 wide: a Q8_0 block (32) does not tile them.
      {{"run", "-q", "-p", "x", "-ctv", "q8_0"},
       K::kDevNull,
       2,
       "--cache-type-v q8_0: needs a head size that is a multiple of 32; this model's is 8"},
      {{"run", "-q", "-p", "x", "--cache-type", "q4_0", "-ctk", "f16"},
       K::kDevNull,
       2,
       "--cache-type q4_0: needs a head size"},
      {{"run", "-q", "-p", "x", "--temp", "nan"}, K::kDevNull, 2, "--temp nan"},
      {{"run", "-q", "-p", "x", "--temp", ""}, K::kDevNull, 2, "--temp"},
      {{"run", "-q", "-p", "x", "--temp", "-1"}, K::kDevNull, 2, "--temp -1"},
      {{"run", "-q", "-p", "x", "--temp", "1e99"}, K::kDevNull, 2, "--temp 1e99"},
      {{"run", "-q", "-p", "x", "--top-k", "-1"}, K::kDevNull, 2, "--top-k -1"},
      {{"run", "-q", "-p", "x", "--top-k", "1e3"}, K::kDevNull, 2, "--top-k 1e3"},
      {{"run", "-q", "-p", "x", "--top-p", "inf"}, K::kDevNull, 2, "--top-p inf"},
      {{"run", "-q", "-p", "x", "--min-p", "-0.1"}, K::kDevNull, 2, "--min-p -0.1"},
      {{"run", "-q", "-p", "x", "--typical", "2"}, K::kDevNull, 2, "--typical 2"},
      {{"run", "-q", "-p", "x", "--repeat-penalty", "0"}, K::kDevNull, 2, "--repeat-penalty 0"},
      {{"run", "-q", "-p", "x", "--repeat-last-n", "-2"}, K::kDevNull, 2, "--repeat-last-n -2"},
      {{"run", "-q", "-p", "x", "--presence-penalty", "nan"}, K::kDevNull, 2, "--presence-penalty"},
      {{"run", "-q", "-p", "x", "--mirostat", "3"}, K::kDevNull, 2, "--mirostat 3"},
      {{"run", "-q", "-p", "x", "--mirostat-lr", "-1"}, K::kDevNull, 2, "--mirostat-lr -1"},
      {{"run", "-q", "-p", "x", "-s", "-2"}, K::kDevNull, 2, "--seed -2"},
      {{"run", "-q", "-p", "x", "-s", "4294967296"}, K::kDevNull, 2, "--seed 4294967296"},
      {{"run", "-q", "-p", "x", "--logit-bias", "abc"}, K::kDevNull, 2, "--logit-bias abc"},
      {{"run", "-q", "-p", "x", "--logit-bias", "99999999+1"}, K::kDevNull, 2, "out of range"},
      {{"run", "-q", "-p", "x", "--stop", ""}, K::kDevNull, 2, "--stop: empty value"},

      // chat: template and system prompt files, stdin.
      {{"chat", "-q", "--chat-template-file", "{dir}"},
       K::kDevNull,
       3,
       "--chat-template-file: '{dir}' is a directory"},
      {{"chat", "-q", "--chat-template-file", "{fifo}"},
       K::kDevNull,
       3,
       "--chat-template-file: '{fifo}' is a FIFO"},
      {{"chat", "-q", "--chat-template-file", "{empty}"},
       K::kDevNull,
       3,
       "--chat-template-file: '{empty}' is empty"},
      {{"chat", "-q", "--chat-template-file", "{missing}"},
       K::kDevNull,
       3,
       "--chat-template-file: cannot open '{missing}'"},
      {{"chat", "-q", "--system-prompt-file", "{dir}"},
       K::kDevNull,
       3,
       "--system-prompt-file: '{dir}' is a directory"},
      {{"chat", "-q", "--system-prompt-file", "{fifo}"},
       K::kDevNull,
       3,
       "--system-prompt-file: '{fifo}' is a FIFO"},
      {{"chat", "-q", "-m", "{dir}", "--chat-template-file", "{tmpl}"},
       K::kDevNull,
       3,
       "-m: {dir}"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}"}, K::kDevZero, 3, "a line longer than"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}"},
       K::kDirectory,
       3,
       "cannot read standard input"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}"}, K::kClosed, 0, ""},
      {{"chat", "-q", "--chat-template-file", "{tmpl}", "-n", "2"}, K::kText, 0, ""},
      {{"chat", "-q", "--chat-template-file", "{tmpl}"},
       K::kText,
       3,
       "/save: '{fifo}' is a FIFO",
       "/save {fifo}\n"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}"},
       K::kText,
       3,
       "/load: '{dir}' is a directory",
       "/load {dir}\n"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}", "-n", "-2"}, K::kDevNull, 2, "--n-predict"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}", "-t", "-3"}, K::kDevNull, 2, "--threads"},
      {{"chat", "-q", "--chat-template-file", "{tmpl}", "--top-p", "nan"},
       K::kDevNull,
       2,
       "--top-p nan"},
      {{"chat", "-q", "--context-policy", "bogus"}, K::kDevNull, 2, "--context-policy"},
      {{"chat", "-q", "--color", ""}, K::kDevNull, 2, "--color"},

      // template.
      {{"template", "--chat-template-file", "{dir}", "--messages", "{msgs}"},
       K::kDevNull,
       3,
       "--chat-template-file: '{dir}' is a directory"},
      {{"template", "--chat-template-file", "{fifo}", "--messages", "{msgs}"},
       K::kDevNull,
       3,
       "--chat-template-file: '{fifo}' is a FIFO"},
      {{"template", "--chat-template-file", "{empty}", "--messages", "{msgs}"},
       K::kDevNull,
       3,
       "--chat-template-file: '{empty}' is empty"},
      {{"template", "--chat-template-file", "{tmpl}", "--messages", "{dir}"},
       K::kDevNull,
       3,
       "--messages: '{dir}' is a directory"},
      {{"template", "--chat-template-file", "{tmpl}", "--messages", "{missing}"},
       K::kDevNull,
       3,
       "--messages: cannot open '{missing}'"},
      {{"template", "--chat-template-file", "{tmpl}", "--messages", "-"},
       K::kDevZero,
       3,
       "--messages: standard input is larger than"},
      {{"template", "--chat-template-file", "{tmpl}", "--messages", "-"},
       K::kClosed,
       3,
       "--messages: standard input is empty"},
      {{"template", "--chat-template-file", "{tmpl}", "--messages", "-"},
       K::kDirectory,
       3,
       "--messages: cannot read standard input"},
      {{"template", "--chat-template-file", "{tmpl}", "--messages", "{text}"},
       K::kDevNull,
       2,
       "not valid JSON"},
      {{"template", "-m", "{dir}", "--messages", "{msgs}"}, K::kDevNull, 3, "-m: {dir}"},
      {{"template", "-m", "{fifo}", "--messages", "{msgs}"}, K::kDevNull, 3, "-m: {fifo}"},
      {{"template", "--messages", "{msgs}"}, K::kDevNull, 2, "give a model"},

      // info.
      {{"info"}, K::kDevNull, 2, "no model given"},
      {{"info", "{dir}"}, K::kDevNull, 3, "info: {dir}: is a directory"},
      {{"info", "{fifo}"}, K::kDevNull, 3, "info: {fifo}: not a regular file"},
      {{"info", "{empty}"}, K::kDevNull, 3, "info: {empty}: file is empty"},
      {{"info", "{missing}"}, K::kDevNull, 3, "info: {missing}: cannot open"},
      {{"info", "{text}"}, K::kDevNull, 4, "{text}"},
      {{"info", "{model}"}, K::kClosed, 0, ""},

      // tokenize.
      {{"tokenize", "-m", "{model}", "-f", "{dir}"}, K::kDevNull, 3, "-f: '{dir}' is a directory"},
      {{"tokenize", "-m", "{model}", "-f", "{fifo}"}, K::kDevNull, 3, "-f: '{fifo}' is a FIFO"},
      {{"tokenize", "-m", "{model}", "--stdin"},
       K::kDevZero,
       3,
       "--stdin: standard input is larger than"},
      {{"tokenize", "-m", "{model}", "--stdin"}, K::kDirectory, 3, "cannot read standard input"},
      {{"tokenize", "-m", "{dir}", "-p", "x"}, K::kDevNull, 3, "-m: {dir}"},
      {{"tokenize", "-p", "x"}, K::kDevNull, 2, "no model given"},

      // synth.
      {{"synth", "-o", "{dir}"}, K::kDevNull, 3, "-o: '{dir}' is a directory"},
      {{"synth", "-o", "{fifo}"}, K::kDevNull, 3, "-o: '{fifo}' is a FIFO"},
      {{"synth", "-o", ""}, K::kDevNull, 2, "--output: empty file name"},
      {{"synth", "-o", "{out}", "--vocab", "{dir}"}, K::kDevNull, 3, "--vocab: {dir}"},
      {{"synth", "-o", "{out}", "--vocab", "{empty}"}, K::kDevNull, 3, "--vocab: {empty}"},
      {{"synth", "-o", "{out}", "--std", "nan"}, K::kDevNull, 2, "--std"},
      {{"synth", "-o", "{out}", "--n-embd", "-5"}, K::kDevNull, 2, "--n-embd"},
      {{"synth", "-o", "{out}", "--n-layer", "abc"}, K::kDevNull, 2, "--n-layer"},
      {{"synth", "-o", "{out}", "--n-layer", "1000000000"}, K::kDevNull, 2, "--n-layer"},
      {{"synth", "-o", "{out}", "--n-embd", "1000000000"}, K::kDevNull, 2, "--n-embd"},
      {{"synth", "-o", "{out}", "--seed", "-1"}, K::kDevNull, 2, "--seed"},
      {{"synth", "-o", "{out}", "--like", "bogus"}, K::kDevNull, 2, "--like"},
      {{"synth", "-o", "{out}", "--type", "bogus"}, K::kDevNull, 2, "bogus"},

      // quantize.
      {{"quantize", "{dir}", "{out}", "q8_0"}, K::kDevNull, 3, "quantize: input: {dir}"},
      {{"quantize", "{fifo}", "{out}", "q8_0"}, K::kDevNull, 3, "quantize: input: {fifo}"},
      {{"quantize", "{empty}", "{out}", "q8_0"}, K::kDevNull, 3, "quantize: input: {empty}"},
      {{"quantize", "{missing}", "{out}", "q8_0"}, K::kDevNull, 3, "quantize: input: {missing}"},
      {{"quantize", "{model}", "{dir}", "q8_0"},
       K::kDevNull,
       3,
       "quantize: output: '{dir}' is a directory"},
      {{"quantize", "{model}", "{fifo}", "q8_0"},
       K::kDevNull,
       3,
       "quantize: output: '{fifo}' is a FIFO"},
      {{"quantize", "{model}", "{model}", "q8_0"}, K::kDevNull, 2, "overwrite the input"},
      {{"quantize", "{model}", "{out}", "bogus"}, K::kDevNull, 2, "bogus"},
      {{"quantize", "-t", "-1", "{model}", "{out}", "q8_0"}, K::kDevNull, 2, "--threads"},
      {{"quantize", "{model}", "{out}"}, K::kDevNull, 2, "type"},

      // perplexity.
      {{"perplexity", "-f", "{dir}"}, K::kDevNull, 3, "-f: '{dir}' is a directory"},
      {{"perplexity", "-f", "{fifo}"}, K::kDevNull, 3, "-f: '{fifo}' is a FIFO"},
      {{"perplexity", "-f", "{empty}"}, K::kDevNull, 3, "-f: '{empty}' is empty"},
      {{"perplexity", "-f", "-"}, K::kDevZero, 3, "-f: standard input is larger than"},
      {{"perplexity", "-f", "-"}, K::kClosed, 3, "-f: standard input is empty"},
      {{"perplexity", "-f", "{text}", "--chunks", "-1"}, K::kDevNull, 2, "--chunks"},
      {{"perplexity", "-f", "{text}", "-c", "-5"}, K::kDevNull, 2, "--ctx-size"},
      {{"perplexity"}, K::kDevNull, 2, "-f is required"},

      // bench.
      {{"bench", "-m", "{dir}"}, K::kDevNull, 3, "-m: {dir}"},
      {{"bench", "-p", "-1"}, K::kDevNull, 2, "--n-prompt"},
      {{"bench", "-n", "abc"}, K::kDevNull, 2, "--n-gen"},
      {{"bench", "-r", "0"}, K::kDevNull, 2, "--repetitions"},
      {{"bench", "-t", "0"}, K::kDevNull, 2, "--threads"},
      {{"bench", "-t", "1,-1"}, K::kDevNull, 2, "--threads"},
      {{"bench", "-p", "0", "-n", "0"}, K::kDevNull, 2, "nothing to measure"},
      {{"bench", "-p", "4", "-n", "0", "-r", "1", "-t", "100000"},
       K::kDevNull,
       0,
       "-t 100000: this machine"},
  };
  return kRows;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

class CliSweep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(temp_dir());
    const fs::path& d = *dir_;
    fs::create_directories(d / "a_dir");
    ASSERT_EQ(mkfifo((d / "a_fifo").c_str(), 0600), 0);
    std::ofstream(d / "empty.txt").flush();
    std::ofstream(d / "prompt.txt") << "Once upon a time";
    std::ofstream(d / "chat.jinja")
        << "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
           "{% endfor %}{% if add_generation_prompt %}assistant:"
           "{% endif %}";
    std::ofstream(d / "messages.json") << R"([{"role": "user", "content": "Hi"}])";
    fs::copy_file(fs::path(QRUN_SOURCE_DIR) / "assets/stories260K.gguf", d / "model.gguf");
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static std::string expand(const std::string& s) {
    const fs::path& d = *dir_;
    std::string r = s;
    r = replace_all(r, "{dir}", (d / "a_dir").string());
    r = replace_all(r, "{fifo}", (d / "a_fifo").string());
    r = replace_all(r, "{empty}", (d / "empty.txt").string());
    r = replace_all(r, "{missing}", (d / "missing.txt").string());
    r = replace_all(r, "{text}", (d / "prompt.txt").string());
    r = replace_all(r, "{tmpl}", (d / "chat.jinja").string());
    r = replace_all(r, "{msgs}", (d / "messages.json").string());
    r = replace_all(r, "{model}", (d / "model.gguf").string());
    r = replace_all(r, "{out}", (d / "out.gguf").string());
    return r;
  }

  static fs::path* dir_;
};

fs::path* CliSweep::dir_ = nullptr;

TEST_F(CliSweep, EveryRowGivesItsExitCodeAndMessageWithoutHanging) {
  EXPECT_GE(rows().size(), 100u);
  for (const Row& row : rows()) {
    std::vector<std::string> argv = {qrun_binary().string()};
    std::string shown = "qrun";
    for (const std::string& a : row.args) {
      argv.push_back(expand(a));
      shown += a.empty() ? " ''" : " " + a;
    }
    SCOPED_TRACE(shown + " (stdin: " + stdin_kind_name(row.in) + ")");
    const ProcessResult r = run_process(argv, row.in, expand(row.text), std::chrono::seconds(60));
    if (r.timed_out) {
      ADD_FAILURE() << "hung; stderr so far: " << r.err;
      continue;
    }
    EXPECT_EQ(r.exit_code, row.code) << r.err;
    EXPECT_NE(r.err.find(expand(row.err_has)), std::string::npos) << r.err;
    if (row.code != 0) {
      // The error is the last line of stderr, and one line.
      if (r.err.empty() || r.err.back() != '\n') {
        ADD_FAILURE() << "no error line: '" << r.err << "'";
        continue;
      }
      const size_t line_start = r.err.rfind('\n', r.err.size() - 2);
      const std::string last = r.err.substr(line_start == std::string::npos ? 0 : line_start + 1);
      EXPECT_EQ(last.rfind("qrun: ", 0), 0u) << r.err;
      EXPECT_NE(last.find(expand(row.err_has)), std::string::npos) << r.err;
    }
    if (row.code == 2 || row.code == 3) {
      EXPECT_TRUE(r.out.empty()) << r.out;  // nothing generated or written on bad input
    }
    // Each row starts without {out}.
    fs::remove(*dir_ / "out.gguf");
  }
}

// A file its user may not read (not a row: permission bits do not stop root, who runs CI).
TEST_F(CliSweep, UnreadableFileIsNamed) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads every file whatever its mode";
  const fs::path locked = *dir_ / "locked.txt";
  std::ofstream(locked) << "Once upon a time";
  fs::permissions(locked, fs::perms::none);
  const std::string qrun = qrun_binary().string();
  const std::vector<std::vector<std::string>> commands = {
      {qrun, "run", "-q", "-f", locked.string()},
      {qrun, "run", "-q", "-p", "x", "-m", locked.string()}};
  for (const std::vector<std::string>& argv : commands) {
    const ProcessResult r = run_process(argv, K::kDevNull);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find(argv[argv.size() - 2] + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Permission denied"), std::string::npos) << r.err;
  }
}

// stdout that cannot be written (a full disk) is an I/O error, not exit 0 with the text lost.
TEST_F(CliSweep, StdoutThatCannotBeWrittenIsExitCode3) {
  for (const char* command : {" run -q --temp 0 -n 4 -p Once", " info {model}"}) {
    SCOPED_TRACE(command);
    const CommandResult r =
        run_command("timeout 60 " + qrun_binary().string() + expand(command) + " >/dev/full");
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("qrun: cannot write to standard output"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace qrun::test
