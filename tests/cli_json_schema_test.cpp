// JSON Schema end to end: `qrun run` under -j/-jf with every supported keyword (anyOf,
// oneOf, allOf, $ref with recursion, prefixItems, item and length counts, integer bounds,
// pattern, formats) on the shared models, greedy and at many seeds and temperatures up to
// 1.5; every output must parse and validate under the schema, checked by Python's
// jsonschema (Draft 2020-12 with its format checker), which knows nothing of qrun. Also:
// -jf, the one-grammar-flag rule and `qrun bench` with a schema.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string qrun() {
  return qrun_binary().string();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

const char* kSchema = R"({
  "$defs": {
    "tag": {"type": "string", "pattern": "^[a-z]{1,8}$"},
    "node": {"type": "object", "properties": {
      "v": {"type": "integer", "minimum": -5, "maximum": 120},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 1}},
      "required": ["v"]}
  },
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "when": {"type": "string", "format": "date-time"},
    "day": {"format": "date"},
    "at": {"format": "time"},
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}, "minItems": 1, "maxItems": 3},
    "pair": {"prefixItems": [{"type": "integer", "exclusiveMinimum": 0}, {"enum": ["a", "b"]}]},
    "kind": {"oneOf": [{"type": "null"}, {"type": "boolean"}, {"type": "integer", "minimum": 1000}]},
    "extra": {"allOf": [{"properties": {"x": {"type": "integer", "exclusiveMaximum": 10}},
                         "required": ["x"]},
                        {"properties": {"y": {"type": "string", "maxLength": 3}}}]},
    "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}(\\.\\d)?$"},
    "any": {"anyOf": [{"type": "string", "pattern": "q+\"?"}, {"type": "array", "maxItems": 2}]},
    "tree": {"$ref": "#/$defs/node"}
  },
  "required": ["id", "name", "tags", "pair", "kind", "code"]
})";

// scripts/install-deps.sh --test installs python3-jsonschema, so where scripts/test.sh runs
// (QRUN_REQUIRE_REAL_MODELS set, as in CI) a missing validator fails rather than skips.
#define QRUN_JSONSCHEMA_OR_SKIP()                                                           \
  do {                                                                                      \
    if (have_jsonschema()) break;                                                           \
    if (::qrun::test::real_models_required()) FAIL() << "python3-jsonschema is missing";    \
    GTEST_SKIP() << "python3-jsonschema is not installed (scripts/install-deps.sh --test)"; \
  } while (false)

bool have_jsonschema() {
  return run_command("python3 -c 'import jsonschema' 2>/dev/null").exit_code == 0;
}

// Validates each line of `docs` (one JSON text per line) against `schema` with
// jsonschema; returns "" or the failures.
std::string validate_with_python(const std::filesystem::path& schema,
                                 const std::filesystem::path& docs) {
  const std::string script =
      "import json, sys, jsonschema\n"
      "schema = json.load(open(sys.argv[1]))\n"
      "v = jsonschema.Draft202012Validator(schema, "
      "format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)\n"
      "bad = 0\n"
      "for n, line in enumerate(open(sys.argv[2]), 1):\n"
      "    try:\n"
      "        doc = json.loads(line)\n"
      "    except ValueError as e:\n"
      "        print(f'line {n}: not JSON: {e}'); bad += 1; continue\n"
      "    for e in v.iter_errors(doc):\n"
      "        print(f'line {n}: {e.message} at {e.json_path}'); bad += 1\n"
      "print('ok' if bad == 0 else f'{bad} failures')\n";
  const std::filesystem::path py = temp_dir() / "validate.py";
  std::ofstream(py) << script;
  const CommandResult r = run_command("python3 " + quote(py.string()) + " " +
                                      quote(schema.string()) + " " + quote(docs.string()));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out == "ok\n" ? "" : r.out + r.err;
}

