// The GGUF writer: every value type and nested arrays round-trip through the reader,
// tensor data land aligned where the infos say, the fill buffer is reused, and a real
// llama.cpp-written model rewritten through the Writer is reproduced byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "core/gguf/gguf.h"
#include "tests/support/test_data.h"

namespace qrun::gguf {
namespace {

namespace fs = std::filesystem;

Value array_of(ValueType elem, std::vector<Value> items) {
  return Value{Array{elem, std::move(items)}};
}

// Every scalar type at its extremes, strings, arrays of each type, nested arrays.
std::vector<KeyValue> all_value_kinds() {
  std::vector<KeyValue> kvs = {
      {"t.u8", Value{uint8_t{255}}},
      {"t.i8", Value{int8_t{-128}}},
      {"t.u16", Value{uint16_t{65535}}},
      {"t.i16", Value{int16_t{-32768}}},
      {"t.u32", Value{uint32_t{4000000000u}}},
      {"t.i32", Value{int32_t{-2000000000}}},
      {"t.f32", Value{1.5f}},
      {"t.bool_true", Value{true}},
      {"t.bool_false", Value{false}},
      {"t.string", Value{std::string("h\xc3\xa9llo\nworld \"quoted\"")}},
      {"t.empty_string", Value{std::string()}},
      {"t.u64", Value{std::numeric_limits<uint64_t>::max()}},
      {"t.i64", Value{std::numeric_limits<int64_t>::min()}},
      {"t.f64", Value{-2.25e300}},
      {"t.arr_u8", array_of(ValueType::kUint8, {Value{uint8_t{1}}, Value{uint8_t{2}}})},
      {"t.arr_i8", array_of(ValueType::kInt8, {Value{int8_t{-1}}})},
      {"t.arr_u16", array_of(ValueType::kUint16, {Value{uint16_t{7}}})},
      {"t.arr_i16", array_of(ValueType::kInt16, {Value{int16_t{-7}}})},
      {"t.arr_u32", array_of(ValueType::kUint32, {Value{uint32_t{9}}, Value{uint32_t{10}}})},
      {"t.arr_i32", array_of(ValueType::kInt32, {Value{int32_t{-9}}})},
      {"t.arr_f32", array_of(ValueType::kFloat32, {Value{0.5f}, Value{-0.25f}})},
      {"t.arr_bool", array_of(ValueType::kBool, {Value{true}, Value{false}, Value{true}})},
      {"t.arr_string", array_of(ValueType::kString, {Value{std::string("a")}, Value{std::string()},
                                                     Value{std::string("ccc")}})},
      {"t.arr_u64", array_of(ValueType::kUint64, {Value{uint64_t{1} << 63}})},
      {"t.arr_i64", array_of(ValueType::kInt64, {Value{int64_t{-5}}})},
      {"t.arr_f64", array_of(ValueType::kFloat64, {Value{3.0}})},
      {"t.arr_empty", array_of(ValueType::kFloat32, {})},
  };
  // [[1, 2], [], [[ "x" ]]] is not allowed (one element type per array), so:
  // [[1, 2], []] of i32 arrays, and [[["x"]]] three levels deep.
  kvs.push_back(
      {"t.nested", array_of(ValueType::kArray,
                            {array_of(ValueType::kInt32, {Value{int32_t{1}}, Value{int32_t{2}}}),
                             array_of(ValueType::kInt32, {})})});
  kvs.push_back(
      {"t.deep", array_of(ValueType::kArray,
                          {array_of(ValueType::kArray,
                                    {array_of(ValueType::kString, {Value{std::string("x")}})})})});
  return kvs;
}

// Structural equality of values, comparing floats bitwise.
bool same_value(const Value& a, const Value& b) {
  if (a.type() != b.type()) return false;
  if (a.type() == ValueType::kArray) {
    const Array& x = a.as_array();
    const Array& y = b.as_array();
    if (x.elem_type != y.elem_type || x.items.size() != y.items.size()) return false;
    for (size_t i = 0; i < x.items.size(); ++i) {
      if (!same_value(x.items[i], y.items[i])) return false;
    }
    return true;
  }
  if (a.type() == ValueType::kFloat32) {
    return std::memcmp(&std::get<float>(a.data), &std::get<float>(b.data), 4) == 0;
  }
  if (a.type() == ValueType::kFloat64) {
    return std::memcmp(&std::get<double>(a.data), &std::get<double>(b.data), 8) == 0;
  }
  return std::visit(
      [&b](const auto& x) {
        using V = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<V, Array>) {
          return false;  // handled above
        } else {
          return x == std::get<V>(b.data);
        }
      },
      a.data);
}

TEST(GgufWriter, EveryValueTypeRoundTrips) {
  Writer w;
  const std::vector<KeyValue> kvs = all_value_kinds();
  for (const KeyValue& kv : kvs) w.set(kv.key, kv.value);
  Result<File> f = File::from_bytes(w.to_bytes(), "kinds.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    SCOPED_TRACE(kvs[i].key);
    EXPECT_EQ(f->metadata()[i].key, kvs[i].key);  // insertion order
    EXPECT_TRUE(same_value(f->metadata()[i].value, kvs[i].value))
        << f->metadata()[i].value.to_display_string() << " vs " << kvs[i].value.to_display_string();
  }
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->get_int("t.i64").value(), std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(f->get_int("t.u64").ok());  // does not fit in int64_t
  EXPECT_EQ(f->get_bool("t.bool_true").value(), true);
  EXPECT_EQ(f->get_string_array("t.arr_string").value(),
            (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f->get_float_array("t.arr_f32").value(), (std::vector<float>{0.5f, -0.25f}));
  EXPECT_EQ(f->get_int_array("t.arr_u32").value(), (std::vector<int64_t>{9, 10}));
  EXPECT_EQ(f->find("t.deep")->to_display_string(), "[[[\"x\"]]]");
}

TEST(GgufWriter, SetReplacesInPlaceAndTypedSettersWork) {
  Writer w;
  w.set_string("a.first", "one");
  w.set_u32("a.second", 2);
  w.set_i32("a.third", -3);
  w.set_string("a.first", "uno");  // replaced, keeps its place
  w.set_f32("a.fourth", 4.5f);
  w.set_bool("a.fifth", true);
  w.set_string_array("a.strings", {"x", "y"});
  w.set_float_array("a.floats", {1.0f, 2.0f});
  w.set_i32_array("a.ints", {-1, 0, 1});
  Result<File> f = File::from_bytes(w.to_bytes(), "set.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<std::string> keys;
  for (const KeyValue& kv : f->metadata()) keys.push_back(kv.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a.first", "a.second", "a.third", "a.fourth", "a.fifth",
                                            "a.strings", "a.floats", "a.ints"}));
  EXPECT_EQ(f->get_string("a.first").value(), "uno");
  EXPECT_EQ(f->find("a.second")->type(), ValueType::kUint32);
  EXPECT_EQ(f->find("a.third")->type(), ValueType::kInt32);
  EXPECT_EQ(f->get_float("a.fourth").value(), 4.5);
  EXPECT_EQ(f->get_bool("a.fifth").value(), true);
  EXPECT_EQ(f->get_string_array("a.strings").value(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(f->get_float_array("a.floats").value(), (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(f->get_int_array("a.ints").value(), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(f->find("a.ints")->as_array().elem_type, ValueType::kInt32);
}

struct TensorSpec {
  std::string name;
  DType type;
  std::vector<int64_t> shape;
};

// Bytes of a tensor: a pattern that differs per tensor and per byte.
std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 8));
  return out;
}

size_t bytes_of(const TensorSpec& s) {
  int64_t rows = 1;
  for (size_t d = 1; d < s.shape.size(); ++d) rows *= s.shape[d];
  return row_size(s.type, s.shape[0]) * static_cast<size_t>(rows);
}

void check_tensors(size_t alignment) {
  SCOPED_TRACE(alignment);
  const std::vector<TensorSpec> specs = {
      {"t.f32", DType::kF32, {7}},        {"t.f16", DType::kF16, {3, 5}},
      {"t.q4_0", DType::kQ4_0, {64, 3}},  {"t.q8_0", DType::kQ8_0, {32, 2, 2, 2}},
      {"t.q4_k", DType::kQ4_K, {256, 2}}, {"t.bf16", DType::kBF16, {1, 1, 1}},
  };
  Writer w(alignment);
  w.set_string("general.architecture", "test");
  std::vector<const uint8_t*> buffers;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const size_t n = bytes_of(s);
    if (i % 2 == 0) {
      const std::vector<uint8_t> data = pattern(n, static_cast<uint8_t>(i));
      w.add_tensor(s.name, s.type, s.shape, std::span<const uint8_t>(data));
    } else {
      w.add_tensor(s.name, s.type, s.shape, [&buffers, n, i](std::span<uint8_t> out) {
        ASSERT_EQ(out.size(), n);
        buffers.push_back(out.data());
        const std::vector<uint8_t> data = pattern(n, static_cast<uint8_t>(i));
        std::memcpy(out.data(), data.data(), n);
      });
    }
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  // One reused buffer for every tensor.
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0], buffers[1]);
  EXPECT_EQ(buffers[1], buffers[2]);

  Result<File> f = File::from_bytes(bytes, "tensors.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->alignment(), alignment);
  if (alignment != kDefaultAlignment) {
    EXPECT_EQ(f->get_int("general.alignment").value(), static_cast<int64_t>(alignment));
  }
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  ASSERT_EQ(f->tensors().size(), specs.size());
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    const TensorInfo& t = f->tensors()[i];
    SCOPED_TRACE(s.name);
    EXPECT_EQ(t.name, s.name);
    EXPECT_EQ(t.type, s.type);
    EXPECT_EQ(t.n_dims, static_cast<int>(s.shape.size()));
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.ne[d], d < s.shape.size() ? s.shape[d] : 1);
    // llama.cpp requires each tensor at the previous one's end rounded up to the alignment.
    EXPECT_EQ(t.offset, expected_offset);
    expected_offset += (t.n_bytes + alignment - 1) / alignment * alignment;
    EXPECT_EQ(t.n_bytes, bytes_of(s));
    const std::vector<uint8_t> want = pattern(t.n_bytes, static_cast<uint8_t>(i));
    EXPECT_EQ(std::memcmp(t.data, want.data(), t.n_bytes), 0);
  }
  // Padding after the last tensor too, and all padding is zeros.
  EXPECT_EQ(bytes.size(), f->data_offset() + expected_offset);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo& t = f->tensors()[i];
    const size_t end = i + 1 < specs.size() ? f->tensors()[i + 1].file_offset : bytes.size();
    for (size_t b = t.file_offset + t.n_bytes; b < end; ++b) ASSERT_EQ(bytes[b], 0) << b;
  }
}

