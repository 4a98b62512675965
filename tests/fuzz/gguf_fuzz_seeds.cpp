// Writes small valid GGUF files into a directory, as seeds for gguf_fuzz: every value
// type, nested arrays, a custom alignment and tensors of plain and block-quantized types.
// Usage: gguf_fuzz_seeds DIR
#include <cstdio>
#include <string>

#include "core/gguf/gguf.h"

namespace {

using qrun::DType;
using qrun::gguf::Array;
using qrun::gguf::Value;
using qrun::gguf::ValueType;
using qrun::gguf::Writer;

void add_tensor(Writer& w, const std::string& name, DType type, std::vector<int64_t> shape) {
  w.add_tensor(name, type, std::move(shape), [](std::span<uint8_t> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 13 + 1);
  });
}

Writer metadata_seed() {
  Writer w;
  w.set("u8", Value{uint8_t{1}});
  w.set("i8", Value{int8_t{-1}});
  w.set("u16", Value{uint16_t{2}});
  w.set("i16", Value{int16_t{-2}});
  w.set_u32("u32", 3);
  w.set_i32("i32", -3);
  w.set_f32("f32", 0.5f);
  w.set_bool("bool", true);
  w.set_string("string", "text");
  w.set("u64", Value{uint64_t{4}});
  w.set("i64", Value{int64_t{-4}});
  w.set("f64", Value{0.25});
  w.set_string_array("strings", {"a", "bb", ""});
  w.set_float_array("floats", {1.f, 2.f});
  w.set_i32_array("ints", {1, -1});
  w.set("nested", Value{Array{ValueType::kArray,
                              {Value{Array{ValueType::kUint8, {Value{uint8_t{7}}}}},
                               Value{Array{ValueType::kUint8, {}}}}}});
  return w;
}

Writer tensor_seed(size_t alignment) {
  Writer w(alignment);
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.embedding_length", 32);
  add_tensor(w, "f32", DType::kF32, {3, 2});
  add_tensor(w, "f16", DType::kF16, {5});
  add_tensor(w, "q4_0", DType::kQ4_0, {32, 2});
  add_tensor(w, "q8_0", DType::kQ8_0, {64, 1, 2});
  add_tensor(w, "q4_k", DType::kQ4_K, {256, 1, 1, 2});
  add_tensor(w, "q6_k", DType::kQ6_K, {256});
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::pair<const char*, Writer> seeds[] = {
      {"seed-metadata.gguf", metadata_seed()},
      {"seed-tensors.gguf", tensor_seed(32)},
      {"seed-tensors-align64.gguf", tensor_seed(64)},
      {"seed-empty.gguf", Writer()},
  };
  for (const auto& [name, writer] : seeds) {
    qrun::Result<void> r = writer.write(dir + "/" + name);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.error().message.c_str());
      return 1;
    }
  }
  return 0;
}
