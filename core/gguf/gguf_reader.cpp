// GGUF v2/v3 parsing into a File, from a read-only mmap or from bytes held in memory.
// Every read is bounded by the bytes that remain; every count is checked against the
// kMax* limits and against the minimum bytes its entries need before anything is
// allocated; sizes use checked arithmetic. The first failure stops the parse and becomes
// an Error whose one-line message names the file, the byte offset and the key or tensor.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <numeric>
#include <unordered_set>

#include "core/gguf/gguf.h"
#include "core/gguf/mapped_files.h"

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

namespace qrun::gguf {

// Owns the bytes a File points into: an mmap of a file, or a vector from from_bytes().
// A mapping is registered (mapped_files.h) under its path while it lives, so that a SIGBUS
// from the file shrinking under it can be reported.
struct File::Mapping {
  std::vector<uint8_t> bytes;
  void* addr = nullptr;
  size_t length = 0;
  std::string path;
  int registration = -1;

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    unregister_mapped_file(registration);
    if (addr != nullptr) munmap(addr, length);
  }
};

File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMaxValueType = static_cast<uint32_t>(ValueType::kFloat64);
// Smallest possible encodings, used to bound counts by the bytes that remain.
constexpr size_t kMinKeyValueBytes = 8 + 4 + 1;  // key length, type, 1-byte value
constexpr size_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;                       // name length, n_dims, 1 dim, type, offset
constexpr size_t kArrayHeaderBytes = 4 + 8;  // element type, count

size_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::kUint8:
    case ValueType::kInt8:
    case ValueType::kBool:
      return 1;
    case ValueType::kUint16:
    case ValueType::kInt16:
      return 2;
    case ValueType::kUint32:
    case ValueType::kInt32:
    case ValueType::kFloat32:
      return 4;
    case ValueType::kUint64:
    case ValueType::kInt64:
    case ValueType::kFloat64:
    case ValueType::kString:
      return 8;
    case ValueType::kArray:
      return kArrayHeaderBytes;
  }
  return 1;
}

bool is_power_of_two(uint64_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

// Bytes as one printable line for messages: control bytes, quotes and backslashes become
// \xNN escapes (UTF-8 passes through), and long names are cut to `max_bytes`.
std::string printable(std::string_view s, size_t max_bytes = 120) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\') {
      out += format("\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > max_bytes) out += format("...(%zu bytes)", s.size());
  return out;
}

}  // namespace

// Walks the bytes once, filling the File. Methods return false after recording the
// first error in err_; run() turns that into the Result.
class Parser {
 public:
  explicit Parser(File& file) : f_(file) {}

  Result<void> run() {
    if (!parse()) return err_;
    return {};
  }

 private:
  File& f_;
  size_t pos_ = 0;
  std::string subject_;  // "key 'general.name'", "tensor 'output.weight'", or empty
  Error err_;
  uint64_t n_values_ = 0;  // metadata values so far, array items included

  size_t remaining() const { return f_.size_ - pos_; }

  bool fail(ErrorCode code, size_t offset, const std::string& detail) {
    std::string msg = format("%s: offset %zu: ", f_.path_.c_str(), offset);
    if (!subject_.empty()) msg += subject_ + ": ";
    err_ = make_error(code, msg + detail);
    return false;
  }

  bool need(size_t n, const char* what) {
    if (n <= remaining()) return true;
    return fail(
        ErrorCode::kFormat, pos_,
        format("unexpected end of file: %s needs %zu bytes, %zu remain", what, n, remaining()));
  }

