// JSON Schema to GBNF: the grammar made from each schema accepts valid instances (also
// pretty-printed) and rejects invalid ones; unsupported keywords and bad values are refused
// naming the keyword and the JSON path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

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

// enum and const keep to `type` (an enum under allOf with a type, too).
TEST(JsonSchema, EnumAndConstKeepToTheType) {
  const auto g = schema_grammar(R"({"type": "string", "enum": ["a", 1, null, "b"]})");
  EXPECT_TRUE(accepts(g, R"("a")"));
  EXPECT_TRUE(accepts(g, R"("b")"));
  EXPECT_FALSE(accepts(g, "1"));
  EXPECT_FALSE(accepts(g, "null"));
  const auto ints =
      schema_grammar(R"({"allOf": [{"enum": [1, 2.0, 2.5, "3"]}, {"type": "integer"}]})");
  EXPECT_TRUE(accepts(ints, "1"));
  EXPECT_TRUE(accepts(ints, "2.0"));
  EXPECT_FALSE(accepts(ints, "2.5"));
  EXPECT_FALSE(accepts(ints, R"("3")"));
  EXPECT_EQ(schema_error(R"({"type": "string", "const": 1})"),
            "the value is not of 'type' at $.const");
  EXPECT_EQ(schema_error(R"({"type": "null", "enum": [1, "a"]})"),
            "no value is of 'type' at $.enum");
}

// additionalProperties as a schema: extra pairs after the listed ones, under any key but
// the listed names, valid under that schema.
TEST(JsonSchema, AdditionalPropertiesSchema) {
  const auto g =
      schema_grammar(R"({"properties": {"ab": {"type": "integer"}, "a": {"type": "null"}},
      "required": ["ab"], "additionalProperties": {"type": "string"}})");
  ASSERT_NE(g, nullptr);
  for (const char* yes : {R"({"ab":1})", R"({"ab":1,"a":null})", R"({"ab":1,"x":"s","abc":"t"})",
                          R"({"ab":1,"a":null,"":"e","b":"u"})"}) {
    EXPECT_TRUE(accepts(g, yes)) << yes;
  }
  for (const char* no : {R"({"ab":1,"x":2})", R"({"ab":1,"a":"s"})", R"({"ab":1,"ab":"s"})",
                         R"({"x":"s"})", R"({"ab":1,"x":"s","a":null})"}) {
    EXPECT_FALSE(accepts(g, no)) << no;
  }
  const auto any = schema_grammar(R"({"type": "object", "additionalProperties": true})");
  EXPECT_TRUE(accepts(any, R"({"k":[1,{"z":null}],"j":"v"})"));
  EXPECT_TRUE(accepts(any, "{}"));
  // In allOf, a property only one branch lists falls under the other's additionalProperties.
  const auto merged = schema_grammar(R"({"allOf": [
      {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "integer", "maximum": 5}},
      {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]})");
  EXPECT_TRUE(accepts(merged, R"({"b":5})"));
  EXPECT_FALSE(accepts(merged, R"({"b":6})"));
  EXPECT_TRUE(accepts(merged, R"({"b":1,"zz":3})"));
  EXPECT_FALSE(accepts(merged, R"({"b":1,"zz":7})"));
}

// Found by grammar_fuzz: a key holding a newline made the message two lines.
TEST(JsonSchema, ErrorsQuotingControlCharactersStayOneLine) {
  EXPECT_EQ(schema_error(R"({"type": "string", "pat\ntern\u0001": "a"})"),
            "unsupported keyword 'pat\\ntern\\x01' at $");
  EXPECT_EQ(schema_error(R"({"properties": {"a\tb": {"not": {}}}})"),
            "unsupported keyword 'not' at $.properties.a\\x09b");
}

