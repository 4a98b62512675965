// `qrun quantize`: from the same input, the tensors come out byte for byte as llama-quantize
// wrote the shared models (types chosen by its recipes, data by its reference quantizers);
// metadata are carried over; bad input is refused with a clear message and exit code.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "support/llamacpp_rows.h"
#include "support/test_data.h"

namespace qrun {
namespace {

using test::CommandResult;
using test::data_path;
using test::qrun_binary;
using test::run_command;

std::string quantize_cmd(const std::string& args) {
  return qrun_binary().string() + " quantize -q " + args;
}

// Every tensor of `expected` has the same type, shape and bytes in `actual`.
void expect_same_tensors(const std::string& actual, const std::string& expected) {
  Result<gguf::File> a = gguf::File::open(actual);
  Result<gguf::File> e = gguf::File::open(expected);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(e.ok()) << e.error().message;
  ASSERT_EQ(a->tensors().size(), e->tensors().size());
  for (const gguf::TensorInfo& want : e->tensors()) {
    SCOPED_TRACE(want.name);
    const gguf::TensorInfo* got = a->find_tensor(want.name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(dtype_name(got->type), std::string(dtype_name(want.type)));
    EXPECT_EQ(got->ne, want.ne);
    ASSERT_EQ(got->n_bytes, want.n_bytes);
    EXPECT_EQ(std::memcmp(got->data, want.data, want.n_bytes), 0);
  }
}

struct Case {
  const char* input;
  const char* type;
  const char* expected;  // written by llama-quantize from `input`
};

class QuantizeMatchesLlamaQuantize : public testing::TestWithParam<Case> {};

TEST_P(QuantizeMatchesLlamaQuantize, TensorForTensor) {
  const Case& c = GetParam();
  const std::string out = (test::temp_dir() / "out.gguf").string();
  const std::string in = data_path(std::string("models/") + c.input).string();
  CommandResult r =
      run_command(quantize_cmd("--allow-requantize '" + in + "' '" + out + "' " + c.type));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.empty());
  expect_same_tensors(out, data_path(std::string("models/") + c.expected).string());
}

INSTANTIATE_TEST_SUITE_P(
    SharedModels, QuantizeMatchesLlamaQuantize,
    testing::Values(Case{"stories260K.gguf", "q8_0", "stories260K-Q8_0.gguf"},
                    Case{"stories260K.gguf", "q4_0", "stories260K-Q4_0.gguf"},
                    Case{"TinyLLama-v0-5M-Q4_0.gguf", "q8_0", "TinyLLama-v0-5M-Q8_0.gguf"},
                    Case{"TinyLLama-v0-5M-Q4_0.gguf", "q4_k_m", "TinyLLama-v0-5M-Q4_K_M.gguf"}));

// Q2_K and Q3_K_S/M/L of a 16-layer GQA model, whose rules change with the layer (the first
// eighth, the last eighth, every third layer between) and the head ratio (attn_v), against
// llama-quantize's files for the same F32 input, tensor by tensor: the type and a 64-bit FNV-1a
// of the bytes (tests/data/quantize_k_low_llamacpp.txt: `file-type tensor type fnv`; the files
// themselves are 14-16 MB each).
TEST(Quantize, LowBitTypesMatchLlamaQuantizeOnSixteenLayers) {
  const std::filesystem::path dir = test::temp_dir();
  const std::string in = (dir / "f32.gguf").string();
  const CommandResult synth =
      run_command(qrun_binary().string() +
                  " synth --arch llama --like tiny --n-layer 16 --n-embd 256 --n-ff 512 --n-head 4 "
                  "--n-head-kv 2 --type f32 --std 0.1 --seed 5 --vocab '" +
                  data_path("vocab/ggml-vocab-llama-spm.gguf").string() + "' -o '" + in + "'");
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  ASSERT_EQ(test::fnv1a(test::read_bytes(in)), 12547367178955075208ull)
      << "qrun synth no longer writes the model the digests were computed from";

  std::ifstream digests(std::string(QRUN_SOURCE_DIR) + "/tests/data/quantize_k_low_llamacpp.txt");
  std::map<std::string, std::vector<std::array<std::string, 3>>> want;  // type: name, type, fnv
  for (std::string ftype, name, type, fnv; digests >> ftype >> name >> type >> fnv;) {
    want[ftype].push_back({name, type, fnv});
  }
  ASSERT_EQ(want.size(), 4u);
  for (const auto& [ftype, tensors] : want) {
    SCOPED_TRACE(ftype);
    const std::string out = (dir / (ftype + ".gguf")).string();
    const CommandResult r = run_command(quantize_cmd("'" + in + "' '" + out + "' " + ftype));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    Result<gguf::File> f = gguf::File::open(out);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->tensors().size(), tensors.size());
    for (const auto& [name, type, fnv] : tensors) {
      const gguf::TensorInfo* t = f->find_tensor(name);
      ASSERT_NE(t, nullptr) << name;
      EXPECT_EQ(dtype_name(t->type), type) << name;
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx",
                    static_cast<unsigned long long>(
                        test::fnv1a(std::vector<uint8_t>(t->data, t->data + t->n_bytes))));
      EXPECT_EQ(hex, fnv) << name;
    }
  }
}