  template <class T>
  bool read(T& out, const char* what) {
    if (!need(sizeof(T), what)) return false;
    std::memcpy(&out, f_.base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }

  bool read_string(std::string& out, const char* what) {
    const size_t at = pos_;
    uint64_t len = 0;
    if (!read(len, what)) return false;
    if (len > kMaxStringBytes) {
      return fail(ErrorCode::kFormat, at,
                  format("%s length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes", what, len,
                         kMaxStringBytes));
    }
    if (len > remaining()) {
      return fail(ErrorCode::kFormat, at,
                  format("%s length %" PRIu64 " runs past the end of the file (%zu bytes remain)",
                         what, len, remaining()));
    }
    out.assign(reinterpret_cast<const char*>(f_.base_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return true;
  }

  bool read_value_type(ValueType& out, const char* what) {
    const size_t at = pos_;
    uint32_t id = 0;
    if (!read(id, what)) return false;
    if (id > kMaxValueType) {
      return fail(ErrorCode::kFormat, at, format("unknown %s %u", what, id));
    }
    out = static_cast<ValueType>(id);
    return true;
  }

  template <class T>
  bool read_scalar(Value& out) {
    T v{};
    if (!read(v, "value")) return false;
    out.data = v;
    return true;
  }

  bool read_value(ValueType type, Value& out, uint32_t depth) {
    switch (type) {
      case ValueType::kUint8:
        return read_scalar<uint8_t>(out);
      case ValueType::kInt8:
        return read_scalar<int8_t>(out);
      case ValueType::kUint16:
        return read_scalar<uint16_t>(out);
      case ValueType::kInt16:
        return read_scalar<int16_t>(out);
      case ValueType::kUint32:
        return read_scalar<uint32_t>(out);
      case ValueType::kInt32:
        return read_scalar<int32_t>(out);
      case ValueType::kFloat32:
        return read_scalar<float>(out);
      case ValueType::kUint64:
        return read_scalar<uint64_t>(out);
      case ValueType::kInt64:
        return read_scalar<int64_t>(out);
      case ValueType::kFloat64:
        return read_scalar<double>(out);
      case ValueType::kBool: {
        const size_t at = pos_;
        uint8_t b = 0;
        if (!read(b, "bool value")) return false;
        if (b > 1) return fail(ErrorCode::kFormat, at, format("bool value is %u, not 0 or 1", b));
        out.data = b == 1;
        return true;
      }
      case ValueType::kString: {
        std::string s;
        if (!read_string(s, "string value")) return false;
        out.data = std::move(s);
        return true;
      }
      case ValueType::kArray: {
        Array a;
        if (!read_array(a, depth + 1)) return false;
        out.data = std::move(a);
        return true;
      }
    }
    return fail(ErrorCode::kFormat, pos_, "unknown value type");
  }

  // `depth` counts the arrays enclosing this one, itself included (a plain array is 1).
  bool read_array(Array& out, uint32_t depth) {
    const size_t at = pos_;
    if (depth > kMaxArrayDepth) {
      return fail(ErrorCode::kFormat, at,
                  format("arrays nested deeper than %u levels", kMaxArrayDepth));
    }
    if (!read_value_type(out.elem_type, "array element type")) return false;
    uint64_t count = 0;
    if (!read(count, "array length")) return false;
    const size_t min_bytes = min_value_bytes(out.elem_type);
    if (count > remaining() / min_bytes) {
      return fail(
          ErrorCode::kFormat, at,
          format("array of %" PRIu64 " %s needs at least %" PRIu64 " bytes, only %zu remain", count,
                 value_type_name(out.elem_type),
                 count > UINT64_MAX / min_bytes ? UINT64_MAX : count * min_bytes, remaining()));
    }
    if (count > kMaxMetadataValues - n_values_) {
      return fail(ErrorCode::kFormat, at,
                  format("array of %" PRIu64 " %s takes the metadata past the limit of %" PRIu64
                         " values in all",
                         count, value_type_name(out.elem_type), kMaxMetadataValues));
    }
    n_values_ += count;
    out.items.resize(static_cast<size_t>(count));
    for (Value& item : out.items) {
      if (!read_value(out.elem_type, item, depth)) return false;
    }
    return true;
  }

  bool parse_header(uint64_t& n_tensors, uint64_t& n_kv) {
    if (!need(4, "the magic")) return false;
    if (std::memcmp(f_.base_, kMagic, 4) != 0) {
      return fail(
          ErrorCode::kFormat, 0,
          format("bad magic '%s', expected 'GGUF' (not a GGUF file)",
                 printable(std::string_view(reinterpret_cast<const char*>(f_.base_), 4)).c_str()));
    }
    pos_ = 4;
    if (!read(f_.version_, "the version")) return false;
    const uint32_t v = f_.version_;
    if (v == 1) {
      return fail(ErrorCode::kUnsupported, 4,
                  "GGUF version 1 is not supported (qrun reads v2 and v3; re-convert the model "
                  "with a current llama.cpp)");
    }
    if (v != 2 && v != 3) {
      if ((v & 0xffffu) == 0 && (__builtin_bswap32(v) == 2 || __builtin_bswap32(v) == 3)) {
        return fail(ErrorCode::kUnsupported, 4,
                    format("GGUF version 0x%08x looks like a big-endian file, which is not "
                           "supported",
                           v));
      }
      return fail(ErrorCode::kUnsupported, 4,
                  format("unsupported GGUF version %u (qrun reads v2 and v3)", v));
    }
    const size_t counts_at = pos_;
    if (!read(n_tensors, "the tensor count")) return false;
    if (!read(n_kv, "the metadata count")) return false;
    if (n_tensors > kMaxTensors) {
      return fail(
          ErrorCode::kFormat, counts_at,
          format("tensor count %" PRIu64 " exceeds the limit of %" PRIu64, n_tensors, kMaxTensors));
    }
    if (n_kv > kMaxKeyValues) {
      return fail(
          ErrorCode::kFormat, counts_at + 8,
          format("metadata count %" PRIu64 " exceeds the limit of %" PRIu64, n_kv, kMaxKeyValues));
    }
    // Both limits are 2^20, so these products cannot overflow.
    const uint64_t min_bytes = n_tensors * kMinTensorInfoBytes + n_kv * kMinKeyValueBytes;
    if (min_bytes > remaining()) {
      return fail(ErrorCode::kFormat, counts_at,
                  format("%" PRIu64 " tensors and %" PRIu64
                         " metadata entries need at least %" PRIu64 " bytes, only %zu remain",
                         n_tensors, n_kv, min_bytes, remaining()));
    }
    return true;
  }

  bool parse_key_value(uint64_t index, std::unordered_set<std::string>& seen) {
    subject_ = format("metadata entry %" PRIu64, index);
    const size_t at = pos_;
    KeyValue kv;
    if (!read_string(kv.key, "key")) return false;
    if (kv.key.empty()) return fail(ErrorCode::kFormat, at, "empty key");
    subject_ = format("key '%s'", printable(kv.key).c_str());
    if (!seen.insert(kv.key).second) return fail(ErrorCode::kFormat, at, "duplicate key");
    const size_t type_at = pos_;
    ValueType type{};
    if (!read_value_type(type, "value type")) return false;
    if (!read_value(type, kv.value, 0)) return false;
    if (kv.key == "general.alignment") {
      if (type != ValueType::kUint32) {
        return fail(ErrorCode::kFormat, type_at,
                    format("type %s, expected u32", value_type_name(type)));
      }
      const uint32_t a = std::get<uint32_t>(kv.value.data);
      if (!is_power_of_two(a)) {
        return fail(ErrorCode::kFormat, type_at + 4,
                    format("alignment %u is not a power of two", a));
      }
      f_.alignment_ = a;
    }
    f_.kvs_.push_back(std::move(kv));
    return true;
  }

  bool parse_tensor_info(uint64_t index, std::unordered_set<std::string>& seen,
                         std::vector<size_t>& info_offsets) {
    subject_ = format("tensor %" PRIu64, index);
    const size_t at = pos_;
    TensorInfo t;
    if (!read_string(t.name, "tensor name")) return false;
    subject_ = format("tensor '%s'", printable(t.name).c_str());
    if (!seen.insert(t.name).second) return fail(ErrorCode::kFormat, at, "duplicate tensor name");
    uint32_t n_dims = 0;
    if (!read(n_dims, "n_dims")) return false;
    if (n_dims < 1 || n_dims > kMaxDims) {
      return fail(ErrorCode::kFormat, at,
                  format("%u dimensions, expected 1 to %u", n_dims, kMaxDims));
    }
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (!read(t.ne[d], "dimension")) return false;
      if (t.ne[d] < 1) {
        return fail(ErrorCode::kFormat, at,
                    format("dimension %u is %" PRId64 ", expected at least 1", d, t.ne[d]));
      }
    }
    int64_t n_elements = 1;
    for (int64_t ne : t.ne) {
      if (__builtin_mul_overflow(n_elements, ne, &n_elements)) {
        return fail(ErrorCode::kFormat, at,
                    format("shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                           "] has more elements than fit in 64 bits",
                           t.ne[0], t.ne[1], t.ne[2], t.ne[3]));
      }
    }
    const size_t type_at = pos_;
    uint32_t type_id = 0;
    if (!read(type_id, "tensor type")) return false;
    const TypeTraits* traits = find_type(type_id);
    if (traits == nullptr) {
      return fail(ErrorCode::kUnsupported, type_at, format("unknown tensor type id %u", type_id));
    }
    t.type = traits->type;
    if (t.ne[0] % traits->block_elems != 0) {
      subject_.clear();
      return fail(
          ErrorCode::kFormat, at,
          format("tensor '%s' (%s) has %" PRId64 " elements per row, not a multiple of %" PRId64,
                 printable(t.name).c_str(), traits->name, t.ne[0], traits->block_elems));
    }
    // n_elements / block_elems blocks of block_bytes each.
    uint64_t n_bytes = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(n_elements / traits->block_elems),
                               static_cast<uint64_t>(traits->block_bytes), &n_bytes) ||
        n_bytes > SIZE_MAX) {
      return fail(ErrorCode::kFormat, at,
                  format("byte size of the %s data overflows", traits->name));
    }
    t.n_bytes = static_cast<size_t>(n_bytes);
    const size_t offset_at = pos_;
    if (!read(t.offset, "tensor data offset")) return false;
    if (t.offset % f_.alignment_ != 0) {
      return fail(ErrorCode::kFormat, offset_at,
                  format("data offset %" PRIu64 " is not a multiple of the alignment %zu", t.offset,
                         f_.alignment_));
    }
    info_offsets.push_back(at);
    f_.tensors_.push_back(std::move(t));
    return true;
  }

  // Checks every tensor lies inside the file and no two overlap, then sets the views.
  bool place_tensors(const std::vector<size_t>& info_offsets) {
    std::vector<size_t> order(f_.tensors_.size());
    for (size_t i = 0; i < f_.tensors_.size(); ++i) {
      TensorInfo& t = f_.tensors_[i];
      subject_ = format("tensor '%s'", printable(t.name).c_str());
      uint64_t begin = 0;
      uint64_t end = 0;
      if (__builtin_add_overflow(f_.data_offset_, t.offset, &begin) ||
          __builtin_add_overflow(begin, static_cast<uint64_t>(t.n_bytes), &end) || end > f_.size_) {
        return fail(
            ErrorCode::kFormat, info_offsets[i],
            format("%s data of %zu bytes at data offset %" PRIu64
                   " runs past the end of the file (data section at %" PRIu64 ", file size %zu)",
                   dtype_name(t.type), t.n_bytes, t.offset, f_.data_offset_, f_.size_));
      }
      t.file_offset = begin;
      t.data = f_.base_ + begin;
    }
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return f_.tensors_[a].offset < f_.tensors_[b].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = f_.tensors_[order[k - 1]];
      const TensorInfo& cur = f_.tensors_[order[k]];
      if (cur.offset < prev.offset + prev.n_bytes) {
        subject_ = format("tensor '%s'", printable(cur.name).c_str());
        return fail(ErrorCode::kFormat, info_offsets[order[k]],
                    format("data [%" PRIu64 ", %" PRIu64 ") overlaps tensor '%s' [%" PRIu64
                           ", %" PRIu64 ")",
                           cur.offset, cur.offset + cur.n_bytes, printable(prev.name).c_str(),
                           prev.offset, prev.offset + prev.n_bytes));
      }
    }
    return true;
  }

  bool parse() {
    uint64_t n_tensors = 0;
    uint64_t n_kv = 0;
    if (!parse_header(n_tensors, n_kv)) return false;
    {
      std::unordered_set<std::string> seen;
      f_.kvs_.reserve(static_cast<size_t>(n_kv));
      for (uint64_t i = 0; i < n_kv; ++i) {
        if (!parse_key_value(i, seen)) return false;
      }
    }
    std::vector<size_t> info_offsets;
    {
      std::unordered_set<std::string> seen;
      f_.tensors_.reserve(static_cast<size_t>(n_tensors));
      info_offsets.reserve(static_cast<size_t>(n_tensors));
      for (uint64_t i = 0; i < n_tensors; ++i) {
        if (!parse_tensor_info(i, seen, info_offsets)) return false;
      }
    }
    subject_.clear();
    // The data section starts at the next multiple of the alignment. A file without
    // tensors may end before it.
    f_.data_offset_ = (pos_ + f_.alignment_ - 1) / f_.alignment_ * f_.alignment_;
    return place_tensors(info_offsets);
  }
};

