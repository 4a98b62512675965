// The GGUF reader on hand-made corrupt files: a small valid file from the Writer, patched
// byte by byte. Every case must fail with the right ErrorCode and a one-line message that
// names the file, the offset and the key or tensor; no input may crash or hang.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <limits>

#include "core/gguf/gguf.h"

namespace qrun::gguf {
namespace {

using Bytes = std::vector<uint8_t>;

Value nested_i32(int depth) {
  Value v{Array{ValueType::kInt32, {Value{int32_t{42}}}}};
  for (int d = 1; d < depth; ++d) v = Value{Array{ValueType::kArray, {std::move(v)}}};
  return v;
}

// A small valid file: eight keys (alignment 64 adds a ninth) and three tensors.
Bytes base_file(size_t alignment = kDefaultAlignment) {
  Writer w(alignment);
  w.set_string("general.architecture", "llama");
  w.set_string("general.name", "corrupt");
  w.set_u32("test.aaa", 1);
  w.set_u32("test.bbb", 2);
  w.set_bool("test.flag", true);
  w.set_string_array("tokenizer.ggml.tokens", {"<s>", "a", "b"});
  w.set_float_array("tokenizer.ggml.scores", {0.f, -1.f, -2.f});
  w.set("test.nested", nested_i32(2));
  Bytes a(64, 0x11), b(2 * 2 * 18, 0x22), c(8, 0x33);
  w.add_tensor("tensor_a", DType::kF32, {8, 2}, std::span<const uint8_t>(a));
  w.add_tensor("tensor_b", DType::kQ4_0, {64, 2}, std::span<const uint8_t>(b));
  w.add_tensor("tensor_c", DType::kF16, {4}, std::span<const uint8_t>(c));
  return w.to_bytes();
}

// Position of the only occurrence of `s` in the bytes.
size_t locate(const Bytes& b, std::string_view s) {
  auto it = std::search(b.begin(), b.end(), s.begin(), s.end());
  EXPECT_NE(it, b.end()) << s;
  EXPECT_EQ(std::search(it + 1, b.end(), s.begin(), s.end()), b.end()) << s << " is not unique";
  return static_cast<size_t>(it - b.begin());
}

template <class T>
void put(Bytes& b, size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}
template <class T>
T get(const Bytes& b, size_t at) {
  T v{};
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

// Field positions of a key and of a tensor info, found by name.
size_t key_start(const Bytes& b, std::string_view key) {
  return locate(b, key) - 8;
}
size_t key_type(const Bytes& b, std::string_view key) {
  return locate(b, key) + key.size();
}
size_t key_value(const Bytes& b, std::string_view key) {
  return key_type(b, key) + 4;
}
size_t tensor_start(const Bytes& b, std::string_view name) {
  return locate(b, name) - 8;
}
size_t tensor_n_dims(const Bytes& b, std::string_view name) {
  return locate(b, name) + name.size();
}
size_t tensor_dim(const Bytes& b, std::string_view name, int d) {
  return tensor_n_dims(b, name) + 4 + 8 * static_cast<size_t>(d);
}
size_t tensor_type(const Bytes& b, std::string_view name) {
  return tensor_dim(b, name, static_cast<int>(get<uint32_t>(b, tensor_n_dims(b, name))));
}
size_t tensor_offset(const Bytes& b, std::string_view name) {
  return tensor_type(b, name) + 4;
}

std::string at(size_t offset) {
  return format("corrupt.gguf: offset %zu: ", offset);
}

struct Case {
  const char* name;
  ErrorCode code;
  // Patches the bytes and returns the message fragment the error must contain.
  std::function<std::string(Bytes&)> mutate;
  size_t alignment = kDefaultAlignment;
};

const std::vector<Case>& cases() {
  constexpr ErrorCode kF = ErrorCode::kFormat;
  constexpr ErrorCode kU = ErrorCode::kUnsupported;
  static const std::vector<Case> kCases = {
      {"bad magic", kF,
       [](Bytes& b) {
         std::memcpy(b.data(), "GGML", 4);
         return at(0) + "bad magic 'GGML', expected 'GGUF'";
       }},
      {"version 1", kU,
       [](Bytes& b) {
         put<uint32_t>(b, 4, 1);
         return at(4) + "GGUF version 1 is not supported";
       }},
      {"version 4", kU,
       [](Bytes& b) {
         put<uint32_t>(b, 4, 4);
         return at(4) + "unsupported GGUF version 4 (qrun reads v2 and v3)";
       }},
      {"version 0", kU,
       [](Bytes& b) {
         put<uint32_t>(b, 4, 0);
         return at(4) + "unsupported GGUF version 0";
       }},
      {"big-endian version", kU,
       [](Bytes& b) {
         put<uint32_t>(b, 4, 0x03000000);
         return at(4) + "GGUF version 0x03000000 looks like a big-endian file";
       }},
      {"absurd tensor count", kF,
       [](Bytes& b) {
         put<uint64_t>(b, 8, uint64_t{1} << 40);
         return at(8) + "tensor count 1099511627776 exceeds the limit of 1048576";
       }},
      {"absurd metadata count", kF,
       [](Bytes& b) {
         put<uint64_t>(b, 16, std::numeric_limits<uint64_t>::max());
         return at(16) + "metadata count 18446744073709551615 exceeds the limit of 1048576";
       }},
      {"tensor count beyond the bytes", kF,
       [](Bytes& b) {
         put<uint64_t>(b, 8, kMaxTensors);
         return at(8) + "1048576 tensors and 8 metadata entries need at least";
       }},
      {"metadata count beyond the bytes", kF,
       [](Bytes& b) {
         put<uint64_t>(b, 16, 100000);
         return at(8) + "3 tensors and 100000 metadata entries need at least 1300096 bytes";
       }},
      {"key length past the end", kF,
       [](Bytes& b) {
         const size_t k = key_start(b, "test.aaa");
         put<uint64_t>(b, k, 1 << 20);
         return at(k) + "metadata entry 2: key length 1048576 runs past the end of the file";
       }},
      {"key length beyond the limit", kF,
       [](Bytes& b) {
         const size_t k = key_start(b, "test.aaa");
         put<uint64_t>(b, k, uint64_t{1} << 40);
         return at(k) + "metadata entry 2: key length 1099511627776 exceeds the limit of 268435456";
       }},
      {"empty key", kF,
       [](Bytes& b) {
         const size_t k = key_start(b, "test.aaa");
         put<uint64_t>(b, k, 0);
         return at(k) + "metadata entry 2: empty key";
       }},
      {"string value past the end", kF,
       [](Bytes& b) {
         const size_t v = key_value(b, "general.name");
         put<uint64_t>(b, v, 1 << 20);
         return at(v) + "key 'general.name': string value length 1048576 runs past the end";
       }},
      {"array string past the end", kF,
       [](Bytes& b) {
         const size_t s = locate(b, "<s>") - 8;
         put<uint64_t>(b, s, 1 << 20);
         return at(s) + "key 'tokenizer.ggml.tokens': string value length 1048576 runs past";
       }},
      {"duplicate key", kF,
       [](Bytes& b) {
         const size_t k = key_start(b, "test.bbb");
         std::memcpy(b.data() + k + 8, "test.aaa", 8);
         return at(k) + "key 'test.aaa': duplicate key";
       }},
      {"unknown value type", kF,
       [](Bytes& b) {
         const size_t t = key_type(b, "test.aaa");
         put<uint32_t>(b, t, 13);
         return at(t) + "key 'test.aaa': unknown value type 13";
       }},
      {"names in messages are escaped", kF,
       [](Bytes& b) {
         b[locate(b, "test.bbb") + 4] = '\n';
         const size_t t = key_type(b, "test\nbbb");
         put<uint32_t>(b, t, 13);
         return at(t) + "key 'test\\x0abbb': unknown value type 13";
       }},
      {"unknown array element type", kF,
       [](Bytes& b) {
         const size_t t = key_value(b, "tokenizer.ggml.tokens");
         put<uint32_t>(b, t, 99);
         return at(t) + "key 'tokenizer.ggml.tokens': unknown array element type 99";
       }},
      {"absurd array length", kF,
       [](Bytes& b) {
         const size_t a = key_value(b, "tokenizer.ggml.scores");
         put<uint64_t>(b, a + 4, uint64_t{1} << 62);
         return at(a) +
                "key 'tokenizer.ggml.scores': array of 4611686018427387904 f32 needs at least";
       }},
      {"absurd nested array length", kF,
       [](Bytes& b) {
         const size_t a = key_value(b, "test.nested");
         put<uint64_t>(b, a + 4, std::numeric_limits<uint64_t>::max());
         return at(a) + "key 'test.nested': array of 18446744073709551615 array needs at least";
       }},
      {"bool value 2", kF,
       [](Bytes& b) {
         const size_t v = key_value(b, "test.flag");
         b[v] = 2;
         return at(v) + "key 'test.flag': bool value is 2, not 0 or 1";
       }},
      {"alignment 0", kF,
       [](Bytes& b) {
         const size_t v = key_value(b, "general.alignment");
         put<uint32_t>(b, v, 0);
         return at(v) + "key 'general.alignment': alignment 0 is not a power of two";
       },
       64},
      {"alignment 3", kF,
       [](Bytes& b) {
         const size_t v = key_value(b, "general.alignment");
         put<uint32_t>(b, v, 3);
         return at(v) + "key 'general.alignment': alignment 3 is not a power of two";
       },
       64},
      {"alignment of the wrong type", kF,
       [](Bytes& b) {
         const size_t t = key_type(b, "general.alignment");
         put<uint32_t>(b, t, static_cast<uint32_t>(ValueType::kInt32));
         return at(t) + "key 'general.alignment': type i32, expected u32";
       },
       64},
      {"tensor name past the end", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_b");
         put<uint64_t>(b, t, 1 << 20);
         return at(t) + "tensor 1: tensor name length 1048576 runs past the end";
       }},
      {"duplicate tensor name", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_b");
         b[t + 8 + 7] = 'a';
         return at(t) + "tensor 'tensor_a': duplicate tensor name";
       }},
      {"n_dims 0", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_a");
         put<uint32_t>(b, tensor_n_dims(b, "tensor_a"), 0);
         return at(t) + "tensor 'tensor_a': 0 dimensions, expected 1 to 4";
       }},
      {"n_dims 5", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_a");
         put<uint32_t>(b, tensor_n_dims(b, "tensor_a"), 5);
         return at(t) + "tensor 'tensor_a': 5 dimensions, expected 1 to 4";
       }},
      {"dim 0", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_a");
         put<int64_t>(b, tensor_dim(b, "tensor_a", 1), 0);
         return at(t) + "tensor 'tensor_a': dimension 1 is 0, expected at least 1";
       }},
      {"negative dim", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_a");
         put<int64_t>(b, tensor_dim(b, "tensor_a", 0), -8);
         return at(t) + "tensor 'tensor_a': dimension 0 is -8, expected at least 1";
       }},
      {"element count overflow", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_a");
         put<int64_t>(b, tensor_dim(b, "tensor_a", 1), int64_t{1} << 62);
         return at(t) +
                "tensor 'tensor_a': shape [8, 4611686018427387904, 1, 1] has more "
                "elements than fit in 64 bits";
       }},
      {"byte count overflow", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_a");
         put<int64_t>(b, tensor_dim(b, "tensor_a", 1), int64_t{1} << 59);
         return at(t) + "tensor 'tensor_a': byte size of the f32 data overflows";
       }},
      {"unknown dtype", kU,
       [](Bytes& b) {
         const size_t t = tensor_type(b, "tensor_a");
         put<uint32_t>(b, t, 99);
         return at(t) + "tensor 'tensor_a': unknown tensor type id 99";
       }},
      {"removed dtype 4", kU,
       [](Bytes& b) {
         const size_t t = tensor_type(b, "tensor_a");
         put<uint32_t>(b, t, 4);
         return at(t) + "tensor 'tensor_a': unknown tensor type id 4";
       }},
      {"row not a multiple of the block", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_b");
         put<int64_t>(b, tensor_dim(b, "tensor_b", 0), 48);
         return at(t) + "tensor 'tensor_b' (q4_0) has 48 elements per row, not a multiple of 32";
       }},
      {"misaligned offset", kF,
       [](Bytes& b) {
         const size_t o = tensor_offset(b, "tensor_b");
         put<uint64_t>(b, o, get<uint64_t>(b, o) + 4);
         return at(o) + "tensor 'tensor_b': data offset 68 is not a multiple of the alignment 32";
       }},
      {"misaligned offset at alignment 64", kF,
       [](Bytes& b) {
         const size_t o = tensor_offset(b, "tensor_c");
         put<uint64_t>(b, o, 160);
         return at(o) + "tensor 'tensor_c': data offset 160 is not a multiple of the alignment 64";
       },
       64},
      {"tensor past the end", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_c");
         put<uint64_t>(b, tensor_offset(b, "tensor_c"), 1 << 20);
         return at(t) +
                "tensor 'tensor_c': f16 data of 8 bytes at data offset 1048576 runs past "
                "the end of the file";
       }},
      {"tensor offset overflow", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_c");
         put<uint64_t>(b, tensor_offset(b, "tensor_c"), ~uint64_t{31});
         return at(t) +
                "tensor 'tensor_c': f16 data of 8 bytes at data offset "
                "18446744073709551584 runs past the end";
       }},
      {"overlapping tensors", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_b");
         put<uint64_t>(b, tensor_offset(b, "tensor_b"), 32);
         return at(t) + "tensor 'tensor_b': data [32, 104) overlaps tensor 'tensor_a' [0, 64)";
       }},
      {"tensors at the same offset", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_c");
         put<uint64_t>(b, tensor_offset(b, "tensor_c"),
                       get<uint64_t>(b, tensor_offset(b, "tensor_b")));
         return at(t) + "tensor 'tensor_c': data [64, 72) overlaps tensor 'tensor_b' [64, 136)";
       }},
      {"truncated in the magic", kF,
       [](Bytes& b) {
         b.resize(3);
         return at(0) + "unexpected end of file: the magic needs 4 bytes, 3 remain";
       }},
      {"truncated in the counts", kF,
       [](Bytes& b) {
         b.resize(12);
         return at(8) + "unexpected end of file: the tensor count needs 8 bytes, 4 remain";
       }},
      {"truncated after the header", kF,
       [](Bytes& b) {
         b.resize(24);
         return at(8) + "3 tensors and 8 metadata entries need at least 200 bytes, only 0 remain";
       }},
      {"truncated in a string", kF,
       [](Bytes& b) {
         put<uint64_t>(b, 8, 0);   // no tensors
         put<uint64_t>(b, 16, 2);  // two keys, the second cut short
         const size_t v = key_value(b, "general.name");
         b.resize(v + 8 + 3);
         return at(v) +
                "key 'general.name': string value length 7 runs past the end of the "
                "file";
       }},
      {"truncated in a tensor name", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_c");
         b.resize(t + 8 + 3);
         return at(t) +
                "tensor 2: tensor name length 8 runs past the end of the file (3 bytes "
                "remain)";
       }},
      {"truncated in a tensor offset", kF,
       [](Bytes& b) {
         const size_t o = tensor_offset(b, "tensor_c");
         b.resize(o + 4);
         return at(o) +
                "tensor 'tensor_c': unexpected end of file: tensor data offset needs 8 "
                "bytes, 4 remain";
       }},
      {"truncated after the tensor infos", kF,
       [](Bytes& b) {
         const size_t end = tensor_offset(b, "tensor_c") + 8;
         const size_t t = tensor_start(b, "tensor_a");
         b.resize(end);
         return at(t) + "tensor 'tensor_a': f32 data of 64 bytes at data offset 0 runs past";
       }},
      {"truncated in the last tensor", kF,
       [](Bytes& b) {
         const size_t t = tensor_start(b, "tensor_c");
         b.resize(b.size() - 32 + 4);
         return at(t) + "tensor 'tensor_c': f16 data of 8 bytes at data offset 160 runs past";
       }},
  };
  return kCases;
}

