// allOf as one schema: the branches' keywords combined so that what the merged schema
// generates is valid under every branch. Objects stay closed as everywhere in the
// converter: a branch with additionalProperties false keeps the merged properties to its
// own, and a property required by one branch but forbidden by another is an error.
#include <algorithm>
#include <set>

#include "core/grammar/json_schema_internal.h"

namespace qrun::schema {
namespace {

const std::set<std::string> kAnnotations = {
    "title",   "description", "$schema",     "$id",      "$comment",  "examples",
    "default", "$defs",       "definitions", "readOnly", "writeOnly", "deprecated"};

Error cannot(const std::string& what) {
  return make_error(ErrorCode::kUsage, "allOf: " + what);
}

std::vector<std::string> type_list(const json& t) {
  std::vector<std::string> out;
  if (t.is_string()) out.push_back(t.get<std::string>());
  if (t.is_array()) {
    for (const json& x : t) {
      if (x.is_string()) out.push_back(x.get<std::string>());
    }
  }
  return out;
}

Result<json> intersect_types(const json& a, const json& b) {
  const std::vector<std::string> ta = type_list(a);
  const std::vector<std::string> tb = type_list(b);
  json out = json::array();
  for (const std::string& x : ta) {
    for (const std::string& y : tb) {
      if (x == y || (x == "integer" && y == "number")) out.push_back(x);
      if (x == "number" && y == "integer") out.push_back(y);
    }
  }
  if (out.empty())
    return cannot("no type satisfies every branch ('type' " + a.dump() + " and " + b.dump() + ")");
  if (out.size() == 1) return out[0];
  return out;
}

bool closed(const json& s) {
  return s.contains("additionalProperties") && s["additionalProperties"] == false;
}

Result<void> merge_properties(json& out, const json& a, const json& b) {
  json props = json::object();
  const json none = json::object();
  const json& pa = a.contains("properties") ? a["properties"] : none;
  const json& pb = b.contains("properties") ? b["properties"] : none;
  if (!pa.is_object() || !pb.is_object()) return cannot("'properties' must be objects");
  // A property only one branch lists is, in the other, under its additionalProperties.
  auto with_extra = [](const json& v, const json& other) {
    if (!other.contains("additionalProperties") || !other["additionalProperties"].is_object()) {
      return v;
    }
    return json{{"allOf", json::array({v, other["additionalProperties"]})}};
  };
  for (auto it = pa.begin(); it != pa.end(); ++it) {
    const json& v = it.value();
    if (pb.contains(it.key())) {
      props[it.key()] = pb[it.key()] == v ? v : json{{"allOf", json::array({v, pb[it.key()]})}};
    } else {
      props[it.key()] = with_extra(v, b);
    }
  }
  for (auto it = pb.begin(); it != pb.end(); ++it) {
    if (!props.contains(it.key())) props[it.key()] = with_extra(it.value(), a);
  }
  // A closed branch forbids the other branch's extra properties.
  json kept = json::object();
  for (const auto& [k, v] : props.items()) {
    if ((closed(a) && !pa.contains(k)) || (closed(b) && !pb.contains(k))) continue;
    kept[k] = v;
  }
  json required = json::array();
  for (const json* r : {&a, &b}) {
    if (!r->contains("required")) continue;
    if (!(*r)["required"].is_array()) return cannot("'required' must be an array");
    for (const json& name : (*r)["required"]) {
      if (!name.is_string()) return cannot("'required' must list property names");
      if (std::find(required.begin(), required.end(), name) != required.end()) continue;
      if (!kept.contains(name.get<std::string>()) && (closed(a) || closed(b))) {
        return cannot("'" + name.get<std::string>() +
                      "' is required by one branch and not allowed by another");
      }
      required.push_back(name);
    }
  }
  if (!kept.empty()) out["properties"] = kept;
  if (!required.empty()) out["required"] = required;
  if (closed(a) || closed(b)) {
    out["additionalProperties"] = false;
  } else {
    const json* xa = a.contains("additionalProperties") ? &a["additionalProperties"] : nullptr;
    const json* xb = b.contains("additionalProperties") ? &b["additionalProperties"] : nullptr;
    if (xa && xb) {
      out["additionalProperties"] = json{{"allOf", json::array({*xa, *xb})}};
    } else if (xa || xb) {
      out["additionalProperties"] = xa ? *xa : *xb;
    }
  }
  return {};
}

}  // namespace

Result<json> merge_schemas(const json& a, const json& b) {
  if (a.is_boolean() && a.get<bool>()) return b;
  if (b.is_boolean() && b.get<bool>()) return a;
  if (!a.is_object() || !b.is_object()) return cannot("a branch is not a schema object");
  json out = a;
  for (const std::string k : {"properties", "required", "additionalProperties"}) out.erase(k);
  const bool objects = a.contains("properties") || b.contains("properties") ||
                       a.contains("required") || b.contains("required") ||
                       a.contains("additionalProperties") || b.contains("additionalProperties");
  if (objects) QRUN_TRY(merge_properties(out, a, b));
  for (const auto& [k, v] : b.items()) {
    if (k == "properties" || k == "required" || k == "additionalProperties") continue;
    if (!out.contains(k)) {
      out[k] = v;
      continue;
    }
    json& cur = out[k];
    if (cur == v || kAnnotations.count(k)) continue;
    if (k == "type") {
      Result<json> t = intersect_types(cur, v);
      if (!t.ok()) return t.error();
      cur = *t;
    } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
      if (!cur.is_number() || !v.is_number()) return cannot("'" + k + "' must be a number");
      if (v.get<double>() > cur.get<double>()) cur = v;
    } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
      if (!cur.is_number() || !v.is_number()) return cannot("'" + k + "' must be a number");
      if (v.get<double>() < cur.get<double>()) cur = v;
    } else if (k == "enum") {
      if (!cur.is_array() || !v.is_array()) return cannot("'enum' must be an array");
      json common = json::array();
      for (const json& x : cur) {
        if (std::find(v.begin(), v.end(), x) != v.end()) common.push_back(x);
      }
      if (common.empty()) return cannot("the branches' enums have no value in common");
      cur = common;
    } else if (k == "allOf") {
      if (!cur.is_array() || !v.is_array()) return cannot("'allOf' must be an array");
      for (const json& x : v) cur.push_back(x);
    } else {
      return cannot("the branches give '" + k + "' different values, which cannot be merged");
    }
  }
  return out;
}

}  // namespace qrun::schema