TEST(Quantize, CopiesMetadataAndSetsTheFileType) {
  const std::string out = (test::temp_dir() / "out.gguf").string();
  const std::string in = data_path("models/stories260K.gguf").string();
  ASSERT_EQ(run_command(quantize_cmd("'" + in + "' '" + out + "' q4_k_m")).exit_code, 0);
  Result<gguf::File> src = gguf::File::open(in);
  Result<gguf::File> dst = gguf::File::open(out);
  ASSERT_TRUE(src.ok() && dst.ok());
  for (const gguf::KeyValue& kv : src->metadata()) {
    if (kv.key == "general.file_type" || kv.key == "general.quantization_version") continue;
    const gguf::Value* v = dst->find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->to_display_string(), kv.value.to_display_string()) << kv.key;
  }
  EXPECT_EQ(dst->get_int("general.file_type").value(), 15);  // MOSTLY_Q4_K_M
  // The quantized model runs and tells a story.
  CommandResult run = run_command(qrun_binary().string() + " run -m '" + out +
                                  "' -p 'Once upon a time' -n 8 --temp 0");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
}

TEST(Quantize, PureAndForcedTypes) {
  const std::string out = (test::temp_dir() / "out.gguf").string();
  const std::string in = data_path("models/TinyLLama-v0-5M-Q4_0.gguf").string();
  ASSERT_EQ(run_command(quantize_cmd("--allow-requantize --pure --output-tensor-type f16 '" + in +
                                     "' '" + out + "' q8_0"))
                .exit_code,
            0);
  Result<gguf::File> f = gguf::File::open(out);
  ASSERT_TRUE(f.ok());
  for (const gguf::TensorInfo& t : f->tensors()) {
    const DType want =
        t.n_dims == 1 ? DType::kF32 : (t.name == "output.weight" ? DType::kF16 : DType::kQ8_0);
    EXPECT_EQ(dtype_name(t.type), std::string(dtype_name(want))) << t.name;
  }
}

TEST(Quantize, RefusesBadInput) {
  const std::string dir = test::temp_dir().string();
  const std::string q4 = data_path("models/TinyLLama-v0-5M-Q4_0.gguf").string();
  const std::string f32 = data_path("models/stories260K.gguf").string();

  CommandResult requant = run_command(quantize_cmd("'" + q4 + "' '" + dir + "/o.gguf' q8_0"));
  EXPECT_EQ(requant.exit_code, 2);
  EXPECT_NE(requant.err.find("TinyLLama-v0-5M-Q4_0.gguf"), std::string::npos) << requant.err;
  EXPECT_NE(requant.err.find("--allow-requantize"), std::string::npos) << requant.err;

  CommandResult type = run_command(quantize_cmd("'" + f32 + "' '" + dir + "/o.gguf' q3_k_xl"));
  EXPECT_EQ(type.exit_code, 2);
  EXPECT_NE(type.err.find("unknown type 'q3_k_xl'"), std::string::npos) << type.err;

  // An empty type is a mistake (an unset shell variable), not "the flag was not given".
  for (const char* flag : {"--output-tensor-type", "--token-embedding-type"}) {
    CommandResult empty = run_command(
        quantize_cmd(std::string(flag) + " '' '" + f32 + "' '" + dir + "/o.gguf' q8_0"));
    EXPECT_EQ(empty.exit_code, 2) << flag;
    EXPECT_NE(empty.err.find(std::string(flag) + ": '' is not a weight type"), std::string::npos)
        << empty.err;
    EXPECT_FALSE(std::filesystem::exists(dir + "/o.gguf"));
  }

  CommandResult same = run_command(quantize_cmd("'" + f32 + "' '" + f32 + "' q8_0"));
  EXPECT_EQ(same.exit_code, 2);
  EXPECT_NE(same.err.find("overwrite the input"), std::string::npos) << same.err;

  const std::string bad =
      data_path("models/invalid/tinyllamas-stories-260k-q8_0.BADROW.gguf").string();
  CommandResult corrupt = run_command(quantize_cmd("'" + bad + "' '" + dir + "/o.gguf' q8_0"));
  EXPECT_EQ(corrupt.exit_code, 4);
  EXPECT_NE(corrupt.err.find("BADROW.gguf"), std::string::npos) << corrupt.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/o.gguf"));

  CommandResult unwritable =
      run_command(quantize_cmd("'" + f32 + "' '/nonexistent-dir/o.gguf' q8_0"));
  EXPECT_NE(unwritable.exit_code, 0);
  EXPECT_NE(unwritable.err.find("/nonexistent-dir/o.gguf"), std::string::npos) << unwritable.err;
}

}  // namespace
}  // namespace qrun
