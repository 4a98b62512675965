// Chat templates: the Jinja2 template stored in a GGUF's tokenizer.chat_template (or given
// with --chat-template-file), rendered with Hugging Face's settings (trim_blocks,
// lstrip_blocks) by qrun's own Jinja interpreter (core/jinja_*). A template that cannot be
// parsed or rendered is an Error naming the template and its line, never a silent fallback.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "ggml-like/result.h"

namespace qrun {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string bos_token;  // the strings the template sees as bos_token / eos_token
  std::string eos_token;
  // The template's "tools" variable (OpenAI's tools array); null leaves it undefined.
  nlohmann::ordered_json tools;
};

class ChatTemplate {
 public:
  // Parses `source`. `origin` names it in errors ("model.gguf: tokenizer.chat_template",
  // "tmpl.jinja"). Syntax errors are kFormat errors naming origin and line.
  static Result<ChatTemplate> parse(std::string source, std::string origin);
  // The template in tokenizer.chat_template; kUnsupported when the file has none (the
  // message says to pass --chat-template-file).
  static Result<ChatTemplate> from_gguf(const gguf::File& file, const std::string& file_name);
  // The template --chat-template gives, as llama.cpp reads the flag: Jinja text, or the
  // name "chatml" (ChatML: <|im_start|>role\ncontent<|im_end|>\n). kUsage for text that
  // holds no Jinja tag (another llama.cpp name, a path meant for --chat-template-file).
  static Result<ChatTemplate> from_flag(std::string text);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Renders `messages` exactly as Python's jinja2 does with HF's settings. Runtime errors
  // (raise_exception, bad operations) are kFormat errors naming origin and line.
  // QRUN_TEMPLATE_NOW (e.g. 2026-01-02T03:04:05) pins strftime_now for tests.
  Result<std::string> render(const std::vector<ChatMessage>& messages,
                             const ChatRenderOptions& options) const;
  // The same with messages given as a JSON array of objects: every key of a message
  // (tool_calls, reasoning_content, content parts, ...) reaches the template, in order.
  Result<std::string> render_json(const nlohmann::ordered_json& messages,
                                  const ChatRenderOptions& options) const;

  const std::string& source() const;
  const std::string& origin() const;

  // Whether the template renders a system message (rather than refusing it, as Gemma 2's
  // raises, or dropping it): llama.cpp's check, a system message and a user one rendered
  // and the system text looked for. Found once, when the template is parsed.
  bool supports_system_role() const;

  // The end-of-turn markers that the template's text contains, in order of first appearance:
  // <|im_end|>, <|eot_id|>, <|eom_id|>, <|eot|>, <|eom|>, <end_of_turn>, <turn|>, <|end|>,
  // <|endoftext|>, <|end_of_text|>, <|END_OF_TURN_TOKEN|>, DeepSeek's end of sentence,
  // <end_of_utterance>, <|return|>, <|call|> and </s>. Generation also stops at tokens whose
  // text is one of these. Markers that open a turn (<|user|>, [INST]) are not included.
  std::vector<std::string> end_of_turn_markers() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// For a template that does not support the system role: a leading system message is
// merged into the message after it (its text, a newline, then that message's text), as
// llama.cpp's chat does, or dropped when no message follows. Left as they are when the
// first message is no system one, or either text is not a plain string (JSON form, where
// any value may stand in a message). Returns whether the messages changed.
bool fold_system_message(std::vector<ChatMessage>& messages);
bool fold_system_message(nlohmann::ordered_json& messages);

}  // namespace qrun