TEST(GgufCorrupt, BaseFileIsValid) {
  for (size_t alignment : {size_t{32}, size_t{64}}) {
    Result<File> f = File::from_bytes(base_file(alignment), "corrupt.gguf");
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->tensors().size(), 3u);
    EXPECT_EQ(f->alignment(), alignment);
  }
}

TEST(GgufCorrupt, EachCaseFailsWithItsMessage) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    Bytes b = base_file(c.alignment);
    const std::string fragment = c.mutate(b);
    Result<File> f = File::from_bytes(std::move(b), "corrupt.gguf");
    ASSERT_FALSE(f.ok()) << "accepted";
    const std::string& msg = f.error().message;
    EXPECT_EQ(f.error().code, c.code) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos)
        << "message: " << msg << "\nexpected: " << fragment;
    EXPECT_EQ(msg.rfind("corrupt.gguf: offset ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(GgufCorrupt, VersionTwoIsAccepted) {
  Bytes b = base_file();
  put<uint32_t>(b, 4, 2);
  Result<File> f = File::from_bytes(std::move(b), "v2.gguf");
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->version(), 2u);
}

TEST(GgufCorrupt, ArrayDepthLimit) {
  for (int depth : {1, static_cast<int>(kMaxArrayDepth), static_cast<int>(kMaxArrayDepth) + 1}) {
    SCOPED_TRACE(depth);
    Writer w;
    w.set("deep", nested_i32(depth));
    Result<File> f = File::from_bytes(w.to_bytes(), "deep.gguf");
    if (depth <= static_cast<int>(kMaxArrayDepth)) {
      ASSERT_TRUE(f.ok()) << f.error().message;
    } else {
      ASSERT_FALSE(f.ok());
      EXPECT_NE(f.error().message.find("key 'deep': arrays nested deeper than 8 levels"),
                std::string::npos)
          << f.error().message;
    }
  }
}

