// JSON in (messages, tools) and out (Python's json.dumps, which Hugging Face's tojson calls
// with ensure_ascii=False). Both walkers are depth-bounded.
#include <algorithm>
#include <cmath>

#include "core/jinja/jinja_text.h"
#include "core/jinja/jinja_value.h"

namespace qrun::jinja {
namespace {

Result<Value> from_json_at(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth)
    return raw_error(format("JSON nested more than %d levels deep", kMaxValueDepth));
  using Type = nlohmann::ordered_json::value_t;
  switch (j.type()) {
    case Type::null:
    case Type::discarded:
      return Value::none();
    case Type::boolean:
      return Value::boolean(j.get<bool>());
    case Type::number_integer:
      return Value::integer(j.get<int64_t>());
    case Type::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case Type::number_float:
      return Value::number(j.get<double>());
    case Type::string:
      return Value::string(j.get<std::string>());
    case Type::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& item : j) {
        QRUN_JINJA_ASSIGN(Value v, from_json_at(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case Type::object: {
      auto d = std::make_shared<Dict>();
      for (const auto& [key, item] : j.items()) {
        QRUN_JINJA_ASSIGN(Value v, from_json_at(item, depth + 1));
        d->set(std::string_view(key), std::move(v));
      }
      return Value::dict(std::move(d));
    }
    case Type::binary:
      break;
  }
  return raw_error("binary JSON values are not supported");
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      switch (b) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (b < 0x20 || (ensure_ascii && b == 0x7F)) {
            out += format("\\u%04x", b);
          } else {
            out += static_cast<char>(b);
          }
      }
      ++i;
      continue;
    }
    size_t len = 0;
    const uint32_t c = text::code_point_at(s, i, &len);
    if (!ensure_ascii) {
      out.append(s.substr(i, len));
    } else if (c < 0x10000) {
      out += format("\\u%04x", c);
    } else {
      const uint32_t v = c - 0x10000;
      out += format("\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
    i += len;
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return repr_float(d);
}

// The key of a JSON object as json.dumps converts it.
Result<std::string> json_key(const Value& key) {
  switch (key.kind()) {
    case Kind::kString:
      return key.as_string();
    case Kind::kInt:
      return std::to_string(key.as_int());
    case Kind::kFloat:
      return json_float(key.as_float());
    case Kind::kBool:
      return std::string(key.as_bool() ? "true" : "false");
    case Kind::kNone:
      return std::string("null");
    default:
      return raw_error(
          format("keys must be str, int, float, bool or None, not %s", type_name(key)));
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& o) : o_(o) {}

  Result<void> write(const Value& v, int depth) {
    if (depth > kMaxValueDepth)
      return raw_error(format("value nested more than %d levels deep", kMaxValueDepth));
    switch (v.kind()) {
      case Kind::kNone:
        out_ += "null";
        return {};
      case Kind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return {};
      case Kind::kInt:
        out_ += std::to_string(v.as_int());
        return {};
      case Kind::kFloat:
        out_ += json_float(v.as_float());
        return {};
      case Kind::kString:
        append_json_string(out_, v.as_string(), o_.ensure_ascii);
        return {};
      case Kind::kList:
      case Kind::kTuple:
        return write_list(v.items(), depth);
      case Kind::kDict:
        return write_dict(v.dict_ref(), depth);
      default:
        return raw_error(format("Object of type %s is not JSON serializable", type_name(v)));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int depth) {
    if (!o_.has_indent) return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i) out_ += o_.indent;
  }

  Result<void> write_list(const ValueList& items, int depth) {
    if (items.empty()) {
      out_ += "[]";
      return {};
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out_ += o_.item_separator;
      newline(depth + 1);
      QRUN_TRY(write(items[i], depth + 1));
    }
    newline(depth);
    out_ += ']';
    return {};
  }

  Result<void> write_dict(const Dict& d, int depth) {
    if (d.empty()) {
      out_ += "{}";
      return {};
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const Dict::Entry& e : d.entries()) {
      QRUN_JINJA_ASSIGN(std::string key, json_key(e.first));
      entries.emplace_back(std::move(key), &e.second);
    }
    if (o_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out_ += o_.item_separator;
      newline(depth + 1);
      append_json_string(out_, entries[i].first, o_.ensure_ascii);
      out_ += o_.key_separator;
      QRUN_TRY(write(*entries[i].second, depth + 1));
    }
    newline(depth);
    out_ += '}';
    return {};
  }

  const JsonOptions& o_;
  std::string out_;
};

}  // namespace

Result<Value> from_json(const nlohmann::ordered_json& j) {
  return from_json_at(j, 0);
}

Result<std::string> to_json(const Value& v, const JsonOptions& options) {
  JsonWriter w(options);
  QRUN_TRY(w.write(v, 0));
  return w.take();
}

}  // namespace qrun::jinja