TEST(JsonSchema, UnsupportedKeywordsNameTheKeywordAndPath) {
  EXPECT_EQ(schema_error(R"({"type": "string", "not": {"const": "a"}})"),
            "unsupported keyword 'not' at $");
  EXPECT_EQ(schema_error(R"({"properties": {"a": {"items": {"propertyNames": {}}}}})"),
            "unsupported keyword 'propertyNames' at $.properties.a.items");
  EXPECT_EQ(schema_error(R"({"properties": {"a": {"items": {}, "uniqueItems": true}}})"),
            "true is not supported: a grammar cannot keep the items distinct at "
            "$.properties.a.uniqueItems");
  EXPECT_EQ(schema_error(R"({"type": "strin"})"), "unsupported type 'strin' at $.type");
  EXPECT_EQ(schema_error(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})"),
            "'b' is not in properties at $.required");
  EXPECT_EQ(schema_error(R"({"properties": {"\u00e9": {}}, "additionalProperties": true})"),
            "supported only when every property name is printable ASCII without '\"' and '\\' "
            "at $.additionalProperties");
  EXPECT_EQ(schema_error(R"({"enum": []})"), "expected a non-empty array at $.enum");
  EXPECT_EQ(schema_error(R"({"anyOf": []})"), "expected a non-empty array at $.anyOf");
  EXPECT_EQ(schema_error("[1]"), "a schema must be an object or true at $");
  EXPECT_EQ(schema_error("{"), "not JSON");
  EXPECT_EQ(schema_error(R"({"type": "number", "minimum": 1, "exclusiveMaximum": 1})"),
            "no number lies between the bounds at $");
  EXPECT_EQ(schema_error(R"({"type": "number", "minimum": 0.1234567890123456})"),
            "at most 15 digits after the point are supported at $.minimum");
  EXPECT_EQ(schema_error(R"({"type": "number", "maximum": 1e19})"),
            "out of the supported range (at most 10^18 in magnitude) at $.maximum");
  EXPECT_EQ(schema_error(R"({"items": [{}], "prefixItems": [{}]})"),
            "an array of schemas (the older tuple form) with 'prefixItems' at $.items");
  EXPECT_EQ(schema_error(R"({"items": {}, "additionalItems": false})"),
            "applies only with 'items' as an array (use 'items') at $.additionalItems");
  EXPECT_EQ(schema_error(R"({"type": "string", "format": "email"})"),
            "unsupported format 'email' (supported: date, time, date-time, uuid) at $.format");
  EXPECT_EQ(schema_error(R"({"$ref": "other.json#/a"})"),
            "only local references (#/$defs/..., #/definitions/...) are supported, not "
            "'other.json#/a' at $.$ref");
  EXPECT_EQ(schema_error(R"({"$ref": "#/$defs/nope"})"),
            "'#/$defs/nope' does not resolve at $.$ref");
  EXPECT_EQ(schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})"),
            "no integer lies between the bounds (5 > 4) at $");
  EXPECT_EQ(schema_error(R"({"type": "array", "maxItems": 20000})"),
            "at most 10000 is supported at $.maxItems");
  EXPECT_EQ(schema_error(R"({"type": "string", "pattern": "a", "minLength": 2})"),
            "'pattern' with 'minLength'/'maxLength' is not supported at $");
  EXPECT_EQ(schema_error(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})"),
            "allOf: no type satisfies every branch ('type' \"string\" and \"integer\") at "
            "$.allOf[1]");
  EXPECT_EQ(schema_error(R"({"allOf": [{"pattern": "a"}, {"pattern": "b"}]})"),
            "allOf: the branches give 'pattern' different values, which cannot be merged at "
            "$.allOf[1]");
  EXPECT_EQ(schema_error(R"({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"})"),
            "the schema's grammar is refused: the grammar is left-recursive: rule 'ref-a-1' can "
            "reach itself without consuming a character");
}