TEST(GgufCorrupt, EveryTruncationFails) {
  const Bytes full = base_file();
  Result<File> whole = File::from_bytes(full, "t.gguf");
  ASSERT_TRUE(whole.ok()) << whole.error().message;
  const TensorInfo& last = whole->tensors().back();
  const size_t data_end = last.file_offset + last.n_bytes;
  for (size_t n = 0; n < full.size(); ++n) {
    Result<File> f = File::from_bytes(Bytes(full.begin(), full.begin() + n), "t.gguf");
    if (n >= data_end) {  // only the zero padding after the last tensor is missing
      EXPECT_TRUE(f.ok()) << n << ": " << f.error().message;
      continue;
    }
    ASSERT_FALSE(f.ok()) << "accepted a file truncated to " << n << " bytes";
    EXPECT_EQ(f.error().code, ErrorCode::kFormat) << f.error().message;
    EXPECT_EQ(f.error().message.rfind("t.gguf: offset ", 0), 0u) << f.error().message;
    EXPECT_EQ(f.error().message.find('\n'), std::string::npos);
  }
}

// Every single-byte change either parses or fails cleanly; no crash, no hang.
TEST(GgufCorrupt, EveryByteFlipIsHandled) {
  const Bytes full = base_file();
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      Bytes b = full;
      b[i] ^= x;
      Result<File> f = File::from_bytes(std::move(b), "flip.gguf");
      if (!f.ok()) {
        EXPECT_EQ(f.error().message.rfind("flip.gguf: offset ", 0), 0u) << f.error().message;
        EXPECT_EQ(f.error().message.find('\n'), std::string::npos);
      }
    }
  }
}

