// The GGUF reader on real files: every model and vocab in the shared data loads, known
// values read back, tensor views point inside the file, and the malformed file in
// models/invalid is rejected with a message naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "core/gguf/gguf.h"
#include "core/gguf/mapped_files.h"
#include "tests/support/test_data.h"

namespace qrun::gguf {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> gguf_files_in(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& entry : fs::directory_iterator(test::data_path(dir))) {
    if (entry.is_regular_file() && entry.path().extension() == ".gguf") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Checks the invariants every successfully parsed file must satisfy.
void expect_consistent(const File& f) {
  EXPECT_TRUE(f.version() == 2 || f.version() == 3);
  EXPECT_EQ(f.data_offset() % f.alignment(), 0u);
  for (const TensorInfo& t : f.tensors()) {
    SCOPED_TRACE(t.name);
    EXPECT_GE(t.n_dims, 1);
    EXPECT_LE(t.n_dims, 4);
    EXPECT_EQ(t.file_offset, f.data_offset() + t.offset);
    EXPECT_EQ(t.offset % f.alignment(), 0u);
    EXPECT_LE(t.file_offset + t.n_bytes, f.file_size());
    const Tensor v = t.view();
    EXPECT_EQ(v.n_bytes(), t.n_bytes);
    EXPECT_EQ(v.data, t.data);
    EXPECT_EQ(v.name, t.name);
    EXPECT_EQ(f.find_tensor(t.name), &t);
  }
  for (const KeyValue& kv : f.metadata()) EXPECT_EQ(f.find(kv.key), &kv.value);
}

TEST(GgufReader, EveryModelAndVocabLoads) {
  std::vector<fs::path> files = gguf_files_in("models");
  const std::vector<fs::path> vocab = gguf_files_in("vocab");
  EXPECT_GE(files.size(), 7u);
  EXPECT_GE(vocab.size(), 9u);
  files.insert(files.end(), vocab.begin(), vocab.end());
  for (const fs::path& p : files) {
    SCOPED_TRACE(p.string());
    Result<File> f = File::open(p.string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->path(), p.string());
    EXPECT_EQ(f->file_size(), fs::file_size(p));
    EXPECT_FALSE(f->metadata().empty());
    expect_consistent(*f);
    Result<std::string> arch = f->get_string("general.architecture");
    ASSERT_TRUE(arch.ok()) << arch.error().message;
    Result<std::vector<std::string>> tokens = f->get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.error().message;
    EXPECT_GT(tokens->size(), 100u);
    // The same bytes parse the same way from memory.
    Result<File> m = File::from_bytes(test::read_bytes(p), "mem.gguf");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->metadata().size(), f->metadata().size());
    EXPECT_EQ(m->tensors().size(), f->tensors().size());
    EXPECT_EQ(m->data_offset(), f->data_offset());
  }
}

TEST(GgufReader, Stories260KValues) {
  Result<File> f = File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f->get_int("llama.embedding_length").value(), 64);
  EXPECT_EQ(f->get_int("llama.block_count").value(), 5);
  EXPECT_EQ(f->get_int("llama.attention.head_count").value(), 8);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv").value(), 4);
  EXPECT_EQ(f->get_int("llama.feed_forward_length").value(), 172);
  EXPECT_GT(f->get_float("llama.attention.layer_norm_rms_epsilon").value(), 0.0);
  EXPECT_EQ(f->get_string_array("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type")->size(), 512u);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model").value(), "llama");
  EXPECT_EQ(f->alignment(), 32u);

  // token_embd, output_norm, output + 9 per layer x 5 layers, all F32.
  EXPECT_EQ(f->tensors().size(), 3u + 9u * 5u);
  EXPECT_NE(f->find_tensor("output.weight"), nullptr);
  for (const TensorInfo& t : f->tensors()) EXPECT_EQ(t.type, DType::kF32) << t.name;
  const TensorInfo* emb = f->find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->n_dims, 2);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 512);
  EXPECT_EQ(emb->n_bytes, 64u * 512u * 4u);
  const TensorInfo* ffn = f->find_tensor("blk.0.ffn_down.weight");
  ASSERT_NE(ffn, nullptr);
  EXPECT_EQ(ffn->ne[0], 172);
  EXPECT_EQ(ffn->ne[1], 64);
  EXPECT_EQ(f->find_tensor("no.such.tensor"), nullptr);
}

TEST(GgufReader, QuantizedTypes) {
  Result<File> q8 = File::open(test::data_path("models/stories260K-Q8_0.gguf").string());
  ASSERT_TRUE(q8.ok()) << q8.error().message;
  EXPECT_EQ(q8->find_tensor("blk.0.attn_q.weight")->type, DType::kQ8_0);
  EXPECT_EQ(q8->find_tensor("blk.0.ffn_down.weight")->type, DType::kF16);
  EXPECT_EQ(q8->find_tensor("blk.0.attn_norm.weight")->type, DType::kF32);

  Result<File> km = File::open(test::data_path("models/TinyLLama-v0-5M-Q4_K_M.gguf").string());
  ASSERT_TRUE(km.ok()) << km.error().message;
  EXPECT_EQ(km->get_string_array("tokenizer.ggml.tokens")->size(), 32000u);
  std::map<DType, int> histogram;
  for (const TensorInfo& t : km->tensors()) histogram[t.type]++;
  EXPECT_GT(histogram[DType::kQ4_K], 0);
  EXPECT_GT(histogram[DType::kQ6_K], 0);
  EXPECT_GT(histogram[DType::kQ5_0], 0);
  EXPECT_GT(histogram[DType::kF32], 0);
}

