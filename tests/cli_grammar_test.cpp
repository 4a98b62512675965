// --grammar and --grammar-file end to end: `qrun run` on stories260K (a model that knows
// nothing of the grammar) writes only text the grammar accepts, greedy and at several seeds
// and temperatures, ends at the grammar's end (stop reason eos), and a bad grammar is one
// line naming the flag, line and column (exit 2). `qrun chat` takes the flag and
// /set grammar-file=... between turns. The flag table keeps the file for /show and /save.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cli/sampling_flags.h"
#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string qrun() {
  return qrun_binary().string();
}

std::string model() {
  return data_path("models/stories260K.gguf").string();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

nlohmann::json run_json(const std::string& flags) {
  const CommandResult r = run_command(qrun() + " run -q --json -m " + quote(model()) +
                                      " -p 'Once upon a time' " + flags);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  if (r.exit_code != 0) return nullptr;
  return nlohmann::json::parse(r.out);
}

TEST(CliGrammar, YesOrNoGreedyAndSampled) {
  const std::string g = quote(R"(root ::= "yes" | "no")");
  std::vector<std::string> flags = {"--temp 0"};
  for (int seed = 1; seed <= 6; ++seed) flags.push_back("--temp 0.8 -s " + std::to_string(seed));
  for (const std::string& f : flags) {
    SCOPED_TRACE(f);
    const nlohmann::json j = run_json(f + " --grammar " + g);
    ASSERT_FALSE(j.is_null());
    const std::string text = j["text"];
    EXPECT_TRUE(text == "yes" || text == "no") << text;
    EXPECT_EQ(j["stop_reason"], "eos");  // the grammar is complete: only EOS was allowed
    EXPECT_NE(j["sampler"].get<std::string>().find("grammar -> "), std::string::npos);
  }
}

// A complete grammar ends generation by itself, so --ignore-eos (which bans EOS) does not
// make the model run on past it.
TEST(CliGrammar, CompleteGrammarStopsEvenWithIgnoreEos) {
  for (int seed = 1; seed <= 3; ++seed) {
    const nlohmann::json j = run_json("--temp 0.8 -n 50 --ignore-eos -s " + std::to_string(seed) +
                                      " --grammar " + quote(R"(root ::= "yes" | "no")"));
    ASSERT_FALSE(j.is_null());
    const std::string text = j["text"];
    EXPECT_TRUE(text == "yes" || text == "no") << text;
    EXPECT_EQ(j["stop_reason"], "eos");
  }
}

// A small JSON grammar; the output must parse as JSON (nlohmann, independent of the
// grammar engine) and have the shape the grammar describes.
TEST(CliGrammar, JsonObjectsParseAtManySeedsAndTemperatures) {
  const std::string grammar =
      R"(root ::= "{" ws "\"name\":" ws str "," ws "\"age\":" ws age ws "," ws "\"tags\":" ws tags ws "}"
str ::= "\"" [a-zA-Z ]{1,16} "\""
age ::= [1-9] [0-9]?
tags ::= "[" ws (str (ws "," ws str){0,2})? ws "]"
ws ::= [ \n]?
)";
  const std::filesystem::path file = temp_dir() / "person.gbnf";
  std::ofstream(file) << grammar;
  int n = 0;
  for (const char* temp : {"0", "0.8", "1.5"}) {
    for (int seed = 1; seed <= 5; ++seed) {
      const std::string f = std::string("--temp ") + temp + " -s " + std::to_string(seed) +
                            " -n 300 --grammar-file " + quote(file.string());
      SCOPED_TRACE(f);
      const nlohmann::json j = run_json(f);
      ASSERT_FALSE(j.is_null());
      EXPECT_EQ(j["stop_reason"], "eos");
      const std::string text = j["text"];
      const nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(v.is_discarded()) << text;
      ASSERT_TRUE(v.is_object()) << text;
      EXPECT_EQ(v.size(), 3u) << text;
      EXPECT_TRUE(v["name"].is_string()) << text;
      EXPECT_TRUE(v["age"].is_number_integer()) << text;
      EXPECT_TRUE(v["tags"].is_array() && v["tags"].size() <= 3) << text;
      ++n;
    }
  }
  EXPECT_EQ(n, 15);
}

// -j: every output parses as JSON (nlohmann, not the grammar engine) and satisfies the
// schema, checked by hand here, greedy and at seeds up to temperature 1.5.
TEST(CliGrammar, JsonSchemaOutputsValidateAtManySeedsAndTemperatures) {
  const std::string schema = R"({"type": "object", "properties": {
      "kind": {"enum": ["cat", "dog", 3, null]}, "n": {"type": "integer"},
      "x": {"type": ["number", "null"]}, "ok": {"type": "boolean"},
      "c": {"const": {"a": [1, "q"]}}}, "required": ["kind", "n", "c"]})";
  const std::filesystem::path file = temp_dir() / "schema.json";
  std::ofstream(file) << schema;
  for (const char* temp : {"0", "0.8", "1.5"}) {
    for (int seed = 1; seed <= 5; ++seed) {
      const std::string f =
          std::string("--temp ") + temp + " -s " + std::to_string(seed) + " -n 400 " +
          (seed % 2 ? "-j " + quote(schema) : "--json-schema-file " + quote(file.string()));
      SCOPED_TRACE(f);
      const nlohmann::json j = run_json(f);
      ASSERT_FALSE(j.is_null());
      EXPECT_EQ(j["stop_reason"], "eos");
      const std::string text = j["text"];
      const nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
      ASSERT_TRUE(v.is_object()) << text;
      for (const auto& [key, value] : v.items()) {
        EXPECT_TRUE(key == "kind" || key == "n" || key == "x" || key == "ok" || key == "c") << text;
      }
      ASSERT_TRUE(v.contains("kind") && v.contains("n") && v.contains("c")) << text;
      EXPECT_TRUE(v["kind"] == "cat" || v["kind"] == "dog" || v["kind"] == 3 || v["kind"].is_null())
          << text;
      EXPECT_TRUE(v["n"].is_number_integer()) << text;
      EXPECT_TRUE(!v.contains("x") || v["x"].is_number() || v["x"].is_null()) << text;
      EXPECT_TRUE(!v.contains("ok") || v["ok"].is_boolean()) << text;
      EXPECT_EQ(v["c"], nlohmann::json::parse(R"({"a": [1, "q"]})")) << text;
    }
  }
  const CommandResult bad = run_command(qrun() + " run -q -m " + quote(model()) + " -p x -j " +
                                        quote(R"({"type": "string", "not": {}})"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "qrun: --json-schema: unsupported keyword 'not' at $\n");
}

