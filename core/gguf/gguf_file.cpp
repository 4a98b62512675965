// gguf::File lookups: find a key or tensor, and typed getters that turn a missing key
// or a value of the wrong type into an Error naming the file and the key.
// Lookups are linear scans: files hold tens of keys and at most a few thousand tensors.
#include <cinttypes>
#include <limits>

#include "core/gguf/gguf.h"

namespace qrun::gguf {

Error File::error(ErrorCode code, const std::string& message) const {
  return make_error(code, path_ + ": " + message);
}

const Value* File::find(std::string_view key) const {
  for (const KeyValue& kv : kvs_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

std::string type_description(const Value& v) {
  if (v.type() != ValueType::kArray) return value_type_name(v.type());
  return std::string("array of ") + value_type_name(v.as_array().elem_type);
}

bool is_number_type(ValueType t) {
  return is_integer_type(t) || t == ValueType::kFloat32 || t == ValueType::kFloat64;
}

// The value at `key`, or an Error when it is missing (only when `required`) or is not
// of the kind `ok` accepts; a missing optional key gives nullptr.
template <class Pred>
Result<const Value*> lookup(const File& f, std::string_view key, bool required,
                            const char* expected, Pred ok) {
  const Value* v = f.find(key);
  if (v == nullptr) {
    if (!required) return static_cast<const Value*>(nullptr);
    return f.error(ErrorCode::kFormat,
                   format("key '%.*s' is missing", static_cast<int>(key.size()), key.data()));
  }
  if (!ok(*v)) {
    return f.error(ErrorCode::kFormat,
                   format("key '%.*s' has type %s, expected %s", static_cast<int>(key.size()),
                          key.data(), type_description(*v).c_str(), expected));
  }
  return v;
}

bool int_value(const Value& v) {
  return is_integer_type(v.type());
}
bool number_value(const Value& v) {
  return is_number_type(v.type());
}
bool bool_value(const Value& v) {
  return v.type() == ValueType::kBool;
}
bool string_value(const Value& v) {
  return v.type() == ValueType::kString;
}

Result<int64_t> checked_int(const File& f, std::string_view key, const Value& v) {
  if (v.type() == ValueType::kUint64 &&
      std::get<uint64_t>(v.data) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return f.error(ErrorCode::kFormat,
                   format("key '%.*s' value %" PRIu64 " does not fit in a signed 64-bit integer",
                          static_cast<int>(key.size()), key.data(), std::get<uint64_t>(v.data)));
  }
  return v.as_int();
}

}  // namespace

Result<int64_t> File::get_int(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "an integer", int_value);
  if (!v) return v.error();
  return checked_int(*this, key, **v);
}

Result<int64_t> File::get_int_or(std::string_view key, int64_t fallback) const {
  Result<const Value*> v = lookup(*this, key, false, "an integer", int_value);
  if (!v) return v.error();
  if (*v == nullptr) return fallback;
  return checked_int(*this, key, **v);
}

Result<double> File::get_float(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "a number", number_value);
  if (!v) return v.error();
  return (*v)->as_double();
}

Result<double> File::get_float_or(std::string_view key, double fallback) const {
  Result<const Value*> v = lookup(*this, key, false, "a number", number_value);
  if (!v) return v.error();
  if (*v == nullptr) return fallback;
  return (*v)->as_double();
}

Result<bool> File::get_bool(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "bool", bool_value);
  if (!v) return v.error();
  return std::get<bool>((*v)->data);
}

Result<bool> File::get_bool_or(std::string_view key, bool fallback) const {
  Result<const Value*> v = lookup(*this, key, false, "bool", bool_value);
  if (!v) return v.error();
  if (*v == nullptr) return fallback;
  return std::get<bool>((*v)->data);
}

Result<std::string> File::get_string(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "string", string_value);
  if (!v) return v.error();
  return (*v)->as_string();
}

Result<std::string> File::get_string_or(std::string_view key, std::string fallback) const {
  Result<const Value*> v = lookup(*this, key, false, "string", string_value);
  if (!v) return v.error();
  if (*v == nullptr) return fallback;
  return (*v)->as_string();
}

Result<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "array of string", [](const Value& x) {
    return x.type() == ValueType::kArray && x.as_array().elem_type == ValueType::kString;
  });
  if (!v) return v.error();
  std::vector<std::string> out;
  out.reserve((*v)->as_array().items.size());
  for (const Value& item : (*v)->as_array().items) out.push_back(item.as_string());
  return out;
}

Result<std::vector<float>> File::get_float_array(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "array of numbers", [](const Value& x) {
    return x.type() == ValueType::kArray && is_number_type(x.as_array().elem_type);
  });
  if (!v) return v.error();
  std::vector<float> out;
  out.reserve((*v)->as_array().items.size());
  for (const Value& item : (*v)->as_array().items) {
    out.push_back(static_cast<float>(item.as_double()));
  }
  return out;
}

Result<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  Result<const Value*> v = lookup(*this, key, true, "array of integers", [](const Value& x) {
    return x.type() == ValueType::kArray && is_integer_type(x.as_array().elem_type);
  });
  if (!v) return v.error();
  std::vector<int64_t> out;
  out.reserve((*v)->as_array().items.size());
  for (const Value& item : (*v)->as_array().items) {
    Result<int64_t> i = checked_int(*this, key, item);
    if (!i) return i.error();
    out.push_back(*i);
  }
  return out;
}

}  // namespace qrun::gguf
