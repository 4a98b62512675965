// gguf::Writer: GGUF v3 in llama.cpp's layout. Header, metadata (in first-set order) and
// tensor infos, zero padding to the alignment, then each tensor's data padded to the
// alignment (the last one too). Tensor data come from fill callbacks, one tensor at a
// time into one reused buffer; files are written to "<path>.tmp" and renamed into place.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_set>

#include "core/gguf/gguf.h"
#include "core/gguf/replacing_file.h"

namespace qrun::gguf {
namespace {

constexpr char kAlignmentKey[] = "general.alignment";
constexpr uint32_t kMagicWord = 0x46554747;  // "GGUF" read as a little-endian u32

// Appends little-endian encodings to a byte vector.
class Encoder {
 public:
  std::vector<uint8_t> bytes;

  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
  void put_value(const Value& v) {
    std::visit(
        [this](const auto& x) {
          using V = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<V, std::string>) {
            put_string(x);
          } else if constexpr (std::is_same_v<V, Array>) {
            put<uint32_t>(static_cast<uint32_t>(x.elem_type));
            put<uint64_t>(x.items.size());
            for (const Value& item : x.items) {
              QRUN_CHECK(item.type() == x.elem_type, "gguf array of %s holds a %s",
                         value_type_name(x.elem_type), value_type_name(item.type()));
              put_value(item);
            }
          } else if constexpr (std::is_same_v<V, bool>) {
            put<uint8_t>(x ? 1 : 0);
          } else {
            put<V>(x);
          }
        },
        v.data);
  }
};

size_t align_up(size_t n, size_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

// Everything before the data section, padded to the alignment.
std::vector<uint8_t> encode_header(const std::vector<KeyValue>& kvs, size_t n_tensors,
                                   size_t alignment) {
  Encoder e;
  e.bytes.reserve(4096);
  e.put<uint32_t>(kMagicWord);
  e.put<uint32_t>(3);
  e.put<uint64_t>(n_tensors);
  // The alignment is the constructor's; a "general.alignment" key set by hand must agree.
  bool add_alignment_key = alignment != kDefaultAlignment;
  for (const KeyValue& kv : kvs) {
    if (kv.key != kAlignmentKey) continue;
    QRUN_CHECK(
        kv.value.type() == ValueType::kUint32 && std::get<uint32_t>(kv.value.data) == alignment,
        "key '%s' must be the u32 %zu given to the Writer", kAlignmentKey, alignment);
    add_alignment_key = false;
  }
  e.put<uint64_t>(kvs.size() + (add_alignment_key ? 1 : 0));
  for (const KeyValue& kv : kvs) {
    e.put_string(kv.key);
    e.put<uint32_t>(static_cast<uint32_t>(kv.value.type()));
    e.put_value(kv.value);
  }
  if (add_alignment_key) {
    e.put_string(kAlignmentKey);
    e.put<uint32_t>(static_cast<uint32_t>(ValueType::kUint32));
    e.put<uint32_t>(static_cast<uint32_t>(alignment));
  }
  return std::move(e.bytes);
}

}  // namespace

void Writer::set(std::string key, Value value) {
  for (KeyValue& kv : kvs_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  kvs_.push_back(KeyValue{std::move(key), std::move(value)});
}

void Writer::set_string_array(std::string key, const std::vector<std::string>& values) {
  Array a{ValueType::kString, {}};
  a.items.reserve(values.size());
  for (const std::string& s : values) a.items.push_back(Value{s});
  set(std::move(key), Value{std::move(a)});
}

void Writer::set_float_array(std::string key, const std::vector<float>& values) {
  Array a{ValueType::kFloat32, {}};
  a.items.reserve(values.size());
  for (float f : values) a.items.push_back(Value{f});
  set(std::move(key), Value{std::move(a)});
}

void Writer::set_i32_array(std::string key, const std::vector<int32_t>& values) {
  Array a{ValueType::kInt32, {}};
  a.items.reserve(values.size());
  for (int32_t i : values) a.items.push_back(Value{i});
  set(std::move(key), Value{std::move(a)});
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> shape, FillFn fill) {
  QRUN_CHECK(!shape.empty() && shape.size() <= kMaxDims, "tensor '%s' has %zu dimensions",
             name.c_str(), shape.size());
  int64_t rows = 1;
  for (int64_t ne : shape) {
    QRUN_CHECK(ne >= 1, "tensor '%s' has a dimension of %lld", name.c_str(),
               static_cast<long long>(ne));
  }
  for (size_t d = 1; d < shape.size(); ++d) rows *= shape[d];
  const TypeTraits& traits = type_traits(type);
  QRUN_CHECK(shape[0] % traits.block_elems == 0,
             "tensor '%s' (%s) row of %lld elements is not a multiple of %lld", name.c_str(),
             traits.name, static_cast<long long>(shape[0]),
             static_cast<long long>(traits.block_elems));
  for (const PendingTensor& t : tensors_) {
    QRUN_CHECK(t.name != name, "duplicate tensor '%s'", name.c_str());
  }
  const size_t n_bytes = row_size(type, shape[0]) * static_cast<size_t>(rows);
  tensors_.push_back(
      PendingTensor{std::move(name), type, std::move(shape), std::move(fill), n_bytes});
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> shape,
                        std::span<const uint8_t> data) {
  auto copy = std::make_shared<std::vector<uint8_t>>(data.begin(), data.end());
  const std::string label = name;
  add_tensor(std::move(name), type, std::move(shape), [copy, label](std::span<uint8_t> out) {
    QRUN_CHECK(out.size() == copy->size(), "tensor '%s': %zu data bytes given, %zu expected",
               label.c_str(), copy->size(), out.size());
    std::memcpy(out.data(), copy->data(), out.size());
  });
}

namespace {

// Streams a Writer's file through `sink(bytes, n) -> bool`; stops at the first false.
template <class Sink>
bool emit(const std::vector<KeyValue>& kvs, size_t alignment, const auto& tensors, Sink&& sink) {
  QRUN_CHECK(alignment != 0 && (alignment & (alignment - 1)) == 0 && alignment <= UINT32_MAX,
             "gguf alignment %zu is not a power of two", alignment);
  std::vector<uint8_t> head = encode_header(kvs, tensors.size(), alignment);
  // Tensor infos; offsets are relative to the data section, each padded to the alignment.
  Encoder infos;
  infos.bytes = std::move(head);
  uint64_t offset = 0;
  size_t max_bytes = 0;
  for (const auto& t : tensors) {
    infos.put_string(t.name);
    infos.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t ne : t.shape) infos.put<int64_t>(ne);
    infos.put<uint32_t>(static_cast<uint32_t>(t.type));
    infos.put<uint64_t>(offset);
    offset += align_up(t.n_bytes, alignment);
    max_bytes = std::max(max_bytes, t.n_bytes);
  }
  infos.bytes.resize(align_up(infos.bytes.size(), alignment), 0);
  if (!sink(infos.bytes.data(), infos.bytes.size())) return false;
  infos.bytes = {};

  std::vector<uint8_t> buffer;
  buffer.reserve(align_up(max_bytes, alignment));
  for (const auto& t : tensors) {
    const size_t padded = align_up(t.n_bytes, alignment);
    buffer.assign(padded, 0);
    t.fill(std::span<uint8_t>(buffer.data(), t.n_bytes));
    if (!sink(buffer.data(), padded)) return false;
  }
  return true;
}

}  // namespace

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out;
  emit(kvs_, alignment_, tensors_, [&out](const uint8_t* p, size_t n) {
    out.insert(out.end(), p, p + n);
    return true;
  });
  return out;
}

Result<void> Writer::write(const std::string& path) const {
  Result<ReplacingFile> file = ReplacingFile::create(path);
  if (!file) return file.error();
  int write_errno = 0;
  const bool ok = emit(kvs_, alignment_, tensors_, [&](const uint8_t* p, size_t n) {
    if (std::fwrite(p, 1, n, file->get()) == n) return true;
    write_errno = errno != 0 ? errno : EIO;
    return false;
  });
  return file->commit(ok ? 0 : (write_errno != 0 ? write_errno : EIO));
}

}  // namespace qrun::gguf