// The README's pipe example on a real model: greedy gemma-3-270m extracts the fields.
TEST(CliGrammar, RealModelExtractsFieldsThroughAPipe) {
  QRUN_REAL_MODEL_OR_SKIP(gemma, "gemma-3-270m-q4_k_m.gguf");
  const std::string schema = R"({"type": "object", "properties": {"name": {"type": "string"},
      "born": {"type": "integer"}}, "required": ["name", "born"]})";
  const CommandResult r =
      run_command(qrun() + " run -q -t 2 --temp 0 -n 60 -m " + quote(gemma.string()) +
                      " -p 'As JSON:' -j " + quote(schema),
                  "Ada Lovelace, born 1815, mathematician\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json v = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(v.is_object()) << r.out;
  EXPECT_EQ(v["name"], "Ada Lovelace") << r.out;
  EXPECT_EQ(v["born"], 1815) << r.out;
}

TEST(CliGrammar, BadGrammarsAreOneLineNamingFlagLineAndColumn) {
  const std::string base = qrun() + " run -q -m " + quote(model()) + " -p x ";
  CommandResult r = run_command(base + "--grammar " + quote("root ::= \"a\" ("));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "qrun: --grammar: line 1, column 15: expected ')' or '|'\n");
  const std::filesystem::path file = temp_dir() / "bad.gbnf";
  std::ofstream(file) << "root ::= item\n# no item\nitem ::= \"x\" | thing\n";
  r = run_command(base + "--grammar-file " + quote(file.string()));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "qrun: --grammar-file " + file.string() +
                       ": line 3, column 16: expected a defined rule ('thing' is not defined)\n");
  r = run_command(base + "--grammar " + quote("root ::= root \"a\""));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("left-recursive"), std::string::npos) << r.err;
  r = run_command(base + "--grammar-file /nonexistent/g.gbnf");
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.err,
            "qrun: --grammar-file: cannot open '/nonexistent/g.gbnf': No such file or directory\n");
}

