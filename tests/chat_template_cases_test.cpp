// Every chat template in shared/templates against the byte-exact renders of Python's jinja2
// (Hugging Face settings) recorded beside it in NAME.cases.json; a case with "error" must
// fail. strftime_now is pinned with QRUN_TEMPLATE_NOW as the recordings were.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/jinja/chat_template.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

namespace fs = std::filesystem;

Result<ChatTemplate> from_file(const fs::path& path) {
  return ChatTemplate::parse(test::read_text(path), path.string());
}

std::vector<fs::path> template_files() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(test::data_path("templates"))) {
    if (entry.path().extension() == ".jinja") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(ChatTemplateCases, EveryTemplateRendersEveryCaseExactly) {
  ::setenv("QRUN_TEMPLATE_NOW", "2026-01-02T03:04:05", 1);
  const std::vector<fs::path> files = template_files();
  ASSERT_GE(files.size(), 30u) << "expected the shared chat templates";
  int cases = 0;
  int passed = 0;
  for (const fs::path& path : files) {
    fs::path cases_path = path;
    cases_path.replace_extension(".cases.json");
    ASSERT_TRUE(fs::exists(cases_path)) << cases_path;
    const auto all = nlohmann::ordered_json::parse(test::read_text(cases_path));
    Result<ChatTemplate> tmpl = from_file(path);
    ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
    for (const auto& [name, c] : all.items()) {
      ++cases;
      SCOPED_TRACE(path.filename().string() + " / " + name);
      ChatRenderOptions options;
      options.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
      options.bos_token = c.at("bos_token").get<std::string>();
      options.eos_token = c.at("eos_token").get<std::string>();
      Result<std::string> out = tmpl->render_json(c.at("messages"), options);
      if (c.contains("error")) {
        EXPECT_FALSE(out.ok()) << "rendered instead of failing:\n" << *out;
        if (!out.ok()) {
          EXPECT_EQ(out.error().code, ErrorCode::kFormat);
          EXPECT_NE(out.error().message.find(c.at("error").get<std::string>()), std::string::npos)
              << out.error().message;
          ++passed;
        }
        continue;
      }
      EXPECT_TRUE(out.ok()) << out.error().message;
      if (!out.ok()) continue;
      EXPECT_EQ(*out, c.at("expected").get<std::string>());
      if (*out == c.at("expected").get<std::string>()) ++passed;
    }
  }
  EXPECT_EQ(passed, cases);
  std::printf("chat template cases: %d of %d pass over %zu templates\n", passed, cases,
              files.size());
}

// The role/content overload renders the same text as the JSON one.
TEST(ChatTemplateCases, MessageStructsMatchJsonMessages) {
  ::setenv("QRUN_TEMPLATE_NOW", "2026-01-02T03:04:05", 1);
  Result<ChatTemplate> tmpl = from_file(test::data_path("templates/Qwen-Qwen3-0.6B.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.error().message;
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}};
  const auto json = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}])");
  ChatRenderOptions options;
  Result<std::string> a = tmpl->render(messages, options);
  Result<std::string> b = tmpl->render_json(json, options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n");
}