TEST(JsonSchema, PatternErrorsNameTheConstructColumnAndPath) {
  for (const auto& [pattern, what] : {
           std::pair{"a(?=b)",
                     "column 2: '(?' (lookaround and named groups are not in the subset)"},
           std::pair{"(a)\\1",
                     "column 4: the escape '\\1' (backreferences, \\b, \\p{...} and the "
                     "like are not in the subset)"},
           std::pair{"a^b",
                     "column 2: an anchor '^' other than at the start or end of the pattern"},
           std::pair{"a{2", "column 4: '}' closing the repetition"},
           std::pair{"(ab", "column 4: ')' closing the group"},
           std::pair{"ab)", "column 3: an unmatched ')'"},
           std::pair{"*a", "column 1: something to repeat before the quantifier"},
           std::pair{"[b-a]", "column 2: a range whose end is not below its start"},
           std::pair{"a{1001}", "column 2: a repetition of at most 1000"},
           std::pair{"a**", "column 3: a quantifier after a quantifier (possessive or nested)"},
       }) {
    nlohmann::json schema = {
        {"type", "object"}, {"properties", {{"code", {{"type", "string"}, {"pattern", pattern}}}}}};
    EXPECT_EQ(schema_error(schema.dump()), std::string("unsupported regex in 'pattern' (") + what +
                                               ") at $.properties.code.pattern")
        << pattern;
  }
}

TEST(JsonSchema, AnyOfOneOfAndSiblingKeywords) {
  const auto g =
      schema_grammar(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2},
      {"type": "object", "properties": {"a": {"type": "null"}}, "required": ["a"]}]})");
  ASSERT_NE(g, nullptr);
  for (const char* yes : {"12", "\"ab\"", "\"\"", R"({"a":null})"})
    EXPECT_TRUE(accepts(g, yes)) << yes;
  for (const char* no : {"1.5", "\"abc\"", "{}", "null", "true"})
    EXPECT_FALSE(accepts(g, no)) << no;
  const auto one = schema_grammar(R"({"oneOf": [{"const": 1}, {"type": "boolean"}]})");
  EXPECT_TRUE(accepts(one, "1"));
  EXPECT_TRUE(accepts(one, "false"));
  EXPECT_FALSE(accepts(one, "2"));
  // Keywords beside anyOf apply to every branch.
  const auto shared =
      schema_grammar(R"({"type": "object", "properties": {"kind": {"type": "string"}},
      "required": ["kind"], "anyOf": [{"properties": {"n": {"type": "integer"}}, "required": ["n"]},
      {"properties": {"s": {"type": "string"}}, "required": ["s"]}]})");
  ASSERT_NE(shared, nullptr);
  EXPECT_TRUE(accepts(shared, R"({"kind":"a","n":1})"));
  EXPECT_TRUE(accepts(shared, R"({"kind":"a","s":"x"})"));
  EXPECT_FALSE(accepts(shared, R"({"n":1})"));
  EXPECT_FALSE(accepts(shared, R"({"kind":"a"})"));
}

TEST(JsonSchema, AllOfMergesObjects) {
  const auto g = schema_grammar(R"({"allOf": [
      {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
      {"properties": {"b": {"type": "string"}, "a": {"minimum": 0}}, "required": ["b"]}]})");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(accepts(g, R"({"a":3,"b":"x"})"));
  EXPECT_FALSE(accepts(g, R"({"a":-3,"b":"x"})"));  // both branches' constraints on a
  EXPECT_FALSE(accepts(g, R"({"a":3})"));
  EXPECT_FALSE(accepts(g, R"({"b":"x"})"));
  // A closed branch keeps the other's extra properties out; required ones are an error.
  const auto closed = schema_grammar(R"({"allOf": [
      {"properties": {"a": {"type": "integer"}}, "additionalProperties": false},
      {"properties": {"b": {"type": "string"}}}]})");
  EXPECT_TRUE(accepts(closed, R"({"a":1})"));
  EXPECT_FALSE(accepts(closed, R"({"a":1,"b":"x"})"));
  EXPECT_EQ(schema_error(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false},
      {"properties": {"b": {}}, "required": ["b"]}]})"),
            "allOf: 'b' is required by one branch and not allowed by another at $.allOf[1]");
  // Types intersect; bounds tighten; $ref branches are followed.
  const auto ints = schema_grammar(R"({"$defs": {"pos": {"minimum": 1}},
      "allOf": [{"type": ["number", "string"]}, {"type": "integer", "maximum": 9}, {"$ref": "#/$defs/pos"}]})");
  for (const char* yes : {"1", "9"}) EXPECT_TRUE(accepts(ints, yes)) << yes;
  for (const char* no : {"0", "10", "\"a\"", "1.5"}) EXPECT_FALSE(accepts(ints, no)) << no;
}

