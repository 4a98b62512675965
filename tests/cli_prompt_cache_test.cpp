// `qrun run --prompt-cache` end to end: greedy output over a warm cache equals the cold
// output token for token (a prompt that extends the cached one, one that diverges partway,
// the same prompt, a shorter one), on the shared models and on Gemma 3 (sliding-window rings);
// corrupt or foreign files are cold starts with a warning, never a crash; --prompt-cache-ro
// never writes; no temporary file is left behind; the usage errors and exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/test_data.h"

namespace qrun::test {
namespace {

namespace fs = std::filesystem;

std::string model_path(const std::string& model) {
  return data_path("models/" + model + ".gguf").string();
}

struct QrunRun {
  CommandResult cmd;
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;
  int64_t n_cached = -1;  // -1: no --prompt-cache
};

// qrun run --json --temp 0 over `prompt` (through a file, so no shell quoting), with `flags`.
QrunRun run(const std::string& model, const std::string& prompt, const std::string& flags,
            int n_predict = 16) {
  const fs::path prompt_file = temp_dir() / "prompt.txt";
  std::ofstream(prompt_file) << prompt;
  QrunRun r;
  r.cmd =
      run_command(qrun_binary().string() + " run --json --temp 0 -n " + std::to_string(n_predict) +
                  " -m '" + model + "' -f '" + prompt_file.string() + "' " + flags);
  if (r.cmd.exit_code != 0) return r;
  const nlohmann::json j = nlohmann::json::parse(r.cmd.out);
  r.prompt_tokens = j["prompt_tokens"].get<std::vector<int32_t>>();
  r.tokens = j["tokens"].get<std::vector<int32_t>>();
  if (j.contains("n_cached_tokens")) r.n_cached = j["n_cached_tokens"].get<int64_t>();
  return r;
}

int64_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return std::mismatch(a.begin(), a.begin() + static_cast<long>(std::min(a.size(), b.size())),
                       b.begin())
             .first -
         a.begin();
}

std::string story(int sentences) {
  const char* parts[] = {"Lily and Tom went to the park. ", "They saw a big red ball. ",
                         "Tom kicked the ball and it flew over the tree. ",
                         "Lily laughed and ran after it. ",
                         "A little dog came to play with them. "};
  std::string s = "Once upon a time, ";
  for (int i = 0; i < sentences; ++i) s += parts[i % 5];
  return s;
}

// Saves `cached` into a fresh cache file, then checks each prompt: its warm run (from a copy
// of that file) reuses the common prefix (less one token when it covers the whole prompt) and
// generates exactly the cold run's tokens.
void expect_warm_equals_cold(const std::string& model, const std::string& cached,
                             const std::vector<std::string>& prompts, const std::string& flags) {
  const fs::path dir = temp_dir();
  const fs::path file = dir / "cache.bin";
  const QrunRun first = run(model, cached, flags + " --prompt-cache '" + file.string() + "'");
  ASSERT_EQ(first.cmd.exit_code, 0) << first.cmd.err;
  EXPECT_EQ(first.n_cached, 0);
  ASSERT_TRUE(fs::exists(file)) << first.cmd.err;
  EXPECT_EQ(first.tokens, run(model, cached, flags).tokens);  // saving changes nothing
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE("prompt " + std::to_string(i));
    const QrunRun cold = run(model, prompts[i], flags);
    ASSERT_EQ(cold.cmd.exit_code, 0) << cold.cmd.err;
    const fs::path copy = dir / ("copy" + std::to_string(i) + ".bin");
    fs::copy_file(file, copy);
    const QrunRun warm = run(model, prompts[i], flags + " --prompt-cache '" + copy.string() + "'");
    ASSERT_EQ(warm.cmd.exit_code, 0) << warm.cmd.err;
    EXPECT_EQ(warm.prompt_tokens, cold.prompt_tokens);
    // All of the common prefix, less one token when it is the whole prompt, less what
    // aligns the last batch fed with a cold run's (prompt_cache_keep; -b below 32).
    const int64_t common = std::min<int64_t>(common_prefix(first.prompt_tokens, cold.prompt_tokens),
                                             static_cast<int64_t>(cold.prompt_tokens.size()) - 1);
    EXPECT_LE(warm.n_cached, common) << warm.cmd.err;
    EXPECT_GT(warm.n_cached, common - 32) << warm.cmd.err;
    EXPECT_EQ(warm.tokens, cold.tokens);
    EXPECT_EQ(warm.cmd.err.find("warning"), std::string::npos) << warm.cmd.err;
  }
}