TEST(GgufReader, GettersReportMissingAndMistypedKeys) {
  Result<File> f = File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  Result<int64_t> missing = f->get_int("llama.no_such_key");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kFormat);
  EXPECT_NE(missing.error().message.find("stories260K.gguf: key 'llama.no_such_key' is missing"),
            std::string::npos)
      << missing.error().message;
  Result<int64_t> wrong = f->get_int("general.architecture");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("has type string, expected an integer"), std::string::npos)
      << wrong.error().message;
  EXPECT_FALSE(f->get_string("llama.embedding_length").ok());
  EXPECT_FALSE(f->get_string_array("tokenizer.ggml.scores").ok());
  EXPECT_EQ(f->get_int_or("llama.no_such_key", 7).value(), 7);
  EXPECT_EQ(f->get_int_or("llama.embedding_length", 7).value(), 64);
  EXPECT_FALSE(f->get_int_or("general.architecture", 7).ok());
  EXPECT_EQ(f->get_string_or("general.no_such_key", "x").value(), "x");
  EXPECT_EQ(f->get_bool_or("general.no_such_key", true).value(), true);
  EXPECT_DOUBLE_EQ(f->get_float_or("general.no_such_key", 2.5).value(), 2.5);
  EXPECT_DOUBLE_EQ(f->get_float("llama.embedding_length").value(), 64.0);
}

TEST(GgufReader, InvalidModelsAreRejectedNamingTheTensor) {
  const std::vector<fs::path> files = gguf_files_in("models/invalid");
  ASSERT_FALSE(files.empty());
  for (const fs::path& p : files) {
    Result<File> f = File::open(p.string());
    ASSERT_FALSE(f.ok()) << p;
    const std::string& msg = f.error().message;
    EXPECT_EQ(f.error().code, ErrorCode::kFormat) << msg;
    EXPECT_NE(msg.find(p.string() + ": offset "), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor '"), std::string::npos) << msg;
    EXPECT_NE(msg.find("multiple of"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST(GgufReader, MissingEmptyAndDirectoryAreIoErrors) {
  const fs::path dir = test::temp_dir();
  Result<File> missing = File::open((dir / "nope.gguf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);
  EXPECT_NE(missing.error().message.find("nope.gguf: cannot open: No such file"), std::string::npos)
      << missing.error().message;

  const fs::path empty = dir / "empty.gguf";
  { std::ofstream(empty, std::ios::binary); }
  Result<File> e = File::open(empty.string());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::kIo);
  EXPECT_NE(e.error().message.find("empty.gguf: file is empty"), std::string::npos)
      << e.error().message;

  Result<File> d = File::open(dir.string());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error().code, ErrorCode::kIo);
  EXPECT_NE(d.error().message.find("is a directory"), std::string::npos) << d.error().message;
  fs::remove_all(dir);
}

// A mapped file is found by the addresses of its tensors (what the CLI's SIGBUS handler asks
// when a file shrinks under it) as long as the File lives, moved or not.
TEST(GgufReader, MappedFilesAreRegisteredWhileOpen) {
  const std::string path = test::data_path("models/stories260K.gguf").string();
  const uint8_t* data = nullptr;
  {
    Result<File> f = File::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    const TensorInfo* t = f->find_tensor("token_embd.weight");
    ASSERT_NE(t, nullptr);
    data = t->data;
    ASSERT_NE(mapped_file_at(data), nullptr);
    EXPECT_EQ(std::string(mapped_file_at(data)), path);
    EXPECT_EQ(std::string(mapped_file_at(data + t->n_bytes - 1)), path);
    File moved = std::move(f).value();
    EXPECT_EQ(std::string(mapped_file_at(data)), path);
    int on_stack = 0;
    EXPECT_EQ(mapped_file_at(&on_stack), nullptr);
  }
  EXPECT_EQ(mapped_file_at(data), nullptr);
  // Bytes held in memory are no mapping.
  Result<File> bytes = File::from_bytes(test::read_bytes(path), "in memory");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(mapped_file_at(bytes->tensors().front().data), nullptr);
}

TEST(GgufReader, FileIsMovable) {
  Result<File> f = File::open(test::data_path("models/stories260K.gguf").string());
  ASSERT_TRUE(f.ok()) << f.error().message;
  const TensorInfo* before = f->find_tensor("token_embd.weight");
  const uint8_t* data = before->data;
  File moved = std::move(f).value();
  const TensorInfo* after = moved.find_tensor("token_embd.weight");
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->data, data);
  float first = 0;
  std::memcpy(&first, after->data, sizeof first);
  EXPECT_TRUE(std::isfinite(first));
}

}  // namespace
}  // namespace qrun::gguf
