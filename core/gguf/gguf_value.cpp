// gguf::Value helpers: kind checks, numeric conversion and display. Display strings are
// one line of printable text whatever the value holds.
#include <cinttypes>

#include "core/gguf/gguf.h"

namespace qrun::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
      return "u8";
    case ValueType::kInt8:
      return "i8";
    case ValueType::kUint16:
      return "u16";
    case ValueType::kInt16:
      return "i16";
    case ValueType::kUint32:
      return "u32";
    case ValueType::kInt32:
      return "i32";
    case ValueType::kFloat32:
      return "f32";
    case ValueType::kBool:
      return "bool";
    case ValueType::kString:
      return "string";
    case ValueType::kArray:
      return "array";
    case ValueType::kUint64:
      return "u64";
    case ValueType::kInt64:
      return "i64";
    case ValueType::kFloat64:
      return "f64";
  }
  return "unknown";
}

bool is_integer_type(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kUint16:
    case ValueType::kInt16:
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kUint64:
    case ValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool Value::is_integer() const {
  return is_integer_type(type());
}

int64_t Value::as_int() const {
  return std::visit(
      [](const auto& v) -> int64_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_integral_v<V>) {
          return static_cast<int64_t>(v);
        } else {
          QRUN_CHECK(false, "gguf value is not an integer");
          return 0;
        }
      },
      data);
}

double Value::as_double() const {
  return std::visit(
      [](const auto& v) -> double {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_arithmetic_v<V>) {
          return static_cast<double>(v);
        } else {
          QRUN_CHECK(false, "gguf value is not a number");
          return 0;
        }
      },
      data);
}

std::string Value::to_display_string(size_t max_items) const {
  return std::visit(
      [max_items](const auto& v) -> std::string {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, std::string>) {
          // At most 77 bytes, cut on a UTF-8 boundary; control bytes escaped so a
          // file cannot move the terminal's cursor.
          size_t n = v.size();
          if (n > 80) {
            n = 77;
            while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xc0) == 0x80) --n;
          }
          std::string out = "\"";
          for (size_t i = 0; i < n; ++i) {
            const auto c = static_cast<unsigned char>(v[i]);
            if (c == '\n')
              out += "\\n";
            else if (c == '\t')
              out += "\\t";
            else if (c == '"')
              out += "\\\"";
            else if (c == '\\')
              out += "\\\\";
            else if (c < 0x20 || c == 0x7f)
              out += format("\\x%02x", c);
            else
              out += static_cast<char>(c);
          }
          return out + (n < v.size() ? "...\"" : "\"");
        } else if constexpr (std::is_same_v<V, Array>) {
          if (v.items.size() > max_items) {
            return format("[%zu %s]", v.items.size(), value_type_name(v.elem_type));
          }
          std::string out = "[";
          for (size_t i = 0; i < v.items.size(); ++i) {
            if (i) out += ", ";
            out += v.items[i].to_display_string(max_items);
          }
          return out + "]";
        } else if constexpr (std::is_same_v<V, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_floating_point_v<V>) {
          return format("%g", static_cast<double>(v));
        } else if constexpr (std::is_signed_v<V>) {
          return format("%" PRId64, static_cast<int64_t>(v));
        } else {
          return format("%" PRIu64, static_cast<uint64_t>(v));
        }
      },
      data);
}

}  // namespace qrun::gguf