TEST(GgufWriter, TensorsAlignedAndRoundTrip) {
  check_tensors(32);
  check_tensors(64);
  check_tensors(1);
  check_tensors(4096);
}

TEST(GgufWriter, HeaderLayout) {
  Writer w;
  w.set_u32("k", 7);
  w.add_tensor("w", DType::kF32, {1}, std::span<const uint8_t>(pattern(4, 1)));
  const std::vector<uint8_t> b = w.to_bytes();
  // magic, version 3, 1 tensor, 1 key; key "k" u32 7; tensor info "w"; padding; data.
  const std::vector<uint8_t> head = {
      'G', 'G', 'U', 'F', 3, 0, 0, 0, 1,   0, 0, 0,   0, 0, 0, 0, 1, 0, 0, 0, 0,
      0,   0,   0,   1,   0, 0, 0, 0, 0,   0, 0, 'k', 4, 0, 0, 0, 7, 0, 0, 0,  // key
      1,   0,   0,   0,   0, 0, 0, 0, 'w', 1, 0, 0,   0,                       // name, n_dims
      1,   0,   0,   0,   0, 0, 0, 0, 0,   0, 0, 0,                            // ne[0], type f32
      0,   0,   0,   0,   0, 0, 0, 0};                                         // offset
  ASSERT_EQ(b.size(), 96u + 32u);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), b.begin()));
  for (size_t i = head.size(); i < 96; ++i) EXPECT_EQ(b[i], 0) << i;
}

