// `qrun template (-m MODEL | --chat-template-file FILE | --chat-template TEXT) --messages CONV.json
// [--add-generation-prompt] [--bos-token S] [--eos-token S]`: prints the prompt a chat
// template renders for a conversation, byte for byte and without an added newline. With -m the
// template is the GGUF's tokenizer.chat_template (only the metadata is read) and bos/eos default
// to the vocabulary's BOS/EOS texts; --chat-template(-file) overrides the model's template.
#include <cstdio>

#include "cli/chat_template_flags.h"
#include "cli/commands.h"
#include "cli/text_file.h"
#include "core/jinja/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace qrun::cli {
namespace {

struct TemplateOptions {
  std::string model;
  ChatTemplateFlags chat_template;
  std::string messages;
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
};

// The conversation: a JSON array of message objects, from a file or "-" (standard input).
Result<nlohmann::ordered_json> read_messages(const std::string& path) {
  Result<std::string> text = read_text_file("--messages", path);
  if (!text.ok()) return text.error();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(*text, nullptr, false);
  if (j.is_discarded())
    return make_error(ErrorCode::kUsage, "template: " + path + " is not valid JSON");
  if (!j.is_array())
    return make_error(ErrorCode::kUsage,
                      "template: " + path + " must hold a JSON array of messages");
  for (size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_object()) {
      return make_error(ErrorCode::kUsage,
                        format("template: %s: message %zu is not a JSON object", path.c_str(), i));
    }
  }
  return j;
}

Result<void> run_template(const TemplateOptions& o, bool bos_given, bool eos_given) {
  Result<std::optional<ChatTemplate>> flag_template = read_chat_template_flags(o.chat_template);
  if (!flag_template.ok()) return flag_template.error();
  std::optional<ChatTemplate> tmpl = std::move(*flag_template);
  if (o.model.empty() && !tmpl) {
    return make_error(ErrorCode::kUsage,
                      "template: give a model (-m MODEL.gguf), --chat-template-file FILE or "
                      "--chat-template TEXT");
  }
  if (o.messages.empty())
    return make_error(ErrorCode::kUsage, "template: no conversation given (--messages CONV.json)");

  ChatRenderOptions render;
  render.add_generation_prompt = o.add_generation_prompt;
  render.bos_token = o.bos_token;
  render.eos_token = o.eos_token;
  if (!o.model.empty()) {
    Result<gguf::File> file = open_gguf("-m", o.model);
    if (!file) return file.error();
    if (!tmpl) {
      Result<ChatTemplate> t = ChatTemplate::from_gguf(*file, o.model);
      if (!t) return t.error();
      tmpl.emplace(std::move(t).value());
    }
    if (!bos_given || !eos_given) {
      Result<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_gguf(*file);
      if (!tok) return tok.error();
      const Tokenizer& t = **tok;
      if (!bos_given && t.bos() != kNoToken) render.bos_token = t.token_text(t.bos());
      if (!eos_given && t.eos() != kNoToken) render.eos_token = t.token_text(t.eos());
    }
  }
  Result<nlohmann::ordered_json> messages = read_messages(o.messages);
  if (!messages) return messages.error();
  // What qrun chat and qrun serve feed the model.
  const bool alone = messages->size() == 1;
  if (!tmpl->supports_system_role() && fold_system_message(*messages)) {
    std::fprintf(stderr, "qrun: template: the template takes no system message; it was %s\n",
                 alone ? "dropped (no message follows it)"
                       : "merged into the next message, as qrun chat and qrun serve do");
  }
  Result<std::string> prompt = tmpl->render_json(*messages, render);
  if (!prompt) return prompt.error();
  if (std::fwrite(prompt->data(), 1, prompt->size(), stdout) != prompt->size() ||
      std::fflush(stdout) != 0) {
    return make_error(ErrorCode::kIo, "template: cannot write to standard output");
  }
  return {};
}

}  // namespace

void register_template(CLI::App& app, Action* selected) {
  auto o = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Print the prompt a chat template renders");
  add_file_option(cmd, "-m,--model", o->model, "GGUF file whose tokenizer.chat_template to use");
  add_chat_template_flags(cmd, o->chat_template);
  add_file_option(cmd, "--messages", o->messages,
                  "JSON file with an array of messages ({\"role\": ..., \"content\": ...}); - "
                  "reads standard input");
  cmd->add_flag("--add-generation-prompt", o->add_generation_prompt,
                "End with the opening of an assistant turn");
  CLI::Option* bos = cmd->add_option("--bos-token", o->bos_token,
                                     "Text of bos_token (default: the model's BOS, or empty)");
  CLI::Option* eos = cmd->add_option("--eos-token", o->eos_token,
                                     "Text of eos_token (default: the model's EOS, or empty)");
  cmd->callback([o, bos, eos, selected] {
    const bool bos_given = bos->count() > 0;
    const bool eos_given = eos->count() > 0;
    *selected = [o, bos_given, eos_given] { return run_template(*o, bos_given, eos_given); };
  });
}

}  // namespace qrun::cli