Result<File> File::from_bytes(std::vector<uint8_t> bytes, std::string name) {
  File f;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->bytes = std::move(bytes);
  f.base_ = f.mapping_->bytes.data();
  f.size_ = f.mapping_->bytes.size();
  f.path_ = std::move(name);
  QRUN_TRY(Parser(f).run());
  return f;
}

Result<File> File::open(const std::string& path) {
  // O_NONBLOCK keeps a FIFO from blocking the open; it is rejected below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return make_error(ErrorCode::kIo,
                      format("%s: cannot open: %s", path.c_str(), std::strerror(errno)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error(ErrorCode::kIo,
                      format("%s: cannot stat: %s", path.c_str(), std::strerror(e)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, format("%s: is a directory, not a GGUF file", path.c_str()));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(ErrorCode::kIo, format("%s: not a regular file", path.c_str()));
  }
  if (st.st_size == 0) {
    ::close(fd);
    return make_error(ErrorCode::kIo, format("%s: file is empty", path.c_str()));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (addr == MAP_FAILED) {
    return make_error(ErrorCode::kIo, format("%s: cannot map %zu bytes: %s", path.c_str(), size,
                                             std::strerror(map_errno)));
  }
  File f;
  f.mapping_ = std::make_unique<Mapping>();
  f.mapping_->addr = addr;
  f.mapping_->length = size;
  f.mapping_->path = path;
  f.mapping_->registration = register_mapped_file(addr, size, f.mapping_->path.c_str());
  f.base_ = static_cast<const uint8_t*>(addr);
  f.size_ = size;
  f.path_ = path;
  QRUN_TRY(Parser(f).run());
  return f;
}

}  // namespace qrun::gguf