TEST(JsonSchema, RefsToDefsAndDefinitionsAndRecursion) {
  const auto g = schema_grammar(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}, "$ref": "#/$defs/node"})");
  ASSERT_NE(g, nullptr);
  for (const char* yes :
       {R"({"v":1})", R"({"v":1,"kids":[]})", R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]}]})"}) {
    EXPECT_TRUE(accepts(g, yes)) << yes;
  }
  for (const char* no : {R"({"v":1,"kids":[{}]})", R"({"v":1,"kids":[{"v":"x"}]})", "{}"}) {
    EXPECT_FALSE(accepts(g, no)) << no;
  }
  const auto d = schema_grammar(R"({"definitions": {"id": {"type": "integer", "minimum": 1}},
      "type": "array", "items": {"$ref": "#/definitions/id"}})");
  EXPECT_TRUE(accepts(d, "[1,2]"));
  EXPECT_FALSE(accepts(d, "[0]"));
  // The whole document by "#", with a property that can stop the recursion.
  const auto self = schema_grammar(R"({"type": "object", "properties": {"next": {"$ref": "#"}}})");
  EXPECT_TRUE(accepts(self, R"({"next":{"next":{}}})"));
  EXPECT_FALSE(accepts(self, R"({"next":{"x":{}}})"));
  // A $ref with sibling keywords is allOf of the two.
  const auto sib =
      schema_grammar(R"({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n", "maximum": 3})");
  EXPECT_TRUE(accepts(sib, "3"));
  EXPECT_FALSE(accepts(sib, "4"));
}

TEST(JsonSchema, ArraysWithPrefixItemsAndCounts) {
  const auto g = schema_grammar(
      R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})");
  for (const char* yes : {"[1,2]", "[1,2,3]", "[ 1 , 2 ]"}) EXPECT_TRUE(accepts(g, yes)) << yes;
  for (const char* no : {"[]", "[1]", "[1,2,3,4]", "[1,\"a\"]"}) EXPECT_FALSE(accepts(g, no)) << no;
  const auto upto = schema_grammar(R"({"type": "array", "maxItems": 1})");
  EXPECT_TRUE(accepts(upto, "[]"));
  EXPECT_TRUE(accepts(upto, "[{\"a\":1}]"));
  EXPECT_FALSE(accepts(upto, "[1,2]"));
  const auto at_least = schema_grammar(R"({"items": {"type": "boolean"}, "minItems": 1})");
  EXPECT_TRUE(accepts(at_least, "[true,false,true]"));
  EXPECT_FALSE(accepts(at_least, "[]"));
  const auto none = schema_grammar(R"({"type": "array", "maxItems": 0})");
  EXPECT_TRUE(accepts(none, "[]"));
  EXPECT_FALSE(accepts(none, "[1]"));
  // A tuple: every prefix item, then `items` up to maxItems.
  const auto tuple = schema_grammar(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}],
      "items": {"type": "null"}, "maxItems": 3})");
  for (const char* yes : {R"(["a",1])", R"(["a",1,null])"}) EXPECT_TRUE(accepts(tuple, yes)) << yes;
  for (const char* no : {R"(["a"])", R"([1,"a"])", R"(["a",1,null,null])", R"(["a",1,2])"}) {
    EXPECT_FALSE(accepts(tuple, no)) << no;
  }
  // uniqueItems: false asks nothing, and true holds of itself with one item at most.
  EXPECT_TRUE(accepts(schema_grammar(R"({"items": {}, "uniqueItems": false})"), "[1,1]"));
  EXPECT_TRUE(accepts(schema_grammar(R"({"maxItems": 1, "uniqueItems": true})"), "[1]"));
  const auto exact = schema_grammar(R"({"prefixItems": [{"const": "x"}]})");
  EXPECT_TRUE(accepts(exact, R"(["x"])"));
  EXPECT_FALSE(accepts(exact, R"(["x",1])"));
  EXPECT_EQ(schema_error(R"({"prefixItems": [{}, {}], "maxItems": 1})"),
            "below the number of prefixItems (all of them are written) at $.maxItems");
  // The tuple form of the drafts before 2020-12: `items` as an array is prefixItems, and
  // `additionalItems` the items after them.
  const auto old_tuple = schema_grammar(R"({"items": [{"format": "date"}, {"type": "integer"}]})");
  EXPECT_TRUE(accepts(old_tuple, R"(["2012-04-23", 7])"));
  for (const char* no : {R"(["2012-04-23"])", R"(["x", 7])", R"(["2012-04-23", 7, 8])"})
    EXPECT_FALSE(accepts(old_tuple, no)) << no;
  const auto old_more = schema_grammar(
      R"({"items": [{"const": "x"}], "additionalItems": {"type": "boolean"}, "maxItems": 3})");
  for (const char* yes : {R"(["x"])", R"(["x", true])", R"(["x", true, false])"})
    EXPECT_TRUE(accepts(old_more, yes)) << yes;
  for (const char* no : {R"(["x", 1])", R"(["x", true, true, true])"})
    EXPECT_FALSE(accepts(old_more, no)) << no;
}

