// JSON Schema to GBNF: the grammar made from each schema accepts valid instances (also
// pretty-printed) and rejects invalid ones; unsupported keywords and bad values are refused
// naming the keyword and the JSON path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema.h"

namespace qrun {
namespace {

std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  Result<std::string> gbnf = json_schema_to_grammar(schema);
  EXPECT_TRUE(gbnf.ok()) << gbnf.error().message;
  if (!gbnf.ok()) return nullptr;
  Result<Grammar> g = parse_grammar(*gbnf);
  EXPECT_TRUE(g.ok()) << g.error().message << "\n" << *gbnf;
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(*g));
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  Result<GrammarMatcher> m = GrammarMatcher::create(g);
  Result<bool> ok = m->accept(text);
  EXPECT_TRUE(ok.ok());
  return ok.ok() && *ok && m->can_end();
}

std::string schema_error(const std::string& schema) {
  Result<std::string> gbnf = json_schema_to_grammar(schema);
  EXPECT_FALSE(gbnf.ok()) << *gbnf;
  return gbnf.ok() ? "" : gbnf.error().message;
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  const auto g = schema_grammar(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer"}, "score": {"type": "number"},
      "ok": {"type": "boolean"}, "none": {"type": "null"}},
      "required": ["name", "ok"], "additionalProperties": false})");
  ASSERT_NE(g, nullptr);
  for (const char* yes :
       {R"({"name":"a","ok":true})", R"({"name":"a\"b\\n\u00e9","age":-12,"ok":false})",
        R"({"name":"","age":0,"score":1.5e-3,"ok":true,"none":null})",
        R"({"name":"x","score":-0.25,"ok":true})"}) {
    EXPECT_TRUE(accepts(g, yes)) << yes;
    EXPECT_TRUE(accepts(g, nlohmann::ordered_json::parse(yes).dump(2))) << yes;
  }
  for (const char* no :
       {R"({"ok":true})", R"({"name":"a"})", R"({"ok":true,"name":"a"})",
        R"({"name":"a","ok":true,"extra":1})", R"({"name":"a","age":1.5,"ok":true})",
        R"({"name":"a","age":01,"ok":true})", R"({"name":"a",,"ok":true})",
        R"({"name":"a","ok":true,})", R"({"name":"a\q","ok":true})",
        "{\"name\":\"a\nb\",\"ok\":true}", R"({"name":"a","ok":"true"})"}) {
    EXPECT_FALSE(accepts(g, no)) << no;
  }
}

TEST(JsonSchema, ArraysEnumsConstsAndTypeLists) {
  const auto g =
      schema_grammar(R"({"type": "array", "items": {"enum": ["red", 2, null, {"k": [true]}]}})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, "[]"));
  EXPECT_TRUE(accepts(g, R"(["red", 2, null, {"k":[true]}])"));
  EXPECT_FALSE(accepts(g, R"(["blue"])"));
  EXPECT_FALSE(accepts(g, R"([2,])"));
  const auto c = schema_grammar(R"({"const": "a\"b"})");
  EXPECT_TRUE(accepts(c, R"("a\"b")"));
  EXPECT_FALSE(accepts(c, R"("ab")"));
  const auto t = schema_grammar(R"({"type": ["integer", "null"]})");
  EXPECT_TRUE(accepts(t, "42"));
  EXPECT_TRUE(accepts(t, "null"));
  EXPECT_FALSE(accepts(t, "4.2"));
  const auto any = schema_grammar("{}");
  for (const char* v : {"1", "\"s\"", "[1,{\"a\":null}]", "{\"x\":[true,false]}"})
    EXPECT_TRUE(accepts(any, v)) << v;
  EXPECT_FALSE(accepts(any, "{x:1}"));
  // No type but properties: an object; nested schemas.
  const auto nested = schema_grammar(
      R"({"properties": {"p": {"properties": {"q": {"type": "array", "items": {"type": "integer"}}}, "required": ["q"]}}})");
  EXPECT_TRUE(accepts(nested, R"({"p":{"q":[1,2,3]}})"));
  EXPECT_TRUE(accepts(nested, R"({})"));
  EXPECT_FALSE(accepts(nested, R"({"p":{}})"));
}

TEST(JsonSchema, UnsupportedKeywordsNameTheKeywordAndPath) {
  EXPECT_EQ(schema_error(R"({"type": "string", "minLength": 2})"),
            "unsupported keyword 'minLength' at $");
  EXPECT_EQ(schema_error(R"({"properties": {"a": {"items": {"pattern": "x"}}}})"),
            "unsupported keyword 'pattern' at $.properties.a.items");
  EXPECT_EQ(schema_error(R"({"type": "strin"})"), "unsupported type 'strin' at $.type");
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
            "'b' is not in properties at $.required");
  EXPECT_EQ(schema_error(R"({"type": "object", "additionalProperties": true})"),
            "only false is supported at $.additionalProperties");
  EXPECT_EQ(schema_error(R"({"enum": []})"), "expected a non-empty array at $.enum");
  EXPECT_EQ(schema_error(R"({"anyOf": [{}]})"), "unsupported keyword 'anyOf' at $");
  EXPECT_EQ(schema_error("[1]"), "a schema must be an object or true at $");
  EXPECT_EQ(schema_error("{"), "not JSON");
}

}  // namespace
}  // namespace qrun
