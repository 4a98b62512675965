// libFuzzer entry point for the GBNF parser, the matcher and the JSON Schema converter.
// Every input is given to both: parse_grammar must accept it or reject it with a one-line
// kUsage message; an accepted grammar starts a matcher that follows the input's own bytes
// (bounded: kRuntime when too ambiguous). json_schema_to_grammar must likewise accept or
// refuse with one kUsage line, and what it accepts must parse as GBNF and start a matcher.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"

namespace {

void check_usage_error(const qrun::Error& e, const char* what) {
  QRUN_CHECK(e.code == qrun::ErrorCode::kUsage, "%s: unexpected code %d: %s", what,
             static_cast<int>(e.code), e.message.c_str());
  QRUN_CHECK(!e.message.empty() && e.message.find('\n') == std::string::npos,
             "%s: empty or multi-line message: %s", what, e.message.c_str());
}

void follow(const std::shared_ptr<const qrun::Grammar>& g, std::string_view text) {
  qrun::Result<qrun::GrammarMatcher> m = qrun::GrammarMatcher::create(g);
  if (!m.ok()) {
    QRUN_CHECK(m.error().code == qrun::ErrorCode::kRuntime, "create: %s",
               m.error().message.c_str());
    return;
  }
  // A few bytes at a time, as tokens come; stop at the first rejection.
  for (size_t i = 0; i < text.size() && i < 256; i += 3) {
    const std::string_view piece = text.substr(i, 3);
    qrun::Result<bool> can = m->can_accept(piece);
    qrun::Result<bool> ok = m->accept(piece);
    if (!ok.ok() || !can.ok()) return;
    QRUN_CHECK(*can == *ok, "can_accept and accept disagree");
    if (!*ok) return;
    (void)m->can_end();
    (void)m->must_end();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  qrun::Result<qrun::Grammar> g = qrun::parse_grammar(input);
  if (g.ok()) {
    follow(std::make_shared<const qrun::Grammar>(std::move(*g)), input);
  } else {
    check_usage_error(g.error(), "parse_grammar");
  }
  qrun::Result<std::string> gbnf = qrun::json_schema_to_grammar(input);
  if (!gbnf.ok()) {
    check_usage_error(gbnf.error(), "json_schema_to_grammar");
    return 0;
  }
  qrun::Result<qrun::Grammar> made = qrun::parse_grammar(*gbnf);
  QRUN_CHECK(made.ok(), "the converter's grammar does not parse: %s\n%s",
             made.error().message.c_str(), gbnf->c_str());
  follow(std::make_shared<const qrun::Grammar>(std::move(*made)), "{\"a\": [1, \"x\"]}");
  return 0;
}