TEST(JsonSchema, StringLengths) {
  const auto g = schema_grammar(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  for (const char* yes : {R"("ab")", R"("abc")", R"("a\"")", R"("\u00e9\n")",
                          "\"\xc3\xa9t\xc3\xa9\"", R"("\ud83d\ude00x")"}) {
    EXPECT_TRUE(accepts(g, yes)) << yes;
  }
  for (const char* no : {R"("a")", R"("abcd")", R"("")", R"("\ud83d")", R"("a\ud83dx")"}) {
    EXPECT_FALSE(accepts(g, no)) << no;
  }
  const auto empty = schema_grammar(R"({"type": "string", "maxLength": 0})");
  EXPECT_TRUE(accepts(empty, R"("")"));
  EXPECT_FALSE(accepts(empty, R"("a")"));
}

// Integer ranges against a direct check of every value in a window around the bounds.
TEST(JsonSchema, IntegerRangesMatchExactlyTheBoundedValues) {
  const std::vector<std::pair<std::optional<int64_t>, std::optional<int64_t>>> cases = {
      {0, 9},
      {1, 10},
      {-5, 5},
      {17, 321},
      {-321, -17},
      {100, 100},
      {0, std::nullopt},
      {35, std::nullopt},
      {std::nullopt, 0},
      {std::nullopt, -35},
      {-1000, 999},
      {999, 1001},
      {std::nullopt, 120},
      {-120, std::nullopt}};
  for (const auto& [lo, hi] : cases) {
    nlohmann::json schema = {{"type", "integer"}};
    if (lo) schema["minimum"] = *lo;
    if (hi) schema["maximum"] = *hi;
    const auto g = schema_grammar(schema.dump());
    ASSERT_NE(g, nullptr) << schema.dump();
    for (int64_t v = -1200; v <= 1200; ++v) {
      const bool want = (!lo || v >= *lo) && (!hi || v <= *hi);
      ASSERT_EQ(accepts(g, std::to_string(v)), want) << schema.dump() << " " << v;
    }
    EXPECT_FALSE(accepts(g, "-0")) << schema.dump();
    EXPECT_FALSE(accepts(g, "007")) << schema.dump();
  }
  // Exclusive and fractional bounds round inward.
  const auto ex =
      schema_grammar(R"({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 5.5})");
  for (int v = 0; v <= 7; ++v) EXPECT_EQ(accepts(ex, std::to_string(v)), v >= 3 && v <= 5) << v;
  const auto fr = schema_grammar(R"({"type": "integer", "minimum": -2.5, "maximum": 1.5})");
  for (int v = -4; v <= 3; ++v) EXPECT_EQ(accepts(fr, std::to_string(v)), v >= -2 && v <= 1) << v;
  const auto big = schema_grammar(R"({"type": "integer", "minimum": 123456789012})");
  EXPECT_TRUE(accepts(big, "123456789012"));
  EXPECT_TRUE(accepts(big, "9999999999999999"));
  EXPECT_FALSE(accepts(big, "123456789011"));
}

