#include "cli/chat_template_flags.h"

#include <utility>

#include "cli/text_file.h"

namespace qrun::cli {

void add_chat_template_flags(CLI::App* cmd, ChatTemplateFlags& flags) {
  CLI::Option* text = cmd->add_option("--chat-template", flags.text,
                                      "Jinja chat template text, or chatml (instead of the model's "
                                      "tokenizer.chat_template)");
  CLI::Option* file =
      add_file_option(cmd, "--chat-template-file", flags.file,
                      "Jinja chat template file (instead of the model's tokenizer.chat_template)");
  text->excludes(file);
}

Result<std::optional<ChatTemplate>> read_chat_template_flags(const ChatTemplateFlags& flags) {
  std::optional<ChatTemplate> out;
  if (!flags.text.empty()) {
    Result<ChatTemplate> t = ChatTemplate::from_flag(flags.text);
    if (!t.ok()) return t.error();
    out.emplace(std::move(*t));
  } else if (!flags.file.empty()) {
    Result<std::string> source = read_text_file("--chat-template-file", flags.file);
    if (!source.ok()) return source.error();
    Result<ChatTemplate> t = ChatTemplate::parse(std::move(*source), flags.file);
    if (!t.ok()) return t.error();
    out.emplace(std::move(*t));
  }
  return out;
}

}  // namespace qrun::cli
