// `qrun grammar (-j SCHEMA | --json-schema-file FILE | --grammar TEXT | --grammar-file FILE)
// [--accepts TEXT]`: prints the GBNF grammar a JSON Schema converts to (for inspection), or
// checks a GBNF grammar; with --accepts, says whether the grammar accepts TEXT as a whole
// ("yes" or "no" on stdout, exit 0 either way). Errors are the run flags' one-liners.
#include <cstdio>

#include "cli/commands.h"
#include "cli/text_file.h"
#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"

namespace qrun::cli {
namespace {

struct GrammarOptions {
  std::string schema;
  std::string schema_file;
  std::string grammar;
  std::string grammar_file;
  std::string accepts;
  bool accepts_given = false;
};

Result<void> run_grammar(const GrammarOptions& o) {
  const int n_sources =
      !o.schema.empty() + !o.schema_file.empty() + !o.grammar.empty() + !o.grammar_file.empty();
  if (n_sources != 1) {
    return make_error(ErrorCode::kUsage,
                      "give one of -j, --json-schema-file, --grammar, --grammar-file");
  }
  std::string gbnf = o.grammar;
  std::string flag = "--grammar";
  if (!o.grammar_file.empty()) {
    Result<std::string> text = read_text_file("--grammar-file", o.grammar_file);
    if (!text.ok()) return text.error();
    gbnf = std::move(*text);
    flag = "--grammar-file " + o.grammar_file;
  }
  const bool from_schema = !o.schema.empty() || !o.schema_file.empty();
  if (from_schema) {
    std::string schema = o.schema;
    flag = "--json-schema";
    if (!o.schema_file.empty()) {
      Result<std::string> text = read_text_file("--json-schema-file", o.schema_file);
      if (!text.ok()) return text.error();
      schema = std::move(*text);
      flag = "--json-schema-file " + o.schema_file;
    }
    Result<std::string> converted = json_schema_to_grammar(schema);
    if (!converted.ok())
      return make_error(ErrorCode::kUsage, flag + ": " + converted.error().message);
    gbnf = std::move(*converted);
  }
  Result<Grammar> g = parse_grammar(gbnf);
  if (!g.ok()) return make_error(ErrorCode::kUsage, flag + ": " + g.error().message);
  if (from_schema && !o.accepts_given) std::fwrite(gbnf.data(), 1, gbnf.size(), stdout);
  if (o.accepts_given) {
    Result<GrammarMatcher> m =
        GrammarMatcher::create(std::make_shared<const Grammar>(std::move(*g)));
    if (!m.ok()) return m.error();
    Result<bool> ok = m->accept(o.accepts);
    if (!ok.ok()) return ok.error();
    std::printf("%s\n", *ok && m->can_end() ? "yes" : "no");
  }
  return {};
}

}  // namespace

void register_grammar(CLI::App& app, Action* selected) {
  auto o = std::make_shared<GrammarOptions>();
  CLI::App* cmd = app.add_subcommand(
      "grammar", "Print the GBNF grammar made from a JSON Schema, or check a grammar");
  cmd->add_option("-j,--json-schema", o->schema, "JSON Schema text");
  cmd->add_option("--json-schema-file", o->schema_file, "JSON Schema file");
  cmd->add_option("--grammar", o->grammar, "GBNF grammar text");
  cmd->add_option("--grammar-file", o->grammar_file, "GBNF grammar file");
  CLI::Option* accepts = cmd->add_option(
      "--accepts", o->accepts, "Print yes or no: whether the grammar accepts this whole text");
  cmd->callback([o, accepts, selected] {
    o->accepts_given = accepts->count() > 0;
    *selected = [o] { return run_grammar(*o); };
  });
}

}  // namespace qrun::cli