// A value in thousandths as JSON writes it: "-2.5" for -2500; with pad, all three digits
// after the point ("-2.500", and "3.000" for 3000).
std::string thousandths(int64_t t, bool pad) {
  const std::string sign = t < 0 ? "-" : "";
  const int64_t a = t < 0 ? -t : t;
  std::string frac = std::to_string(1000 + a % 1000).substr(1);
  if (!pad) frac.erase(frac.find_last_not_of('0') + 1);
  return sign + std::to_string(a / 1000) + (frac.empty() ? "" : "." + frac);
}

// Number ranges against exact comparisons (in thousandths) of values around and between
// the bounds, each written the shortest way and with three decimals.
TEST(JsonSchema, NumberRangesMatchExactlyTheBoundedValues) {
  struct Bound {
    int64_t at;  // thousandths
    bool inclusive;
  };
  struct Case {
    std::optional<Bound> lo, hi;
  };
  const std::vector<Case> cases = {
      {Bound{0, false}, std::nullopt},         {Bound{0, true}, std::nullopt},
      {std::nullopt, Bound{0, false}},         {std::nullopt, Bound{0, true}},
      {Bound{-2500, true}, Bound{1250, true}}, {Bound{-2500, false}, Bound{1250, false}},
      {Bound{-1999, true}, Bound{-1, false}},  {Bound{5, false}, Bound{7, true}},
      {Bound{1000, true}, Bound{1000, true}},  {std::nullopt, Bound{-1500, true}},
      {Bound{125, false}, std::nullopt},       {Bound{-125, true}, Bound{2000, false}},
      {Bound{1990, true}, Bound{12010, false}}};
  std::vector<int64_t> values;
  for (int64_t t = -2600; t <= 2600; t += 13) values.push_back(t);
  for (const Case& c : cases) {
    nlohmann::json schema = {{"type", "number"}};
    for (const auto& [b, lower] : {std::pair{c.lo, true}, std::pair{c.hi, false}}) {
      if (!b) continue;
      const char* key = lower ? (b->inclusive ? "minimum" : "exclusiveMinimum")
                              : (b->inclusive ? "maximum" : "exclusiveMaximum");
      schema[key] = static_cast<double>(b->at) / 1000;
      for (int64_t d = -2; d <= 2; ++d) values.push_back(b->at + d);
    }
    const auto g = schema_grammar(schema.dump());
    ASSERT_NE(g, nullptr) << schema.dump();
    for (const int64_t t : values) {
      const bool want = (!c.lo || (c.lo->inclusive ? t >= c.lo->at : t > c.lo->at)) &&
                        (!c.hi || (c.hi->inclusive ? t <= c.hi->at : t < c.hi->at));
      for (const bool pad : {false, true}) {
        ASSERT_EQ(accepts(g, thousandths(t, pad)), want)
            << schema.dump() << " " << thousandths(t, pad);
      }
    }
    for (const char* no : {"-0", "-0.0", "1e2", "01", "1.", ".5"})
      EXPECT_FALSE(accepts(g, no)) << schema.dump() << " " << no;
  }
  // Integral bounds on a number: the price of json-schema.org's example product.
  const auto price = schema_grammar(R"({"type": "number", "exclusiveMinimum": 0})");
  for (const char* yes : {"12.50", "0.001", "7", "100000.25"})
    EXPECT_TRUE(accepts(price, yes)) << yes;
  for (const char* no : {"0", "0.000", "-3", "-0.5"}) EXPECT_FALSE(accepts(price, no)) << no;
  // Without bounds, numbers keep their exponent.
  EXPECT_TRUE(accepts(schema_grammar(R"({"type": "number"})"), "1.5e-3"));
  // Of two lower bounds the tighter one holds; at the same value, the exclusive one.
  const auto both = schema_grammar(R"({"type": "number", "minimum": 2, "exclusiveMinimum": 2})");
  EXPECT_FALSE(accepts(both, "2"));
  EXPECT_TRUE(accepts(both, "2.01"));
}

