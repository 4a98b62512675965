// End-to-end tests of `qrun info` and `qrun synth` through the built binary:
// synthetic models of every recipe are written, read back and described correctly,
// and bad input gives one-line errors with the documented exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

std::string qrun() {
  return qrun_binary().string();
}

nlohmann::json info_json(const std::string& path) {
  CommandResult r = run_command(qrun() + " info --json '" + path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(CliInfo, DescribesStories260K) {
  const std::string path = data_path("models/stories260K.gguf").string();
  nlohmann::json j = info_json(path);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["n_embd"], 64);
  EXPECT_EQ(j["n_layer"], 5);
  EXPECT_EQ(j["n_head"], 8);
  EXPECT_EQ(j["n_head_kv"], 4);
  EXPECT_EQ(j["n_ff"], 172);
  EXPECT_EQ(j["n_vocab"], 512);
  EXPECT_EQ(j["tokenizer_model"], "llama");
  EXPECT_EQ(j["special_tokens"]["bos"]["id"], 1);
  EXPECT_EQ(j["chat_template"], false);
  EXPECT_TRUE(j["tensor_types"].contains("f32"));
}

TEST(CliInfo, TextAndTensorListing) {
  const std::string path = data_path("models/TinyLLama-v0-5M-Q4_K_M.gguf").string();
  CommandResult r = run_command(qrun() + " info --tensors '" + path + "'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("architecture   llama"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("q4_k"), std::string::npos);
  EXPECT_NE(r.out.find("q6_k"), std::string::npos);
  EXPECT_NE(r.out.find("blk.7.ffn_down.weight"), std::string::npos);
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST(CliInfo, ErrorsAreOneLineWithDocumentedCodes) {
  CommandResult missing = run_command(qrun() + " info /nonexistent/model.gguf");
  EXPECT_EQ(missing.exit_code, 3);
  EXPECT_NE(missing.err.find("/nonexistent/model.gguf"), std::string::npos) << missing.err;
  EXPECT_EQ(std::count(missing.err.begin(), missing.err.end(), '\n'), 1) << missing.err;

  const std::string bad =
      data_path("models/invalid/tinyllamas-stories-260k-q8_0.BADROW.gguf").string();
  CommandResult corrupt = run_command(qrun() + " info '" + bad + "'");
  EXPECT_EQ(corrupt.exit_code, 4);
  EXPECT_NE(corrupt.err.find("multiple of"), std::string::npos) << corrupt.err;
  EXPECT_EQ(std::count(corrupt.err.begin(), corrupt.err.end(), '\n'), 1) << corrupt.err;

  CommandResult usage = run_command(qrun() + " info --no-such-flag x.gguf");
  EXPECT_EQ(usage.exit_code, 2);
  CommandResult none = run_command(qrun() + " info");
  EXPECT_EQ(none.exit_code, 2);
}

TEST(CliSynth, EveryRecipeWritesADescribableModel) {
  const std::filesystem::path dir = temp_dir();
  const std::string vocab = data_path("vocab/ggml-vocab-llama-spm.gguf").string();
  for (const char* recipe : {"f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_1", "q5_1", "iq4_nl",
                             "iq4_xs", "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"}) {
    SCOPED_TRACE(recipe);
    const std::string out = (dir / (std::string(recipe) + ".gguf")).string();
    // n_embd 256 so that every k-quant row length is a whole number of 256-blocks.
    CommandResult r =
        run_command(qrun() + " synth -o '" + out + "' --like tiny --n-embd 256 --n-ff 512 --type " +
                    recipe + " --vocab '" + vocab + "' --seed 7");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    nlohmann::json j = info_json(out);
    EXPECT_EQ(j["architecture"], "llama");
    EXPECT_EQ(j["n_embd"], 256);
    EXPECT_EQ(j["n_layer"], 2);
    EXPECT_EQ(j["n_head"], 4);
    EXPECT_EQ(j["n_head_kv"], 2);
    EXPECT_EQ(j["n_ff"], 512);
    EXPECT_EQ(j["n_vocab"], 32000);
    EXPECT_EQ(j["tokenizer_model"], "llama");
    // 2 layers x 9 tensors + token_embd + output_norm + output.
    EXPECT_EQ(j["n_tensors"], 21);
    const std::string base = std::string(recipe).substr(0, 4);
    EXPECT_TRUE(j["tensor_types"].contains(base == "q4_k" || base == "q5_k" ? base : recipe))
        << j["tensor_types"].dump();
  }
}

TEST(CliSynth, Gemma3WithItsWindowIsDescribed) {
  const std::string out = (temp_dir() / "g.gguf").string();
  CommandResult r = run_command(qrun() + " synth -o '" + out +
                                "' --arch gemma3 --like tiny --sliding-window 16 --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = info_json(out);
  EXPECT_EQ(j["architecture"], "gemma3");
  EXPECT_EQ(j["sliding_window"], 16);
  EXPECT_EQ(info_json(data_path("models/stories260K.gguf").string())["sliding_window"], nullptr);
  CommandResult text = run_command(qrun() + " info '" + out + "'");
  EXPECT_NE(text.out.find("sliding window of 16 positions"), std::string::npos) << text.out;
  CommandResult gen = run_command(qrun() + " run -q -m '" + out + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
}

// gemma2: its soft-caps (the file's, or Gemma 2's defaults) and window are described, and a
// file of it runs.
TEST(CliSynth, Gemma2WithItsSoftCapsIsDescribed) {
  const std::string out = (temp_dir() / "g2.gguf").string();
  CommandResult r = run_command(qrun() + " synth -o '" + out +
                                "' --arch gemma2 --like tiny --sliding-window 16 --attn-softcap "
                                "20 --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = info_json(out);
  EXPECT_EQ(j["architecture"], "gemma2");
  EXPECT_EQ(j["sliding_window"], 16);
  EXPECT_EQ(j["attn_softcap"], 20.0);
  EXPECT_EQ(j["final_softcap"], 30.0);
  EXPECT_EQ(info_json(data_path("models/stories260K.gguf").string())["attn_softcap"], nullptr);
  CommandResult text = run_command(qrun() + " info '" + out + "'");
  EXPECT_NE(text.out.find("soft-caps      attention logits 20, output logits 30"),
            std::string::npos)
      << text.out;
  CommandResult gen = run_command(qrun() + " run -q -m '" + out + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
}

// info --ctx states the KV bytes for the chosen types (gemma3 tiny: 2 layers, 2 KV heads of
// 32, both local with a window of 16: rings of 16 - 1 + 512 rows, the batch included), and
// the same model runs with quantized K and V of different types.
TEST(CliSynth, InfoCtxStatesKvBytesAndQuantizedCachesRun) {
  const std::string out = (temp_dir() / "gkv.gguf").string();
  ASSERT_EQ(run_command(qrun() + " synth -o '" + out +
                        "' --arch gemma3 --like tiny --head-dim 32 --sliding-window 16 --type q8_0")
                .exit_code,
            0);
  const auto kv_json = [&](const std::string& flags) {
    CommandResult r = run_command(qrun() + " info '" + out + "' --json --ctx 1024 " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["kv_cache"];
  };
  const nlohmann::json f16 = kv_json("");
  const nlohmann::json q8 = kv_json("-ctk q8_0 -ctv q8_0");
  const nlohmann::json mixed = kv_json("--cache-type q4_0 -ctv f16");
  EXPECT_EQ(f16["type_k"], "f16");
  EXPECT_EQ(mixed["type_k"], "q4_0");
  EXPECT_EQ(mixed["type_v"], "f16");
  const int64_t row = 2 * 32;  // elements of one K (or V) row
  const int64_t rows = 2 * (16 - 1 + 512);
  EXPECT_EQ(f16["bytes"], 2 * row * 2 * rows);
  EXPECT_EQ(f16["bytes_full_layers"], 2 * row * 2 * 2 * 1024);
  EXPECT_EQ(q8["bytes"], 2 * row / 32 * 34 * rows);
  EXPECT_EQ(mixed["bytes"], (row / 32 * 18 + row * 2) * rows);
  CommandResult text = run_command(qrun() + " info '" + out + "' --ctx 1024 -ctk q8_0");
  EXPECT_NE(text.out.find("kv cache       1024 tokens, K q8_0, V f16:"), std::string::npos)
      << text.out;
  for (const char* flags : {"-ctk q8_0 -ctv q8_0", "--cache-type q4_0", "-ctk bf16 -ctv q8_0"}) {
    CommandResult gen =
        run_command(qrun() + " run -m '" + out + "' -p hello -n 4 --temp 0 " + flags);
    EXPECT_EQ(gen.exit_code, 0) << flags << ": " << gen.err;
  }
}

// phi3: LongRoPE is described, the window key is reported as not applied, and it runs.
TEST(CliSynth, Phi3WithLongRopeIsDescribedAndRuns) {
  const std::string out = (temp_dir() / "p.gguf").string();
  CommandResult r =
      run_command(qrun() + " synth -o '" + out +
                  "' --arch phi3 --like tiny --orig-ctx 128 --sliding-window 16 --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = info_json(out);
  EXPECT_EQ(j["architecture"], "phi3");
  EXPECT_EQ(j["sliding_window"], nullptr);
  EXPECT_EQ(j["ignored_sliding_window"], 16);
  // tiny's context is 512: scale 4, attention factor sqrt(1 + ln 4 / ln 128) = 1.13389
  EXPECT_EQ(j["rope_scaling"], "longrope from 128 x1.13389");
  CommandResult text = run_command(qrun() + " info '" + out + "'");
  EXPECT_NE(text.out.find("sliding window of 16 is not applied"), std::string::npos) << text.out;
  CommandResult gen = run_command(qrun() + " run -q -m '" + out + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  // An original context only means something for phi3.
  EXPECT_NE(run_command(qrun() + " synth -o '" + out + "' --orig-ctx 128").exit_code, 0);
}

TEST(CliSynth, MixturesOfExpertsAreDescribedAndRun) {
  const std::string out = (temp_dir() / "moe.gguf").string();
  CommandResult r = run_command(qrun() + " synth -o '" + out +
                                "' --arch qwen3moe --like tiny --experts 6 --experts-used 3 "
                                "--expert-ff 32 --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = info_json(out);
  EXPECT_EQ(j["architecture"], "qwen3moe");
  EXPECT_EQ(j["n_expert"], 6);
  EXPECT_EQ(j["n_expert_used"], 3);
  EXPECT_EQ(j["n_ff_exp"], 32);
  // tiny: 2 layers of 3 expert tensors of 64 x 32 x 6; a token runs through half of them.
  const int64_t experts = 2 * 3 * 64 * 32 * 6;
  EXPECT_EQ(j["n_params"].get<int64_t>() - j["n_active_params"].get<int64_t>(), experts / 2);
  CommandResult text = run_command(qrun() + " info '" + out + "'");
  EXPECT_NE(text.out.find("experts        6 per layer, 3 used per token, 32 wide"),
            std::string::npos)
      << text.out;
  CommandResult gen = run_command(qrun() + " run -q -m '" + out + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  // qwen2moe: a shared expert, which every token runs through.
  r = run_command(qrun() + " synth -o '" + out +
                  "' --arch qwen2moe --like tiny --experts 6 --experts-used 3 --expert-ff 32 "
                  "--shared-expert-ff 48 --type q8_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = info_json(out);
  EXPECT_EQ(j["architecture"], "qwen2moe");
  EXPECT_EQ(j["n_ff_shexp"], 48);
  EXPECT_EQ(j["n_params"].get<int64_t>() - j["n_active_params"].get<int64_t>(), experts / 2);
  text = run_command(qrun() + " info '" + out + "'");
  EXPECT_NE(text.out.find("3 used per token, 32 wide, and a shared expert 48 wide"),
            std::string::npos)
      << text.out;
  gen = run_command(qrun() + " run -q -m '" + out + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  // Mixtral-style: llama with experts. Dense llama shows no experts.
  r = run_command(qrun() + " synth -o '" + out + "' --like tiny --experts 4 --type q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = info_json(out);
  EXPECT_EQ(j["n_expert"], 4);
  EXPECT_EQ(j["n_expert_used"], 2);
  gen = run_command(qrun() + " run -q -m '" + out + "' -p hello -n 4 --temp 0");
  EXPECT_EQ(gen.exit_code, 0) << gen.err;
  r = run_command(qrun() + " synth -o '" + out + "' --like tiny --type q4_0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(info_json(out)["n_expert"], nullptr);
}

TEST(CliSynth, SameSeedSameFile) {
  const std::filesystem::path dir = temp_dir();
  for (const char* name : {"a.gguf", "b.gguf"}) {
    CommandResult r =
        run_command(qrun() + " synth -o '" + (dir / name).string() + "' --like tiny --type q4_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  EXPECT_EQ(read_bytes(dir / "a.gguf"), read_bytes(dir / "b.gguf"));
}

TEST(CliSynth, BadArgumentsAreUsageErrors) {
  const std::filesystem::path dir = temp_dir();
  const std::string out = (dir / "x.gguf").string();
  CommandResult bad_type = run_command(qrun() + " synth -o '" + out + "' --type q9_9");
  EXPECT_EQ(bad_type.exit_code, 2);
  EXPECT_NE(bad_type.err.find("q9_9"), std::string::npos);
  CommandResult bad_like = run_command(qrun() + " synth -o '" + out + "' --like gpt-9");
  EXPECT_EQ(bad_like.exit_code, 2);
  CommandResult bad_shape = run_command(qrun() + " synth -o '" + out + "' --n-embd 65 --n-head 4");
  EXPECT_EQ(bad_shape.exit_code, 2);
  CommandResult window_on_llama =
      run_command(qrun() + " synth -o '" + out + "' --sliding-window 8");
  EXPECT_EQ(window_on_llama.exit_code, 2);
  EXPECT_NE(window_on_llama.err.find("--arch gemma2, gemma3, phi3 or olmo2"), std::string::npos)
      << window_on_llama.err;
  CommandResult cap_on_gemma3 =  // Gemma 3 has no attention soft-cap
      run_command(qrun() + " synth -o '" + out + "' --arch gemma3 --attn-softcap 20");
  EXPECT_EQ(cap_on_gemma3.exit_code, 2);
  EXPECT_NE(cap_on_gemma3.err.find("--arch gemma2"), std::string::npos) << cap_on_gemma3.err;
  for (const char* dims : {"7", "18"}) {  // odd; more than tiny's head of 16
    CommandResult bad_rope = run_command(qrun() + " synth -o '" + out + "' --rope-dims " + dims);
    EXPECT_EQ(bad_rope.exit_code, 2) << dims;
    EXPECT_NE(bad_rope.err.find("rope dimensions"), std::string::npos) << bad_rope.err;
  }
  for (const char* experts : {"--arch qwen2 --experts 4", "--experts 4 --experts-used 5"}) {
    CommandResult bad_experts = run_command(qrun() + " synth -o '" + out + "' " + experts);
    EXPECT_EQ(bad_experts.exit_code, 2) << experts;
    EXPECT_NE(bad_experts.err.find("experts"), std::string::npos) << bad_experts.err;
  }
  CommandResult olmoe_width =  // olmoe's experts are --n-ff wide
      run_command(qrun() + " synth -o '" + out + "' --arch olmoe --expert-ff 32");
  EXPECT_EQ(olmoe_width.exit_code, 2);
  EXPECT_NE(olmoe_width.err.find("--n-ff"), std::string::npos) << olmoe_width.err;
  CommandResult orig_past_ctx =
      run_command(qrun() + " synth -o '" + out + "' --arch phi3 --orig-ctx 1024");  // ctx 512
  EXPECT_EQ(orig_past_ctx.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace qrun::test
