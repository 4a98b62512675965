// JSON Schema (a subset) to GBNF. Each schema node becomes one rule; primitive rules are
// shared and emitted once; each $ref target is one named rule, so recursive schemas become
// recursive rules. allOf is merged into one schema (json_schema_merge.cpp); anyOf and
// oneOf are alternatives (oneOf's "exactly one" is not enforced: give it disjoint
// branches). Objects: properties p1..pn in order, where body_i is "the properties from i
// on, none written yet" and tail_i "the properties from i on, after one was written" (so
// commas come only between properties):
//   body_i ::= kv_i tail_{i+1} | body_{i+1}   (the second only if p_i is optional)
//   tail_i ::= "," space kv_i tail_{i+1} | tail_{i+1}
#include "core/grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/grammar/grammar.h"
#include "core/grammar/json_schema_internal.h"

namespace qrun {
namespace {

using schema::json;

constexpr int kMaxDepth = 64;         // nested schemas, allOf merges and $ref hops
constexpr int64_t kMaxCount = 10000;  // minItems, maxItems, minLength, maxLength

const std::set<std::string> kAnnotations = {
    "title",   "description", "$schema",     "$id",      "$comment",  "examples",
    "default", "$defs",       "definitions", "readOnly", "writeOnly", "deprecated"};
const std::set<std::string> kKeywords = {"type",
                                         "properties",
                                         "required",
                                         "additionalProperties",
                                         "enum",
                                         "const",
                                         "items",
                                         "prefixItems",
                                         "additionalItems",
                                         "uniqueItems",
                                         "minItems",
                                         "maxItems",
                                         "minLength",
                                         "maxLength",
                                         "minimum",
                                         "maximum",
                                         "exclusiveMinimum",
                                         "exclusiveMaximum",
                                         "pattern",
                                         "format",
                                         "anyOf",
                                         "oneOf",
                                         "allOf",
                                         "$ref"};

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

// "{lo,hi}" and friends for GBNF; hi < 0 is unbounded.
std::string repetition(int64_t lo, int64_t hi) {
  if (hi < 0) return lo == 0 ? "*" : lo == 1 ? "+" : "{" + std::to_string(lo) + ",}";
  if (lo == hi) return lo == 1 ? "" : "{" + std::to_string(lo) + "}";
  if (lo == 0 && hi == 1) return "?";
  return "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  Result<std::string> run() {
    Result<std::string> top = visit(root_, "$", 0);
    if (!top.ok()) return top.error();
    std::string out = "root ::= " + *top + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    for (const std::string& p : used_) out += p + " ::= " + *schema::primitive_body(p) + "\n";
    return out;
  }

