// libFuzzer entry point for the GBNF parser, the matcher and the JSON Schema converter.
// Every input is given to both: parse_grammar must accept it or reject it with a one-line
// kUsage message; an accepted grammar starts a matcher that follows the input's own bytes
// (bounded: kRuntime when too ambiguous), by text and, with token elements, by token.
// json_schema_to_grammar must likewise accept or refuse with one kUsage line, and what it
// accepts must parse as GBNF and start a matcher.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

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
  // A few bytes at a time, as tokens come; stop at the first rejection. With token
  // elements, each piece also comes as a token whose id is its first byte.
  for (size_t i = 0; i < text.size() && i < 256; i += 3) {
    const std::string_view piece = text.substr(i, 3);
    if (g->has_tokens) {
      const auto id = static_cast<int32_t>(static_cast<unsigned char>(piece[0]));
      const bool allowed = m->token_allows(id);
      qrun::Result<bool> ok = m->accept_token(id, piece);
      if (!ok.ok()) return;
      QRUN_CHECK(!allowed || *ok, "token_allows said yes, accept_token no");
      if (!*ok) return;
      continue;
    }
    qrun::Result<bool> can = m->can_accept(piece);
    qrun::Result<bool> ok = m->accept(piece);
    if (!ok.ok() || !can.ok()) return;
    QRUN_CHECK(*can == *ok, "can_accept and accept disagree");
    if (!*ok) return;
    (void)m->can_end();
    (void)m->must_end();
  }
}

// Binds token elements to a vocabulary of 256 tokens: a <text> of at most 8 bytes is one
// token (its bytes' sum, modulo 256), a longer one two; refusals are one kUsage line.
std::shared_ptr<const qrun::Grammar> bind(std::shared_ptr<const qrun::Grammar> g) {
  qrun::Result<std::shared_ptr<const qrun::Grammar>> bound =
      qrun::resolve_grammar_tokens(std::move(g), 256, [](std::string_view text) {
        if (text.size() > 8) return std::vector<int32_t>{0, 1};
        int32_t sum = 0;
        for (const char c : text) sum += static_cast<unsigned char>(c);
        return std::vector<int32_t>{sum % 256};
      });
  if (!bound.ok()) {
    check_usage_error(bound.error(), "resolve_grammar_tokens");
    return nullptr;
  }
  return *bound;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  qrun::Result<qrun::Grammar> g = qrun::parse_grammar(input);
  if (g.ok()) {
    auto grammar = std::make_shared<const qrun::Grammar>(std::move(*g));
    follow(grammar, input);  // unbound <text> elements match no token
    if (grammar->has_tokens) {
      if (auto bound = bind(grammar)) follow(bound, input);
    }
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