// A template that refuses a system message (Gemma 2's raises) is found at parse time, and
// fold_system_message merges the system text into the next message as llama.cpp's chat
// does ("system\nuser"), or drops it alone; templates with a system role are left alone,
// and so are messages whose texts are not plain strings.
TEST(ChatTemplateCases, SystemMessagesFoldIntoTheNextWhereTheTemplateTakesNone) {
  Result<ChatTemplate> gemma = from_file(test::data_path("templates/google-gemma-2-2b-it.jinja"));
  Result<ChatTemplate> qwen = from_file(test::data_path("templates/Qwen-Qwen3-0.6B.jinja"));
  ASSERT_TRUE(gemma.ok() && qwen.ok());
  EXPECT_FALSE(gemma->supports_system_role());
  EXPECT_TRUE(qwen->supports_system_role());
  // Dropped rather than rendered: a template that never writes the system text.
  Result<ChatTemplate> silent = ChatTemplate::parse(
      "{% for m in messages %}{% if m.role != 'system' %}{{ m.content }}{% endif %}{% endfor %}",
      "silent.jinja");
  ASSERT_TRUE(silent.ok());
  EXPECT_FALSE(silent->supports_system_role());

  std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}};
  fold_system_message(messages);
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_EQ(messages[0].role, "user");
  EXPECT_EQ(messages[0].content, "Be brief.\nHi");
  ChatRenderOptions options;
  options.bos_token = "<bos>";
  Result<std::string> text = gemma->render(messages, options);
  ASSERT_TRUE(text.ok()) << text.error().message;
  EXPECT_EQ(*text, "<bos><start_of_turn>user\nBe brief.\nHi<end_of_turn>\n<start_of_turn>model\n");

  std::vector<ChatMessage> alone = {{"system", "Be brief."}};
  fold_system_message(alone);
  EXPECT_TRUE(alone.empty());
  std::vector<ChatMessage> no_system = {{"user", "Hi"}, {"assistant", "Hello"}};
  fold_system_message(no_system);
  EXPECT_EQ(no_system.size(), 2u);

  auto json = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":"Hi","name":"x"}])");
  fold_system_message(json);
  EXPECT_EQ(json, nlohmann::ordered_json::parse(
                      R"([{"role":"user","content":"Be brief.\nHi","name":"x"}])"));
  auto parts = nlohmann::ordered_json::parse(
      R"([{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text"}]}])");
  const nlohmann::ordered_json before = parts;
  EXPECT_FALSE(fold_system_message(parts));
  EXPECT_EQ(parts, before);
  // Any JSON may stand in a message: a role that is no string is left alone, not thrown on.
  auto odd = nlohmann::ordered_json::parse(R"([{"role":5,"content":"x"},{"role":"user"}])");
  EXPECT_FALSE(fold_system_message(odd));
  auto no_content = nlohmann::ordered_json::parse(R"([{"role":"system"},{"role":"user"}])");
  EXPECT_FALSE(fold_system_message(no_content));
}

// Every shared template names at least one end-of-turn marker, except the ones whose turns
// end with eos_token or the next turn's opener.
TEST(ChatTemplateCases, EndOfTurnMarkers) {
  const auto markers = [](const std::string& name) {
    Result<ChatTemplate> t = from_file(test::data_path("templates/" + name + ".jinja"));
    EXPECT_TRUE(t.ok());
    return t.ok() ? t->end_of_turn_markers() : std::vector<std::string>{};
  };
  EXPECT_EQ(markers("Qwen-Qwen3-0.6B"), std::vector<std::string>{"<|im_end|>"});
  EXPECT_EQ(markers("meta-llama-Llama-3.1-8B-Instruct"),
            (std::vector<std::string>{"<|eot_id|>", "<|eom_id|>"}));
  EXPECT_EQ(markers("google-gemma-2-2b-it"), std::vector<std::string>{"<end_of_turn>"});
  EXPECT_EQ(markers("google-gemma-4-31B-it-interleaved"), std::vector<std::string>{"<turn|>"});
  EXPECT_EQ(markers("microsoft-Phi-3.5-mini-instruct"), std::vector<std::string>{"<|end|>"});
  EXPECT_EQ(markers("ibm-granite-granite-4.0"), std::vector<std::string>{"<|end_of_text|>"});
  EXPECT_EQ(markers("CohereForAI-c4ai-command-r7b-12-2024-tool_use"),
            std::vector<std::string>{"<|END_OF_TURN_TOKEN|>"});
  EXPECT_EQ(markers("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"),
            std::vector<std::string>{"<\xEF\xBD\x9C"
                                     "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>"});
  EXPECT_TRUE(markers("mistralai-Mistral-Nemo-Instruct-2407").empty());
}

}  // namespace
}  // namespace qrun