std::vector<std::string> variants(const std::string& base, const std::string& tail) {
  std::string diverging = base.substr(0, base.size() * 2 / 3);
  diverging = diverging.substr(0, diverging.rfind(' ')) + " The sun was hot and bright.";
  return {base + tail, diverging, base, base.substr(0, base.size() / 2)};
}

TEST(CliPromptCache, WarmOutputEqualsColdOnTheSharedModels) {
  for (const char* model : {"stories260K", "TinyLLama-v0-5M-Q4_K_M"}) {
    SCOPED_TRACE(model);
    const std::string base = story(12);
    // -b 32: the cached prompt spans several batches, and warm runs start mid-batch.
    expect_warm_equals_cold(model_path(model), base, variants(base, "Then they went home."),
                            "-b 32");
  }
}

// Synthetic models of the other architectures (random weights, the demo vocabulary): Qwen2
// (QKV biases) and Gemma 3 with a window of 16, whose rings of 47 rows (-b 32) hold fewer
// positions than the prompt, so only a prompt that extends the cached one reuses it.
TEST(CliPromptCache, WarmOutputEqualsColdOnSyntheticQwen2AndGemma3) {
  const fs::path dir = temp_dir();
  for (const char* arch : {"qwen2", "gemma3"}) {
    SCOPED_TRACE(arch);
    const std::string model = (dir / (std::string(arch) + ".gguf")).string();
    const bool gemma = std::string(arch) == "gemma3";
    const CommandResult synth =
        run_command(qrun_binary().string() + " synth -o '" + model + "' --arch " + arch +
                    " --like tiny --type q8_0" + (gemma ? " --sliding-window 16" : ""));
    ASSERT_EQ(synth.exit_code, 0) << synth.err;
    const std::string base = story(8);
    std::vector<std::string> prompts = {base + "Then they went home.", base};
    if (!gemma) prompts = variants(base, "Then they went home.");
    expect_warm_equals_cold(model, base, prompts, "-b 32");
  }
}

TEST(CliPromptCache, WarmOutputEqualsColdOnGemmaAcrossSlidingWindowRings) {
#ifdef QRUN_SANITIZED
  // Eleven runs over ~850 tokens of a 270M model: 265 s under ASan, a quarter of that whole
  // run. The rings' code is the same at any size: the synthetic Gemma above (a window of
  // 16) runs it under the sanitizers, and prompt_cache_test a file whose rings lost the
  // prompt's start. This real-size case runs in the plain build.
  GTEST_SKIP() << "real-size rings: plain build only";
#endif
  QRUN_REAL_MODEL_OR_SKIP(gemma, "gemma-3-270m-q4_k_m.gguf");
  // Gemma 3 270M: five of six layers see a window of 512. With -b 64 their rings hold 575
  // positions, fewer than the ~850-token prompt, so the file keeps only the ring's rows
  // there, and a prompt that diverges far back is a cold start (with a warning).
  const std::string base = story(100);
  std::string late = base.substr(0, base.size() - 40);
  late = late.substr(0, late.rfind(' ')) + " The sun was hot.";
  expect_warm_equals_cold(gemma.string(), base, {base + "Then they went home.", late, base},
                          "-b 64 -c 2048");  // rings of 575
  const fs::path file = temp_dir() / "gemma.bin";
  ASSERT_EQ(run(gemma.string(), base, "-b 64 -c 2048 --prompt-cache '" + file.string() + "'", 1)
                .cmd.exit_code,
            0);
  const std::string early = base.substr(0, base.size() / 3) + " The end.";
  const QrunRun cold = run(gemma.string(), early, "-b 64 -c 2048");
  const QrunRun warm =
      run(gemma.string(), early,
          "-b 64 -c 2048 --prompt-cache-ro --prompt-cache '" + file.string() + "'");
  ASSERT_EQ(warm.cmd.exit_code, 0) << warm.cmd.err;
  EXPECT_EQ(warm.n_cached, 0);
  EXPECT_NE(warm.cmd.err.find("sliding-window"), std::string::npos) << warm.cmd.err;
  EXPECT_EQ(warm.tokens, cold.tokens);
}

