// Reading llama.cpp's reference rows (llamacpp_rows.h).
#include "tests/support/llamacpp_rows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/gguf/gguf.h"
#include "core/kv_cache.h"
#include "core/model.h"
#include "kernels/cpu/cpu_backend.h"
#include "models/registry.h"
#include "tests/support/test_data.h"

namespace qrun::test {

std::vector<LlamaCppRow> read_llamacpp_rows(const std::string& name) {
  std::ifstream in(std::string(QRUN_SOURCE_DIR) + "/tests/data/" + name);
  std::vector<LlamaCppRow> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string tag;
    LlamaCppRow r;
    ls >> tag >> r.pos >> r.argmax;
    double v = 0;
    while (ls >> v) r.logits.push_back(v);
    if (tag == "row") rows.push_back(std::move(r));
  }
  return rows;
}

double nmse_strided(const float* logits, const LlamaCppRow& ref) {
  double num = 0, den = 0;
  for (size_t j = 0; j < ref.logits.size(); ++j) {
    const double d = logits[j * kLlamaCppRowStride] - ref.logits[j];
    num += d * d;
    den += ref.logits[j] * ref.logits[j];
  }
  return num / den;
}

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

namespace {

int argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int>(best);
}

}  // namespace

double expect_synth_matches_llamacpp(const std::string& synth_args, uint64_t fnv,
                                     const std::string& ref_name, double max_nmse, int tie_rows) {
  const std::filesystem::path dir = temp_dir();
  const std::string model_path = (dir / "model.gguf").string();
  const CommandResult synth =
      run_command(qrun_binary().string() + " synth " + synth_args + " --vocab " +
                  data_path("vocab/ggml-vocab-llama-spm.gguf").string() + " -o " + model_path);
  EXPECT_EQ(synth.exit_code, 0) << synth.err;
  EXPECT_EQ(fnv1a(read_bytes(model_path)), fnv)
      << "qrun synth no longer writes the model the reference was computed on";

  const std::vector<LlamaCppRow> ref = read_llamacpp_rows(ref_name);
  EXPECT_EQ(ref.size(), 16u);
  Result<gguf::File> file = gguf::File::open(model_path);
  EXPECT_TRUE(file.ok()) << file.error().message;
  if (ref.size() != 16u || !file.ok()) return 0.0;
  Result<std::unique_ptr<Model>> model = models::load_model(*file);
  EXPECT_TRUE(model.ok()) << model.error().message;
  if (!model.ok()) return 0.0;
  const int64_t n_vocab = (*model)->hparams().n_vocab;
  EXPECT_EQ(ref[0].logits.size(),
            static_cast<size_t>((n_vocab + kLlamaCppRowStride - 1) / kLlamaCppRowStride));

  kernels::CpuBackend be(2);
  Result<KvCache> kv = make_kv_cache(**model, 128, DType::kF16);
  EXPECT_TRUE(kv.ok());
  if (!kv.ok()) return 0.0;
  const std::vector<int32_t> prompt = {1, 450, 4996, 338, 263, 1243, 29889, 13};
  std::vector<float> logits(prompt.size() * static_cast<size_t>(n_vocab));
  EXPECT_TRUE((*model)->forward(be, prompt, 0, *kv, true, logits.data()).ok());
  double worst = 0.0;
  int ties = 0;
  const auto check_row = [&](const float* row, const LlamaCppRow& r) {
    SCOPED_TRACE(testing::Message() << "position " << r.pos);
    const double nmse = nmse_strided(row, r);
    worst = std::max(worst, nmse);
    if (nmse >= max_nmse && nmse < kActivationTieNmse && ties < tie_rows) {
      ++ties;  // an activation rounding tie (see llamacpp_rows.h)
    } else {
      EXPECT_LT(nmse, max_nmse);
    }
    EXPECT_EQ(argmax(row, n_vocab), r.argmax);
  };
  for (size_t t = 0; t < prompt.size(); ++t) check_row(logits.data() + t * n_vocab, ref[t]);
  int32_t next = ref[prompt.size() - 1].argmax;
  for (size_t i = prompt.size(); i < ref.size(); ++i) {
    const std::vector<int32_t> one = {next};
    EXPECT_TRUE(
        (*model)->forward(be, one, static_cast<int64_t>(i), *kv, false, logits.data()).ok());
    check_row(logits.data(), ref[i]);
    next = ref[i].argmax;
  }
  return worst;
}

}  // namespace qrun::test