TEST(CliJsonSchema, OutputsValidateUnderEveryKeywordAtManySeedsAndTemperatures) {
  const std::filesystem::path schema = temp_dir() / "schema.json";
  std::ofstream(schema) << kSchema;
  const std::filesystem::path docs = temp_dir() / "docs.jsonl";
  std::ofstream out(docs);
  struct Case {
    std::string model;
    std::string flags;
  };
  std::vector<Case> cases;
  const std::string small = data_path("models/stories260K.gguf").string();
  const std::string tiny = data_path("models/TinyLLama-v0-5M-Q4_0.gguf").string();
  cases.push_back({small, "--temp 0"});
  for (const char* temp : {"0.8", "1.2", "1.5"}) {
    for (int seed = 1; seed <= 8; ++seed) {
      cases.push_back({small, std::string("--temp ") + temp + " -s " + std::to_string(seed)});
    }
  }
  for (const char* temp : {"0", "1", "1.5"}) {
    for (int seed = 1; seed <= 2; ++seed) {
      cases.push_back({tiny, std::string("--temp ") + temp + " -s " + std::to_string(seed)});
    }
  }
  int n = 0;
  for (const Case& c : cases) {
    const std::string grammar_flag =
        n % 2 ? "-j " + quote(kSchema) : "-jf " + quote(schema.string());
    const std::string cmd = qrun() + " run -q --json -t 2 -n 1500 -m " + quote(c.model) +
                            " -p 'Once upon a time' " + c.flags + " " + grammar_flag;
    SCOPED_TRACE(c.model + " " + c.flags);
    const CommandResult r = run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["stop_reason"], "eos") << j["text"];
    const std::string text = j["text"];
    const nlohmann::json v = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(v.is_object()) << text;
    out << nlohmann::json::parse(text, nullptr, false).dump() << "\n";
    ++n;
  }
  out.close();
  EXPECT_EQ(n, 31);
  QRUN_JSONSCHEMA_OR_SKIP();
  EXPECT_EQ(validate_with_python(schema, docs), "");
}

// The validator itself catches a wrong document (so the test above can fail).
TEST(CliJsonSchema, ThePythonValidatorRejectsNearMisses) {
  QRUN_JSONSCHEMA_OR_SKIP();
  const std::filesystem::path schema = temp_dir() / "schema.json";
  std::ofstream(schema) << kSchema;
  const std::filesystem::path docs = temp_dir() / "bad.jsonl";
  std::ofstream(docs)
      << R"({"id": "123e4567-e89b-12d3-a456-42661417400", "name": "a", "tags": ["x"], "pair": [1, "a"], "kind": null, "code": "AB-123"})"
      << "\n";
  EXPECT_NE(validate_with_python(schema, docs), "");
}

TEST(CliJsonSchema, ShortFlagAndOneGrammarFlagOnly) {
  const std::string model = data_path("models/stories260K.gguf").string();
  const std::filesystem::path schema = temp_dir() / "digit.json";
  std::ofstream(schema) << R"({"type": "integer", "minimum": 3, "maximum": 7})";
  const CommandResult ok = run_command(qrun() + " run -q -s 3 -m " + quote(model) + " -p x -jf " +
                                       quote(schema.string()));
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  // One digit, then what the grammar's trailing `space` allows.
  EXPECT_TRUE(!ok.out.empty() && ok.out[0] >= '3' && ok.out[0] <= '7' &&
              ok.out.find_first_not_of(" \t\n", 1) == std::string::npos)
      << ok.out;
  const CommandResult both =
      run_command(qrun() + " run -q -m " + quote(model) + " -p x --grammar 'root ::= \"a\"' -jf " +
                  quote(schema.string()));
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_EQ(both.err,
            "qrun: --grammar and -jf/--json-schema-file cannot be given together (give one "
            "grammar flag)\n");
  const CommandResult two = run_command(qrun() + " run -q -m " + quote(model) +
                                        " -p x -j '{}' --grammar-file " + quote(schema.string()));
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_EQ(two.err,
            "qrun: --grammar-file and -j/--json-schema cannot be given together (give one "
            "grammar flag)\n");
  const CommandResult printed = run_command(qrun() + " grammar -jf " + quote(schema.string()));
  ASSERT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_NE(printed.out.find("[3-7]"), std::string::npos) << printed.out;
}

TEST(CliJsonSchema, BenchMeasuresTheGrammar) {
  const std::string model = data_path("models/stories260K.gguf").string();
  const CommandResult r =
      run_command(qrun() + " bench --json -p 0 -n 16 -r 1 -t 1 -m " + quote(model) + " -j " +
                  quote(R"({"type": "array", "items": {"type": "integer", "maximum": 99}})"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[0]["tg_tokens"], "fixed");
  EXPECT_EQ(j[1]["tg_tokens"], "sampled");
  EXPECT_EQ(j[2]["tg_tokens"], "sampled with grammar");
  for (const nlohmann::json& rec : j) EXPECT_GT(rec["avg_ts"].get<double>(), 0.0);
  const CommandResult bad =
      run_command(qrun() + " bench -n 4 -m " + quote(model) + " -j '{\"not\": {}}'");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "qrun: --json-schema: unsupported keyword 'not' at $\n");
}

}  // namespace
}  // namespace qrun::test