 private:
  void use(const std::string& primitive) {
    if (!used_.insert(primitive).second) return;
    for (const std::string& d : schema::primitive_deps(primitive)) use(d);
  }
  std::string add_rule(std::string body) {
    const std::string name = format("n%zu", ++n_generated_);
    rules_.emplace_back(name, std::move(body));
    return name;
  }
  static Error error_at(const std::string& path, const std::string& what) {
    return make_error(ErrorCode::kUsage, what + " at " + path);
  }
  // Whether `s` has keywords other than annotations and those in `except`.
  static bool has_assertions(const json& s, std::initializer_list<std::string_view> except) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& key = it.key();
      if (!kAnnotations.count(key) &&
          std::find(except.begin(), except.end(), key) == except.end()) {
        return true;
      }
    }
    return false;
  }

  // --- $ref --------------------------------------------------------------------------
  // The schema a local reference points to ("#", "#/$defs/a", "#/definitions/a/items/0").
  Result<const json*> resolve(const json& ref, const std::string& path) {
    if (!ref.is_string()) return error_at(path + ".$ref", "expected a string");
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') {
      return error_at(path + ".$ref",
                      "only local references (#/$defs/..., #/definitions/...) "
                      "are supported, not '" +
                          r + "'");
    }
    const json* at = &root_;
    size_t i = 1;
    if (r.size() > 1 && r[1] != '/')
      return error_at(path + ".$ref", "'" + r + "' is not a JSON pointer");
    while (i < r.size()) {
      const size_t next = r.find('/', i + 1);
      std::string token =
          r.substr(i + 1, next == std::string::npos ? std::string::npos : next - i - 1);
      for (size_t p = 0; (p = token.find('~', p)) != std::string::npos; ++p) {
        if (p + 1 < token.size() && (token[p + 1] == '0' || token[p + 1] == '1')) {
          token.replace(p, 2, token[p + 1] == '0' ? "~" : "/");
        }
      }
      if (at->is_object() && at->contains(token)) {
        at = &(*at)[token];
      } else if (at->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 10 &&
                 std::stoul(token) < at->size()) {
        at = &(*at)[std::stoul(token)];
      } else {
        return error_at(path + ".$ref", "'" + r + "' does not resolve");
      }
      i = next == std::string::npos ? r.size() : next;
    }
    return at;
  }

  // The rule for a $ref: one per target, named after it, made on first use.
  Result<std::string> ref_rule(const json& ref, const std::string& path, int depth) {
    Result<const json*> target = resolve(ref, path);
    if (!target.ok()) return target.error();
    const std::string r = ref.get<std::string>();
    if (auto it = ref_rules_.find(r); it != ref_rules_.end()) return it->second;
    std::string base = "ref-";
    for (const char c : r.substr(r.rfind('/') == std::string::npos ? 1 : r.rfind('/') + 1)) {
      base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    }
    std::string name = base + "-" + std::to_string(ref_rules_.size() + 1);
    ref_rules_[r] = name;
    const size_t slot = rules_.size();
    rules_.emplace_back(name, "");
    std::string ref_path = "$";
    for (char c : r.substr(1)) ref_path += c == '/' ? '.' : c;
    Result<std::string> body = visit(**target, ref_path, depth + 1);
    if (!body.ok()) return body.error();
    rules_[slot].second = *body;
    return name;
  }

  // A branch with its top-level $ref followed (for merging): the target merged with the
  // branch's other keywords.
  Result<json> followed(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return error_at(path, "$ref and allOf nested too deeply (a cycle?)");
    if (!s.is_object() || !s.contains("$ref")) return s;
    Result<const json*> target = resolve(s["$ref"], path);
    if (!target.ok()) return target.error();
    Result<json> t = followed(**target, path, depth + 1);
    if (!t.ok()) return t.error();
    json rest = s;
    rest.erase("$ref");
    Result<json> merged = schema::merge_schemas(*t, rest);
    if (!merged.ok()) return error_at(path, merged.error().message);
    return merged;
  }

  // --- schemas -----------------------------------------------------------------------
  // The rule expression (a rule name or a primitive) for the schema at `path`.
  Result<std::string> visit(const json& s, const std::string& path, int depth) {
    if (depth > kMaxDepth) return error_at(path, "the schema is nested too deeply");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return error_at(path, "the schema false allows nothing");
      use("value");
      return std::string("value");
    }
    if (!s.is_object()) return error_at(path, "a schema must be an object or true");
    for (const auto& [key, v] : s.items()) {
      if (!kKeywords.count(key) && !kAnnotations.count(key)) {
        return error_at(path, "unsupported keyword '" + key + "'");
      }
    }
    if (s.contains("$ref")) {
      if (!has_assertions(s, {"$ref"})) return ref_rule(s["$ref"], path, depth);
      Result<json> merged = followed(s, path, depth);
      if (!merged.ok()) return merged.error();
      return visit(*merged, path, depth + 1);
    }
    if (s.contains("allOf")) return visit_all_of(s, path, depth);
    if (s.contains("anyOf") || s.contains("oneOf")) return visit_any_of(s, path, depth);
    if (s.contains("const") || s.contains("enum")) return visit_values(s, path);
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
    } else {
      types = implied_types(s);
      if (types.empty()) {
        use("value");
        return std::string("value");
      }
    }
    std::string body;
    for (const std::string& t : types) {
      Result<std::string> r = visit_type(s, path, t, depth);
      if (!r.ok()) return r.error();
      body += (body.empty() ? "" : " | ") + *r;
    }
    return types.size() == 1 ? body : add_rule(body);
  }

  // Whether a JSON value is of one of the types `type` names (absent: any type).
  static bool of_type(const json& v, const json& s) {
    if (!s.contains("type")) return true;
    const json& t = s["type"];
    const json names = t.is_array() ? t : json::array({t});
    for (const json& n : names) {
      if (!n.is_string()) continue;
      const std::string name = n.get<std::string>();
      if ((name == "object" && v.is_object()) || (name == "array" && v.is_array()) ||
          (name == "string" && v.is_string()) || (name == "boolean" && v.is_boolean()) ||
          (name == "null" && v.is_null()) || (name == "number" && v.is_number()) ||
          (name == "integer" && v.is_number() &&
           (!v.is_number_float() || std::floor(v.get<double>()) == v.get<double>()))) {
        return true;
      }
    }
    return false;
  }

  // const or enum: the values as literals, those of the wrong `type` left out (enum) or
  // refused (const). Other keywords beside them are not checked against the values.
  Result<std::string> visit_values(const json& s, const std::string& path) {
    use("space");
    if (s.contains("const")) {
      if (!of_type(s["const"], s)) return error_at(path + ".const", "the value is not of 'type'");
      return add_rule(literal(s["const"]));
    }
    const json& e = s["enum"];
    if (!e.is_array() || e.empty()) return error_at(path + ".enum", "expected a non-empty array");
    std::string body;
    for (const json& v : e) {
      if (of_type(v, s)) body += (body.empty() ? "" : " | ") + literal(v);
    }
    if (body.empty()) return error_at(path + ".enum", "no value is of 'type'");
    return add_rule(body);
  }

  // Without `type`: the types the keywords describe (a subset of what the schema allows).
  static std::vector<std::string> implied_types(const json& s) {
    std::vector<std::string> types;
    auto any = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (any({"properties", "required", "additionalProperties"})) types.push_back("object");
    if (any({"items", "prefixItems", "additionalItems", "minItems", "maxItems"}))
      types.push_back("array");
    if (any({"pattern", "format", "minLength", "maxLength"})) types.push_back("string");
    if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}))
      types.push_back("integer");
    return types;
  }

  Result<std::string> visit_all_of(const json& s, const std::string& path, int depth) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.empty())
      return error_at(path + ".allOf", "expected a non-empty array");
    json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < all.size(); ++i) {
      const std::string at = path + ".allOf[" + std::to_string(i) + "]";
      Result<json> branch = followed(all[i], at, depth + 1);
      if (!branch.ok()) return branch.error();
      Result<json> m = schema::merge_schemas(merged, *branch);
      if (!m.ok()) return error_at(at, m.error().message);
      merged = std::move(*m);
    }
    return visit(merged, path, depth + 1);
  }

  Result<std::string> visit_any_of(const json& s, const std::string& path, int depth) {
    if (s.contains("anyOf") && s.contains("oneOf")) {
      return error_at(path, "'anyOf' and 'oneOf' together are not supported");
    }
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    const json& alts = s[key];
    if (!alts.is_array() || alts.empty())
      return error_at(path + "." + key, "expected a non-empty array");
    // Keywords beside anyOf apply to every branch: merge them in.
    json rest = s;
    rest.erase(key);
    const bool shared = has_assertions(rest, {});
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) {
      const std::string at = path + "." + key + "[" + std::to_string(i) + "]";
      Result<std::string> r = std::string();
      if (shared) {
        Result<json> branch = followed(alts[i], at, depth + 1);
        if (!branch.ok()) return branch.error();
        Result<json> m = schema::merge_schemas(rest, *branch);
        if (!m.ok()) return error_at(at, m.error().message);
        r = visit(*m, at, depth + 1);
      } else {
        r = visit(alts[i], at, depth + 1);
      }
      if (!r.ok()) return r.error();
      body += (body.empty() ? "" : " | ") + *r;
    }
    return add_rule(body);
  }

  // A non-negative integer keyword (minItems, maxLength, ...) up to kMaxCount; -1 if absent.
  static Result<int64_t> count(const json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return int64_t{-1};
    const json& v = s[key];
    const bool integral = v.is_number_integer() ||
                          (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!integral || v.get<double>() < 0)
      return error_at(path + "." + key, "expected a non-negative integer");
    if (v.get<double>() > static_cast<double>(kMaxCount)) {
      return error_at(path + "." + key,
                      format("at most %lld is supported", static_cast<long long>(kMaxCount)));
    }
    return static_cast<int64_t>(v.get<double>());
  }

  Result<std::string> visit_type(const json& s, const std::string& path, const std::string& t,
                                 int depth) {
    if (t == "string") return visit_string(s, path);
    if (t == "integer") return visit_integer(s, path);
    if (t == "number") return visit_number(s, path);
    if (t == "boolean" || t == "null") {
      use(t);
      return t;
    }
    if (t == "array") return visit_array(s, path, depth);
    if (t == "object") return visit_object(s, path, depth);
    return error_at(path + ".type", "unsupported type '" + t + "'");
  }

  Result<std::string> visit_string(const json& s, const std::string& path) {
    Result<int64_t> lo = count(s, "minLength", path);
    if (!lo.ok()) return lo.error();
    Result<int64_t> hi = count(s, "maxLength", path);
    if (!hi.ok()) return hi.error();
    const bool lengths = *lo >= 0 || *hi >= 0;
    if (s.contains("format") && s.contains("pattern"))
      return error_at(path, "'format' with 'pattern' is not supported");
    if (s.contains("format") || s.contains("pattern")) {
      const char* key = s.contains("format") ? "format" : "pattern";
      if (lengths)
        return error_at(path, format("'%s' with 'minLength'/'maxLength' is not supported", key));
      if (!s[key].is_string()) return error_at(path + "." + key, "expected a string");
      const std::string value = s[key].get<std::string>();
      use("space");
      if (s.contains("format")) {
        const char* rule = schema::format_rule(value);
        if (rule == nullptr) {
          return error_at(path + ".format", "unsupported format '" + value +
                                                "' (supported: date, time, date-time, uuid)");
        }
        use(rule);
        return std::string(rule);
      }
      Result<std::string> re = schema::regex_to_gbnf(value);
      if (!re.ok())
        return error_at(path + ".pattern",
                        "unsupported regex in 'pattern' (" + re.error().message + ")");
      return add_rule("\"\\\"\" " + *re + " \"\\\"\" space");
    }
    if (!lengths) {
      use("string");
      return std::string("string");
    }
    const int64_t min_len = std::max<int64_t>(*lo, 0);
    if (*hi >= 0 && *hi < min_len) return error_at(path + ".maxLength", "below minLength");
    use("char");
    use("space");
    const std::string rep = repetition(min_len, *hi);
    return add_rule("\"\\\"\" " + (*hi == 0 ? "" : "char" + rep + " ") + "\"\\\"\" space");
  }

  Result<std::string> visit_integer(const json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const json& v = s[k];
      if (!v.is_number()) return error_at(path + "." + k, "expected a number");
      const double x = v.get<double>();
      if (!(std::fabs(x) <= static_cast<double>(schema::kMaxIntegerBound))) {
        return error_at(path + "." + k, "out of the supported range (at most 10^18 in magnitude)");
      }
      const std::string key = k;
      // Integers only: exact for int64 values; floats round inward.
      const bool integral = v.is_number_integer();
      const int64_t iv = integral ? v.get<int64_t>() : 0;
      if (key == "minimum") {
        const int64_t b = integral ? iv : static_cast<int64_t>(std::ceil(x));
        lo = lo ? std::max(*lo, b) : b;
      } else if (key == "exclusiveMinimum") {
        const int64_t b = integral ? iv + 1 : static_cast<int64_t>(std::floor(x)) + 1;
        lo = lo ? std::max(*lo, b) : b;
      } else if (key == "maximum") {
        const int64_t b = integral ? iv : static_cast<int64_t>(std::floor(x));
        hi = hi ? std::min(*hi, b) : b;
      } else {
        const int64_t b = integral ? iv - 1 : static_cast<int64_t>(std::ceil(x)) - 1;
        hi = hi ? std::min(*hi, b) : b;
      }
    }
    if (!lo && !hi) {
      use("integer");
      return std::string("integer");
    }
    if (lo && hi && *lo > *hi)
      return error_at(path, format("no integer lies between the bounds (%lld > %lld)",
                                   static_cast<long long>(*lo), static_cast<long long>(*hi)));
    use("space");
    return add_rule(schema::integer_range(lo, hi) + " space");
  }

  // Bounds of any decimal value, exactly: the digits of each bound as the schema writes
  // it. The numbers are written without an exponent (schema::number_range).
  Result<std::string> visit_number(const json& s, const std::string& path) {
    std::optional<schema::NumberBound> lo, hi;
    for (const char* k : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!s.contains(k)) continue;
      const json& v = s[k];
      if (!v.is_number()) return error_at(path + "." + k, "expected a number");
      const std::string key = k;
      Result<schema::NumberBound> b =
          schema::parse_bound(v.dump(), key == "minimum" || key == "maximum");
      if (!b.ok()) return error_at(path + "." + k, b.error().message);
      const bool lower = key == "minimum" || key == "exclusiveMinimum";
      std::optional<schema::NumberBound>& side = lower ? lo : hi;
      const int c = side ? schema::compare_bounds(*b, *side) : (lower ? 1 : -1);
      if (c == 0) {
        side->inclusive = side->inclusive && b->inclusive;
      } else if ((c > 0) == lower) {
        side = *b;
      }
    }
    if (!lo && !hi) {
      use("number");
      return std::string("number");
    }
    if (lo && hi) {
      const int c = schema::compare_bounds(*lo, *hi);
      if (c > 0 || (c == 0 && !(lo->inclusive && hi->inclusive)))
        return error_at(path, "no number lies between the bounds");
    }
    use("space");
    return add_rule(schema::number_range(lo, hi) + " space");
  }

  Result<std::string> visit_array(const json& s, const std::string& path, int depth) {
    use("space");
    Result<int64_t> min_items = count(s, "minItems", path);
    if (!min_items.ok()) return min_items.error();
    Result<int64_t> max_items = count(s, "maxItems", path);
    if (!max_items.ok()) return max_items.error();
    // The tuple form of the drafts before 2020-12, `items` as an array, is prefixItems, and
    // its `additionalItems` is what `items` is now.
    const bool tuple = s.contains("items") && s["items"].is_array();
    if (tuple && s.contains("prefixItems"))
      return error_at(path + ".items",
                      "an array of schemas (the older tuple form) with 'prefixItems'");
    if (!tuple && s.contains("additionalItems"))
      return error_at(path + ".additionalItems",
                      "applies only with 'items' as an array (use 'items')");
    const std::string prefix_key = tuple ? "items" : "prefixItems";
    const std::string items_key = tuple ? "additionalItems" : "items";
    std::vector<std::string> prefix;
    if (s.contains(prefix_key)) {
      const json& p = s[prefix_key];
      if (!p.is_array()) return error_at(path + "." + prefix_key, "expected an array");
      for (size_t i = 0; i < p.size(); ++i) {
        Result<std::string> r =
            visit(p[i], path + "." + prefix_key + "[" + std::to_string(i) + "]", depth + 1);
        if (!r.ok()) return r.error();
        prefix.push_back(*r);
      }
    }
    const int64_t n = static_cast<int64_t>(prefix.size());
    // Further items: from `items`; with prefixItems and no `items`, none are written.
    std::string item;
    const bool items_false = s.contains(items_key) && s[items_key] == false;
    if (s.contains(items_key) && !items_false) {
      Result<std::string> r = visit(s[items_key], path + "." + items_key, depth + 1);
      if (!r.ok()) return r.error();
      item = *r;
    } else if (!s.contains(items_key) && n == 0) {
      use("value");
      item = "value";
    }
    // A grammar cannot keep items apart; uniqueItems holds of its own with one item at most.
    if (s.contains("uniqueItems")) {
      const json& u = s["uniqueItems"];
      if (!u.is_boolean()) return error_at(path + ".uniqueItems", "expected true or false");
      if (u.get<bool>() && !(*max_items >= 0 && *max_items <= 1) && !(item.empty() && n <= 1)) {
        return error_at(path + ".uniqueItems",
                        "true is not supported: a grammar cannot keep the items distinct");
      }
    }
    int64_t lo = std::max<int64_t>(0, *min_items - n);
    int64_t hi = item.empty() ? 0 : *max_items < 0 ? -1 : *max_items - n;
    if (*max_items >= 0 && *max_items < n) {
      return error_at(path + ".maxItems",
                      "below the number of prefixItems (all of them are written)");
    }
    if (*max_items >= 0 && *min_items > *max_items)
      return error_at(path + ".maxItems", "below minItems");
    if (hi >= 0 && lo > hi) return error_at(path + ".minItems", "more items than 'items' allows");
    std::string body = "\"[\" space";
    for (int64_t i = 0; i < n; ++i)
      body += (i ? " \",\" space " : " ") + prefix[static_cast<size_t>(i)];
    // Items after the first written one: ("," space item){lo,hi}, nothing when hi is 0.
    auto more = [&](int64_t m_lo, int64_t m_hi) {
      return m_hi == 0 ? std::string() : " (\",\" space " + item + ")" + repetition(m_lo, m_hi);
    };
    if (n > 0) {
      body += more(lo, hi);
    } else if (hi != 0 && lo == 0) {
      body += " (" + item + more(0, hi < 0 ? -1 : hi - 1) + ")?";
    } else if (hi != 0) {
      body += " " + item + more(lo - 1, hi < 0 ? -1 : hi - 1);
    }
    return add_rule(body + " \"]\" space");
  }

  Result<std::string> visit_object(const json& s, const std::string& path, int depth) {
    use("space");
    std::vector<std::pair<std::string, const json*>> props;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return error_at(path + ".properties", "expected an object");
      for (const auto& [k, v] : s["properties"].items()) props.emplace_back(k, &v);
    }
    // additionalProperties true or a schema: further pairs may follow the listed ones,
    // under keys that are none of the listed names (extra_tail after a written pair,
    // extra_body when none was written yet). Absent or false: none.
    std::string extra_tail;
    std::string extra_body;
    if (s.contains("additionalProperties") && s["additionalProperties"] != false) {
      Result<std::string> value =
          visit(s["additionalProperties"], path + ".additionalProperties", depth + 1);
      if (!value.ok()) return value.error();
      std::vector<std::string> names;
      for (const auto& p : props) {
        for (const char c : p.first) {
          const auto u = static_cast<unsigned char>(c);
          if (u >= 0x80 || u < 0x20 || u == 0x7F || c == '"' || c == '\\') {
            return error_at(path + ".additionalProperties",
                            "supported only when every property name is printable ASCII "
                            "without '\"' and '\\'");
          }
        }
        names.push_back(p.first);
      }
      use("plain-char");
      const std::string kv_extra =
          add_rule("\"\\\"\" " + other_key(names, 0) + " \"\\\"\" space \":\" space " + *value);
      extra_tail = add_rule("(\",\" space " + kv_extra + ")*");
      extra_body = add_rule("(" + kv_extra + " " + extra_tail + ")?");
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
    for (const auto& [name, sub] : props) {
      Result<std::string> r = visit(*sub, path + ".properties." + name, depth + 1);
      if (!r.ok()) return r.error();
      kv.push_back(literal(json(name)) + " \":\" space " + *r);
    }
    std::string tail_next = extra_tail;  // "" stands for the empty sequence
    std::string body_next = extra_body;
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

  // The characters of a key after its first `depth` ones, which every name in `names`
  // shares, such that the key is none of the names: a trie of the names, each node
  // allowing the end (unless a name ends there), any character that starts no name's
  // next, or a name's next character followed by the node below it.
  static std::string other_key(const std::vector<std::string>& names, size_t depth) {
    bool ends_here = false;
    std::map<char, std::vector<std::string>> next;
    for (const std::string& n : names) {
      if (n.size() == depth) {
        ends_here = true;
      } else {
        next[n[depth]].push_back(n);
      }
    }
    std::string excluded = R"(\x22\x5C\x00-\x1F\x7F)";
    std::vector<std::string> alts;
    if (!ends_here) alts.push_back("\"\"");
    for (const auto& [c, group] : next) {
      const std::string hex =
          format("\\x%02X", static_cast<unsigned>(static_cast<unsigned char>(c)));
      excluded += hex;
      alts.push_back("\"" + hex + "\" " + other_key(group, depth + 1));
    }
    alts.push_back("[^" + excluded + "] plain-char*");
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  const json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::map<std::string, std::string> ref_rules_;
  std::set<std::string> used_;
  size_t n_generated_ = 0;
};

// Errors quote keys, paths and patterns from the schema, whose strings may hold control
// characters ("\n" in a key); they are written as C escapes so the message stays one line.
Error one_line(Error e) {
  std::string out;
  for (const char c : e.message) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7f) {
      out += format("\\x%02x", u);
    } else {
      out += c;
    }
  }
  e.message = std::move(out);
  return e;
}

}  // namespace

Result<std::string> json_schema_to_grammar(std::string_view schema_text) {
  const json schema = json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return make_error(ErrorCode::kUsage, "not JSON");
  Result<std::string> gbnf = Converter(schema).run();
  if (!gbnf.ok()) return one_line(gbnf.error());
  // The converter writes valid GBNF; what can still fail is a $ref cycle that reaches
  // itself before any text (left recursion) or a grammar past the size limits.
  Result<Grammar> g = parse_grammar(*gbnf);
  if (!g.ok()) {
    return one_line(
        make_error(ErrorCode::kUsage, "the schema's grammar is refused: " + g.error().message));
  }
  return gbnf;
}

}  // namespace qrun
