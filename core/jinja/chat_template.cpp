// ChatTemplate: a jinja::Template plus the variables Hugging Face passes to chat templates
// (messages, add_generation_prompt, bos_token, eos_token, and tools when given) and the
// clock strftime_now reads: QRUN_TEMPLATE_NOW=YYYY-MM-DDTHH:MM:SS pins it (tests),
// otherwise it is the local time.
#include "core/jinja/chat_template.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "core/jinja/jinja.h"

namespace qrun {

struct ChatTemplate::Impl {
  std::string source;
  jinja::Template tmpl;
  bool system_role = true;
};

namespace {

// End-of-turn markers of the chat formats qrun knows, as they appear in templates.
constexpr const char* kEndOfTurnMarkers[] = {
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|eot|>",
    "<|eom|>",
    "<end_of_turn>",
    "<turn|>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|END_OF_TURN_TOKEN|>",
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // <｜end▁of▁sentence｜>
    "<end_of_utterance>",
    "<|return|>",
    "<|call|>",
    "</s>",
};

// The moment strftime_now() formats.
Result<std::tm> template_now() {
  std::tm tm{};
  const char* pinned = std::getenv("QRUN_TEMPLATE_NOW");
  if (pinned && *pinned) {
    int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
    char extra = 0;
    if (std::sscanf(pinned, "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &extra) != 6 ||
        mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
      return make_error(ErrorCode::kUsage, std::string("QRUN_TEMPLATE_NOW must look like "
                                                       "2026-01-02T03:04:05, not '") +
                                               pinned + "'");
    }
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    const time_t t = timegm(&tm);  // normalizes and fills the weekday and day of the year
    gmtime_r(&t, &tm);
    return tm;
  }
  const time_t t = std::time(nullptr);
  localtime_r(&t, &tm);
  return tm;
}

Result<std::string> render_value(const jinja::Template& tmpl, jinja::Value messages,
                                 const ChatRenderOptions& options) {
  QRUN_JINJA_ASSIGN(const std::tm now, template_now());
  jinja::RenderOptions render_options;
  render_options.now = now;
  jinja::Variables variables = {
      {"messages", std::move(messages)},
      {"add_generation_prompt", jinja::Value::boolean(options.add_generation_prompt)},
      {"bos_token", jinja::Value::string(options.bos_token)},
      {"eos_token", jinja::Value::string(options.eos_token)},
  };
  if (!options.tools.is_null()) {
    auto tools = jinja::from_json(options.tools);
    if (!tools.ok()) return make_error(ErrorCode::kUsage, "tools: " + tools.error().message);
    variables.emplace_back("tools", std::move(tools).value());
  }
  return tmpl.render(variables, render_options);
}

}  // namespace

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

Result<ChatTemplate> ChatTemplate::parse(std::string source, std::string origin) {
  QRUN_JINJA_ASSIGN(jinja::Template tmpl, jinja::Template::parse(source, std::move(origin)));
  ChatTemplate t(std::make_unique<Impl>(Impl{std::move(source), std::move(tmpl)}));
  constexpr const char* kProbe = "qrun-system-probe";
  Result<std::string> probe =
      t.render({ChatMessage{"system", kProbe}, ChatMessage{"user", "hi"}}, ChatRenderOptions{});
  t.impl_->system_role = probe.ok() && probe->find(kProbe) != std::string::npos;
  return t;
}

Result<ChatTemplate> ChatTemplate::from_gguf(const gguf::File& file, const std::string& file_name) {
  constexpr const char* kKey = "tokenizer.chat_template";
  if (!file.find(kKey)) {
    return make_error(ErrorCode::kUnsupported, file_name + ": no chat template (" + kKey +
                                                   "); pass one with --chat-template-file "
                                                   "FILE or --chat-template (Jinja, or chatml)");
  }
  QRUN_JINJA_ASSIGN(std::string source, file.get_string(kKey));
  return parse(std::move(source), file_name + ": " + kKey);
}

Result<ChatTemplate> ChatTemplate::from_flag(std::string text) {
  if (text == "chatml") {
    return parse(
        "{%- for message in messages -%}\n"
        "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
        "{%- endfor -%}\n"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n",
        "--chat-template chatml");
  }
  if (text.find("{{") == std::string::npos && text.find("{%") == std::string::npos) {
    return make_error(ErrorCode::kUsage,
                      "--chat-template: '" + text +
                          "' is not a Jinja template (the one name taken is chatml; a file "
                          "goes to --chat-template-file)");
  }
  return parse(std::move(text), "--chat-template");
}

Result<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                         const ChatRenderOptions& options) const {
  jinja::ValueList list;
  list.reserve(messages.size());
  for (const ChatMessage& m : messages) {
    auto d = std::make_shared<jinja::Dict>();
    d->set("role", jinja::Value::string(m.role));
    d->set("content", jinja::Value::string(m.content));
    list.push_back(jinja::Value::dict(std::move(d)));
  }
  return render_value(impl_->tmpl, jinja::Value::list(std::move(list)), options);
}

Result<std::string> ChatTemplate::render_json(const nlohmann::ordered_json& messages,
                                              const ChatRenderOptions& options) const {
  auto value = jinja::from_json(messages);
  if (!value.ok()) return make_error(ErrorCode::kUsage, "messages: " + value.error().message);
  return render_value(impl_->tmpl, std::move(value).value(), options);
}

const std::string& ChatTemplate::source() const {
  return impl_->source;
}

const std::string& ChatTemplate::origin() const {
  return impl_->tmpl.origin();
}

bool ChatTemplate::supports_system_role() const {
  return impl_->system_role;
}

bool fold_system_message(std::vector<ChatMessage>& messages) {
  if (messages.empty() || messages.front().role != "system") return false;
  if (messages.size() > 1) messages[1].content = messages[0].content + "\n" + messages[1].content;
  messages.erase(messages.begin());
  return true;
}

bool fold_system_message(nlohmann::ordered_json& messages) {
  const auto string_field = [](const nlohmann::ordered_json& m, const char* key) {
    return m.is_object() && m.contains(key) && m[key].is_string();
  };
  if (!messages.is_array() || messages.empty()) return false;
  const nlohmann::ordered_json& first = messages.front();
  if (!string_field(first, "role") || first["role"] != "system") return false;
  if (!string_field(first, "content")) return false;
  if (messages.size() > 1) {
    if (!string_field(messages[1], "content")) return false;
    messages[1]["content"] =
        first["content"].get<std::string>() + "\n" + messages[1]["content"].get<std::string>();
  }
  messages.erase(messages.begin());
  return true;
}

std::vector<std::string> ChatTemplate::end_of_turn_markers() const {
  std::vector<std::pair<size_t, std::string>> found;
  for (const char* marker : kEndOfTurnMarkers) {
    const size_t at = impl_->source.find(marker);
    if (at != std::string::npos) found.emplace_back(at, marker);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> markers;
  for (auto& [at, marker] : found) markers.push_back(std::move(marker));
  return markers;
}

}  // namespace qrun