TEST(JsonSchema, Formats) {
  const auto date = schema_grammar(R"({"type": "string", "format": "date"})");
  for (const char* yes : {R"("2024-01-31")", R"("1999-04-30")", R"("2023-02-28")"})
    EXPECT_TRUE(accepts(date, yes)) << yes;
  for (const char* no : {R"("2024-04-31")", R"("2024-13-01")", R"("2024-00-10")", R"("24-01-01")",
                         R"("2024-1-01")", R"("2024-02-30")"}) {
    EXPECT_FALSE(accepts(date, no)) << no;
  }
  const auto time = schema_grammar(R"({"format": "time"})");
  for (const char* yes : {R"("23:59:59Z")", R"("00:00:00.123+05:30")", R"("12:30:00-08:00")"})
    EXPECT_TRUE(accepts(time, yes)) << yes;
  for (const char* no : {R"("24:00:00Z")", R"("12:60:00Z")", R"("12:30:00")", R"("12:30Z")"})
    EXPECT_FALSE(accepts(time, no)) << no;
  const auto dt = schema_grammar(R"({"type": "string", "format": "date-time"})");
  EXPECT_TRUE(accepts(dt, R"("2024-06-01T08:15:00Z")"));
  EXPECT_FALSE(accepts(dt, R"("2024-06-01 08:15:00Z")"));
  const auto uuid = schema_grammar(R"({"type": "string", "format": "uuid"})");
  EXPECT_TRUE(accepts(uuid, R"("123e4567-e89b-12d3-A456-426614174000")"));
  EXPECT_FALSE(accepts(uuid, R"("123e4567-e89b-12d3-a456-42661417400")"));
  EXPECT_FALSE(accepts(uuid, R"("123e4567e89b12d3a456426614174000")"));
}

// Patterns against std::regex (ECMAScript, matched whole) on the decoded strings: every
// candidate the grammar accepts in JSON form matches, and the other way round.
TEST(JsonSchema, PatternsAgreeWithStdRegex) {
  const std::vector<std::string> patterns = {"^[A-Z]{2}-[0-9]{3,4}$",
                                             "(ab|cd)*e?",
                                             "a.c",
                                             "[^a-c]+",
                                             "\\d+(\\.\\d{1,2})?",
                                             "^(?:x|y|)z$",
                                             "\\w\\s\\w",
                                             "[a\\-z]",
                                             "colou?r",
                                             "[\"\\\\]x",
                                             "\\$\\^\\.",
                                             "[A-Za-z_][A-Za-z0-9_]*",
                                             "\\x41\\u0042",
                                             "a+?b"};
  const std::vector<std::string> candidates = {
      "",     "AB-123", "AB-1234", "ab-123", "AB-12",    "AB-12345",  "e",   "abe",  "abcde",
      "abab", "ac",     "abc",     "a\nc",   "a\"c",     "def",       "dab", "12",   "1.5",
      "1.55", "1.555",  "z",       "xz",     "yz",       "xyz",       "a b", "a\tb", "ab",
      "-",    "a",      "color",   "colour", "\"x",      "\\x",       "x",   "$^.",  "_a1",
      "1a",   "AB",     "aab",     "b",      "\xc3\xa9", "a\xc3\xa9", "aaab"};
  for (const std::string& pattern : patterns) {
    const auto g =
        schema_grammar(nlohmann::json({{"type", "string"}, {"pattern", pattern}}).dump());
    ASSERT_NE(g, nullptr) << pattern;
    std::string body = pattern;
    if (!body.empty() && body.front() == '^') body.erase(0, 1);
    if (!body.empty() && body.back() == '$' && body[body.size() - 2] != '\\') body.pop_back();
    const std::regex re(body, std::regex::ECMAScript);
    for (const std::string& c : candidates) {
      const bool want = std::regex_match(c, re);
      EXPECT_EQ(accepts(g, nlohmann::json(c).dump()), want)
          << pattern << " on " << nlohmann::json(c).dump();
    }
  }
}

}  // namespace
}  // namespace qrun
