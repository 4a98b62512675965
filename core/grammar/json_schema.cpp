// JSON Schema (a subset) to GBNF. Each schema node becomes one rule; primitive rules are
// shared and emitted once. Objects: properties p1..pn in order, where body_i is "the
// properties from i on, none written yet" and tail_i "the properties from i on, after one
// was written" (so commas come only between properties):
//   body_i ::= kv_i tail_{i+1} | body_{i+1}   (the second only if p_i is optional)
//   tail_i ::= "," space kv_i tail_{i+1} | tail_{i+1}
#include "core/grammar/json_schema.h"

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace qrun {
namespace {

using json = nlohmann::ordered_json;

// The primitive rules, as in llama.cpp's json-schema-to-grammar.
const std::map<std::string, std::string> kPrimitives = {
    {"space", R"(| " " | "\n" [ \t]{0,20})"},
    {"boolean", R"(("true" | "false") space)"},
    {"null", R"("null" space)"},
    {"integral-part", R"([0] | [1-9] [0-9]{0,15})"},
    {"decimal-part", R"([0-9]{1,16})"},
    {"integer", R"(("-"? integral-part) space)"},
    {"number", R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)"},
    {"char", R"([^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4}))"},
    {"string", R"("\"" char* "\"" space)"},
    {"value", R"(object | array | string | number | boolean | null)"},
    {"object",
     R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)"},
    {"array", R"("[" space ( value ("," space value)* )? "]" space)"},
};
// What each primitive uses, so that only the needed ones are emitted.
const std::map<std::string, std::vector<std::string>> kPrimitiveDeps = {
    {"boolean", {"space"}},
    {"null", {"space"}},
    {"integer", {"integral-part", "space"}},
    {"number", {"integral-part", "decimal-part", "space"}},
    {"string", {"char", "space"}},
    {"value", {"object", "array", "string", "number", "boolean", "null"}},
    {"object", {"string", "value", "space"}},
    {"array", {"value", "space"}},
};

// A JSON text as a GBNF string literal followed by space.
std::string literal(const json& v) {
  const std::string text = v.dump(-1, ' ', false, json::error_handler_t::strict);
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out + "\" space";
}

class Converter {
 public:
  Result<std::string> run(const json& schema) {
    Result<std::string> root = visit(schema, "$");
    if (!root.ok()) return root.error();
    std::string out = "root ::= " + *root + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    for (const std::string& p : used_) out += p + " ::= " + kPrimitives.at(p) + "\n";
    return out;
  }

 private:
  void use(const std::string& primitive) {
    if (!used_.insert(primitive).second) return;
    if (auto it = kPrimitiveDeps.find(primitive); it != kPrimitiveDeps.end()) {
      for (const std::string& d : it->second) use(d);
    }
  }
  std::string add_rule(std::string body) {
    const std::string name = format("n%zu", rules_.size() + 1);
    rules_.emplace_back(name, std::move(body));
    return name;
  }
  static Error error_at(const std::string& path, const std::string& what) {
    return make_error(ErrorCode::kUsage, what + " at " + path);
  }

  // The rule expression (a rule name or a primitive) for the schema at `path`.
  Result<std::string> visit(const json& s, const std::string& path) {
    if (s.is_boolean() && s.get<bool>()) {
      use("value");
      return std::string("value");
    }
    if (!s.is_object()) return error_at(path, "a schema must be an object or true");
    static const std::set<std::string> kKnown = {
        "type",        "properties", "required", "additionalProperties",
        "enum",        "const",      "items",    "title",
        "description", "$schema",    "$id"};
    for (const auto& [key, v] : s.items()) {
      if (!kKnown.count(key)) return error_at(path, "unsupported keyword '" + key + "'");
    }
    if (s.contains("const")) {
      use("space");
      return add_rule(literal(s["const"]));
    }
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return error_at(path + ".enum", "expected a non-empty array");
      use("space");
      std::string body;
      for (const json& v : e) body += (body.empty() ? "" : " | ") + literal(v);
      return add_rule(body);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return error_at(path + ".type", "expected type names");
          types.push_back(x.get<std::string>());
        }
      } else {
        return error_at(path + ".type", "expected a type name or a list of them");
      }
    } else if (s.contains("properties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      use("value");
      return std::string("value");
    }
    std::string body;
    for (const std::string& t : types) {
      Result<std::string> r = visit_type(s, path, t);
      if (!r.ok()) return r.error();
      body += (body.empty() ? "" : " | ") + *r;
    }
    return types.size() == 1 ? body : add_rule(body);
  }

  Result<std::string> visit_type(const json& s, const std::string& path, const std::string& t) {
    if (t == "string" || t == "number" || t == "integer" || t == "boolean" || t == "null") {
      use(t);
      return t;
    }
    if (t == "array") {
      use("space");
      std::string item = "value";
      if (s.contains("items")) {
        Result<std::string> r = visit(s["items"], path + ".items");
        if (!r.ok()) return r.error();
        item = *r;
      } else {
        use("value");
      }
      return add_rule("\"[\" space (" + item + " (\",\" space " + item + ")*)? \"]\" space");
    }
    if (t == "object") return visit_object(s, path);
    return error_at(path + ".type", "unsupported type '" + t + "'");
  }

  Result<std::string> visit_object(const json& s, const std::string& path) {
    use("space");
    if (s.contains("additionalProperties") &&
        !(s["additionalProperties"].is_boolean() && !s["additionalProperties"].get<bool>())) {
      return error_at(path + ".additionalProperties", "only false is supported");
    }
    std::vector<std::pair<std::string, const json*>> props;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return error_at(path + ".properties", "expected an object");
      for (const auto& [k, v] : s["properties"].items()) props.emplace_back(k, &v);
    }
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return error_at(path + ".required", "expected an array");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return error_at(path + ".required", "expected property names");
        const std::string name = r.get<std::string>();
        bool found = false;
        for (const auto& p : props) found = found || p.first == name;
        if (!found) return error_at(path + ".required", "'" + name + "' is not in properties");
        required.insert(name);
      }
    }
    // kv_i, then tail_i and body_i from the last property back.
    std::vector<std::string> kv;
    for (const auto& [name, schema] : props) {
      Result<std::string> r = visit(*schema, path + ".properties." + name);
      if (!r.ok()) return r.error();
      kv.push_back(literal(json(name)) + " \":\" space " + *r);
    }
    std::string tail_next;  // "" stands for the empty sequence
    std::string body_next;
    for (size_t i = props.size(); i-- > 0;) {
      const bool req = required.count(props[i].first) != 0;
      const std::string seq = kv[i] + (tail_next.empty() ? "" : " " + tail_next);
      const std::string tail =
          add_rule("\",\" space " + seq + (req ? "" : " | " + or_empty(tail_next)));
      const std::string body = add_rule(seq + (req ? "" : " | " + or_empty(body_next)));
      tail_next = tail;
      body_next = body;
    }
    return add_rule("\"{\" space " + (body_next.empty() ? "" : body_next + " ") + "\"}\" space");
  }
  static std::string or_empty(const std::string& rule) { return rule.empty() ? "\"\"" : rule; }

  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_;
};

}  // namespace

Result<std::string> json_schema_to_grammar(std::string_view schema_text) {
  const json schema = json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return make_error(ErrorCode::kUsage, "not JSON");
  return Converter().run(schema);
}

}  // namespace qrun