TEST(CliPromptCache, AWarmRunRewritesTheFileOnlyWhenItCoversLess) {
  const std::string model = model_path("stories260K");
  const fs::path dir = temp_dir();
  const fs::path file = dir / "cache.bin";
  const std::string flag = " --prompt-cache '" + file.string() + "'";
  std::string base = story(6);
  base.pop_back();  // no trailing space, so its tokens start the longer prompt's
  ASSERT_EQ(run(model, base, flag).cmd.exit_code, 0);
  // A longer prompt: the file now holds all of it. (Runs over a prompt the file covers feed
  // its last two tokens again: a cold run's last batch of -b 512 has more than one.)
  const QrunRun longer = run(model, base + " Then they went home.", flag);
  ASSERT_EQ(longer.cmd.exit_code, 0);
  const QrunRun again = run(model, base + " Then they went home.", flag);
  EXPECT_EQ(again.n_cached, static_cast<int64_t>(again.prompt_tokens.size()) - 2);
  // A shorter prompt that the file covers does not shrink it.
  const std::vector<uint8_t> before = read_bytes(file);
  const QrunRun shorter = run(model, base, flag);
  EXPECT_EQ(shorter.n_cached, static_cast<int64_t>(shorter.prompt_tokens.size()) - 2);
  EXPECT_EQ(read_bytes(file), before);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
}

TEST(CliPromptCache, ReadOnlyNeverWrites) {
  const std::string model = model_path("stories260K");
  const fs::path dir = temp_dir();
  const fs::path file = dir / "cache.bin";
  const std::string ro = " --prompt-cache-ro --prompt-cache '" + file.string() + "'";
  const QrunRun missing = run(model, story(4), ro);
  ASSERT_EQ(missing.cmd.exit_code, 0) << missing.cmd.err;
  EXPECT_TRUE(fs::is_empty(dir));
  ASSERT_EQ(run(model, story(4), " --prompt-cache '" + file.string() + "'").cmd.exit_code, 0);
  const std::vector<uint8_t> saved = read_bytes(file);
  const QrunRun extended = run(model, story(8), ro);
  ASSERT_EQ(extended.cmd.exit_code, 0) << extended.cmd.err;
  EXPECT_GT(extended.n_cached, 0);
  EXPECT_EQ(read_bytes(file), saved);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}), 1);
}

TEST(CliPromptCache, CorruptOrForeignFilesAreColdStartsWithAWarning) {
  const std::string model = model_path("stories260K");
  const fs::path dir = temp_dir();
  const fs::path good = dir / "good.bin";
  const std::string prompt = story(5);
  ASSERT_EQ(run(model, prompt, "--prompt-cache '" + good.string() + "'").cmd.exit_code, 0);
  const fs::path foreign = dir / "foreign.bin";  // the same prompt, another model's file
  ASSERT_EQ(run(model_path("stories260K-Q8_0"), prompt, "--prompt-cache '" + foreign.string() + "'")
                .cmd.exit_code,
            0);
  const std::vector<uint8_t> bytes = read_bytes(good);
  const QrunRun cold = run(model, prompt + "The end.", "");

  struct Case {
    std::string name;
    std::string reason;  // in the warning
    std::vector<uint8_t> bytes;
  };
  std::vector<Case> cases;
  for (size_t size : {size_t{0}, size_t{10}, size_t{64}, bytes.size() / 2, bytes.size() - 1}) {
    cases.push_back({"truncated to " + std::to_string(size), "truncated",
                     std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<long>(size))});
  }
  std::vector<uint8_t> flipped = bytes;
  flipped[bytes.size() - 100] ^= 1;  // a V row of the last layer
  cases.push_back({"a flipped payload byte", "checksum mismatch", flipped});
  std::vector<uint8_t> magic = bytes;
  magic[1] = 'x';
  cases.push_back({"wrong magic", "bad magic", magic});
  cases.push_back({"another model's file", "another model", read_bytes(foreign)});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path file = dir / "bad.bin";
    std::ofstream(file, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(c.bytes.data()),
               static_cast<std::streamsize>(c.bytes.size()));
    const QrunRun r = run(model, prompt + "The end.", "--prompt-cache '" + file.string() + "'");
    ASSERT_EQ(r.cmd.exit_code, 0) << r.cmd.err;
    EXPECT_EQ(r.n_cached, 0);
    EXPECT_EQ(r.tokens, cold.tokens);
    EXPECT_NE(r.cmd.err.find("qrun: warning: --prompt-cache " + file.string() + ": "),
              std::string::npos)
        << r.cmd.err;
    EXPECT_NE(r.cmd.err.find(c.reason), std::string::npos) << r.cmd.err;
    EXPECT_NE(r.cmd.err.find("; starting cold\n"), std::string::npos) << r.cmd.err;
    // The run wrote a good file in its place.
    const QrunRun next = run(model, prompt + "The end.", "--prompt-cache '" + file.string() + "'");
    EXPECT_EQ(next.n_cached, static_cast<int64_t>(next.prompt_tokens.size()) - 2) << next.cmd.err;
  }
  EXPECT_FALSE(fs::exists(dir / "bad.bin.tmp"));
}