// A file whose arrays hold more values in all than kMaxMetadataValues is refused before
// the items are allocated (each would cost a Value, far more than its encoded byte).
TEST(GgufCorrupt, MetadataValueLimit) {
  const uint64_t count = kMaxMetadataValues + 1;
  Bytes b = {'G', 'G', 'U', 'F', 3, 0, 0, 0};
  auto append = [&b](auto v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
  };
  append(uint64_t{0});  // tensors
  append(uint64_t{1});  // keys
  append(uint64_t{4});
  b.insert(b.end(), {'b', 'i', 'g', '!'});
  append(static_cast<uint32_t>(ValueType::kArray));
  const size_t array_at = b.size();
  append(static_cast<uint32_t>(ValueType::kUint8));
  append(count);
  b.resize(b.size() + count, 0);
  Result<File> f = File::from_bytes(std::move(b), "big.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().message.find(format("big.gguf: offset %zu: key 'big!': array of 16777217 u8 "
                                          "takes the metadata past the limit of 16777216 values",
                                          array_at)),
            std::string::npos)
      << f.error().message;
}

TEST(GgufCorrupt, EmptyInput) {
  Result<File> f = File::from_bytes({}, "empty.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().code, ErrorCode::kFormat);
  EXPECT_NE(f.error().message.find("empty.gguf: offset 0: unexpected end of file"),
            std::string::npos)
      << f.error().message;
}

}  // namespace
}  // namespace qrun::gguf
