// GGUF v2/v3 files: a bounded reader over a read-only mmap, and a writer.
// The reader validates every field against the bytes that remain and against sane
// limits before it allocates; every failure is an Error whose one-line message names
// the file, the byte offset and the key or tensor. Tensor data are non-owning views
// into the mapping, which lives as long as the File.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ggml-like/result.h"
#include "ggml-like/tensor.h"

namespace qrun::gguf {

// Metadata value types; the numbers are GGUF's.
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* value_type_name(ValueType t);
bool is_integer_type(ValueType t);  // the eight integer types (not bool)

struct Value;
struct Array {
  ValueType elem_type = ValueType::kUint8;
  std::vector<Value> items;
};

// A metadata value. The variant's alternatives are in GGUF type-id order, so
// data.index() == static_cast<size_t>(type()).
struct Value {
  std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
               Array, uint64_t, int64_t, double>
      data;

  ValueType type() const { return static_cast<ValueType>(data.index()); }
  bool is_integer() const;
  bool is_float() const { return type() == ValueType::kFloat32 || type() == ValueType::kFloat64; }
  // Conversions; QRUN_CHECK the kind (use the File getters for checked access by key).
  int64_t as_int() const;    // any integer type or bool
  double as_double() const;  // any integer or float type
  const std::string& as_string() const { return std::get<std::string>(data); }
  const Array& as_array() const { return std::get<Array>(data); }
  // Short human-readable rendering ("[32000 string]" for long arrays).
  std::string to_display_string(size_t max_items = 8) const;
};

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  DType type = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, 4> ne = {1, 1, 1, 1};  // ne[0] is the row length
  uint64_t offset = 0;                       // relative to the start of the data section
  uint64_t file_offset = 0;                  // absolute offset in the file
  size_t n_bytes = 0;
  const uint8_t* data = nullptr;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  Tensor view() const { return Tensor{type, n_dims, ne, data, name}; }
};

// Sanity limits. A count beyond them is rejected before anything is allocated.
inline constexpr uint64_t kMaxTensors = 1u << 20;
inline constexpr uint64_t kMaxKeyValues = 1u << 20;
inline constexpr uint64_t kMaxStringBytes = 1u << 28;
inline constexpr uint32_t kMaxArrayDepth = 8;
// All metadata values together, array items included (each costs a Value in memory).
inline constexpr uint64_t kMaxMetadataValues = 1u << 24;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr size_t kDefaultAlignment = 32;

class File {
 public:
  // Maps and parses a file; the error names `path`.
  static Result<File> open(const std::string& path);
  // Parses bytes held in memory (tests, fuzzing); the error names `name`.
  static Result<File> from_bytes(std::vector<uint8_t> bytes, std::string name);

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  uint64_t data_offset() const { return data_offset_; }
  // The bytes before the tensor data: header, metadata and tensor infos (what identifies a
  // model for a saved KV state).
  std::span<const uint8_t> header_bytes() const {
    return {base_, static_cast<size_t>(std::min<uint64_t>(data_offset_, size_))};
  }
  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;

  // Typed access by key. A missing key or a value of the wrong type is an Error
  // ("model.gguf: key 'llama.block_count' is missing").
  Result<int64_t> get_int(std::string_view key) const;   // any integer type
  Result<double> get_float(std::string_view key) const;  // any number
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string> get_string(std::string_view key) const;
  Result<std::vector<std::string>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  // Same, with a default for a missing key (a present key of the wrong type is still an Error).
  Result<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  Result<double> get_float_or(std::string_view key, double fallback) const;
  Result<bool> get_bool_or(std::string_view key, bool fallback) const;
  Result<std::string> get_string_or(std::string_view key, std::string fallback) const;

  // An Error about this file: "<path>: <message>" with the given code.
  Error error(ErrorCode code, const std::string& message) const;

 private:
  File() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  uint32_t version_ = 0;
  size_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;

  friend class Parser;
};

// Writes GGUF v3 files that llama.cpp reads. Tensor data are produced on demand by a
// fill callback, so a multi-gigabyte model is written without holding it in memory.
class Writer {
 public:
  using FillFn = std::function<void(std::span<uint8_t> out)>;

  explicit Writer(size_t alignment = kDefaultAlignment) : alignment_(alignment) {}

  // Sets (or replaces) a metadata value; keys are written in first-set order.
  void set(std::string key, Value value);
  void set_string(std::string key, std::string value) {
    set(std::move(key), Value{std::move(value)});
  }
  void set_u32(std::string key, uint32_t value) { set(std::move(key), Value{value}); }
  void set_i32(std::string key, int32_t value) { set(std::move(key), Value{value}); }
  void set_f32(std::string key, float value) { set(std::move(key), Value{value}); }
  void set_bool(std::string key, bool value) { set(std::move(key), Value{value}); }
  void set_string_array(std::string key, const std::vector<std::string>& values);
  void set_float_array(std::string key, const std::vector<float>& values);
  void set_i32_array(std::string key, const std::vector<int32_t>& values);

  // Adds a tensor. `shape` is in GGML order (shape[0] = row length).
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape, FillFn fill);
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape,
                  std::span<const uint8_t> data);  // data are copied

  // Writes to `path` through a temporary file renamed into place.
  Result<void> write(const std::string& path) const;
  // The whole file in memory (tests).
  std::vector<uint8_t> to_bytes() const;

 private:
  struct PendingTensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    FillFn fill;
    size_t n_bytes;
  };
  size_t alignment_;
  std::vector<KeyValue> kvs_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace qrun::gguf
