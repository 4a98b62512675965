// `qrun template` end to end: a template file renders the recorded case byte for byte, a
// model's own template is used with -m (and overridden by --chat-template-file), bos/eos
// default to the vocabulary's, and bad input (a template file that is a directory, a FIFO or
// empty too) is one line with a documented exit code.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string qrun() {
  return qrun_binary().string();
}

const char* kPhi3 = "templates/microsoft-Phi-3.5-mini-instruct";

TEST(CliTemplate, FileRendersTheRecordedCase) {
  const nlohmann::json cases =
      nlohmann::json::parse(read_text(data_path(std::string(kPhi3) + ".cases.json")));
  const std::string tmpl = data_path(std::string(kPhi3) + ".jinja").string();
  for (const char* name : {"single", "system"}) {
    SCOPED_TRACE(name);
    const nlohmann::json& c = cases.at(name);
    const std::filesystem::path messages = temp_dir() / "messages.json";
    std::ofstream(messages) << c.at("messages").dump();
    std::string cmd = qrun() + " template --chat-template-file '" + tmpl + "' --messages '" +
                      messages.string() + "' --bos-token '" + c.at("bos_token").get<std::string>() +
                      "' --eos-token '" + c.at("eos_token").get<std::string>() + "'";
    if (c.at("add_generation_prompt").get<bool>()) cmd += " --add-generation-prompt";
    const CommandResult r = run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, c.at("expected").get<std::string>());
  }
}

TEST(CliTemplate, ModelTemplateFromStdinAndOverride) {
  const std::filesystem::path dir = temp_dir();
  const std::string model = (dir / "phi3.gguf").string();
  ASSERT_EQ(run_command(qrun() + " synth -o '" + model + "' --like tiny --vocab '" +
                        data_path("vocab/ggml-vocab-phi-3.gguf").string() + "'")
                .exit_code,
            0);
  const std::string conv = R"([{"role":"user","content":"Hi"}])";
  const CommandResult own = run_command(
      qrun() + " template -m '" + model + "' --messages - --add-generation-prompt", conv);
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_NE(own.out.find("Hi"), std::string::npos) << own.out;
  EXPECT_NE(own.out.find("<|assistant|>"), std::string::npos) << own.out;

  const std::filesystem::path tmpl = dir / "t.jinja";
  std::ofstream(tmpl) << "[{{ bos_token }}]{% for m in messages %}{{ m.role }}:{{ m.content }}"
                         "{% endfor %}[{{ eos_token }}]";
  const CommandResult over =
      run_command(qrun() + " template -m '" + model + "' --chat-template-file '" + tmpl.string() +
                      "' --messages -",
                  conv);
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_EQ(over.out, "[<s>]user:Hi[<|endoftext|>]");
}

// --chat-template as llama.cpp reads it: Jinja text, or the name chatml; any other text
// without a Jinja tag (another llama.cpp name, a file name) is refused, and so is giving it
// with --chat-template-file.
TEST(CliTemplate, InlineTemplateAndChatml) {
  const std::string conv =
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])";
  const CommandResult chatml = run_command(
      qrun() + " template --chat-template chatml --messages - --add-generation-prompt", conv);
  ASSERT_EQ(chatml.exit_code, 0) << chatml.err;
  EXPECT_EQ(chatml.out,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
  const CommandResult text = run_command(
      qrun() +
          " template --chat-template '{% for m in messages %}<{{ m.role }}>{{ m.content }}"
          "{% endfor %}' --messages -",
      conv);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out, "<system>Be brief.<user>Hi");

  const CommandResult name =
      run_command(qrun() + " template --chat-template llama3 --messages -", conv);
  EXPECT_EQ(name.exit_code, 2) << name.err;
  EXPECT_EQ(name.err,
            "qrun: --chat-template: 'llama3' is not a Jinja template (the one name taken is "
            "chatml; a file goes to --chat-template-file)\n");
  const CommandResult syntax = run_command(
      qrun() + " template --chat-template '{% for m in messages %}' --messages -", conv);
  EXPECT_NE(syntax.exit_code, 0);
  EXPECT_NE(syntax.err.find("--chat-template"), std::string::npos) << syntax.err;
  EXPECT_EQ(std::count(syntax.err.begin(), syntax.err.end(), '\n'), 1) << syntax.err;
  const std::filesystem::path tmpl = temp_dir() / "inline.jinja";
  std::ofstream(tmpl) << "{{ messages[0].content }}";
  const CommandResult both =
      run_command(qrun() + " template --chat-template chatml --chat-template-file '" +
                      tmpl.string() + "' --messages -",
                  conv);
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_NE(both.err.find("--chat-template"), std::string::npos) << both.err;
}

TEST(CliTemplate, ErrorsAreOneLine) {
  const std::string stories = data_path("models/stories260K.gguf").string();
  const CommandResult none =
      run_command(qrun() + " template -m '" + stories + "' --messages -", "[]");
  EXPECT_EQ(none.exit_code, 5) << none.err;
  EXPECT_NE(none.err.find("--chat-template-file"), std::string::npos) << none.err;
  EXPECT_EQ(std::count(none.err.begin(), none.err.end(), '\n'), 1) << none.err;

  const std::string tmpl = data_path(std::string(kPhi3) + ".jinja").string();
  const CommandResult bad_json =
      run_command(qrun() + " template --chat-template-file '" + tmpl + "' --messages -", "{");
  EXPECT_EQ(bad_json.exit_code, 2) << bad_json.err;
  const CommandResult no_messages =
      run_command(qrun() + " template --chat-template-file '" + tmpl + "'");
  EXPECT_EQ(no_messages.exit_code, 2);
  const CommandResult no_template = run_command(qrun() + " template --messages -", "[]");
  EXPECT_EQ(no_template.exit_code, 2);
  const CommandResult missing =
      run_command(qrun() + " template --chat-template-file /nonexistent.jinja --messages -", "[]");
  EXPECT_EQ(missing.exit_code, 3) << missing.err;
}

// A directory, a FIFO nobody writes and an empty file are refused, naming the flag and the
// path: a directory used to render an empty template with exit code 0.
TEST(CliTemplate, TemplateFileMustBeARegularNonEmptyFile) {
  const std::filesystem::path dir = temp_dir();
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(dir / "empty.jinja").flush();
  const std::string messages = R"([{"role": "user", "content": "Hi"}])";
  for (const std::string& path : {dir.string(), fifo, (dir / "empty.jinja").string()}) {
    SCOPED_TRACE(path);
    for (const char* command : {" template --messages - ", " chat -q "}) {
      const CommandResult r = run_command(
          "timeout 60 " + qrun() + command + "--chat-template-file '" + path + "'", messages);
      EXPECT_EQ(r.exit_code, 3) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_NE(r.err.find("--chat-template-file: '" + path + "'"), std::string::npos) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace qrun::test