TEST(CliGrammar, ChatTakesTheFlagAndSetGrammarFile) {
  const std::filesystem::path dir = temp_dir();
  const std::string synth = qrun() + " synth -o " + quote((dir / "phi3.gguf").string()) +
                            " --like tiny --seed 3 --vocab " +
                            quote(data_path("vocab/ggml-vocab-phi-3.gguf").string());
  ASSERT_EQ(run_command(synth).exit_code, 0);
  std::ofstream(dir / "digits.gbnf") << "root ::= [0-9]{3} \"!\"\n";
  const CommandResult r = run_command(
      qrun() + " chat -q -t 1 --temp 0.8 -s 7 -n 40 -m " + quote((dir / "phi3.gguf").string()) +
          " --grammar " + quote(R"(root ::= "yes" | "no")"),
      "Hello\n/set grammar-file=" + (dir / "digits.gbnf").string() + "\nAgain\n/show\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const size_t nl = r.out.find('\n');
  ASSERT_NE(nl, std::string::npos) << r.out;
  const std::string first = r.out.substr(0, nl);
  EXPECT_TRUE(first == "yes" || first == "no") << r.out;
  EXPECT_TRUE(std::regex_match(r.out.substr(nl + 1), std::regex("[0-9]{3}!\n"))) << r.out;
  EXPECT_NE(r.err.find("grammar-file=\"" + (dir / "digits.gbnf").string() + "\""),
            std::string::npos)
      << r.err;
}

// `qrun grammar`: the grammar made from a schema, printed, parses again as --grammar-file;
// --accepts answers yes or no.
TEST(CliGrammar, GrammarCommandPrintsAndChecks) {
  const std::string schema = R"({"type": "object", "properties": {"a": {"type": "integer"}},
      "required": ["a"]})";
  const CommandResult printed = run_command(qrun() + " grammar -j " + quote(schema));
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(printed.out.rfind("root ::= ", 0), 0u) << printed.out;
  const std::filesystem::path file = temp_dir() / "made.gbnf";
  std::ofstream(file) << printed.out;
  for (const auto& [text, want] :
       {std::pair{R"({"a": 12})", "yes\n"}, std::pair{R"({ "a" : -3 })", "yes\n"},
        std::pair{"{}", "no\n"}, std::pair{R"({"a": 1.5})", "no\n"}}) {
    const CommandResult r = run_command(qrun() + " grammar --grammar-file " + quote(file.string()) +
                                        " --accepts " + quote(text));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, want) << text;
  }
  const CommandResult none = run_command(qrun() + " grammar");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.err, "qrun: give one of -j, --json-schema-file, --grammar, --grammar-file\n");
  const CommandResult bad = run_command(qrun() + " grammar --grammar 'root ::= x'");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "qrun: --grammar: line 1, column 10: expected a defined rule ('x' is not "
            "defined)\n");
}

TEST(SamplingFlagsGrammar, SetClearAndDescribe) {
  cli::SamplingFlags f;
  ASSERT_TRUE(cli::set_sampling_flag(f, "grammar", R"(root ::= "a")").ok());
  ASSERT_NE(f.grammar, nullptr);
  EXPECT_EQ(cli::describe_sampling_flags(f).find("grammar"), std::string::npos);
  const Result<void> bad = cli::set_sampling_flag(f, "grammar", "root ::= [");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "--grammar: line 1, column 11: expected a closing ']'");
  EXPECT_NE(f.grammar, nullptr);  // a bad value leaves the setting as it was
  const std::filesystem::path file = temp_dir() / "g.gbnf";
  std::ofstream(file) << "root ::= \"b\"\n";
  ASSERT_TRUE(cli::set_sampling_flag(f, "grammar-file", file.string()).ok());
  EXPECT_NE(cli::describe_sampling_flags(f).find(" grammar-file=\"" + file.string() + "\""),
            std::string::npos);
  ASSERT_TRUE(cli::set_sampling_flag(f, "grammar-file", "").ok());
  EXPECT_EQ(f.grammar, nullptr);
  EXPECT_EQ(cli::describe_sampling_flags(f).find("grammar"), std::string::npos);
}

// Each of the four grammar settings clears the grammar on an empty value, whichever set it.
TEST(SamplingFlagsGrammar, EveryGrammarSettingClearsOnEmpty) {
  const std::filesystem::path schema = temp_dir() / "s.json";
  std::ofstream(schema) << R"({"type": "integer", "maximum": 9})";
  const std::filesystem::path gbnf = temp_dir() / "g.gbnf";
  std::ofstream(gbnf) << "root ::= \"b\"\n";
  const std::vector<std::pair<const char*, std::string>> settings = {
      {"grammar", R"(root ::= "a")"},
      {"grammar-file", gbnf.string()},
      {"json-schema", R"({"type": "null"})"},
      {"json-schema-file", schema.string()}};
  for (const auto& [set_key, value] : settings) {
    for (const auto& [clear_key, unused] : settings) {
      cli::SamplingFlags f;
      ASSERT_TRUE(cli::set_sampling_flag(f, set_key, value).ok()) << set_key;
      ASSERT_NE(f.grammar, nullptr) << set_key;
      ASSERT_TRUE(cli::set_sampling_flag(f, clear_key, "").ok()) << clear_key;
      EXPECT_EQ(f.grammar, nullptr) << set_key << " cleared by " << clear_key;
      EXPECT_TRUE(f.grammar_file.empty());
    }
  }
  cli::SamplingFlags f;
  const Result<void> bad = cli::set_sampling_flag(f, "json-schema", R"({"minLength": "x"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "--json-schema: expected a non-negative integer at $.minLength");
}

}  // namespace
}  // namespace qrun::test