TEST(CliPromptCache, UsageAndWriteErrorsAreOneLineWithTheirExitCodes) {
  const std::string qrun = qrun_binary().string() + " run -n 1 -m '" + model_path("stories260K") +
                           "' -p 'Once upon a time' ";
  CommandResult ro = run_command(qrun + "--prompt-cache-ro");
  EXPECT_EQ(ro.exit_code, 2);
  EXPECT_NE(ro.err.find("--prompt-cache-ro needs --prompt-cache FILE"), std::string::npos)
      << ro.err;
  const fs::path missing_dir = temp_dir() / "no" / "cache.bin";
  CommandResult write = run_command(qrun + "-q --prompt-cache '" + missing_dir.string() + "'");
  EXPECT_EQ(write.exit_code, 3);
  EXPECT_NE(write.err.find("--prompt-cache " + missing_dir.string() + ": cannot create"),
            std::string::npos)
      << write.err;
}

// Chat: /save FILE --kv keeps the KV state as FILE.kv; /load FILE in a new process restores
// it and prefills only what the saved cache does not hold, and the next reply is the one the
// first process gave. A corrupt FILE.kv is a warning and a full prefill.
TEST(CliPromptCache, ChatSaveKvThenLoadResumesWithoutPrefill) {
  const fs::path dir = temp_dir();
  const std::string model = (dir / "phi3.gguf").string();
  const std::string vocab = data_path("vocab/ggml-vocab-phi-3.gguf").string();
  ASSERT_EQ(run_command(qrun_binary().string() + " synth -o '" + model +
                        "' --like tiny --seed 3 --vocab '" + vocab + "'")
                .exit_code,
            0);
  const std::string chat = qrun_binary().string() + " chat -m '" + model +
                           "' --temp 0 -t 1 -n 8 --ignore-eos --no-history";
  const std::string saved = (dir / "conv.json").string();
  const CommandResult first =
      run_command(chat, "Hello there, tell me a story\n/save " + saved + " --kv\nAnd then?\n");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.err.find("cached tokens to " + saved + ".kv"), std::string::npos) << first.err;
  ASSERT_TRUE(fs::exists(saved + ".kv"));
  EXPECT_FALSE(fs::exists(saved + ".kv.tmp"));
  const std::string second_reply = first.out.substr(first.out.find('\n') + 1);

  const CommandResult resumed = run_command(chat, "/load " + saved + "\nAnd then?\n");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("tokens restored from " + saved + ".kv"), std::string::npos)
      << resumed.err;
  EXPECT_EQ(resumed.out, second_reply);

  std::vector<uint8_t> bytes = read_bytes(saved + ".kv");
  bytes[bytes.size() / 2] ^= 1;
  std::ofstream(saved + ".kv", std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const CommandResult corrupt = run_command(chat, "/load " + saved + "\nAnd then?\n");
  ASSERT_EQ(corrupt.exit_code, 0) << corrupt.err;
  EXPECT_NE(corrupt.err.find("qrun: warning: " + saved +
                             ".kv: checksum mismatch (corrupt); "
                             "prefilling instead"),
            std::string::npos)
      << corrupt.err;
  EXPECT_EQ(corrupt.out, second_reply);

  const CommandResult no_file = run_command(chat, "/save --kv\n");
  EXPECT_EQ(no_file.exit_code, 2);
  EXPECT_NE(no_file.err.find("/save: give a file name"), std::string::npos) << no_file.err;
}

}  // namespace
}  // namespace qrun::test