// A model written by llama.cpp, rewritten through the Writer, comes back byte for byte:
// the strongest check that the layout (order, padding, n_dims) is llama.cpp's own.
TEST(GgufWriter, RewritingALlamaCppFileIsByteIdentical) {
  for (const char* name : {"models/stories260K-Q8_0.gguf", "models/TinyLLama-v0-5M-Q4_K_M.gguf",
                           "vocab/ggml-vocab-llama-spm.gguf"}) {
    SCOPED_TRACE(name);
    const fs::path path = test::data_path(name);
    Result<File> f = File::open(path.string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    Writer w(f->alignment());
    for (const KeyValue& kv : f->metadata()) w.set(kv.key, kv.value);
    for (const TensorInfo& t : f->tensors()) {
      std::vector<int64_t> shape(t.ne.begin(), t.ne.begin() + t.n_dims);
      w.add_tensor(t.name, t.type, shape, std::span<const uint8_t>(t.data, t.n_bytes));
    }
    const fs::path out = test::temp_dir() / "rewritten.gguf";
    Result<void> r = w.write(out.string());
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
    const std::vector<uint8_t> original = test::read_bytes(path);
    const std::vector<uint8_t> rewritten = test::read_bytes(out);
    // A file without tensors may stop before the data section's padding.
    const size_t n =
        f->tensors().empty() ? std::min(original.size(), rewritten.size()) : original.size();
    ASSERT_EQ(rewritten.size() >= n, true);
    EXPECT_TRUE(std::equal(original.begin(), original.begin() + n, rewritten.begin()));
    EXPECT_EQ(rewritten, w.to_bytes());
    fs::remove_all(out.parent_path());
  }
}

TEST(GgufWriter, WriteFailureNamesThePath) {
  Writer w;
  w.set_u32("k", 1);
  const std::string path = (test::temp_dir() / "no_such_dir" / "out.gguf").string();
  Result<void> r = w.write(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kIo);
  EXPECT_NE(r.error().message.find(path), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
}

TEST(GgufWriter, WriteReplacesAnExistingFile) {
  const fs::path dir = test::temp_dir();
  const std::string path = (dir / "out.gguf").string();
  Writer a;
  a.set_string("v", "first");
  ASSERT_TRUE(a.write(path).ok());
  Writer b;
  b.set_string("v", "second");
  ASSERT_TRUE(b.write(path).ok());
  Result<File> f = File::open(path);
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->get_string("v").value(), "second");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qrun::gguf
