// --chat-template and --chat-template-file, as llama.cpp spells them, for the commands that
// render conversations (chat, serve, template): the template to use instead of the model's
// tokenizer.chat_template.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "core/jinja/chat_template.h"
#include "ggml-like/result.h"

namespace qrun::cli {

struct ChatTemplateFlags {
  std::string text;  // --chat-template: Jinja text, or "chatml"
  std::string file;  // --chat-template-file
};

// Declares both flags on `cmd` (each excludes the other).
void add_chat_template_flags(CLI::App* cmd, ChatTemplateFlags& flags);

// The template the flags give, read and parsed (before the model loads, so that a typo fails
// fast); nullopt when neither is given. Errors name the flag: read_text_file's for the file,
// ChatTemplate::from_flag's and parse's for the text.
Result<std::optional<ChatTemplate>> read_chat_template_flags(const ChatTemplateFlags& flags);

}  // namespace qrun::cli
